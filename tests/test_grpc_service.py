"""Every RPC through a real server on 127.0.0.1 (in a thread of this process), real channels."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import os
import pickle
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

import npu_resolver
from npu_resolver import MAX_OBJECT_DEPTH, Code, Resolution, ResolveRequest, resolve
from npu_resolver_client import (
    AsyncResolverClient,
    ResolveError,
    ResolveFailure,
    ResolverCallError,
    ResolverClient,
    ResolverUnavailable,
    remote_resolve,
)
from npu_resolver_client.wire import pb, pb_grpc, request_to_proto, resolution_from_proto
from npu_resolver_server import HEALTH_SERVICE, PID_METADATA_KEY, ServerSettings
from npu_resolver_server._cache import Answer, AnswerCache
from tests._server import ThreadServer, free_port, grpc_server, grpc_target  # noqa: F401
from tests.test_grpc_wire import VARIED

BAD = ResolveRequest(product="atlas-training", config={"hccl_timeout": 17341})
GOOD = ResolveRequest(product="atlas-training", config={"hccl_timeout": 600})


@pytest.fixture
def client(grpc_target: str) -> Any:  # noqa: F811
    with ResolverClient(grpc_target, timeout=10) as c:
        yield c


def _same(remote: Resolution, local: Resolution) -> None:
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
    assert list(remote.options) == list(local.options)


# --------------------------------------------------------------------------- Resolve


@pytest.mark.parametrize(("name", "request_"), VARIED, ids=[n for n, _ in VARIED])
def test_resolve_equals_in_process(
    client: ResolverClient, name: str, request_: ResolveRequest
) -> None:
    local = resolve(request_)
    try:
        remote = client.resolve_request(request_)
    except ResolveError as error:
        assert not local.ok
        assert error.resolution is not None
        remote = error.resolution
    _same(remote, local)
    assert remote_resolve(client.target, request_).to_json() == local.to_json()


def test_own_stubs_through_the_public_wire_module_answer_as_in_process(grpc_target: str) -> None:  # noqa: F811
    """npu_resolver_client.wire, as its docstring shows: a caller's own channel and stub."""
    request_ = ResolveRequest(
        product="atlas-training", config={"hccl_timeout": 600}, validate_only=True
    )
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        answer = resolution_from_proto(stub.Resolve(request_to_proto(request_), timeout=10))
    assert answer.to_json() == resolve(request_).to_json()
    assert answer.options["hccl_timeout"] == 544


def _refused(target: str, request_: ResolveRequest) -> Any:
    """The error of a Resolve refused, through gRPC's own generated stub."""
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Resolve(request_to_proto(request_), timeout=10)
    return info.value


def test_resolve_out_of_range_is_invalid_argument_with_bad_request(grpc_target: str) -> None:  # noqa: F811
    error = _refused(grpc_target, BAD)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(error)
    assert status is not None and len(status.details) == 2
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert [(v.field, v.reason) for v in bad.field_violations] == [
        ("config.hccl_timeout", "OUT_OF_RANGE")
    ]
    response = pb.ResolveResponse()
    assert status.details[1].Unpack(response)
    assert not response.ok and response.product == "atlas-training"
    assert "hccl_timeout" in error.details()


@pytest.mark.parametrize(
    ("config", "more"),
    [
        ({"hccl_timeout": -1}, ""),
        ({"hccl_timeot": 1, "deterministic": 5}, " (and 1 more error)"),
        ({"hccl_timeot": 1, "deterministic": 5, "hccl_timeout": -1}, " (and 2 more errors)"),
    ],
    ids=["one error", "two errors", "three errors"],
)
def test_a_refused_resolves_status_message_names_the_first_error_and_counts_the_rest(
    grpc_target: str,  # noqa: F811
    config: dict[str, Any],
    more: str,
) -> None:
    """A caller reading only the status message (a plain gRPC stub, a log line) learns the
    first error's field and code and how many more the report holds."""
    request_ = ResolveRequest(product="atlas-a2", config=config)
    first = resolve(request_).errors[0]
    error = _refused(grpc_target, request_)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == f"config.{first.option}: {first.code.value}: {first.message}{more}"


def test_a_refused_resolves_status_message_carries_the_first_errors_suggestion(
    grpc_target: str,  # noqa: F811
) -> None:
    """A caller in another language that reads the status message alone (a plain stub, a log
    line) sees the close product the report suggests."""
    error = _refused(grpc_target, ResolveRequest(product="atlas-a3x"))
    assert error.details().startswith("product: UNKNOWN_PRODUCT: product 'atlas-a3x' is not")
    assert error.details().endswith("(suggestion: atlas-a3)")


def test_client_raises_one_error_type_with_the_report(client: ResolverClient) -> None:
    with pytest.raises(ResolveError) as info:
        client.resolve("atlas-training", {"hccl_timeout": 17341})
    error = info.value
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert [d.code.value for d in error.diagnostics] == ["OUT_OF_RANGE"]
    assert error.violations[0].field == "config.hccl_timeout"
    assert error.resolution is not None
    _same(error.resolution, resolve(BAD))


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (ResolveRequest(product="atlas-9000"), "product"),
        (ResolveRequest(product="atlas-a2", profile="gold"), "profile"),
        (
            ResolveRequest(product="atlas-a2", env={"HCCL_EXEC_TIMEOUT": "soon"}),
            "env.HCCL_EXEC_TIMEOUT",
        ),
        (ResolveRequest(product="atlas-a2", config={"precison_mode": 1}), "config.precison_mode"),
        # R-AOE-1 under strict: the value came from the job's AOE_MODE, not from the config.
        (
            ResolveRequest("atlas-a2", {"graph_run_mode": 0}, {"AOE_MODE": "2"}, strict=True),
            "env.AOE_MODE",
        ),
        (
            ResolveRequest("atlas-a2", {"aoe_mode": "2", "graph_run_mode": 0}, strict=True),
            "config.aoe_mode",
        ),
        (  # null means unset: the value is still the variable's
            ResolveRequest(
                "atlas-a2", {"aoe_mode": None, "graph_run_mode": 0}, {"AOE_MODE": "2"}, strict=True
            ),
            "env.AOE_MODE",
        ),
        (ResolveRequest(product="atlas-a2", attachments={"nope": "x"}), "attachments.nope"),
        (ResolveRequest(product="atlas-a2", workdir="/job\x00/x"), "workdir"),
        (ResolveRequest(product="atlas-a2", config={"workdir": "/x"}), "config.workdir"),
        # Unknown options named like request fields (a whole request passed as its config):
        # the config is at fault, not the request's product, env or attachments.
        (ResolveRequest(product="atlas-a2", config={"product": "atlas-a2"}), "config.product"),
        (ResolveRequest(product="atlas-a2", config={"env.HOME": "/x"}), "config.env.HOME"),
        (ResolveRequest(product="atlas-a2", config={"config": {}}), "config.config"),
        (
            ResolveRequest(product="atlas-a2", config={"attachments.x": "y"}),
            "config.attachments.x",
        ),
    ],
)
def test_violation_fields(client: ResolverClient, request_: ResolveRequest, field: str) -> None:
    with pytest.raises(ResolveError) as info:
        client.resolve_request(request_)
    assert [v.field for v in info.value.violations] == [field]


def test_validate_only_returns_the_report_with_ok_status(client: ResolverClient) -> None:
    report = client.resolve("atlas-training", {"hccl_timeout": 17341}, validate_only=True)
    assert not report.ok
    assert report.codes() == ["OUT_OF_RANGE"]


def test_answers_carry_the_worker_pid(client: ResolverClient) -> None:
    client.resolve("atlas-a2")
    assert client.last_server_pid == str(os.getpid())
    with pytest.raises(ResolveError):
        client.resolve_request(BAD)
    assert client.last_server_pid == str(os.getpid())


def test_repeated_requests_hit_the_answer_cache(
    client: ResolverClient,
    grpc_server: ThreadServer,  # noqa: F811
) -> None:
    """A reply is kept from its request's second sight, then answered from the cache (errors
    too, with their full report)."""
    cache = grpc_server.built.service.cache
    request_ = ResolveRequest(product="atlas-a2", config={"hccl_timeout": 1234})
    first = client.resolve_request(request_)
    kept = len(cache)
    assert client.resolve_request(request_) == first
    assert len(cache) == kept + 1  # the second sight admits it
    hits = cache.hits
    assert client.resolve_request(request_) == first
    assert cache.hits == hits + 1
    bad = ResolveRequest(product="atlas-a2", config={"hccl_timeout": "not cached yet"})
    for _ in range(3):
        with pytest.raises(ResolveError) as info:
            client.resolve_request(bad)
        assert info.value.resolution is not None
    assert cache.hits == hits + 2


def test_cached_answers_are_kept_per_policy_version() -> None:
    """An answer is the policy's in force: another version never gets it, even for the same
    bytes (a batch's items resolved under the old policy land after a reload cleared it)."""
    cache = AnswerCache(16)
    answer = Answer(grpc.StatusCode.OK, payload=b"x" * 100)
    cache.put("v1", b"request", answer)
    cache.put("v1", b"request", answer)  # kept from its second sight
    assert cache.get("v1", b"request") is answer
    assert cache.get("v2", b"request") is None and cache.get("", b"request") is None


def test_one_off_requests_are_not_kept() -> None:
    """A flood of distinct requests leaves the cache empty: nothing recurring is evicted and no
    memory goes to replies nobody asks for again."""
    cache = AnswerCache(16)
    answer = Answer(grpc.StatusCode.OK, payload=b"x" * 100)
    cache.put("", b"hot", answer)
    cache.put("", b"hot", answer)
    for i in range(1000):
        cache.put("", f"one-off {i}".encode(), answer)
    assert len(cache) == 1 and cache.get("", b"hot") is answer


def test_requests_of_up_to_64_kib_are_answered_from_the_cache(
    grpc_server: ThreadServer,  # noqa: F811
) -> None:
    """Larger requests are rare and would crowd the cache out: they are resolved each time."""
    cache = grpc_server.built.service.cache
    bare = pb.ResolveRequest(product="atlas-a2", validate_only=True).ByteSize()
    with grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.unary_unary("/npu.resolver.v1.Resolver/Resolve")
        for size, hits in ((64 * 1024, 1), (64 * 1024 + 1, 0)):
            workdir = "w" * (size - bare - 4)  # its tag and a 3-byte length
            request_ = pb.ResolveRequest(product="atlas-a2", workdir=workdir, validate_only=True)
            raw = request_.SerializeToString()
            assert len(raw) == size
            before = cache.hits
            for _ in range(3):  # seen, kept, then answered from the cache
                call(raw, timeout=10)
            assert cache.hits - before == hits


def test_a_full_cache_gives_way_to_its_least_recently_used_answer() -> None:
    cache = AnswerCache(2)
    answers = {key: Answer(grpc.StatusCode.OK, payload=key) for key in (b"a", b"b", b"c")}
    for key in (b"a", b"b"):
        cache.put("", key, answers[key])
        cache.put("", key, answers[key])
    assert len(cache) == 2
    assert cache.get("", b"a") is answers[b"a"]  # used since b was kept
    cache.put("", b"c", answers[b"c"])
    cache.put("", b"c", answers[b"c"])
    assert len(cache) == 2
    assert cache.get("", b"b") is None
    assert cache.get("", b"a") is answers[b"a"] and cache.get("", b"c") is answers[b"c"]


def test_an_answer_of_exactly_the_byte_bound_is_kept_and_one_byte_more_is_not() -> None:
    answer = Answer(grpc.StatusCode.OK, payload=b"x" * 1000)
    bound = answer.size + len(b"request")
    for max_bytes, kept in ((bound, 1), (bound - 1, 0)):
        cache = AnswerCache(16, max_bytes=max_bytes)
        cache.put("", b"request", answer)
        cache.put("", b"request", answer)
        assert len(cache) == kept


def test_a_cache_cleared_for_a_new_policy_holds_as_many_bytes_as_before() -> None:
    """What the cache held under the old policy no longer counts against its byte bound."""
    answer = Answer(grpc.StatusCode.OK, payload=b"x" * 1000)
    keys = (b"first", b"second")
    cache = AnswerCache(16, max_bytes=sum(answer.size + len(key) for key in keys))
    for version in ("v1", "v2", "v3"):
        for key in keys:
            cache.put(version, key, answer)
            cache.put(version, key, answer)
        assert len(cache) == 2
        assert all(cache.get(version, key) is answer for key in keys)
        cache.clear()


# --------------------------------------------------------------------------- the other RPCs


def test_batch_mixed_items(client: ResolverClient) -> None:
    requests = [GOOD, BAD, ResolveRequest(product="nope"), GOOD, replace_validate(BAD)]
    results = client.resolve_batch(requests)
    assert len(results) == 5
    assert isinstance(results[0], Resolution) and results[0].ok
    assert isinstance(results[1], ResolveFailure)
    assert results[1].code is grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in results[1].violations] == ["config.hccl_timeout"]
    assert results[1].resolution is not None
    _same(results[1].resolution, resolve(BAD))
    assert isinstance(results[1].error(), ResolveError)
    assert isinstance(results[2], ResolveFailure) and results[2].violations[0].field == "product"
    assert results[3] == results[0]
    assert isinstance(results[4], Resolution) and not results[4].ok
    assert client.resolve_batch([]) == []


