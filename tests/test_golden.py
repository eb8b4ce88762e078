"""The golden cases: input, expected effective config and diagnostics, one parametrized test."""

from __future__ import annotations

from typing import Any

import pytest

from npu_resolver import Resolution, ResolveRequest, parse_policy, resolve
from tests.conftest import attached_again, golden_cases

CASES = golden_cases()


def check_expectation(result: Resolution, expect: dict[str, Any]) -> None:
    """Compare an answer with a golden case's expectation (shared with the server tests)."""
    got = result.to_json()
    if "ok" in expect:
        assert got["ok"] is expect["ok"], got["diagnostics"]
    for name, value in expect.get("options", {}).items():
        assert name in got["options"], f"{name} missing; diagnostics: {got['diagnostics']}"
        assert got["options"][name] == value and type(got["options"][name]) is type(value), name
    for name in expect.get("absent", []):
        assert name not in got["options"], f"{name} should be absent"
    for name, fields in expect.get("provenance", {}).items():
        for key, value in fields.items():
            assert got["provenance"][name].get(key) == value, (name, key, got["provenance"][name])
    for key, value in expect.get("paths", {}).items():
        assert got["paths"].get(key) == value, (key, got["paths"])
    for key in expect.get("paths_absent", []):
        assert key not in got["paths"], key
    if "diagnostics" in expect:
        actual = [
            {k: d[k] for k in ("severity", "code", "option", "rule")} for d in got["diagnostics"]
        ]
        wanted = [
            {k: v for k, v in d.items() if k != "message_contains"} for d in expect["diagnostics"]
        ]
        assert actual == wanted, got["diagnostics"]
        for diagnostic, expected in zip(got["diagnostics"], expect["diagnostics"], strict=True):
            assert expected.get("message_contains", "") in diagnostic["message"], diagnostic


def run_case(case: dict[str, Any]) -> Resolution:
    policy = parse_policy(case["policy"], "golden.toml") if case.get("policy") else None
    return resolve(ResolveRequest.from_json(case["request"]), policy=policy)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case: dict[str, Any]) -> None:
    result = run_case(case)
    check_expectation(result, case["expect"])
    if result.ok:
        request = ResolveRequest.from_json(case["request"])
        policy = parse_policy(case["policy"], "golden.toml") if case.get("policy") else None
        again = resolve(
            ResolveRequest(
                product=result.product,
                config=dict(result.options),
                env=request.env,
                workdir=request.workdir,
                profile=request.profile,
                attachments=attached_again(result, request.attachments),
            ),
            policy=policy,
        )
        assert again.ok, again.diagnostics
        assert again.options == result.options
        assert again.fingerprint == result.fingerprint
