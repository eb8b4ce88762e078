"""The golden cases through a real server: the same answer as in process, to the byte.

Cases with a policy get a server holding that policy (one server per distinct policy text).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from npu_resolver import ResolveRequest, parse_policy, resolve
from npu_resolver_client import ResolveError, ResolverClient
from tests._server import ThreadServer
from tests.conftest import golden_cases
from tests.test_golden import check_expectation

CASES = golden_cases()


class _Servers:
    def __init__(self) -> None:
        self.servers: dict[str, ThreadServer] = {}
        self.clients: dict[str, ResolverClient] = {}

    def client(self, policy_text: str) -> ResolverClient:
        if policy_text not in self.clients:
            policy = parse_policy(policy_text, "golden.toml") if policy_text else None
            server = ThreadServer(policy=policy).start()
            self.servers[policy_text] = server
            self.clients[policy_text] = ResolverClient(server.target)
        return self.clients[policy_text]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="module")
def servers() -> Iterator[_Servers]:
    pool = _Servers()
    yield pool
    pool.close()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_through_the_server(servers: _Servers, case: dict[str, Any]) -> None:
    policy_text = case.get("policy") or ""
    request = ResolveRequest.from_json(case["request"])
    policy = parse_policy(policy_text, "golden.toml") if policy_text else None
    local = resolve(request, policy=policy)
    client = servers.client(policy_text)
    try:
        remote = client.resolve_request(request)
        assert local.ok or request.validate_only
    except ResolveError as error:
        assert not local.ok
        assert error.resolution is not None
        remote = error.resolution
        assert {d.code for d in error.diagnostics} == {d.code for d in local.errors}
    check_expectation(remote, case["expect"])
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
    assert list(remote.options) == list(local.options)
    assert list(remote.provenance) == list(local.provenance)
    assert list(remote.paths) == list(local.paths)


@pytest.mark.parametrize(
    "config",
    [
        {"hccl_timeout": float("nan")},
        {"enable_small_channel": float("inf")},
        {"dump_config": {"a": float("nan")}},
        {"distribute": {"x": [1, float("-inf")]}, "hccl_timeout": 600},
        {"hccl_timeout": 600.0, "dump_config": {"x": float("nan")}},
    ],
    ids=["int-nan", "int-inf", "object-nan", "nested-inf", "beside-a-float"],
)
def test_non_finite_numbers_are_invalid_on_their_option_on_both_sides(
    servers: _Servers, config: dict[str, Any]
) -> None:
    """JSON has no NaN nor infinities: INVALID_VALUE on the option, the same through a server."""
    request = ResolveRequest(product="atlas-a2", config=config)
    local = resolve(request)
    assert [(d.code.value, d.option) for d in local.errors] == [
        ("INVALID_VALUE", name) for name in config if name != "hccl_timeout" or len(config) == 1
    ]
    with pytest.raises(ResolveError) as raised:
        servers.client("").resolve_request(request)
    remote = raised.value.resolution
    assert remote is not None
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