def test_batch_failures_carry_their_index_and_the_callers_own_values(
    client: ResolverClient,
) -> None:
    """A failed item says which it was, and its report holds the caller's JSON as given (600.0
    stays a float in `requested`), as Resolve's report for it does."""
    failing = ResolveRequest(
        product="atlas-training", config={"hccl_timeout": 600.0, "enable_exception_dump": 3}
    )
    results = client.resolve_batch([GOOD, failing, GOOD, ResolveRequest(product="nope")])
    failures = [r for r in results if isinstance(r, ResolveFailure)]
    assert [f.index for f in failures] == [1, 3]
    assert failures[0].resolution is not None
    _same(failures[0].resolution, resolve(failing))
    requested = failures[0].resolution.provenance["hccl_timeout"].requested
    assert requested == 600.0 and type(requested) is float


def test_batch_reply_carries_the_catalog_and_policy_versions_it_was_answered_under(
    grpc_target: str,  # noqa: F811
) -> None:
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        reply = stub.ResolveBatch(
            pb.ResolveBatchRequest(requests=[request_to_proto(GOOD)]), timeout=10
        )
    assert reply.catalog_version == npu_resolver.CATALOG_VERSION == "900"
    assert reply.policy_version == ""  # this server has no policy (see test_grpc_policy)
    assert len(reply.results) == 1


def test_diff_through_a_server_keeps_strict_and_workdir(client: ResolverClient) -> None:
    request_ = ResolveRequest(
        product="", config={"input_batch_cpy": True}, workdir="/jobs/7", strict=True
    )
    products = ["atlas-a2", "atlas-training"]
    remote = client.diff(request_, products)
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        npu_resolver.diff(request_, products).to_json(), sort_keys=True
    )
    training = remote.results["atlas-training"]
    assert [(d.severity.value, d.code.value) for d in training.diagnostics] == [
        ("ERROR", "DROPPED_UNSUPPORTED_PRODUCT")
    ]
    assert remote.results["atlas-a2"].paths["debug_dir"] == "/jobs/7"


def test_diff_and_batch_through_a_policy_server_keep_the_profile_and_say_the_version() -> None:
    policy = npu_resolver.parse_policy(
        "[profiles.debug.defaults]\nhccl_timeout = 7200\n", "policy.toml"
    )
    request_ = ResolveRequest(product="", profile="debug")
    products = ["atlas-a2", "atlas-a3"]
    with ThreadServer(policy=policy) as server, ResolverClient(server.target) as client:
        remote = client.diff(request_, products)
        with grpc.insecure_channel(server.target) as channel:
            batch = pb_grpc.ResolverStub(channel).ResolveBatch(
                pb.ResolveBatchRequest(requests=[request_to_proto(GOOD)]), timeout=10
            )
    local = npu_resolver.diff(request_, products, policy=policy)
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
    assert remote.results["atlas-a2"].options["hccl_timeout"] == 7200
    assert batch.policy_version == policy.version != ""


def test_r_pm_3_an_error_on_a_value_the_policy_gave_names_the_profile_in_its_violation() -> None:
    """The config held no precision_mode: the violation names the field that chose the value
    (the profile), in the status and in a report the client rebuilds alike; the caller's own
    value of it is named in the config."""
    policy = npu_resolver.parse_policy(
        '[profiles.inf.locked]\nprecision_mode = "force_fp16"\n', "policy.toml"
    )
    from_policy = ResolveRequest(product="atlas-a2", profile="inf")
    own = ResolveRequest(product="atlas-a2", config={"precision_mode": "force_fp16"})
    unset = ResolveRequest(product="atlas-a2", config={"precision_mode": None}, profile="inf")
    with ThreadServer(policy=policy) as server, ResolverClient(server.target) as client:
        cases = ((from_policy, "profile"), (own, "config.precision_mode"), (unset, "profile"))
        for request_, field in cases:
            with pytest.raises(ResolveError) as info:
                client.resolve_request(request_)
            assert [(v.field, v.reason) for v in info.value.violations] == [
                (field, "UNSUPPORTED_VALUE")
            ]


def test_a_locked_value_keeps_the_callers_own_json_in_requested_through_a_server() -> None:
    """The caller's 600.0 replaced by a lock is `requested: 600.0` in process; a Struct carries
    it as a double, which the client puts back as the caller wrote it."""
    policy = npu_resolver.parse_policy(
        "[profiles.default.locked]\nhccl_timeout = 1200\n", "policy.toml"
    )
    request_ = ResolveRequest(product="atlas-a2", config={"hccl_timeout": 600.0})
    with ThreadServer(policy=policy) as server, ResolverClient(server.target) as client:
        remote = client.resolve_request(request_)
    _same(remote, resolve(request_, policy=policy))
    entry = remote.provenance["hccl_timeout"]
    assert entry.source is npu_resolver.Source.POLICY_LOCKED
    assert entry.requested == 600.0 and type(entry.requested) is float


def test_a_policys_objects_and_a_forced_requested_come_back_as_in_process() -> None:
    """A policy's object travels as a Struct (no key order, numbers as doubles): the policy
    holds it as carried (keys sorted, 2.0 as 2) and the client sorts what it reads, so the
    answer equals the in-process one whatever order the map came in. A value a rule replaced
    (R-EXD-2, FORCED) keeps the caller's 0.0 in `requested`, as a lock's does."""
    policy = npu_resolver.parse_policy(
        "[profiles.obj.defaults]\n"
        "profiling_config = {zeta = 1, alpha = 2.0, mid = [3.0, {b = 1, a = 2}]}\n"
        "[profiles.obj.locked]\ndump_config = {zz = 1, aa = 2}\n",
        "policy.toml",
    )
    objects = ResolveRequest(product="atlas-a2", profile="obj")
    forced = ResolveRequest(
        product="atlas-a3", config={"enable_exception_dump": 0.0}, env={"NPU_COLLECT_PATH": "/d"}
    )
    with ThreadServer(policy=policy) as server, ResolverClient(server.target) as client:
        remote = [client.resolve_request(objects), client.resolve_request(forced)]
    local = [resolve(objects, policy=policy), resolve(forced, policy=policy)]
    assert [json.dumps(r.to_json()) for r in remote] == [json.dumps(r.to_json()) for r in local]
    assert local[0].options["profiling_config"] == {
        "alpha": 2,
        "mid": [3, {"a": 2, "b": 1}],
        "zeta": 1,
    }
    assert list(local[0].options["dump_config"]) == ["aa", "zz"]
    requested = remote[1].provenance["enable_exception_dump"].requested
    assert requested == 0.0 and type(requested) is float


def replace_validate(request_: ResolveRequest) -> ResolveRequest:
    from dataclasses import replace

    return replace(request_, validate_only=True)


def _nested(levels: int) -> dict[str, Any]:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return deep


def test_batch_item_out_of_limits_fails_alone(client: ResolverClient) -> None:
    results = client.resolve_batch(
        [ResolveRequest("atlas-a2", {"dump_config": _nested(MAX_OBJECT_DEPTH + 5)}), GOOD]
    )
    assert isinstance(results[0], ResolveFailure) and results[0].resolution is not None
    assert "nested deeper" in results[0].message
    assert [(d.code, d.option) for d in results[0].resolution.errors] == [
        (Code.INVALID_VALUE, "config")
    ]
    assert isinstance(results[1], Resolution)


def test_validate_only_reports_a_config_too_deep_to_read_with_status_ok(
    client: ResolverClient,
) -> None:
    """The contract: validate_only never fails at the transport level."""
    report = client.resolve_request(
        ResolveRequest(
            "atlas-a2", {"dump_config": _nested(MAX_OBJECT_DEPTH + 5)}, validate_only=True
        )
    )
    assert not report.ok
    assert [(d.code, d.option) for d in report.errors] == [(Code.INVALID_VALUE, "config")]


def _cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append({"again": loop})
    return loop


@pytest.mark.parametrize(
    "value", [_nested(995), _nested(5_000), _cycle()], ids=["995", "5000", "cycle"]
)
def test_a_config_too_deep_for_json_to_write_is_refused_as_in_process(
    client: ResolverClient, value: Any
) -> None:
    """Deeper than Python's json writer can follow, or around a cycle: still the in-process
    INVALID_VALUE on `config`, from resolve, validate_only and a batch alike, never a
    RecursionError or a ValueError."""
    request_ = ResolveRequest("atlas-a2", {"dump_config": value, "hccl_timeout": 600})
    local = npu_resolver.resolve(request_)
    assert [(d.code, d.option) for d in local.errors] == [(Code.INVALID_VALUE, "config")]
    with pytest.raises(ResolveError) as info:
        client.resolve_request(request_)
    assert info.value.resolution is not None
    assert info.value.resolution.to_json() == local.to_json()
    report = client.resolve_request(replace_validate(request_))
    assert report.to_json() == npu_resolver.resolve(replace_validate(request_)).to_json()
    (item,) = client.resolve_batch([request_])
    assert isinstance(item, ResolveFailure) and item.resolution is not None
    assert item.resolution.to_json() == local.to_json()


def test_an_object_the_server_reads_is_judged_as_in_process(client: ResolverClient) -> None:
    """Every depth the wire carries is one the core judges itself, so both say the same."""
    for levels in (MAX_OBJECT_DEPTH - 1, MAX_OBJECT_DEPTH):
        request_ = ResolveRequest("atlas-a2", {"dump_config": _nested(levels)}, validate_only=True)
        local = npu_resolver.resolve(request_)
        assert client.resolve_request(request_).to_json() == local.to_json()
    too_deep = ResolveRequest("atlas-a2", {"dump_config": _nested(MAX_OBJECT_DEPTH)})
    assert [d.option for d in npu_resolver.resolve(too_deep).errors] == ["dump_config"]


def test_diff(client: ResolverClient) -> None:
    request_ = ResolveRequest(
        product="", config={"hccl_timeout": 600, "precision_mode": "force_fp16"}
    )
    products = ["atlas-a2", "atlas-training", "Atlas 300I Duo"]
    remote = client.diff(request_, products)
    local = npu_resolver.diff(request_, products)
    assert remote.products == local.products
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
    assert "hccl_timeout" in [row.option for row in remote.differing]


def test_diff_cells_keep_the_callers_own_object_values_as_in_process(
    client: ResolverClient,
) -> None:
    """An object option passes through as given: the wire carries 2.0 as 2 and objects
    without key order, yet the diff's cells hold the caller's JSON, as in process."""
    dump = {"x": 2.0, "b": [1.5, {"a": 3.0}]}
    request_ = ResolveRequest(product="", config={"dump_config": dump})
    products = ["atlas-a2", "atlas-training"]
    remote = client.diff(request_, products)
    local = npu_resolver.diff(request_, products)
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
    (row,) = [row for row in remote.rows if row.option == "dump_config"]
    for cell in row.cells.values():
        assert cell is not None and json.dumps(cell.value) == json.dumps(dump)


@pytest.mark.parametrize("config_json", ["{", '{"a": 1, "a": 2}', "[1]"])
def test_diff_of_a_config_it_cannot_read_is_a_report_of_every_column(
    grpc_target: str,  # noqa: F811
    config_json: str,
) -> None:
    """As Resolve answers a config it cannot read with a report, so does Diff: each column
    refuses the config (INVALID_VALUE on `config`), not the whole call."""
    products = ["atlas-a2", "Atlas 300I Duo", "atlas-a2", "bogus"]
    message = pb.DiffRequest(products=products, config_json=config_json)
    with grpc.insecure_channel(grpc_target) as channel:
        reply = pb_grpc.ResolverStub(channel).Diff(message, timeout=10)
    assert list(reply.products) == ["atlas-a2", "atlas-300i-duo", "bogus"]
    for pid in reply.products:
        result = reply.results[pid]
        assert not result.ok and not result.options
        assert [(d.code, d.option) for d in result.diagnostics] == [("INVALID_VALUE", "config")]
    assert reply.results["atlas-300i-duo"].product == "atlas-300i-duo"


def test_diff_is_logged_and_counted_ok_only_when_every_column_is() -> None:
    """The call log's `ok` (and the answer behind it) for a Diff: false when a column has an
    error, as a batch with a failed item is."""
    from npu_resolver_server import PolicyStore
    from npu_resolver_server._cache import Answer
    from npu_resolver_server._servicer import ResolverService

    service = ResolverService(PolicyStore())
    context: Any = None
    good = pb.DiffRequest(products=["atlas-a2", "atlas-a3"], config_json='{"hccl_timeout": 600}')
    bad = pb.DiffRequest(
        products=["atlas-a2", "atlas-training"], config_json='{"hccl_timeout": 17341}'
    )
    answer = service.diff(good.SerializeToString(), context)
    assert isinstance(answer, Answer) and answer.ok is True  # a small request: answered at once
    answer = service.diff(bad.SerializeToString(), context)
    assert isinstance(answer, Answer)
    assert answer.code is grpc.StatusCode.OK and answer.ok is False


@pytest.mark.parametrize("products", [["atlas-a2"], []])
def test_diff_refuses_fewer_than_two_products(client: ResolverClient, products: list[str]) -> None:
    """One rule, the core's, in process and through a server alike."""
    with pytest.raises(npu_resolver.DiffError, match="2 or more products"):
        npu_resolver.diff(ResolveRequest(product=""), products)
    with pytest.raises(ResolveError) as info:
        client.diff(ResolveRequest(product=""), products)
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.resolution is None
    assert info.value.violations[0].field == "products"
    assert info.value.violations[0].reason == "TOO_FEW_PRODUCTS"


