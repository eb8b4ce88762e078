"""Shared test helpers: the golden cases as data."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from npu_resolver import Resolution, Source
from tests._server import grpc_server, grpc_target  # noqa: F401 - shared session fixtures

# Property tests judge answers, not timings: a loaded machine can pause a test for a second or
# more, and hypothesis's per-example deadline (200 ms) and too-slow check then fail correct code
# ("Unreliable test timings"). Loaded before any test module builds its own settings from it.
settings.register_profile(
    "answers-not-timings", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("answers-not-timings")

# The server's settings read NPU_RESOLVER_* from the environment: the shell the tests run in
# (NPU_RESOLVER_HOST=0.0.0.0, say) must not move the servers they start off 127.0.0.1 or
# change their limits. A test that wants a variable sets it itself.
for _name in [name for name in os.environ if name.upper().startswith("NPU_RESOLVER_")]:
    del os.environ[_name]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-figures",
        action="store_true",
        help="write the reliability suite's figures to benchmarks/reliability.json",
    )


GOLDEN_DIR = Path(__file__).parent / "golden"


def golden_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for file in sorted(GOLDEN_DIR.glob("*.json")):
        for case in json.loads(file.read_text(encoding="utf-8")):
            case["file"] = file.name
            cases.append(case)
    return cases


def attached_again(answer: Resolution, attachments: Mapping[str, str]) -> dict[str, str]:
    """The attachments that still describe the files an answer names, for resolving its options
    again: one for a file a policy lock replaced was the content of the caller's file, not of the
    locked one the answer names (R-ODC-2 and the other content rules do not read it)."""
    return {
        option: text
        for option, text in attachments.items()
        if not (
            (prov := answer.provenance.get(option)) is not None
            and prov.source is Source.POLICY_LOCKED
            and prov.has_requested
        )
    }