@pytest.mark.parametrize("products", [["atlas-a2"], []])
def test_diff_says_too_few_products_before_reading_the_config(
    grpc_target: str,  # noqa: F811
    products: list[str],
) -> None:
    """Refused before any work: a config that could not be read is not looked at."""
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Diff(pb.DiffRequest(products=products, config_json="not json"), timeout=10)
    error: Any = info.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "2 or more products" in error.details()


def test_diff_refuses_a_product_name_longer_than_any_in_process_and_through_a_server(
    client: ResolverClient,
) -> None:
    """Each name is a column, keyed in every row of the answer: sixteen unknown names of
    255,000 characters made a 4 MB request whose reply no server could send. Refused before any
    work, in the same words either way, naming which name."""
    names = ["atlas-a2", "x" * (npu_resolver.MAX_PRODUCT_NAME + 1)]
    with pytest.raises(npu_resolver.DiffError) as local:
        npu_resolver.diff(ResolveRequest(product=""), names)
    assert local.value.reason == "PRODUCT_NAME_TOO_LONG"
    assert str(local.value).startswith("a diff's product name 2 has 257 characters")
    with pytest.raises(ResolveError) as remote:
        client.diff(ResolveRequest(product=""), names)
    assert remote.value.violations[0].reason == "PRODUCT_NAME_TOO_LONG"
    assert str(local.value) in str(remote.value)
    longest = max(len(name) for p in npu_resolver.PRODUCTS for name in (p.id, p.name, *p.aliases))
    assert longest <= npu_resolver.MAX_PRODUCT_NAME  # every real name fits


def test_diff_refuses_more_products_than_the_limit_in_process_and_through_a_server(
    client: ResolverClient,
) -> None:
    """One limit, the core's: the same refusal, in the same words, either way; the words say
    what the numbers are (names counted once, the known products)."""
    names = [f"x{i}" for i in range(npu_resolver.MAX_DIFF_PRODUCTS + 1)]
    with pytest.raises(npu_resolver.DiffError) as local:
        npu_resolver.diff(ResolveRequest(product=""), names)
    assert local.value.reason == "TOO_MANY_PRODUCTS"
    assert pickle.loads(pickle.dumps(local.value)).reason == "TOO_MANY_PRODUCTS"
    with pytest.raises(ResolveError) as remote:
        client.diff(ResolveRequest(product=""), names)
    assert remote.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert remote.value.violations[0].reason == "TOO_MANY_PRODUCTS"
    assert str(local.value) in str(remote.value)
    assert str(local.value) == (
        "a diff takes at most 16 products and this one names 17 (a product named twice counts "
        "once); name at most 16: the 5 known ones are atlas-350, atlas-a3, atlas-a2, "
        "atlas-training, atlas-300i-duo"
    )
    # Sixteen columns, however many names: still a diff.
    sixteen = npu_resolver.diff(ResolveRequest(product=""), names[:16] + names[:16])
    assert len(sixteen.products) == 16


def test_a_diff_naming_products_past_the_field_limit_is_refused_as_too_many_products(
    client: ResolverClient,
) -> None:
    """Past 65,536 names (repeats of one product, say) the request is refused before it is
    decoded; it said "send the job's own variables and only the attachments its options
    name", a resolve's advice. It now says what a diff takes, with the diff's own reason."""
    with pytest.raises(ResolveError) as refused:
        client.diff(ResolveRequest(product=""), ["atlas-a2"] * 70_000)
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
    (violation,) = refused.value.violations
    assert (violation.field, violation.reason) == ("products", "TOO_MANY_PRODUCTS")
    assert "a diff takes at most 16" in refused.value.details
    assert "attachments" not in refused.value.details


@pytest.mark.parametrize("before", [b"", b"\x22\x07/jobs/7"], ids=["names first", "workdir first"])
def test_a_diff_naming_products_past_the_field_limit_says_so_whatever_comes_first(
    grpc_target: str,  # noqa: F811
    before: bytes,
) -> None:
    """Fields may come in any order on the wire (or two messages be joined): the names after
    another field are still counted as names, not said to be too many fields of a resolve."""
    raw = before + pb.DiffRequest(products=["atlas-a2"] * 70_000).SerializeToString()
    with grpc.insecure_channel(grpc_target) as channel, pytest.raises(grpc.RpcError) as info:
        channel.unary_unary("/npu.resolver.v1.Resolver/Diff")(raw, timeout=20)
    error: Any = info.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "the request has more than 65,536 fields, most of them product names; a diff takes at "
        "most 16 (a product named twice is one column)"
    )


def test_diff_refuses_a_product_name_that_is_not_a_str_with_a_type_error() -> None:
    """As ResolveRequest refuses a product that is not a str: a mistake in the caller's code,
    said where it is made (not an exception from deep inside, nor a column named None)."""
    with pytest.raises(TypeError, match="a diff's product names are str, not NoneType"):
        npu_resolver.diff(ResolveRequest(product=""), [None, "atlas-a2"])  # type: ignore[list-item]


def test_arguments_of_the_wrong_type_are_type_errors_naming_the_parameter(
    client: ResolverClient,
) -> None:
    """Not a diff of the letters of one name, nor an AttributeError from deep inside."""
    request_ = ResolveRequest(product="atlas-a2")
    with pytest.raises(TypeError, match=r"products is a list of product names, not one str"):
        npu_resolver.diff(request_, "atlas-a2")
    with pytest.raises(TypeError, match=r"products is a list of product names, not one str"):
        client.diff(request_, "atlas-a2")
    with pytest.raises(TypeError, match=r"products is a list of product names, not set"):
        client.diff(request_, {"atlas-a2", "atlas-a3"})  # type: ignore[arg-type]
    calls: list[Any] = [
        npu_resolver.resolve,
        lambda r, **kw: npu_resolver.diff(r, ["a", "b"], **kw),
    ]
    for call in calls:
        with pytest.raises(TypeError, match=r"policy must be an npu_resolver.Policy, not str; "):
            call(request_, policy="pol.toml")
        with pytest.raises(TypeError, match=r"request must be an npu_resolver.ResolveRequest"):
            call({"product": "atlas-a2"})


def test_diff_of_two_names_of_one_product_is_one_column(client: ResolverClient) -> None:
    request_ = ResolveRequest(product="", config={"hccl_timeout": 1000})
    local = npu_resolver.diff(request_, ["atlas-a2", "Ascend910B3"])
    assert local.products == ("atlas-a2",)
    assert client.diff(request_, ["atlas-a2", "Ascend910B3"]).to_json() == local.to_json()


def test_diff_with_an_unknown_product_is_the_in_process_answer(client: ResolverClient) -> None:
    request_ = ResolveRequest(product="", config={"hccl_timeout": 600})
    products = ["atlas-a2", "atlas-9000"]
    remote = client.diff(request_, products)
    local = npu_resolver.diff(request_, products)
    assert json.dumps(remote.to_json(), sort_keys=True) == json.dumps(
        local.to_json(), sort_keys=True
    )
    assert [d.code.value for d in remote.results["atlas-9000"].errors] == ["UNKNOWN_PRODUCT"]


def test_a_diffs_rows_compare_only_the_products_resolved(client: ResolverClient) -> None:
    """An unknown product has no cell in any row: it takes no part in `same`, so `differing`
    holds what the known products differ in (every row differed), as the CLI's table shows,
    in process and through a server alike."""
    request_ = ResolveRequest(product="", config={"hccl_timeout": 600})
    products = ["atlas-training", "atlas-a2", "nope"]
    for answer in (client.diff(request_, products), npu_resolver.diff(request_, products)):
        assert [row.option for row in answer.differing] == [
            "input_batch_cpy",
            "precision_mode_v2",
            "precision_mode",
            "hccl_timeout",
        ]
        known = answer.only(["atlas-training", "atlas-a2"])
        assert [row.option for row in known.differing] == [row.option for row in answer.differing]
        (mode,) = [row for row in answer.rows if row.option == "graph_run_mode"]
        assert mode.same and mode.cells["nope"] is None


def test_list_products_and_catalog(client: ResolverClient) -> None:
    assert client.list_products() == npu_resolver.list_products()
    # What a product supports is not on the wire: a product described as this package's own
    # table describes it has that row's capabilities, so code written against the table
    # reads the same through the client (AOE tuning on atlas-a2, say).
    remote = [(p.id, p.aoe_tuning, p.aicore_num) for p in client.list_products()]
    assert remote == [(p.id, p.aoe_tuning, p.aicore_num) for p in npu_resolver.PRODUCTS]
    assert all(value is not None for _, *values in remote for value in values)
    assert json.dumps(client.describe_catalog(), sort_keys=True) == json.dumps(
        npu_resolver.describe_catalog(), sort_keys=True
    )
    one = client.describe_catalog("Atlas A2")
    assert [p["id"] for p in one["products"]] == ["atlas-a2"]
    with pytest.raises(ResolveError) as refused:
        client.describe_catalog("atlas-9000")
    (violation,) = refused.value.violations
    assert (violation.field, violation.reason) == ("product", "UNKNOWN_PRODUCT")
    assert "atlas-9000" in violation.description


def test_a_catalog_described_for_one_product_is_not_the_answer_for_every_product() -> None:
    """Replies are kept per product asked: the whole catalog after one product's still lists
    every product, and that product's again only its own."""
    with ThreadServer() as server, ResolverClient(server.target, timeout=10) as client:
        one = client.describe_catalog("atlas-a2")
        every = client.describe_catalog()
        again = client.describe_catalog("atlas-a2")
    assert [p["id"] for p in one["products"]] == ["atlas-a2"]
    assert [p["id"] for p in every["products"]] == [p.id for p in npu_resolver.PRODUCTS]
    assert json.dumps(every, sort_keys=True) == json.dumps(
        npu_resolver.describe_catalog(), sort_keys=True
    )
    assert again == one


def test_a_resolve_errors_text_carries_the_suggestion_the_cli_shows(
    client: ResolverClient,
    grpc_target: str,  # noqa: F811
) -> None:
    """An unknown product's close name was in the report and the CLI's line, but not in the
    error's text: it follows the message there too, as the CLI writes it, from the blocking
    and asyncio clients and a batch item alike; `details` stays the server's words, and a
    message that says its close name already is not told it twice. (The server's status
    message carries it too, for callers that read only that.)"""
    unknown = ResolveRequest("atlas-a3x")
    message = npu_resolver.resolve(unknown).errors[0].message
    said = f"INVALID_ARGUMENT: product: UNKNOWN_PRODUCT: {message} (suggestion: atlas-a3)"

    async def in_async() -> ResolveError:
        async with AsyncResolverClient(grpc_target) as async_client:
            with pytest.raises(ResolveError) as info:
                await async_client.resolve_request(unknown)
            return info.value

    with pytest.raises(ResolveError) as blocking:
        client.resolve_request(unknown)
    [failure] = client.resolve_batch([unknown])
    assert isinstance(failure, ResolveFailure)
    for error in (blocking.value, asyncio.run(in_async()), failure.error()):
        assert isinstance(error, ResolveError)
        assert str(error) == said
        assert error.details == f"product: UNKNOWN_PRODUCT: {message} (suggestion: atlas-a3)"
        assert pickle.loads(pickle.dumps(error)).args == error.args
    with pytest.raises(ResolveError) as typo:
        client.resolve("atlas-a2", {"hccl_timout": 600})
    assert str(typo.value).endswith("did you mean 'hccl_timeout'?")  # said once, not twice


def test_get_policy_without_policy(client: ResolverClient) -> None:
    info = client.get_policy()
    assert info.policy_version == "" and info.source == "" and info.last_reload_error == ""
    with pytest.raises(ResolverCallError) as error:
        client.reload_policy()
    assert error.value.code is grpc.StatusCode.FAILED_PRECONDITION


async def test_async_client(grpc_target: str) -> None:  # noqa: F811
    async with AsyncResolverClient(grpc_target) as client:
        good = [r for _, r in VARIED if resolve(r).ok]
        results = await asyncio.gather(*(client.resolve_request(r) for r in good))
        assert [r.to_json() for r in results] == [resolve(r).to_json() for r in good]
        with pytest.raises(ResolveError) as info:
            await client.resolve_request(BAD)
        assert info.value.violations[0].reason == "OUT_OF_RANGE"
        assert client.last_server_pid == str(os.getpid())
        batch = await client.resolve_batch([GOOD, BAD])
        assert isinstance(batch[1], ResolveFailure)
        assert (await client.list_products())[0].id == "atlas-350"
        assert (await client.describe_catalog())["catalog_version"] == "900"
        assert (await client.diff(GOOD, ["atlas-a2", "atlas-a3"])).products == (
            "atlas-a2",
            "atlas-a3",
        )
        assert (await client.get_policy()).policy_version == ""


# --------------------------------------------------------------------------- robustness


def _raw_call(target: str, method: str, payload: bytes, timeout: float = 10) -> grpc.RpcError:
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", -1)]) as ch:
        call = ch.unary_unary(f"/npu.resolver.v1.Resolver/{method}")
        with pytest.raises(grpc.RpcError) as info:
            call(payload, timeout=timeout)
    return info.value


@pytest.mark.parametrize("method", ["Resolve", "ResolveBatch", "Diff", "DescribeCatalog"])
def test_malformed_bytes_are_invalid_argument(grpc_target: str, method: str) -> None:  # noqa: F811
    error: Any = _raw_call(grpc_target, method, b"\xff\xff\xff\xff")
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid" in error.details()


def test_invalid_utf8_is_invalid_argument(grpc_target: str) -> None:  # noqa: F811
    raw = pb.ResolveRequest(product="atlas-a2", env={"HCCL_EXEC_TIMEOUT": "ok"}).SerializeToString()
    error: Any = _raw_call(grpc_target, "Resolve", raw.replace(b"ok", b"\xc3\x28"))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "UTF-8" in error.details()


def test_nesting_and_width_limits(grpc_target: str) -> None:  # noqa: F811
    from npu_resolver_server._encode import field as _field

    # 1,000 nested lists, written by hand: protobuf itself refuses to build such a message.
    value = _field(3, b"x")  # Value.string_value
    for _ in range(1000):
        value = _field(6, _field(1, value))  # Value.list_value -> ListValue.values
    entry = _field(1, b"dump_config") + _field(2, value)  # Struct.fields map entry
    raw = _field(1, b"atlas-a2") + _field(2, _field(1, entry))  # product, config
    error: Any = _raw_call(grpc_target, "Resolve", raw)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT

    wide = pb.ResolveRequest(product="atlas-a2")
    wide.config.update({f"k{i}": i for i in range(100_000)})
    error = _raw_call(grpc_target, "Resolve", wide.SerializeToString())
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "keys" in error.details()


def test_oversize_request_is_resource_exhausted(grpc_target: str) -> None:  # noqa: F811
    big = {"op_debug_config": "x" * (5 * 1024 * 1024)}
    with (
        ResolverClient(grpc_target, max_message_bytes=64 * 1024 * 1024) as client,
        pytest.raises(ResolverCallError) as info,
    ):
        client.resolve("atlas-a2", attachments=big)
    assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_tiny_deadline_is_deadline_exceeded(client: ResolverClient) -> None:
    requests = [GOOD] * 1000
    with pytest.raises(ResolverUnavailable) as info:
        client.resolve_batch(requests, timeout=0.001)
    assert info.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert client.resolve("atlas-a2").ok  # the server is unharmed


def test_unreachable_server_is_resolver_unavailable() -> None:
    with (
        ResolverClient(f"127.0.0.1:{free_port()}", timeout=5) as client,
        pytest.raises(ResolverUnavailable) as info,
    ):
        client.resolve("atlas-a2")
    assert info.value.code is grpc.StatusCode.UNAVAILABLE


# --------------------------------------------------------------------------- health, reflection


def test_health_serving(grpc_target: str) -> None:  # noqa: F811
    with grpc.insecure_channel(grpc_target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", HEALTH_SERVICE):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_health_list_names_every_service_as_check_does(grpc_target: str) -> None:  # noqa: F811
    """List is part of the health protocol and reflection advertises it: a caller that uses it
    to find the services must not get UNIMPLEMENTED."""
    with grpc.insecure_channel(grpc_target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = stub.List(health_pb2.HealthListRequest(), timeout=5)
    serving = health_pb2.HealthCheckResponse.SERVING
    assert {name: s.status for name, s in reply.statuses.items()} == {
        "": serving,
        HEALTH_SERVICE: serving,
    }


def test_health_not_serving_during_drain() -> None:
    with (
        ThreadServer(ServerSettings(port=0, grace_seconds=2)) as server,
        grpc.insecure_channel(server.target) as channel,
    ):
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        server.run(server.built.health.enter_graceful_shutdown())
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        listed = stub.List(health_pb2.HealthListRequest(), timeout=5)
        assert {s.status for s in listed.statuses.values()} == {
            health_pb2.HealthCheckResponse.NOT_SERVING
        }
        watch.cancel()


def test_reflection_answers_under_v1_too(grpc_target: str) -> None:  # noqa: F811
    """Clients on gRPC's v1 reflection API (the current one) ask grpc.reflection.v1 first;
    the messages are v1alpha's, field for field."""
    from grpc_reflection.v1alpha import reflection_pb2

    asked = reflection_pb2.ServerReflectionRequest(file_containing_symbol=HEALTH_SERVICE)
    with grpc.insecure_channel(grpc_target) as channel:
        call = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        listed, found = list(
            call(iter([reflection_pb2.ServerReflectionRequest(list_services=""), asked]), timeout=5)
        )
    assert HEALTH_SERVICE in {s.name for s in listed.list_services_response.service}
    files = found.file_descriptor_response.file_descriptor_proto
    assert any(b"npu/resolver/v1/resolver.proto" in f for f in files)


def test_reflection_lists_and_describes_its_v1_service(grpc_target: str) -> None:  # noqa: F811
    """A v1 client that lists the services and then describes each (as grpcurl's `describe`
    does) finds the v1 reflection service among them, and its file under its own package."""
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2

    v1 = "grpc.reflection.v1.ServerReflection"
    asked = reflection_pb2.ServerReflectionRequest(file_containing_symbol=v1)
    with grpc.insecure_channel(grpc_target) as channel:
        call = channel.stream_stream(
            f"/{v1}/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        listed, found = list(
            call(iter([reflection_pb2.ServerReflectionRequest(list_services=""), asked]), timeout=5)
        )
    assert v1 in {s.name for s in listed.list_services_response.service}
    assert not found.HasField("error_response"), found.error_response.error_message
    (raw,) = found.file_descriptor_response.file_descriptor_proto
    proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    assert (proto.name, proto.package) == ("grpc/reflection/v1/reflection.proto", v1[:-17])
    method = proto.service[0].method[0]
    assert (method.name, method.input_type) == (
        "ServerReflectionInfo",
        ".grpc.reflection.v1.ServerReflectionRequest",
    )


def test_reflection_only_client_lists_and_calls_resolve(grpc_target: str) -> None:  # noqa: F811
    with grpc.insecure_channel(grpc_target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {HEALTH_SERVICE, "grpc.health.v1.Health"} <= services
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName(HEALTH_SERVICE)
        method = service.methods_by_name["Resolve"]
        # Built at run time from the reflected descriptors: no static type to check against.
        request_class: Any = message_factory.GetMessageClass(method.input_type)
        response_class: Any = message_factory.GetMessageClass(method.output_type)
        request_: Any = request_class(product="Atlas A2")
        request_.config.update({"hccl_timeout": 600})
        call = channel.unary_unary(
            f"/{HEALTH_SERVICE}/Resolve",
            request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString,
        )
        reply = call(request_, timeout=10)
    assert reply.ok and reply.product == "atlas-a2"
    assert reply.options["hccl_timeout"] == 600


# --------------------------------------------------------------------------- policy, auth, TLS


POLICY_A = """
[profiles.default.defaults]
op_debug_level = 0
"""
POLICY_B = """
[profiles.default.defaults]
op_debug_level = 0

[profiles.gold.defaults]
op_debug_level = 0
"""


def test_policy_reload_keeps_last_good(tmp_path: Path) -> None:
    from npu_resolver_server import PolicyStore

    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(POLICY_A)
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    store = PolicyStore(policy_file)
    store.load_initial()
    settings = ServerSettings(port=0, policy=policy_file, admin_token_file=token_file)
    with ThreadServer(settings, store=store) as server, ResolverClient(server.target) as client:
        first = client.get_policy()
        assert first.policy_version and first.source == str(policy_file)
        assert first.profiles == ("default",)
        assert client.resolve("atlas-a2").policy_version == first.policy_version

        with pytest.raises(ResolverCallError) as info:
            client.reload_policy()
        assert info.value.code is grpc.StatusCode.UNAUTHENTICATED

        policy_file.write_text("this is [not toml")
        with (
            ResolverClient(server.target, token="wrong") as bad_admin,
            pytest.raises(ResolverCallError),
        ):
            bad_admin.reload_policy()
        with ResolverClient(server.target, token="s3cret") as admin:
            outcome = admin.reload_policy()
        assert not outcome.changed and outcome.error
        status = client.get_policy()
        assert status.policy_version == first.policy_version
        assert status.last_reload_error and status.refused_version
        assert status.reload_failures == 1
        assert client.resolve("atlas-a2").ok

        policy_file.write_text(POLICY_B)
        assert store.check_file() is not None  # what the watcher does every second
        status = client.get_policy()
        assert status.policy_version != first.policy_version
        assert status.profiles == ("default", "gold") and not status.last_reload_error
        assert client.resolve("atlas-a2", profile="gold").ok


def test_resolve_token_protection(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0k")
    settings = ServerSettings(port=0, admin_token_file=token_file, protect_resolve=True)
    with ThreadServer(settings) as server:
        with ResolverClient(server.target) as client, pytest.raises(ResolverCallError) as info:
            client.resolve("atlas-a2")
        assert info.value.code is grpc.StatusCode.UNAUTHENTICATED
        with ResolverClient(server.target, token="t0k") as client:
            assert client.resolve("atlas-a2").ok
        with grpc.insecure_channel(server.target) as channel:  # probes need no token
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_a_rotated_admin_token_takes_effect_without_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A token rotated in its Secret, or revoked after a leak, must not wait for a restart:
    the file is looked at again (at most once a second) and the new token alone is taken. A
    file emptied mid-rewrite keeps the token in use, said once; the token is never logged."""
    from npu_resolver_server._auth import RECHECK_S, TokenFile

    caplog.set_level(logging.INFO, logger="npu_resolver_server")
    token_file = tmp_path / "token"
    token_file.write_text("old-secret\n")
    now = [0.0]
    token = TokenFile(token_file, clock=lambda: now[0])
    assert token.current() == b"old-secret"
    token_file.write_text("new-secret")
    assert token.current() == b"old-secret"  # not looked at again within the second
    now[0] += RECHECK_S
    assert token.current() == b"new-secret"
    token_file.write_text("  \n")
    for _ in range(3):
        now[0] += RECHECK_S
        assert token.current() == b"new-secret"
    token_file.unlink()
    now[0] += RECHECK_S
    assert token.current() == b"new-secret"
    events = [getattr(r, "fields", {}).get("event") for r in caplog.records]
    assert events.count("admin_token_reloaded") == 1
    assert events.count("admin_token_reload_failed") == 2  # once empty, once gone
    assert not any(
        "secret" in r.getMessage() + str(getattr(r, "fields", "")) for r in caplog.records
    )


def test_the_server_takes_the_rotated_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first")
    settings = ServerSettings(port=0, admin_token_file=token_file, protect_resolve=True)
    with ThreadServer(settings) as server:
        with ResolverClient(server.target, token="first") as client:
            assert client.resolve("atlas-a2").ok
        replacement = tmp_path / "token.new"
        replacement.write_text("second")
        os.replace(replacement, token_file)
        deadline = time.monotonic() + 10
        with ResolverClient(server.target, token="second") as client:
            while True:  # taken within a second or so
                try:
                    assert client.resolve("atlas-a2").ok
                    break
                except ResolverCallError as exc:
                    assert exc.code is grpc.StatusCode.UNAUTHENTICATED
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
        with ResolverClient(server.target, token="first") as client:
            with pytest.raises(ResolverCallError) as info:
                client.resolve("atlas-a2")
            assert info.value.code is grpc.StatusCode.UNAUTHENTICATED


def test_the_token_is_compared_in_constant_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comparison that stops at the first differing byte tells a caller, by its time, how
    much of a guess was right: every token given is compared with hmac.compare_digest."""
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recorded(given: bytes, token: bytes) -> bool:
        compared.append((given, token))
        return real(given, token)

    monkeypatch.setattr(hmac, "compare_digest", recorded)
    token_file = tmp_path / "token"
    token_file.write_text("t0k")
    settings = ServerSettings(port=0, admin_token_file=token_file, protect_resolve=True)
    with ThreadServer(settings) as server:
        for given in ("t0k", "t0kX"):
            with (
                ResolverClient(server.target, token=given) as client,
                contextlib.suppress(ResolverCallError),
            ):
                client.resolve("atlas-a2")
    assert compared == [(b"t0k", b"t0k"), (b"t0kX", b"t0k")]


@pytest.mark.parametrize(
    ("header", "answered"),
    [
        ("Bearer t0k", True),
        ("bearer t0k", True),  # the scheme is case-insensitive (RFC 9110)
        ("BEARER  t0k ", True),
        ("Bearer t0kX", False),
        ("Basic t0k", False),
        ("t0k", False),
    ],
)
def test_the_bearer_scheme_is_read_as_http_reads_it(
    tmp_path: Path, header: str, answered: bool
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0k")
    settings = ServerSettings(port=0, admin_token_file=token_file, protect_resolve=True)
    with ThreadServer(settings) as server, grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        message = pb.ListProductsRequest()
        if answered:
            assert stub.ListProducts(message, metadata=(("authorization", header),), timeout=10)
            return
        with pytest.raises(grpc.RpcError) as info:
            stub.ListProducts(message, metadata=(("authorization", header),), timeout=10)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert info.value.details() == "the bearer token is not valid"
        trailing = dict(info.value.trailing_metadata())
        assert trailing["x-npu-resolver-pid"] == str(os.getpid())  # the server runs in a thread
        with pytest.raises(grpc.RpcError) as info:
            stub.ListProducts(message, timeout=10)
        # Not an admin call: the refusal does not say "admin".
        assert info.value.details() == "this call needs the bearer token (authorization metadata)"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import trustme

    folder = tmp_path_factory.mktemp("certs")
    ca, other_ca = trustme.CA(), trustme.CA()
    server_cert = ca.issue_cert("localhost", "127.0.0.1")
    client_cert = ca.issue_cert("launcher@example.test")
    paths = {
        "ca": folder / "ca.pem",
        "other_ca": folder / "other.pem",
        "cert": folder / "server.pem",
        "key": folder / "server.key",
        "client_cert": folder / "client.pem",
        "client_key": folder / "client.key",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other_ca.cert_pem.write_to_path(str(paths["other_ca"]))
    server_cert.private_key_pem.write_to_path(str(paths["key"]))
    paths["cert"].write_bytes(b"".join(b.bytes() for b in server_cert.cert_chain_pems))
    client_cert.private_key_pem.write_to_path(str(paths["client_key"]))
    paths["client_cert"].write_bytes(b"".join(b.bytes() for b in client_cert.cert_chain_pems))
    return paths


def test_tls(certs: dict[str, Path]) -> None:
    settings = ServerSettings(port=0, tls_cert=certs["cert"], tls_key=certs["key"])
    with ThreadServer(settings) as server:
        target = f"localhost:{server.port}"
        with ResolverClient(target, root_certificates=certs["ca"]) as client:
            assert client.resolve("atlas-a2").ok
        with (
            ResolverClient(target, root_certificates=certs["other_ca"], timeout=3) as client,
            pytest.raises(ResolverUnavailable),
        ):
            client.resolve("atlas-a2")


def test_a_tls_server_across_a_slow_link_is_reached(certs: dict[str, Path]) -> None:
    """A TLS handshake of a few round trips over a slow link (a second each way) takes longer
    than the client's longest reconnect backoff (2 s); the connection is still made, as plain
    gRPC makes it (a minimum backoff would also have cut gRPC's connect timeout to it)."""
    from tests._server import SlowLink

    settings = ServerSettings(port=0, tls_cert=certs["cert"], tls_key=certs["key"])
    with ThreadServer(settings) as server:
        link = SlowLink(server.target, 1.0)
        try:
            target = f"127.0.0.1:{link.port}"
            with ResolverClient(target, root_certificates=certs["ca"], timeout=30) as client:
                assert client.resolve("atlas-a2").ok
        finally:
            link.close()


def test_renewed_certificates_are_taken_without_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """cert-manager renews a Secret in place and the kubelet swaps the mounted files: the next
    connection gets the new certificate. A renewal whose key is another certificate's is
    refused (logged), and the last good pair keeps serving."""
    import trustme

    def install(cert: Any, key: Any) -> None:  # written whole, then renamed into place
        for name, pem in (("tls.crt", cert), ("tls.key", key)):
            (tmp_path / f"{name}.new").write_bytes(pem.bytes())
            os.replace(tmp_path / f"{name}.new", tmp_path / name)

    old_ca, new_ca = trustme.CA(), trustme.CA()
    first = old_ca.issue_cert("localhost")
    install(first.cert_chain_pems[0], first.private_key_pem)
    settings = ServerSettings(port=0, tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key")

    def served_to(ca: trustme.CA) -> bool:
        roots = ca.cert_pem.bytes()
        with ResolverClient(f"localhost:{server.port}", root_certificates=roots, timeout=3) as c:
            try:
                return c.resolve("atlas-a2").ok
            except ResolverUnavailable:
                return False

    with ThreadServer(settings) as server:
        assert served_to(old_ca)
        renewed = new_ca.issue_cert("localhost")
        install(renewed.cert_chain_pems[0], renewed.private_key_pem)
        assert served_to(new_ca)
        assert not served_to(old_ca)
        bad = new_ca.issue_cert("localhost")
        install(bad.cert_chain_pems[0], renewed.private_key_pem)  # another certificate's key
        assert served_to(new_ca)  # the last good pair, whose key is the one installed
        rsa = new_ca.issue_cert("localhost", key_type=trustme.KeyType.RSA)
        install(bad.cert_chain_pems[0], rsa.private_key_pem)  # a key of another algorithm
        assert served_to(new_ca)
        assert served_to(new_ca)  # judged once per change of the files, said once
    errors = [
        r.fields["error"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "tls_reload_failed"
    ]
    key = tmp_path / "tls.key"
    assert len(errors) == 2, errors
    assert errors[0].startswith(f"--tls-key {key} does not belong to --tls-cert")
    assert errors[1].startswith(f"--tls-key {key} cannot serve with --tls-cert")
    assert "(OpenSSL: NO_CERTIFICATE_ASSIGNED)" in errors[1]


def test_renewal_retries_files_it_could_not_read_and_says_a_missing_one_once(
    certs: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What gRPC's fetcher is asked before each handshake: a file gone mid-swap is said once
    however many connections come, and a pair that could not be read (its permissions fixed
    later: only the files' ctime changes) is read again, not given up on."""
    from npu_resolver_server._tls import CertificateFiles

    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(certs["cert"].read_bytes())
    key.write_bytes(certs["key"].read_bytes())
    files = CertificateFiles(cert, key, None)
    assert files.renewed() is None  # nothing changed
    key.rename(tmp_path / "away")
    assert [files.renewed() for _ in range(5)] == [None] * 5
    (tmp_path / "away").rename(key)
    os.utime(key, ns=(1, 1))  # another state of the files
    real_read = files._read
    files._read = lambda: (_ for _ in ()).throw(PermissionError("denied"))  # type: ignore[method-assign]
    assert files.renewed() is None
    files._read = real_read  # type: ignore[method-assign]
    key.chmod(0o600)  # only the ctime changes
    assert files.renewed() is not None
    lines = [r.fields["error"] for r in caplog.records if r.getMessage() == "tls_reload_failed"]  # type: ignore[attr-defined]
    assert len(lines) == 2 and "No such file" in lines[0] and lines[1] == "denied", lines


def test_mutual_tls(certs: dict[str, Path]) -> None:
    settings = ServerSettings(
        port=0, tls_cert=certs["cert"], tls_key=certs["key"], tls_client_ca=certs["ca"]
    )
    with ThreadServer(settings) as server:
        target = f"localhost:{server.port}"
        with ResolverClient(
            target,
            root_certificates=certs["ca"],
            private_key=certs["client_key"],
            certificate_chain=certs["client_cert"],
        ) as client:
            assert client.resolve("atlas-a2").ok
        with (
            ResolverClient(target, root_certificates=certs["ca"], timeout=3) as client,
            pytest.raises(ResolverUnavailable),
        ):
            client.resolve("atlas-a2")


def test_a_client_key_that_is_not_the_certificates_is_refused_before_any_call(
    certs: dict[str, Path],
) -> None:
    """gRPC would find it out at the first call, and say so as a server it cannot reach (exit 3,
    ResolverUnavailable after the retries): it is the caller's own input, named where given."""
    from tests.test_cli import run

    said = "private_key does not belong to the certificate_chain's first certificate"
    for kind in (ResolverClient, AsyncResolverClient):
        with pytest.raises(ValueError, match=said):
            kind(
                "127.0.0.1:9",
                root_certificates=certs["ca"],
                certificate_chain=certs["client_cert"],
                private_key=certs["key"],  # the server's
            )
    proc = run(
        "resolve", "--product", "atlas-a2", "--server", "127.0.0.1:9",
        "--tls-ca", str(certs["ca"]),
        "--tls-cert", str(certs["client_cert"]), "--tls-key", str(certs["key"]),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert (
        f"--tls-key {certs['key']} does not belong to --tls-cert {certs['client_cert']}'s first "
        "certificate (their public keys differ)"
    ) in proc.stderr


def test_a_client_key_of_another_algorithm_is_refused_before_any_call(
    certs: dict[str, Path], tmp_path: Path
) -> None:
    """An RSA key beside an ECDSA certificate: OpenSSL says so differently from a key of another
    certificate, and it is refused all the same, naming what OpenSSL said."""
    import trustme

    rsa_key = tmp_path / "rsa.key"
    trustme.CA().issue_cert("x", key_type=trustme.KeyType.RSA).private_key_pem.write_to_path(
        str(rsa_key)
    )
    said = r"private_key cannot serve with the certificate_chain's first certificate \(OpenSSL: "
    with pytest.raises(ValueError, match=said):
        ResolverClient("127.0.0.1:9", certificate_chain=certs["client_cert"], private_key=rsa_key)


def test_cli_without_a_client_certificate_says_mutual_tls_may_be_why(
    certs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that requires client certificates closes the handshake, which gRPC reports as
    a lost connection, like a network fault; the CLI names the likely cause and its flags."""
    from npu_resolver._cli import main

    settings = ServerSettings(
        port=0, tls_cert=certs["cert"], tls_key=certs["key"], tls_client_ca=certs["ca"]
    )
    with ThreadServer(settings) as server:
        asked = ["resolve", "--product", "atlas-a2", "--server", server.target]
        asked += ["--tls-ca", str(certs["ca"])]
        assert main(asked) == 3
        assert "if the server requires client certificates (mutual TLS), give --tls-cert " in (
            capsys.readouterr().err
        )
        own = ["--tls-cert", str(certs["client_cert"]), "--tls-key", str(certs["client_key"])]
        assert main([*asked, *own, "--format", "json"]) == 0


def test_cli_with_tls_flags_against_a_plaintext_server_says_so_in_one_line(
    certs: dict[str, Path],
) -> None:
    """Not gRPC's own log line for every failed handshake, nor the mutual-TLS hint: the one
    line the CLI writes names the likely cause (no TLS on that port) and what to do."""
    from tests.test_cli import run

    with ThreadServer(ServerSettings(port=0)) as server:
        proc = run(
            "resolve", "--product", "atlas-a2", "--server", server.target,
            "--tls-ca", str(certs["ca"]),
        )  # fmt: skip
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.rstrip().endswith(
        "; the server does not speak TLS there: leave out the --tls-* flags"
    )


def test_cli_without_tls_flags_against_a_tls_server_says_tls_may_be_why(
    certs: dict[str, Path],
) -> None:
    """A TLS server closes a plaintext connection, which gRPC reports as a lost one ("Socket
    closed"), like a network fault: the CLI names the likely cause and its flag. A server that
    is not there refuses the connection: no such hint."""
    from tests.test_cli import run

    hint = "; if the server speaks TLS, give --tls-ca (its CA bundle)"
    with ThreadServer(ServerSettings(port=0, tls_cert=certs["cert"], tls_key=certs["key"])) as s:
        proc = run("resolve", "--product", "atlas-a2", "--server", s.target)
    assert proc.returncode == 3
    assert proc.stderr.rstrip().endswith(hint), proc.stderr
    proc = run("resolve", "--product", "atlas-a2", "--server", s.target)  # stopped: refused
    assert proc.returncode == 3 and hint not in proc.stderr, proc.stderr


def test_the_client_says_when_a_tls_mismatch_may_be_why_it_cannot_reach_the_server(
    certs: dict[str, Path],
) -> None:
    """As the CLI does in its flags' words, the client names the likely cause in its own
    arguments' words: a plaintext client at a TLS port ("Socket closed"), a TLS client at a
    plaintext one, a client without a certificate at a server that requires one; blocking and
    asyncio alike. A server that is not there gets no such hint."""
    tls = ServerSettings(port=0, tls_cert=certs["cert"], tls_key=certs["key"])
    mutual = ServerSettings(
        port=0, tls_cert=certs["cert"], tls_key=certs["key"], tls_client_ca=certs["ca"]
    )
    cases = [
        (tls, None, "; if the server speaks TLS, pass root_certificates (its CA bundle)"),
        (
            ServerSettings(port=0),
            certs["ca"],
            "; the server does not speak TLS there: leave out root_certificates, "
            "certificate_chain and private_key",
        ),
        (
            mutual,
            certs["ca"],
            "; if the server requires client certificates (mutual TLS), pass certificate_chain "
            "and private_key",
        ),
    ]
    for settings, roots, hint in cases:
        with ThreadServer(settings) as server:
            target = server.target
            with (
                ResolverClient(target, timeout=3, root_certificates=roots) as client,
                pytest.raises(ResolverUnavailable) as blocking,
            ):
                client.resolve("atlas-a2")

            async def call(target: str = target, roots: Path | None = roots) -> None:
                async with AsyncResolverClient(target, timeout=3, root_certificates=roots) as c:
                    await c.resolve("atlas-a2")

            with pytest.raises(ResolverUnavailable) as awaited:
                asyncio.run(call())
        for error in (blocking.value, awaited.value):
            assert str(error).endswith(hint), str(error)
    for roots in (None, certs["ca"]):  # the server stopped: the connection is refused
        with (
            ResolverClient(target, timeout=1, root_certificates=roots) as client,
            pytest.raises(ResolverUnavailable) as gone,
        ):
            client.resolve("atlas-a2")
        assert "TLS" not in str(gone.value) and "certificate" not in str(gone.value)


def test_a_client_that_does_not_trust_the_servers_certificate_is_told_so(
    certs: dict[str, Path], tmp_path: Path
) -> None:
    """Another CA's bundle: the handshake fails on verification, which the client names (not
    mutual TLS, which a TLS client without its own certificate was told of whatever failed);
    the CLI says it of --tls-ca. Every hint the client gives has the CLI's words for it."""
    import trustme

    from npu_resolver._cli._transport import _TLS_HINTS_AS_FLAGS
    from npu_resolver_client.wire import TLS_HINTS
    from tests.test_cli import run

    assert _TLS_HINTS_AS_FLAGS.keys() == TLS_HINTS.keys()
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with ThreadServer(ServerSettings(port=0, tls_cert=certs["cert"], tls_key=certs["key"])) as s:
        with (
            ResolverClient(s.target, timeout=3, root_certificates=other) as client,
            pytest.raises(ResolverUnavailable) as refused,
        ):
            client.resolve("atlas-a2")
        proc = run("resolve", "--product", "atlas-a2", "--server", s.target, "--tls-ca", str(other))
    assert str(refused.value).endswith(TLS_HINTS["untrusted_server"])
    assert proc.returncode == 3 and proc.stderr.rstrip().endswith(
        "; the server's certificate does not verify against --tls-ca (another CA's?)"
    ), proc.stderr


def test_a_certificate_for_another_host_name_is_named_as_such(tmp_path: Path) -> None:
    """A certificate that verifies but names another host fails gRPC's own host name check,
    worded apart from a failed verification: the client says which."""
    import trustme

    from npu_resolver_client.wire import TLS_HINTS

    ca = trustme.CA()
    leaf = ca.issue_cert("elsewhere.test")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    leaf.cert_chain_pems[0].write_to_path(str(files["cert"]))
    leaf.private_key_pem.write_to_path(str(files["key"]))
    with (
        ThreadServer(ServerSettings(port=0, tls_cert=files["cert"], tls_key=files["key"])) as s,
        ResolverClient(s.target, timeout=3, root_certificates=files["ca"]) as client,
        pytest.raises(ResolverUnavailable) as refused,
    ):
        client.resolve("atlas-a2")
    assert str(refused.value).endswith(TLS_HINTS["wrong_host"]), str(refused.value)


@pytest.mark.parametrize(
    ("said", "roots", "cause"),
    [
        ("SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: certificate has expired", True,
         "expired_server"),
        ("CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate", False,
         "untrusted_by_system"),
        ("CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate", True,
         "untrusted_server"),
        ("Peer name localhost is not in peer certificate", True, "wrong_host"),
    ],
)  # fmt: skip
def test_each_tls_failure_gets_the_hint_for_its_cause(
    said: str, roots: bool, cause: str, certs: dict[str, Path]
) -> None:
    """gRPC's words for an expired certificate, one the system's CAs do not sign (no
    root_certificates given: a client with only its own certificate), one another CA signed,
    and (in older gRPC) a host name mismatch, each get their own hint, not one for all."""
    from npu_resolver_client._client import _Settings, _tls_hint
    from npu_resolver_client.wire import TLS_HINTS

    settings = _Settings(
        target="127.0.0.1:9",
        timeout=None,
        root_certificates=certs["ca"] if roots else None,
        private_key=None if roots else certs["client_key"],
        certificate_chain=None if roots else certs["client_cert"],
        token=None,
        max_message_bytes=4 * 1024 * 1024,
        options=(),
        wait_for_ready=False,
    )
    assert _tls_hint(settings, said) == TLS_HINTS[cause]


def test_metrics_count_calls() -> None:
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics

    registry = CollectorRegistry()
    with ThreadServer(metrics=Metrics(registry)) as server, ResolverClient(server.target) as client:
        client.resolve("atlas-a2")
        with pytest.raises(ResolveError):
            client.resolve_request(BAD)
        value = registry.get_sample_value
        assert value("npu_resolver_requests_total", {"method": "Resolve", "code": "OK"}) == 1
        assert (
            value("npu_resolver_requests_total", {"method": "Resolve", "code": "INVALID_ARGUMENT"})
            == 1
        )
        assert (
            value(
                "npu_resolver_diagnostics_total",
                {"code": "OUT_OF_RANGE", "product": "atlas-training"},
            )
            == 1
        )
        assert value("npu_resolver_request_latency_seconds_count", {"method": "Resolve"}) == 2
        assert value("npu_resolver_policy_info", {"version": ""}) == 1


def test_a_report_cut_from_the_trailer_and_asked_for_again_is_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client fetches a report too large for the trailer with validate_only, marked as
    asked again: its diagnostics count once (alerts on them would double exactly for jobs with
    many errors); a validate_only call without the mark is a report of its own, counted."""
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics

    caplog.set_level(logging.INFO, logger="npu_resolver_server")
    config: dict[str, Any] = {f"no_such_option_{i}": i for i in range(30)}
    request = ResolveRequest("atlas-training", {**config, "hccl_timeout": 17341})
    registry = CollectorRegistry()
    value = registry.get_sample_value
    unknown = {"code": "UNKNOWN_OPTION", "product": "atlas-training"}
    out_of_range = {"code": "OUT_OF_RANGE", "product": "atlas-training"}
    with ThreadServer(metrics=Metrics(registry)) as server, ResolverClient(server.target) as client:
        with pytest.raises(ResolveError) as info:
            client.resolve_request(request)
        assert len(info.value.violations) == 31 and info.value.resolution is not None
        assert value("npu_resolver_diagnostics_total", unknown) == 30
        assert value("npu_resolver_diagnostics_total", out_of_range) == 1
        # Both calls were made and served: each is a request.
        assert value("npu_resolver_requests_total", {"method": "Resolve", "code": "OK"}) == 1
        failed = {"method": "Resolve", "code": "INVALID_ARGUMENT"}
        assert value("npu_resolver_requests_total", failed) == 1
        report = client.resolve_request(dataclasses.replace(request, validate_only=True))
        assert not report.ok
        assert value("npu_resolver_diagnostics_total", unknown) == 60
        assert value("npu_resolver_diagnostics_total", out_of_range) == 2

        async def asked_again_async() -> None:
            async with AsyncResolverClient(server.target) as async_client:
                with pytest.raises(ResolveError):
                    await async_client.resolve_request(request)

        asyncio.run(asked_again_async())
        assert value("npu_resolver_diagnostics_total", unknown) == 90
    lines = [
        r.fields  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "fields", {}).get("event") == "rpc"
    ]
    assert [(f["code"], f.get("report_again", False)) for f in lines] == [
        ("INVALID_ARGUMENT", False),
        ("OK", True),
        ("OK", False),
        ("INVALID_ARGUMENT", False),
        ("OK", True),
    ]


def test_with_one_worker_the_policy_info_series_of_a_version_no_longer_in_force_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import MULTIPROC_ENV, Metrics

    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.policy("v1")
    metrics.policy("v2")
    value = registry.get_sample_value
    assert value("npu_resolver_policy_info", {"version": "v2"}) == 1
    assert value("npu_resolver_policy_info", {"version": "v1"}) is None


def test_call_latency_is_bucketed_from_a_tenth_of_a_millisecond_to_30_s() -> None:
    """The buckets an alert on Resolve's p99 of a few milliseconds reads, and those of the
    calls that take longer by design (a batch, a ReloadPolicy that waits up to 10 s), which
    a top bucket of 2.5 s put in +Inf."""
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry).observe("Resolve", "OK", 0.003, "atlas-a2", ())
    (family,) = [m for m in registry.collect() if m.name == "npu_resolver_request_latency_seconds"]
    bounds = [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]
    assert bounds == [
        "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
        "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "30.0", "+Inf",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("remaining", "code"),
    [
        (None, "CANCELLED"),
        (5.0, "CANCELLED"),
        (0.0, "DEADLINE_EXCEEDED"),
        (0.02, "DEADLINE_EXCEEDED"),
    ],
)
def test_a_call_cancelled_while_its_handler_awaits_is_counted_and_logged(
    remaining: float | None, code: str
) -> None:
    """A caller that cancels, or whose deadline passes, while a batch or a reload awaits gets
    no reply; the call left no trace on the server, whose dashboards stayed green. A caller's
    own deadline timer cancels the call a moment before the server's copy of it passes: that
    is still the deadline."""
    from prometheus_client import CollectorRegistry

    from npu_resolver_server import PolicyStore
    from npu_resolver_server._metrics import Metrics
    from npu_resolver_server._servicer import ResolverService
    from tests.test_call_log import _configured

    registry = CollectorRegistry()
    service = ResolverService(PolicyStore(), metrics=Metrics(registry))

    async def never_answers(raw: bytes, context: Any) -> Answer:
        await asyncio.Event().wait()
        raise AssertionError("not reached")

    class Context:
        def time_remaining(self) -> float | None:
            return remaining

    async def call_then_cancel() -> None:
        handler = service._wrap("ResolveBatch", never_answers)
        task = asyncio.ensure_future(handler(b"", cast(Any, Context())))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with _configured() as log:
        asyncio.run(call_then_cancel())
    labels = {"method": "ResolveBatch", "code": code}
    assert registry.get_sample_value("npu_resolver_requests_total", labels) == 1
    (line,) = [json.loads(text) for text in log.getvalue().splitlines()]
    assert (line["method"], line["code"], line["ok"]) == ("ResolveBatch", code, False)


class _NoDeadline:
    """What the ReloadPolicy handler reads of its context."""

    def time_remaining(self) -> float | None:
        return None


def _reload_left_by_its_caller(
    error: str,
    after_reload: Callable[[float | None, Callable[[], bool]], Awaitable[None]],
    failures: object = None,
) -> Any:
    """A ReloadPolicy call cancelled while the (fake) file loads, then the load let finish and
    the work after it given time to end; the service, to look at."""
    from pathlib import Path

    from npu_resolver_server._policy_store import ReloadOutcome
    from npu_resolver_server._servicer import ResolverService

    class Store:
        path = Path("policy.toml")

        async def reload_async(self) -> ReloadOutcome:
            await loaded.wait()
            return ReloadOutcome(not error, "v2", error)

    loaded = asyncio.Event()
    service = ResolverService(
        cast(Any, Store()), failures=cast(Any, failures), after_reload=after_reload
    )

    async def cancelled_mid_load() -> None:
        call = asyncio.ensure_future(service.reload_policy(b"", cast(Any, _NoDeadline())))
        await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        loaded.set()
        for _ in range(100):
            if not service._reloading:
                break
            await asyncio.sleep(0.01)

    asyncio.run(cancelled_mid_load())
    return service


@pytest.mark.parametrize("error", ["", "policy.toml: line 1: not TOML"])
def test_a_reload_whose_caller_leaves_still_reaches_the_other_workers_and_is_counted(
    error: str,
) -> None:
    """The load is shielded from the caller: a ReloadPolicy cancelled while the file loads went
    on loading, but the other workers were not asked to read it (a good file) and a failure was
    not counted server-wide (a bad one)."""
    asked: list[float | None] = []
    failed: list[int] = []

    class Failures:
        def call_failed(self) -> int:
            failed.append(1)
            return 1

    async def after_reload(remaining: float | None, answering: Callable[[], bool]) -> None:
        assert not answering()  # its caller left: the others are asked, nothing is waited for
        asked.append(remaining)

    _reload_left_by_its_caller(error, after_reload, Failures())
    assert (len(asked), len(failed)) == ((0, 1) if error else (1, 0))


def test_an_error_in_a_reload_whose_caller_left_is_logged_as_an_internal_error() -> None:
    """No reply carries it: asyncio printed it as plain text ("Task exception was never
    retrieved") when the task was collected; it is the JSON `internal` line of any other."""
    from tests.test_call_log import _configured

    async def after_reload(remaining: float | None, answering: Callable[[], bool]) -> None:
        raise OSError("the supervisor could not be signalled")

    with _configured() as log:
        _reload_left_by_its_caller("", after_reload)
    lines = [json.loads(text) for text in log.getvalue().splitlines()]
    internal = [line for line in lines if line.get("event") == "internal"]
    assert len(internal) == 1 and internal[0]["method"] == "ReloadPolicy", lines
    assert "the supervisor could not be signalled" in internal[0]["exc"], internal


def test_a_batch_whose_reply_would_not_fit_keeps_the_answers_that_fit() -> None:
    """gRPC would refuse to send the whole reply; the items answered within the message limit
    keep their answers, and each one after says, as its own RESOURCE_EXHAUSTED, from which item
    to send them again (the proto: a batch never fails as a whole for one item)."""
    settings = ServerSettings(port=0, max_message_bytes=64 * 1024)
    requests = [
        ResolveRequest("atlas-a2", {"hccl_timeout": 600 + i}, workdir=f"/jobs/{i}")
        for i in range(200)
    ]
    with ThreadServer(settings) as server, ResolverClient(server.target) as client:
        results = client.resolve_batch(requests)
        assert len(results) == 200
        answered = [r for r in results if isinstance(r, Resolution)]
        first = len(answered)
        assert 0 < first < 200 and all(isinstance(r, Resolution) for r in results[:first])
        for left in results[first:]:
            assert isinstance(left, ResolveFailure)
            assert left.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert left.message == (
                "not answered: the batch's reply reached its 65,536 byte message limit at item "
                f"{first} of 200 (counting from 0); send the items from {first} on in another call"
            )
        for result, request_ in zip(answered, requests, strict=False):
            assert result.options["hccl_timeout"] == request_.config["hccl_timeout"]
        again = client.resolve_batch(requests[first : first + 10])  # as the message says
        assert all(isinstance(r, Resolution) for r in again)


def test_a_batch_item_whose_answer_alone_passes_the_limit_does_not_stop_the_others() -> None:
    """Sent again in a batch it would never fit: its report of errors gets its own
    RESOURCE_EXHAUSTED saying to use Resolve (which cuts a long report to fit), and the items
    after it are answered."""
    ok = ResolveRequest("atlas-a2", {"hccl_timeout": 600})
    big = ResolveRequest("atlas-a2", {f"zz_unknown_option_{i}": i for i in range(500)})
    settings = ServerSettings(port=0, max_message_bytes=65536)
    with (
        ThreadServer(settings) as server,
        ResolverClient(server.target, max_message_bytes=65536) as client,
    ):
        first, middle, last = client.resolve_batch([ok, big, ok])
        assert isinstance(first, Resolution) and isinstance(last, Resolution)
        assert isinstance(middle, ResolveFailure)
        assert middle.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert middle.message.startswith("not answered: this item's answer alone takes ")
        assert "send it with Resolve" in middle.message
        with pytest.raises(ResolveError) as info:  # as the message says
            client.resolve_request(big)
        assert info.value.violations
        # Asked with validate_only, the report is answered OK but still holds errors: the same
        # advice (a report is cut to fit), not the one for an answer without errors.
        report = dataclasses.replace(big, validate_only=True)
        _, middle, _ = client.resolve_batch([ok, report, ok])
        assert isinstance(middle, ResolveFailure)
        assert "send it with Resolve (without validate_only)" in middle.message


def test_a_batch_item_whose_plain_answer_passes_the_limit_is_told_no_call_carries_it() -> None:
    """An answer without errors is never cut: Resolve cannot deliver it either, so the item
    does not send the caller there; the unary refusal says what would help."""
    long = ResolveRequest("atlas-a2", {"debug_dir": "/d" + "a" * 3500})
    settings = ServerSettings(port=0, max_message_bytes=8192)
    with ThreadServer(settings) as server, ResolverClient(server.target) as client:
        alone, small = client.resolve_batch([long, ResolveRequest("atlas-a2")])
        assert isinstance(small, Resolution)
        assert isinstance(alone, ResolveFailure)
        assert alone.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "no reply of this server can carry it" in alone.message
        assert "Resolve" not in alone.message
        with pytest.raises(ResolverCallError) as info:
            client.resolve_request(long)
        assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "8,192 byte message limit" in info.value.details
        assert "--max-message-bytes raised" in info.value.details


def test_a_batch_that_answers_not_even_its_first_item_asks_for_fewer_items() -> None:
    """Each item fits a reply alone, but not beside the notes of the others: "send the items
    from 0 on" would be answered the same way again, so the advice is fewer items a call, and
    following it gets the answers."""
    item = ResolveRequest("atlas-a2", {"hccl_timeout": 600}, workdir="/jobs/0")
    with ThreadServer(ServerSettings(port=0)) as server, ResolverClient(server.target) as client:
        raw = pb.ResolveBatchRequest(requests=[request_to_proto(item)])
        with grpc.insecure_channel(server.target) as channel:
            call = channel.unary_unary("/npu.resolver.v1.Resolver/ResolveBatch")
            one_item = len(call(raw.SerializeToString(), timeout=10))
    settings = ServerSettings(port=0, max_message_bytes=one_item + 40)
    with ThreadServer(settings) as server, ResolverClient(server.target) as client:
        results = client.resolve_batch([item] * 3)
        assert all(isinstance(r, ResolveFailure) for r in results)
        for result in results:
            assert isinstance(result, ResolveFailure)
            assert result.message.endswith(
                "at item 0 of 3 (counting from 0); send fewer items a call (the first item's "
                "answer and a note for each of the others did not fit together)"
            )
        (alone,) = client.resolve_batch([item])  # as the message says
        assert isinstance(alone, Resolution)


def test_batch_reply_limit_counts_the_fields_after_the_items() -> None:
    """The versions written after the items count too: a reply never exceeds the limit. One
    byte short, the last item is left out with its reason; when not even the reasons fit (a
    tiny limit), the call is refused whole, saying so."""
    one = [ResolveRequest("atlas-a2", {"hccl_timeout": 600}, workdir="/jobs/0")]
    with ThreadServer(ServerSettings(port=0)) as server, ResolverClient(server.target) as client:
        items = len(client.resolve_batch(one * 3))
        assert items == 3
        raw = pb.ResolveBatchRequest(requests=[request_to_proto(r) for r in one * 3])
        with grpc.insecure_channel(server.target) as channel:
            call = channel.unary_unary("/npu.resolver.v1.Resolver/ResolveBatch")
            exact = len(call(raw.SerializeToString(), timeout=10))
    for limit in (exact, exact - 1):
        settings = ServerSettings(port=0, max_message_bytes=limit)
        with ThreadServer(settings) as server, ResolverClient(server.target) as client:
            results = client.resolve_batch(one * 3)
            kinds = [type(r).__name__ for r in results]
            if limit == exact:
                assert kinds == ["Resolution"] * 3
            else:
                assert kinds == ["Resolution", "Resolution", "ResolveFailure"]
    settings = ServerSettings(port=0, max_message_bytes=1024)
    with ThreadServer(settings) as server, ResolverClient(server.target) as client:
        with pytest.raises(ResolverCallError) as info:
            client.resolve_batch(one * 8)
        assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "send smaller batches" in info.value.details


def test_client_errors_survive_pickling(client: ResolverClient, grpc_target: str) -> None:  # noqa: F811
    """Job tooling runs the client in process pools: an error raised in a worker must reach the
    caller whole, report included, not break the pool."""
    with pytest.raises(ResolveError) as info:
        client.resolve_request(BAD)
    error = pickle.loads(pickle.dumps(info.value))
    assert type(error) is ResolveError and str(error) == str(info.value)
    assert error.violations == info.value.violations
    assert error.resolution == info.value.resolution
    assert error.resolution is not None
    assert [p.has_requested for p in error.resolution.provenance.values()] == [
        p.has_requested
        for p in info.value.resolution.provenance.values()  # type: ignore[union-attr]
    ]
    for other in (
        ResolverUnavailable(grpc.StatusCode.UNAVAILABLE, "down"),
        ResolverCallError(grpc.StatusCode.INTERNAL, "boom"),
    ):
        back = pickle.loads(pickle.dumps(other))
        assert type(back) is type(other) and (back.code, back.details, back.sent) == (
            other.code,
            other.details,
            True,
        )
    with (
        ResolverClient(grpc_target, max_message_bytes=1024) as small,
        pytest.raises(ResolverCallError) as unsent,
    ):
        small.resolve("atlas-a2", {"debug_dir": "/" + "d" * 2000})
    assert unsent.value.sent is False  # refused by this client, before any call
    assert pickle.loads(pickle.dumps(unsent.value)).sent is False
    too_large = ResolverCallError(grpc.StatusCode.RESOURCE_EXHAUSTED, "the reply is ...")
    too_large.reply_too_large = True
    assert pickle.loads(pickle.dumps(too_large)).reply_too_large is True


def test_a_resolve_error_whose_report_was_left_out_says_so_after_pickling() -> None:
    error = ResolveError("the report is too large", None)
    error.report_cut = True
    assert pickle.loads(pickle.dumps(error)).report_cut is True


def test_a_closed_client_says_so(grpc_target: str) -> None:  # noqa: F811
    client = ResolverClient(grpc_target)
    client.close()
    client.close()  # twice is fine
    with pytest.raises(ResolverCallError, match="closed") as info:
        client.resolve("atlas-a2")
    assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert info.value.sent is False  # no server saw it: safe to send again, elsewhere

    async def closed_async() -> None:
        async_client = AsyncResolverClient(grpc_target)
        await async_client.close()
        with pytest.raises(ResolverCallError, match="closed") as refused:
            await async_client.resolve("atlas-a2")
        assert refused.value.sent is False

    asyncio.run(closed_async())


def test_metrics_count_batch_items_and_diff_columns_diagnostics_by_product() -> None:
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics

    registry = CollectorRegistry()
    batch = [ResolveRequest("atlas-training", {"hccl_timeout": 1000 + i}) for i in range(10)]
    with ThreadServer(metrics=Metrics(registry)) as server, ResolverClient(server.target) as client:
        client.resolve_batch(batch)
        client.diff(ResolveRequest("", {"hccl_timeout": 1000}), ["atlas-training", "nope"])
    value = registry.get_sample_value
    rounded = {"code": "ROUNDED", "product": "atlas-training"}
    assert value("npu_resolver_diagnostics_total", rounded) == 11  # 10 items + 1 diff column
    unknown = {"code": "UNKNOWN_PRODUCT", "product": "unknown"}  # never the caller's text
    assert value("npu_resolver_diagnostics_total", unknown) == 1


def test_calls_refused_for_the_token_or_the_reply_size_are_counted() -> None:
    """Every call is logged and counted with the status the caller saw."""
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics

    registry = CollectorRegistry()
    value = registry.get_sample_value
    with tempfile.TemporaryDirectory() as folder:
        token_file = Path(folder) / "token"
        token_file.write_text("t0k")
        settings = ServerSettings(
            port=0, admin_token_file=token_file, protect_resolve=True, max_message_bytes=2048
        )
        with ThreadServer(settings, metrics=Metrics(registry)) as server:
            with ResolverClient(server.target) as client, pytest.raises(ResolverCallError):
                client.resolve("atlas-a2")
            with ResolverClient(server.target, token="t0k") as client:
                with pytest.raises(ResolverCallError) as info:
                    client.describe_catalog()  # about 50 kB: over the 2 kB limit
                assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "2,048 byte message limit" in info.value.details
                # The advice fits the call: a catalog holds no value of the caller's.
                assert "describe one product a call" in info.value.details
                assert "shorten the long values" not in info.value.details
    counted = {"method": "Resolve", "code": "UNAUTHENTICATED"}
    assert value("npu_resolver_requests_total", counted) == 1
    catalog = {"method": "DescribeCatalog", "code": "RESOURCE_EXHAUSTED"}
    assert value("npu_resolver_requests_total", catalog) == 1


def _never_sends(release: threading.Event) -> Iterator[bytes]:
    """A streaming caller that sends nothing and does not half-close until `release`."""
    release.wait(10)
    yield from ()


def test_calls_to_methods_no_service_has_are_answered_and_counted() -> None:
    """A client built from another version of the proto, or a typo in a hand-written path:
    UNIMPLEMENTED at once, unary or streaming (it waits for no message), counted under
    "unknown" (never the caller's text as a label), the worker's pid in the trailer."""
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics

    registry = CollectorRegistry()
    with (
        ThreadServer(metrics=Metrics(registry)) as server,
        grpc.insecure_channel(server.target) as channel,
    ):
        for path in ("/npu.resolver.v1.Resolver/ResolveAll", "/x.Y/Z"):
            with pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(path)(b"", timeout=5)
            assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert PID_METADATA_KEY in dict(info.value.trailing_metadata())
            release = threading.Event()
            stream = channel.stream_stream(path)(_never_sends(release), timeout=5)
            with pytest.raises(grpc.RpcError) as info:
                list(stream)
            release.set()
            # Answered at once, not when the deadline ends a wait for a message.
            assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == (
            health_pb2.HealthCheckResponse.SERVING
        )
        assert channel.unary_unary("/npu.resolver.v1.Resolver/ListProducts")(b"", timeout=5)
    counted = {"method": "unknown", "code": "UNIMPLEMENTED"}
    assert registry.get_sample_value("npu_resolver_requests_total", counted) == 4


def test_cli_reaches_a_server_that_wants_mutual_tls_and_a_token(
    certs: dict[str, Path], tmp_path: Path
) -> None:
    from tests.test_cli import run

    token_file = tmp_path / "token"
    token_file.write_text("t0k\n")
    settings = ServerSettings(
        port=0,
        tls_cert=certs["cert"],
        tls_key=certs["key"],
        tls_client_ca=certs["ca"],
        admin_token_file=token_file,
        protect_resolve=True,
    )
    tls = ["--tls-ca", str(certs["ca"]), "--tls-cert", str(certs["client_cert"])]
    tls += ["--tls-key", str(certs["client_key"])]
    with ThreadServer(settings) as server:
        base = ["resolve", "--product", "atlas-a2", "--format", "json", "--server", server.target]
        proc = run(*base, *tls, "--token-file", str(token_file))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["ok"] is True
        proc = run(*base, *tls)  # no token
        assert proc.returncode == 2 and "UNAUTHENTICATED" in proc.stderr
        proc = run(
            "policy", "show", "--server", server.target, *tls, "--token-file", str(token_file)
        )
        assert proc.returncode == 0, proc.stderr
    proc = run("resolve", "--product", "atlas-a2", "--tls-ca", str(certs["ca"]))
    assert proc.returncode == 2 and "go with --server" in proc.stderr


@pytest.mark.parametrize("flag", ["--tls-ca", "--tls-cert", "--tls-key"])
def test_a_credential_file_that_is_not_pem_is_unreadable_input_not_an_unreachable_server(
    tmp_path: Path, certs: dict[str, Path], flag: str
) -> None:
    """gRPC takes only PEM; anything else would fail at the first call as UNAVAILABLE (exit 3,
    with gRPC's own log lines). It is refused before any call: exit 2 naming the flag, and a
    ValueError from the client's constructor."""
    from tests.test_cli import run

    not_pem = tmp_path / "der.bin"
    not_pem.write_bytes(b"0\x82\x01\x0a notapem")
    given = {
        "--tls-ca": certs["ca"],
        "--tls-cert": certs["client_cert"],
        "--tls-key": certs["client_key"],
    }
    given[flag] = not_pem
    args = [item for pair in given.items() for item in (pair[0], str(pair[1]))]
    proc = run("resolve", "--product", "atlas-a2", "--server", f"127.0.0.1:{free_port()}", *args)
    assert proc.returncode == 2, proc.stderr
    assert f"{flag} {not_pem} is not PEM text" in proc.stderr
    assert "Traceback" not in proc.stderr and "unreachable" not in proc.stderr
    param = {"--tls-ca": "root_certificates", "--tls-cert": "certificate_chain"}.get(
        flag, "private_key"
    )
    credentials = {
        "root_certificates": certs["ca"],
        "certificate_chain": certs["client_cert"],
        "private_key": certs["client_key"],
        param: not_pem,
    }
    with pytest.raises(ValueError, match=f"{param} is not PEM text"):
        ResolverClient("127.0.0.1:1", **credentials)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "refused", "holds"),
    [
        ({"--tls-ca": "client_key"}, "--tls-ca", "certificate"),
        ({"--tls-cert": "client_key", "--tls-key": "client_cert"}, "--tls-cert", "certificate"),
        ({"--tls-key": "client_cert"}, "--tls-key", "private key"),
    ],
)
def test_a_key_given_for_a_certificate_or_the_other_way_round_is_refused_naming_the_flag(
    certs: dict[str, Path], given: dict[str, str], refused: str, holds: str
) -> None:
    """PEM all the same, yet gRPC would refuse it only when connecting (exit 3, with its own
    log lines): the labels are checked, by the CLI (exit 2), the client's constructor and the
    server's settings alike."""
    from tests.test_cli import run

    files = {"--tls-ca": "ca", "--tls-cert": "client_cert", "--tls-key": "client_key", **given}
    args = [item for flag, name in files.items() for item in (flag, str(certs[name]))]
    proc = run("resolve", "--product", "atlas-a2", "--server", f"127.0.0.1:{free_port()}", *args)
    assert proc.returncode == 2, proc.stderr
    said = f"{refused} {certs[files[refused]]} holds no {holds}: no -----BEGIN "
    assert said in proc.stderr and "unreachable" not in proc.stderr
    params = {"--tls-ca": "root_certificates", "--tls-cert": "certificate_chain"}
    credentials = {params.get(flag, "private_key"): certs[name] for flag, name in files.items()}
    with pytest.raises(ValueError, match=f"^{params.get(refused, 'private_key')} holds no {holds}"):
        ResolverClient("127.0.0.1:1", **credentials)  # type: ignore[arg-type]
    server = {"--tls-cert": "cert", "--tls-key": "key", **given}
    server.pop("--tls-ca", None)
    server["--tls-client-ca"] = files["--tls-ca"]
    flag = "--tls-client-ca" if refused == "--tls-ca" else refused
    with pytest.raises(ValueError, match=f"{flag} {certs[server[flag]]} holds no {holds}"):
        ServerSettings(**{f[2:].replace("-", "_"): certs[n] for f, n in server.items()})  # type: ignore[arg-type]


def test_wait_for_ready_bridges_a_server_that_starts_late() -> None:
    """Without it, the retries give up after about 1.5 s; with it, the call waits (within its
    deadline) for the replica that is restarting."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    with ResolverClient(target, timeout=2) as client, pytest.raises(ResolverUnavailable):
        client.resolve("atlas-a2")
    server = ThreadServer(ServerSettings(port=port, grace_seconds=1.0))
    timer = threading.Timer(2.5, server.start)
    timer.start()
    try:
        with ResolverClient(target, timeout=20, wait_for_ready=True) as client:
            assert client.resolve("atlas-a2").ok
    finally:
        timer.join()
        server.stop()


async def test_the_async_client_waits_for_a_server_that_starts_late_with_wait_for_ready() -> None:
    port = free_port()
    target = f"127.0.0.1:{port}"
    server = ThreadServer(ServerSettings(port=port, grace_seconds=1.0))
    timer = threading.Timer(2.5, server.start)
    timer.start()
    try:
        async with AsyncResolverClient(target, timeout=20, wait_for_ready=True) as client:
            assert (await client.resolve("atlas-a2")).ok
    finally:
        timer.join()
        server.stop()


def test_metrics_labels_stay_bounded_and_count_only_answers_the_caller_got(
    tmp_path: Path,
) -> None:
    from prometheus_client import CollectorRegistry

    from npu_resolver_server._metrics import Metrics
    from npu_resolver_server._servicer import METHODS

    service = pb.DESCRIPTOR.services_by_name["Resolver"]
    assert {m.name for m in service.methods} == METHODS
    registry = CollectorRegistry()
    value = registry.get_sample_value
    token_file = tmp_path / "token"
    token_file.write_text("t0k")
    settings = ServerSettings(
        port=0, admin_token_file=token_file, protect_resolve=True, max_message_bytes=4096
    )
    batch = [ResolveRequest("atlas-training", {"hccl_timeout": 1000 + i}) for i in range(10)]
    with ThreadServer(settings, metrics=Metrics(registry)) as server:
        with grpc.insecure_channel(server.target) as channel:
            for i in range(3):  # method names the caller makes up, and no token
                with pytest.raises(grpc.RpcError):
                    channel.unary_unary(f"/npu.resolver.v1.Resolver/Bogus{i}")(b"", timeout=5)
        with ResolverClient(server.target, token="t0k") as client:
            results = client.resolve_batch(batch)  # its reply does not fit in 4 kB whole
    answered = sum(isinstance(result, Resolution) for result in results)
    assert 0 < answered < len(batch)
    assert (
        value("npu_resolver_requests_total", {"method": "unknown", "code": "UNAUTHENTICATED"}) == 3
    )
    rounded = {"code": "ROUNDED", "product": "atlas-training"}
    assert value("npu_resolver_diagnostics_total", rounded) == answered  # only what it got


@pytest.mark.parametrize("length", [8_000, 20_000])
def test_a_long_unknown_profile_keeps_its_report_within_a_default_clients_trailer(
    grpc_target: str,  # noqa: F811
    length: int,
) -> None:
    """UNKNOWN_PROFILE quoted the profile whole: a long one overflowed the trailer of a plain
    grpcio client, which then lost the status and its details."""
    message = pb.ResolveRequest(product="atlas-a2", profile="q" * length)
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as info:
                stub.Resolve(message, timeout=10)
            error: Any = info.value
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            status = rpc_status.from_call(error)
            assert status is not None
            bad = error_details_pb2.BadRequest()
            assert status.details[0].Unpack(bad)
            assert [(v.field, v.reason) for v in bad.field_violations] == [
                ("profile", "UNKNOWN_PROFILE")
            ]
            assert "is not in the policy" in bad.field_violations[0].description
            assert len(bad.field_violations[0].description) < 200


def test_an_encrypted_private_key_is_refused_where_it_is_given(
    tmp_path: Path, certs: dict[str, Path]
) -> None:
    """gRPC takes no passphrase: an encrypted key would fail at the first call (client) or at
    start with a misleading bind error (server), or have OpenSSL ask a terminal for one."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs["client_key"].read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    assert b"ENCRYPTED PRIVATE KEY" in encrypted.read_bytes()
    with pytest.raises(ValueError, match="private_key holds an ENCRYPTED PRIVATE KEY"):
        ResolverClient(
            "127.0.0.1:1",
            root_certificates=certs["ca"],
            certificate_chain=certs["client_cert"],
            private_key=encrypted,
        )
    with pytest.raises(ValueError, match=f"--tls-key {encrypted} holds an ENCRYPTED PRIVATE"):
        ServerSettings(port=0, tls_cert=certs["cert"], tls_key=encrypted)


@pytest.mark.parametrize(
    ("field", "arguments"),
    [
        ("config", {"config": [("hccl_timeout", 600)]}),
        ("config", {"config": "hccl_timeout=600"}),
        ("env", {"env": "HOME=/home/u"}),
        ("attachments", {"attachments": [("modify_mixlist", "{}")]}),
    ],
)
def test_clients_refuse_a_field_that_is_not_a_mapping_as_resolve_request_does(
    client: ResolverClient,
    grpc_target: str,  # noqa: F811
    field: str,
    arguments: dict[str, Any],
) -> None:
    """The same TypeError naming the field as in process, from the blocking and the asyncio
    client alike: not a list of pairs taken as a config, nor dict()'s own ValueError."""
    said = rf"ResolveRequest.{field} must be a mapping, not (list|str)"
    with pytest.raises(TypeError, match=said):
        ResolveRequest(product="atlas-a2", **arguments)
    with pytest.raises(TypeError, match=said):
        client.resolve("atlas-a2", **arguments)

    async def from_async() -> None:
        async with AsyncResolverClient(grpc_target) as async_client:
            await async_client.resolve("atlas-a2", **arguments)

    with pytest.raises(TypeError, match=said):
        asyncio.run(from_async())


@pytest.mark.parametrize(
    ("options", "items", "fits"),
    [(("dump_config",), 3000, True), (("dump_config", "memory_config", "distribute"), 9000, False)],
)
def test_get_policy_of_long_lists_sends_it_without_whitespace_or_says_why_not(
    tmp_path: Path, options: tuple[str, ...], items: int, fits: bool
) -> None:
    """Indented, a policy of long lists is about six times its file and passed the message
    size, so GetPolicy failed on every call for a file the server had taken (with advice to
    shorten the caller's values). Its content now comes without whitespace when the indented
    text would not fit; past even that, the refusal says what to do."""
    from npu_resolver_server import PolicyStore

    policy_file = tmp_path / "policy.toml"
    listed = ", ".join(["1"] * items)
    values = "".join(f"{name} = {{steps = [{listed}]}}\n" for name in options)
    policy_file.write_text(f"[profiles.default.defaults]\n{values}")
    store = PolicyStore(policy_file)
    store.load_initial()
    assert len(store.status().canonical_text) > 32 * 1024  # indented: over the limit below
    settings = ServerSettings(port=0, policy=policy_file, max_message_bytes=32 * 1024)
    with ThreadServer(settings, store=store) as server, ResolverClient(server.target) as client:
        if not fits:
            with pytest.raises(ResolverCallError) as refused:
                client.get_policy()
            assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "the policy in force" in refused.value.details
            assert "--max-message-bytes" in refused.value.details
            return
        info = client.get_policy()
    assert info.policy_version == store.version
    assert json.loads(info.canonical_text) == json.loads(store.status().canonical_text)
    assert "\n" not in info.canonical_text and " " not in info.canonical_text


def test_a_diff_of_many_fields_is_called_too_many_products_only_when_its_products_are() -> None:
    """Over 65,536 fields, a diff is refused for its products when most of them are product
    names (what its message says), and for its size otherwise: 17 names of one product among
    65,600 other fields are no diff of too many products."""
    from npu_resolver_server._reading import MAX_TOP_LEVEL_FIELDS, too_large

    many = {f"V{i}": "x" for i in range(8_190)}
    mixed = pb.DiffRequest(products=["atlas-a2"] * 49_200, env=many, attachments=many)
    assert too_large(pb.DiffRequest, mixed.SerializeToString(), 10_000) == "products"
    few = pb.DiffRequest(products=["atlas-a2"] * 16, env=many, attachments=many)
    padding = pb.DiffRequest(workdir="w").SerializeToString() * 49_200  # the last one is read
    assert too_large(pb.DiffRequest, few.SerializeToString() + padding, 10_000) == "request"
    seventeen = pb.DiffRequest(products=["atlas-a2"] * 17).SerializeToString()
    workdirs = pb.DiffRequest(workdir="www").SerializeToString() * 65_600  # over 256 KiB
    assert too_large(pb.DiffRequest, seventeen + workdirs, 10_000) == "request"
    named = pb.DiffRequest(products=["atlas-a2"] * (MAX_TOP_LEVEL_FIELDS + 1))
    assert too_large(pb.DiffRequest, named.SerializeToString(), 10_000) == "products"


def test_policy_show_prints_the_same_json_in_process_and_through_a_server_named_as_the_proto(
    tmp_path: Path,
) -> None:
    """The CLI's JSON takes the proto's field names, as the resolve answer does: the policy's
    text was `content` in the CLI and `canonical_text` in the proto and PolicyInfo."""
    from npu_resolver_server import PolicyStore
    from tests.test_cli import run

    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.defaults]\nhccl_timeout = 3600\n[profiles.debug]\n")
    local = run("policy", "show", "--policy", str(policy))
    assert local.returncode == 0, local.stderr
    store = PolicyStore(policy)
    store.load_initial()
    with ThreadServer(store=store) as server:
        remote = run("policy", "show", "--server", server.target)
    assert remote.returncode == 0, remote.stderr
    shown, served = json.loads(local.stdout), json.loads(remote.stdout)
    assert set(served) == {f.name for f in pb.GetPolicyResponse.DESCRIPTOR.fields}
    assert served["canonical_text"] and served["policy_version"]
    assert served == shown
