"""What the server bounds so that one caller cannot stall it or lose another's reply: batch
size, diff width, error details that fit a trailer, and bursts beyond gRPC's pending queue."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from hypothesis import given
from hypothesis import strategies as st

from npu_resolver import CATALOG, MAX_CONFIG_ITEMS, Resolution, ResolveRequest, resolve
from npu_resolver_client import ResolveError, ResolveFailure, ResolverClient
from npu_resolver_client.wire import pb
from npu_resolver_server import ServerSettings
from npu_resolver_server._encode import field, length_delimited, struct_items, varint
from npu_resolver_server._reading import MAX_MAP_ENTRIES, UNREADABLE, too_large
from npu_resolver_server._replies import (
    STATUS_DETAILS_KEY,
    TRAILER_BYTES,
    fit_trailer,
    trailer_bytes,
)
from npu_resolver_server._servicer import MAX_BATCH_ITEMS, MAX_DIFF_PRODUCTS
from tests._server import ProcessServer, ThreadServer, grpc_server, grpc_target  # noqa: F401

RESOLVE = "/npu.resolver.v1.Resolver/Resolve"
BATCH = "/npu.resolver.v1.Resolver/ResolveBatch"


def _call(target: str, method: str, payload: bytes) -> tuple[grpc.StatusCode, Any]:
    """A call on a channel with gRPC's default options, as any third-party client has."""
    with grpc.insecure_channel(target) as channel:
        try:
            return grpc.StatusCode.OK, channel.unary_unary(method)(payload, timeout=20)
        except grpc.RpcError as error:
            return error.code(), error


def test_a_batch_over_the_item_limit_is_refused_naming_the_limit(
    grpc_target: str,  # noqa: F811
) -> None:
    item = pb.ResolveRequest(product="atlas-a2", validate_only=True)
    batch = pb.ResolveBatchRequest(requests=[item] * (MAX_BATCH_ITEMS + 1))
    code, error = _call(grpc_target, BATCH, batch.SerializeToString())
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_BATCH_ITEMS:,} requests" in error.details()
    batch = pb.ResolveBatchRequest(requests=[item] * MAX_BATCH_ITEMS)
    code, reply = _call(grpc_target, BATCH, batch.SerializeToString())
    assert code is grpc.StatusCode.OK
    assert len(pb.ResolveBatchResponse.FromString(reply).results) == MAX_BATCH_ITEMS
    # A full batch from a newer client, with a field this server does not know: still a batch.
    unknown_field = b"\x12\x03new"  # field 2, length-delimited
    code, reply = _call(grpc_target, BATCH, batch.SerializeToString() + unknown_field)
    assert code is grpc.StatusCode.OK
    assert len(pb.ResolveBatchResponse.FromString(reply).results) == MAX_BATCH_ITEMS


def test_a_diff_names_each_product_once_and_at_most_the_limit(
    grpc_target: str,  # noqa: F811
) -> None:
    method = "/npu.resolver.v1.Resolver/Diff"
    wide = pb.DiffRequest(products=[f"card-{i}" for i in range(MAX_DIFF_PRODUCTS + 1)])
    code, error = _call(grpc_target, method, wide.SerializeToString())
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_DIFF_PRODUCTS} products" in error.details()
    repeated = pb.DiffRequest(products=["atlas-a2", "Ascend910B1", "atlas-a3"] * 10_000)
    code, reply = _call(grpc_target, method, repeated.SerializeToString())
    assert code is grpc.StatusCode.OK
    assert list(pb.DiffResponse.FromString(reply).products) == ["atlas-a2", "atlas-a3"]
    twice = pb.DiffRequest(products=["atlas-a2", "atlas-a2"])  # one column, as in process
    code, reply = _call(grpc_target, method, twice.SerializeToString())
    assert code is grpc.StatusCode.OK
    assert list(pb.DiffResponse.FromString(reply).products) == ["atlas-a2"]


_PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F) if c != ord("%"))
"""What grpc-message sends as it is; any other byte is percent-encoded."""


def _trailer(error: Any) -> int:
    """The trailer bytes the call's status message and details took."""
    return trailer_bytes(error.details(), len(dict(error.trailing_metadata())[STATUS_DETAILS_KEY]))


def _details(error: Any) -> status_pb2.Status:
    raw = dict(error.trailing_metadata())[STATUS_DETAILS_KEY]
    return status_pb2.Status.FromString(raw)


def test_a_report_of_many_errors_reaches_a_default_client(grpc_target: str) -> None:  # noqa: F811
    """60 misspelt options: the details would be ~17 KiB with the response packed, over the
    metadata limit of a default client, which would then get RESOURCE_EXHAUSTED and no report."""
    config = {f"no_such_option_number_{i}": i for i in range(60)}
    request = pb.ResolveRequest(product="atlas-a2")
    request.config.update(config)
    code, error = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.INVALID_ARGUMENT, error
    assert _trailer(error) <= TRAILER_BYTES
    status = _details(error)
    assert "validate_only" in error.details()
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert 1 <= len(bad.field_violations) < 60
    assert all(v.reason == "UNKNOWN_OPTION" for v in bad.field_violations)
    # The response is left out (validate_only returns it), and an ErrorInfo says so in a form
    # a caller in any language can test for.
    assert [d.type_url.rsplit("/", 1)[1] for d in status.details] == [
        "google.rpc.BadRequest",
        "google.rpc.ErrorInfo",
    ]
    info = error_details_pb2.ErrorInfo()
    assert status.details[1].Unpack(info)
    assert (info.reason, info.domain) == ("REPORT_CUT", "npu.resolver.v1")
    assert dict(info.metadata) == {"errors": "60", "listed": str(len(bad.field_violations))}


def test_cut_details_stay_within_the_budget_with_long_non_ascii_names(
    grpc_target: str,  # noqa: F811
) -> None:
    """The note on a cut report is part of the details: it counts against the budget too."""
    config = {"中" * 90 + str(i): i for i in range(40)}
    request = pb.ResolveRequest(product="atlas-a2")
    request.config.update(config)
    code, error = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert _trailer(error) <= TRAILER_BYTES
    assert _as_sent(error) <= 8192  # each non-ASCII byte of the message travels as 3
    assert "validate_only" in error.details()


def _refused_lists(count: int) -> dict[str, Any]:
    """A config of `count` options, each set to a list, which every one of them refuses."""
    config: dict[str, Any] = {}
    for option in CATALOG.options:
        trial = {**config, option.name: [1]}
        if len(resolve(ResolveRequest("atlas-a2", trial)).errors) == len(trial):
            config = trial
        if len(config) == count:
            return config
    raise AssertionError(f"fewer than {count} options refuse a list")


def test_a_report_within_the_trailer_budget_arrives_whole_on_every_call(
    grpc_target: str,  # noqa: F811
) -> None:
    """21 errors: about 5.6 KB of details with the response packed, 7.5 KB in base64 as
    grpc-java counts them, under the 8 KiB of trailer a default client takes (over it, gRPC
    refuses trailers at random, or always), so nothing is cut."""
    request = pb.ResolveRequest(product="atlas-a2")
    request.config.update(_refused_lists(21))
    for _ in range(20):
        code, error = _call(grpc_target, RESOLVE, request.SerializeToString())
        assert code is grpc.StatusCode.INVALID_ARGUMENT, error
        assert 6_000 < _trailer(error) <= TRAILER_BYTES
        status = _details(error)
        bad = error_details_pb2.BadRequest()
        assert status.details[0].Unpack(bad)
        assert len(bad.field_violations) == 21
        packed = pb.ResolveResponse()
        assert status.details[1].Unpack(packed)
        assert len(packed.diagnostics) == 21
        assert "validate_only" not in error.details()


def test_a_cut_report_fits_a_trailer_counted_in_base64(grpc_target: str) -> None:  # noqa: F811
    """grpc-java counts a binary trailer as sent, in base64 (a third larger than its bytes),
    against its 8 KiB default: 16 misspelt names or 26 refused values, 7 KB of details, had
    been sent whole and would reach such a client as no report at all. Now each report's
    details and message, as sent, with the keys and overhead of the status, message and pid
    entries, stay within the 8,192."""
    misspelt = {f"no_such_option_number_{i}": i for i in range(16)}
    for config in (misspelt, _refused_lists(18), _refused_lists(26), _refused_lists(40)):
        request = pb.ResolveRequest(product="atlas-a2")
        request.config.update(config)
        code, error = _call(grpc_target, RESOLVE, request.SerializeToString())
        assert code is grpc.StatusCode.INVALID_ARGUMENT, error
        assert _as_sent(error) <= 8192, (len(config), _as_sent(error))


def _as_sent(error: Any) -> int:
    """A failed call's trailers as they travel: binary values in base64, the message
    percent-encoded, 32 bytes of overhead an entry, as grpc-java counts them."""
    trailer = dict(error.trailing_metadata())
    as_sent = sum(
        len(key) + 32 + len(base64.b64encode(value) if isinstance(value, bytes) else value)
        for key, value in trailer.items()
    )
    as_sent += len("grpc-status") + 32 + 1 + len("grpc-message") + 32
    return as_sent + len(quote(error.details(), safe=_PRINTABLE))


def test_a_report_of_a_few_errors_still_packs_the_response(grpc_target: str) -> None:  # noqa: F811
    request = pb.ResolveRequest(product="atlas-a2")
    request.config.update({"hccl_timeout": -5, "no_such_option": 1})
    code, error = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    packed = [d for d in _details(error).details if d.type_url.endswith("ResolveResponse")]
    assert len(packed) == 1


def test_the_client_gets_the_whole_report_of_many_errors(grpc_target: str) -> None:  # noqa: F811
    config = {f"no_such_option_number_{i}": i for i in range(60)}
    with ResolverClient(grpc_target) as client, pytest.raises(ResolveError) as info:
        client.resolve("atlas-a2", config)
    assert info.value.resolution is not None
    assert len(info.value.resolution.errors) == 60


def test_a_burst_beyond_grpcs_default_pending_queue_is_answered_in_full() -> None:
    """gRPC cancels received calls past 1,000 pending by default; none may be lost."""
    payload = pb.ResolveRequest(product="atlas-a2", validate_only=True).SerializeToString()
    calls = 2500

    async def burst(target: str) -> Counter[str]:
        channels = [grpc.aio.insecure_channel(target) for _ in range(4)]
        try:
            methods = [ch.unary_unary(RESOLVE) for ch in channels]

            async def one(i: int) -> str:
                try:
                    await methods[i % len(methods)](payload, timeout=60)
                except grpc.aio.AioRpcError as error:
                    return str(error.code().name)
                return "OK"

            return Counter(await asyncio.gather(*(one(i) for i in range(calls))))
        finally:
            for ch in channels:
                await ch.close()

    server = ProcessServer()
    with server:
        codes = asyncio.run(burst(server.target))
    assert codes == Counter({"OK": calls})


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "config",
    [
        *({"distribute": _nested(levels)} for levels in range(14, 22)),
        {"distribute": {"xs": list(range(12_000))}},
        {"distribute": {"xs": list(range(9_990))}},
        {f"k{i}": {"v": [i]} for i in range(600)},
        {f"k{i}": i for i in range(10_001)},
        {"a": _nested(30), "b": list(range(10_001))},
    ],
    ids=[
        *(f"depth{levels}" for levels in range(14, 22)),
        *("wide", "almost", "many_keys", "flat_over_limit", "deep_and_wide"),
    ],
)
def test_deep_and_wide_configs_get_the_in_process_answer_through_a_server(
    grpc_target: str,  # noqa: F811
    config: dict[str, Any],
) -> None:
    """The server's reading limits are the core's: both refuse the same configs, alike."""
    import npu_resolver

    request = ResolveRequest("atlas-a2", config, validate_only=True)
    local = npu_resolver.resolve(request)
    with ResolverClient(grpc_target) as client:
        remote = client.resolve_request(request)
    assert remote.ok == local.ok
    assert [(d.code, d.option, d.message) for d in remote.diagnostics] == [
        (d.code, d.option, d.message) for d in local.diagnostics
    ]
    assert remote.options == local.options


def test_a_batch_item_keeps_its_whole_report_however_many_errors(
    grpc_target: str,  # noqa: F811
) -> None:
    """Batch items travel in the reply's body: no trailer limit cuts their report."""

    with ResolverClient(grpc_target) as client:
        config = {f"no_such_option_number_{i}": i for i in range(40)}
        (item,) = client.resolve_batch([ResolveRequest("atlas-a2", config)])
    assert isinstance(item, ResolveFailure)
    assert item.resolution is not None
    assert len(item.resolution.errors) == 40


@pytest.mark.parametrize("char", ["x", "中", "%"])
def test_one_error_too_long_for_the_trailer_is_cut_not_lost(char: str) -> None:
    """However long one error's text is, the details still fit the trailer a default client
    takes, with the violation's field and reason intact; also text that grpc-message sends
    percent-encoded, each character as several bytes."""
    long = char * 30_000
    violation = error_details_pb2.BadRequest.FieldViolation(
        field="config.some_option", reason="INVALID_VALUE", description=long
    )
    status = status_pb2.Status(code=3, message=long)
    status.details.add().Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    message, details = fit_trailer(long, status.SerializeToString())
    assert trailer_bytes(message, len(details)) <= TRAILER_BYTES
    assert len(message) <= 1_000
    kept = status_pb2.Status.FromString(details)
    bad = error_details_pb2.BadRequest()
    assert kept.details[0].Unpack(bad)
    assert [(v.field, v.reason) for v in bad.field_violations] == [
        ("config.some_option", "INVALID_VALUE")
    ]


@pytest.mark.parametrize("levels", [33, 40, 200])
def test_a_struct_config_deeper_than_the_decoder_reads_is_a_report_not_a_malformed_call(
    grpc_target: str,  # noqa: F811
    levels: int,
) -> None:
    """A Struct nested past the protobuf decoder's depth (about 32 levels) cannot be read at
    all. Callers in other languages send Struct: they get the in-process answer (a config too
    deep), a batch answers its other items, and a diff reports it in every column."""
    import npu_resolver
    from npu_resolver_client.wire import pb_grpc, resolution_from_proto

    config = {"dump_config": _nested(levels)}
    local = npu_resolver.resolve(ResolveRequest("atlas-a2", config))
    assert [d.option for d in local.errors] == ["config"]
    deep = pb.ResolveRequest(product="atlas-a2", validate_only=True)
    deep.config.update(config)
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.ResolverStub(channel)
        answer = resolution_from_proto(stub.Resolve(deep, timeout=10))
        assert answer.to_json() == local.to_json()

        # Written by hand: the Python protobuf runtime cannot build such a batch either.
        good = pb.ResolveRequest(product="atlas-a2").SerializeToString()
        batch = field(1, good) + field(1, deep.SerializeToString())
        call = channel.unary_unary(
            "/npu.resolver.v1.Resolver/ResolveBatch",
            response_deserializer=pb.ResolveBatchResponse.FromString,
        )
        results = call(batch, timeout=10).results
        assert [r.WhichOneof("result") for r in results] == ["response", "response"]
        assert resolution_from_proto(results[0].response).ok
        assert resolution_from_proto(results[1].response).to_json() == local.to_json()

        diff = pb.DiffRequest(products=["atlas-a2", "atlas-a3"])
        diff.config.update(config)
        columns = stub.Diff(diff, timeout=10).results
        for product in ("atlas-a2", "atlas-a3"):
            (error,) = [d for d in columns[product].diagnostics if d.code == "INVALID_VALUE"]
            assert error.option == "config" and "nested deeper than" in error.message


def test_a_request_the_decoder_refuses_for_another_reason_is_still_malformed(
    grpc_target: str,  # noqa: F811
) -> None:
    """Only a config too deep is read around; other broken bytes stay a malformed request."""
    with grpc.insecure_channel(grpc_target) as channel:
        call = channel.unary_unary("/npu.resolver.v1.Resolver/Resolve")
        with pytest.raises(grpc.RpcError) as info:
            call(b"\x12\x05\x0a\x03\xff\xff\xff", timeout=10)  # config: a Struct cut short
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid ResolveRequest" in info.value.details()


def _turns_during(service: Any, batch: pb.ResolveBatchRequest) -> tuple[int, Any]:
    """The turns another task got on the event loop while `service` answered `batch`."""

    class Context:
        def time_remaining(self) -> float | None:
            return None

    async def run() -> tuple[int, Any]:
        turns = 0

        async def other_call() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_call())
        await asyncio.sleep(0)
        start = turns
        answer = await service.resolve_batch(batch.SerializeToString(), Context())
        other.cancel()
        return turns - start, answer

    return asyncio.run(run())


def test_a_batch_lets_the_workers_other_calls_run_while_it_is_answered() -> None:
    """A batch of a thousand items takes most of a second of one worker: between slices of it,
    the event loop runs the worker's other calls (a health probe must not wait it out)."""
    from npu_resolver_server import PolicyStore
    from npu_resolver_server._servicer import BATCH_SLICE, ResolverService

    service = ResolverService(PolicyStore.fixed(None))
    batch = pb.ResolveBatchRequest(
        requests=[
            pb.ResolveRequest(product="atlas-a2", config_json=f'{{"hccl_timeout": {600 + i}}}')
            for i in range(MAX_BATCH_ITEMS)
        ]
    )

    turns, answer = _turns_during(service, batch)
    assert answer.code is grpc.StatusCode.OK
    assert turns >= MAX_BATCH_ITEMS // BATCH_SLICE - 1


def test_a_batch_of_heavy_items_yields_between_them() -> None:
    """Items with megabyte attachments take a tenth of a second each: the event loop gets a
    turn after each, not after sixteen of them."""
    from npu_resolver_server import PolicyStore
    from npu_resolver_server._servicer import BATCH_SLICE, ResolverService

    service = ResolverService(PolicyStore.fixed(None))
    items = 4
    assert items < BATCH_SLICE
    config = '{"modify_mixlist": "/m", "precision_mode": "allow_mix_precision_fp16"}'
    batch = pb.ResolveBatchRequest(
        requests=[
            pb.ResolveRequest(
                product="atlas-a2",
                config_json=config,
                attachments={
                    "modify_mixlist": f'{{"black-list": {{"to-add": ["{i}"'
                    + ',"a"' * 250_000
                    + "]}}"
                },
                validate_only=True,
            )
            for i in range(items)
        ]
    )

    turns, answer = _turns_during(service, batch)
    assert answer.code is grpc.StatusCode.OK
    assert turns >= items - 1


# A request of more than LARGE_REQUEST_BYTES is looked at before protobuf decodes it: the
# decoder reads a map in time quadratic in its size (300,000 entries take over a second).
PADDING = "w" * 300_000


def _violations(error: Any) -> list[tuple[str, str]]:
    trailers = dict(error.trailing_metadata())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    bad = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad)
    return [(v.field, v.reason) for v in bad.field_violations]


@pytest.mark.parametrize("where", ["env", "attachments"])
def test_a_request_with_more_top_level_entries_than_read_is_refused_unread(
    grpc_target: str,  # noqa: F811
    where: str,
) -> None:

    entries = {f"V{i:06d}": "" for i in range(MAX_MAP_ENTRIES + 1)}
    request = pb.ResolveRequest(product="atlas-a2", workdir=PADDING)
    getattr(request, where).update(entries)
    code, error = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(error) == [(where, "TOO_MANY_ENTRIES")]
    assert f"more than {MAX_MAP_ENTRIES:,} {where} entries" in error.details()
    status = status_pb2.Status.FromString(
        dict(error.trailing_metadata())["grpc-status-details-bin"]
    )
    bad = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad)
    assert bad.field_violations[0].description == error.details()  # the why, for each field


@pytest.mark.parametrize("where", ["env", "attachments"])
def test_validate_only_with_a_map_too_large_to_read_is_a_report_not_a_refusal(
    grpc_target: str,  # noqa: F811
    where: str,
) -> None:
    """validate_only is "report only: never fails at the transport level": the map is left
    unread all the same, and its refusal is the report's one error."""
    entries = {f"V{i:06d}": "" for i in range(MAX_MAP_ENTRIES + 1)}
    request = pb.ResolveRequest(product="Atlas A2", workdir=PADDING, validate_only=True)
    getattr(request, where).update(entries)
    code, reply = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.OK
    answer = pb.ResolveResponse.FromString(reply)
    assert not answer.ok and answer.product == "atlas-a2" and answer.catalog_version == "900"
    (diagnostic,) = answer.diagnostics
    assert (diagnostic.option, diagnostic.code) == (where, "INVALID_VALUE")
    assert f"more than {MAX_MAP_ENTRIES:,} {where} entries" in diagnostic.message


def test_a_large_request_within_the_entry_bound_is_answered(
    grpc_target: str,  # noqa: F811
) -> None:
    for count in (300, MAX_MAP_ENTRIES):  # the bound itself is read
        env = {f"V{i:04d}": "x" for i in range(count)}
        request = pb.ResolveRequest(
            product="atlas-a2", workdir=PADDING, env=env, validate_only=True
        )
        code, reply = _call(grpc_target, RESOLVE, request.SerializeToString())
        assert code is grpc.StatusCode.OK
        assert pb.ResolveResponse.FromString(reply).ok


def test_max_message_bytes_raises_what_the_server_takes_and_what_it_sends() -> None:
    """With --max-message-bytes 16 MiB, a request and a reply past gRPC's default 4 MiB both
    go through: a Resolve of a 6 MiB attachment, and a batch whose reply is larger."""
    settings = ServerSettings(port=0, grace_seconds=2.0, max_message_bytes=16 * 2**20)
    with (
        ThreadServer(settings) as server,
        ResolverClient(server.target, max_message_bytes=16 * 2**20) as client,
    ):
        answer = client.resolve("atlas-a2", attachments={"op_debug_config": "#" * (6 * 2**20)})
        assert answer.ok and answer.product == "atlas-a2"
        asked = [ResolveRequest("atlas-a2", workdir=f"/{i}/" + "w" * 1500) for i in range(1000)]
        answers = client.resolve_batch(asked)
        assert len(answers) == 1000
        assert all(isinstance(a, Resolution) and a.ok for a in answers)


def test_protecting_resolve_calls_without_a_token_file_is_refused() -> None:
    """A server told to protect every call but given no token to check is not made."""
    with pytest.raises(ValueError, match="protecting resolve calls needs --admin-token-file"):
        ServerSettings(protect_resolve=True)


def test_a_request_of_256_kib_is_decoded_as_sent_and_one_byte_more_is_looked_at_first(
    grpc_target: str,  # noqa: F811
) -> None:
    """Up to 256 KiB no map is large enough to matter: its 8,193 env entries are read. One byte
    more and more than 8,192 are refused unread (with validate_only, the report's one error)."""
    env = {f"V{i:06d}": "" for i in range(8_193)}
    bare = pb.ResolveRequest(product="atlas-a2", env=env, validate_only=True).ByteSize()
    for size in (256 * 1024, 256 * 1024 + 1):
        workdir = "w" * (size - bare - 4)  # its tag and a 3-byte length
        request = pb.ResolveRequest(
            product="atlas-a2", env=env, workdir=workdir, validate_only=True
        )
        raw = request.SerializeToString()
        assert len(raw) == size
        code, reply = _call(grpc_target, RESOLVE, raw)
        assert code is grpc.StatusCode.OK
        answer = pb.ResolveResponse.FromString(reply)
        if size == 256 * 1024:
            assert answer.ok and not answer.diagnostics
            continue
        (diagnostic,) = answer.diagnostics
        assert (diagnostic.option, diagnostic.code) == ("env", "INVALID_VALUE")
        assert "more than 8,192 env entries" in diagnostic.message


def test_a_large_request_of_more_than_65536_fields_is_refused_unread(
    grpc_target: str,  # noqa: F811
) -> None:
    """Fields unknown to this server count too: 65,536 in all are read, one more is refused
    before protobuf decodes anything."""
    head = pb.ResolveRequest(product="atlas-a2", workdir=PADDING, validate_only=True)
    unknown = b"\x98\x06\x00"  # field 99, a varint
    read = head.SerializeToString() + unknown * (65_536 - 3)
    code, reply = _call(grpc_target, RESOLVE, read)
    assert code is grpc.StatusCode.OK
    assert pb.ResolveResponse.FromString(reply).ok
    code, error = _call(grpc_target, RESOLVE, read + unknown)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert _violations(error) == [("request", "TOO_MANY_ENTRIES")]
    assert error.details() == (
        "the request has more than 65,536 fields; send the job's own variables and only the "
        "attachments its options name"
    )


def test_a_struct_config_wider_than_read_is_the_in_process_report_unread(
    grpc_target: str,  # noqa: F811
) -> None:
    """As a config_json of as many keys: an INVALID_VALUE on config, the request still read."""
    from npu_resolver import MAX_CONFIG_ITEMS, ResolveRequest, resolve

    wide = {f"k{i:06d}": 1 for i in range(MAX_CONFIG_ITEMS + 1)}
    request = pb.ResolveRequest(product="atlas-a2", workdir=PADDING, validate_only=True)
    request.config.update(wide)
    code, reply = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.OK
    answer = pb.ResolveResponse.FromString(reply)
    local = resolve(ResolveRequest("atlas-a2", wide, workdir=PADDING))
    assert [(d.option, d.message) for d in answer.diagnostics] == [
        (d.option, d.message) for d in local.diagnostics
    ]
    diff = pb.DiffRequest(products=["atlas-a2", "atlas-a3"], workdir=PADDING)
    diff.config.update(wide)
    code, reply = _call(grpc_target, "/npu.resolver.v1.Resolver/Diff", diff.SerializeToString())
    assert code is grpc.StatusCode.OK
    columns = pb.DiffResponse.FromString(reply).results
    assert {c: [d.option for d in r.diagnostics] for c, r in columns.items()} == {
        "atlas-a2": ["config"],
        "atlas-a3": ["config"],
    }


def _env_past_the_bound() -> pb.ResolveRequest:
    """A request over LARGE_REQUEST_BYTES with one env entry more than is read."""

    return pb.ResolveRequest(
        product="atlas-a2",
        workdir=PADDING,
        env={f"V{i:06d}": "" for i in range(MAX_MAP_ENTRIES + 1)},
    )


def test_a_batch_item_with_too_many_entries_fails_alone(
    grpc_target: str,  # noqa: F811
) -> None:
    heavy = _env_past_the_bound()
    good = pb.ResolveRequest(product="atlas-a2")
    batch = pb.ResolveBatchRequest(requests=[good, heavy, good])
    code, reply = _call(grpc_target, BATCH, batch.SerializeToString())
    assert code is grpc.StatusCode.OK
    results = pb.ResolveBatchResponse.FromString(reply).results
    assert [r.WhichOneof("result") for r in results] == ["response", "status", "response"]
    assert "env entries" in results[1].status.message


def _keys_and_items(data: Any) -> int:
    """config_shape's count: every key of an object and every item of a list, at every level."""
    if isinstance(data, dict):
        return len(data) + sum(_keys_and_items(v) for v in data.values())
    if isinstance(data, list):
        return len(data) + sum(_keys_and_items(v) for v in data)
    return 0


_json = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=40,
)


@given(st.dictionaries(st.text(max_size=8), _json, max_size=8))
def test_the_pre_decode_walk_counts_a_structs_keys_and_items_as_the_core_does(
    config: dict[str, Any],
) -> None:
    message = pb.ResolveRequest()
    message.config.update(config)
    (raw,) = length_delimited(message.SerializeToString(), 2) or [b""]
    total = _keys_and_items(config)
    assert struct_items(raw, total + 1) == total
    if total:
        assert struct_items(raw, total - 1) == total  # read no further than one past the bound


@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a\x05\x0a\x01",
        b"\x0a",
        b"\x0b",
        b"\x0a\x80",
        b"\x0a\x02\x0a\x05",  # an entry whose key runs past the entry's end
    ],
)
def test_the_pre_decode_walk_refuses_what_it_cannot_read(raw: bytes) -> None:
    assert struct_items(raw, 100) is None


NESTED_WIDE = {
    "an object one level down": {"memory_config": {f"k{i:06d}": 1 for i in range(10_001)}},
    "a list one level down": {"memory_config": list(range(10_001))},
    "a list of objects": {"memory_config": [{"k": i} for i in range(5_001)]},
}


@pytest.mark.parametrize("config", NESTED_WIDE.values(), ids=NESTED_WIDE)
def test_a_struct_config_wide_below_its_top_level_is_the_in_process_report_unread(
    grpc_target: str,  # noqa: F811
    config: dict[str, Any],
) -> None:
    """protobuf's decoder reads a nested map in time quadratic in its size as well (150,000
    keys one level down: half a second): such a config is refused from its bytes, with the
    answer a resolve in process gives."""

    request = pb.ResolveRequest(product="atlas-a2", workdir=PADDING, validate_only=True)
    request.config.update(config)
    raw = request.SerializeToString()
    assert too_large(pb.ResolveRequest, raw, MAX_CONFIG_ITEMS) == "config"
    code, reply = _call(grpc_target, RESOLVE, raw)
    assert code is grpc.StatusCode.OK
    answer = pb.ResolveResponse.FromString(reply)
    local = resolve(ResolveRequest("atlas-a2", config, workdir=PADDING))
    assert [(d.option, d.message) for d in answer.diagnostics] == [
        (d.option, d.message) for d in local.diagnostics
    ]
    assert "more than 10,000 keys and items in all" in answer.diagnostics[0].message


def test_a_large_struct_config_within_the_bound_is_read_r_mem_1(grpc_target: str) -> None:  # noqa: F811
    """R-MEM-1: memory_config passes through, here whole."""
    config = {"memory_config": {f"k{i:05d}": "v" * 40 for i in range(MAX_CONFIG_ITEMS - 1)}}
    request = pb.ResolveRequest(product="atlas-a2", validate_only=True)
    request.config.update(config)
    raw = request.SerializeToString()
    assert len(raw) > 256 * 1024
    assert too_large(pb.ResolveRequest, raw, MAX_CONFIG_ITEMS) is None
    code, reply = _call(grpc_target, RESOLVE, raw)
    assert code is grpc.StatusCode.OK
    answer = pb.ResolveResponse.FromString(reply)
    assert answer.ok
    assert len(answer.options.fields["memory_config"].struct_value.fields) == MAX_CONFIG_ITEMS - 1


# An unknown group (wire types 3 and 4): long deprecated, never in this API, but protobuf's
# decoder reads it as an unknown field, so a walk that cannot read it must not pass the request on.
GROUP = b"\x9b\x06" + b"\x38\x01" + b"\x9c\x06"  # field 99: start, a varint field 7, end


def test_a_group_cannot_hide_a_map_too_large_to_decode(grpc_target: str) -> None:  # noqa: F811
    raw = GROUP + _env_past_the_bound().SerializeToString()
    assert pb.ResolveRequest.FromString(raw).product == "atlas-a2"  # the decoder reads it
    assert too_large(pb.ResolveRequest, raw, MAX_CONFIG_ITEMS) == UNREADABLE
    code, error = _call(grpc_target, RESOLVE, raw)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "holding a group" in error.details()
    config = pb.ResolveRequest()
    config.config.update({"memory_config": {f"k{i:06d}": 1 for i in range(MAX_CONFIG_ITEMS + 1)}})
    (struct,) = length_delimited(config.SerializeToString(), 2) or [b""]
    assert struct_items(GROUP + struct, 10**6) is None
    inside = field(1, b"atlas-a2") + field(2, GROUP + struct) + field(4, PADDING.encode())
    assert too_large(pb.ResolveRequest, inside, MAX_CONFIG_ITEMS) == UNREADABLE


def test_a_large_request_cut_short_is_refused_unread_as_not_valid(
    grpc_target: str,  # noqa: F811
) -> None:
    raw = _env_past_the_bound().SerializeToString()[:-1]
    code, error = _call(grpc_target, RESOLVE, raw)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "the request is not a valid ResolveRequest as this server reads one over 256 KiB (cut "
        "short, or holding a group)"
    )


def test_a_config_struct_sent_in_pieces_is_bounded_as_one() -> None:
    """The pieces merge into one Struct: fields that count for nothing in a later piece are
    bounded by what the earlier pieces left of the bound, not by the whole bound again."""
    wide = pb.ResolveRequest()
    wide.config.update({f"k{i:05d}": 1 for i in range(9_000)})
    (keys,) = length_delimited(wide.SerializeToString(), 2) or [b""]
    again = b"\x08\x00" * 5_000  # Value.null_value, written 5,000 times
    entry = b"\x0a\x01z" + b"\x12" + varint(len(again)) + again
    junk = field(1, entry)
    product, padding = field(1, b"atlas-a2"), field(4, PADDING.encode())
    raw = product + field(2, keys) + field(2, junk) + padding
    assert len(pb.ResolveRequest.FromString(raw).config.fields) == 9_001
    assert too_large(pb.ResolveRequest, raw, MAX_CONFIG_ITEMS) == "config"
    assert (
        too_large(pb.ResolveRequest, product + field(2, junk) + padding, MAX_CONFIG_ITEMS) is None
    )


def test_fields_that_count_for_nothing_are_bounded_too() -> None:
    """Unknown fields, or a Value's kind written again and again, cost the walk a step each
    and the decoder next to nothing: past MAX_FIELDS_PER_ITEM per item of the bound, the walk
    stops and the config is refused as one of too many keys."""
    unknown = b"\x18\x00" * 200_000  # Struct field 3, a varint: unknown
    assert struct_items(unknown, 100) == 101
    again = b"\x08\x00" * 200_000  # Value.null_value, written 200,000 times
    entry = b"\x0a\x01k" + b"\x12" + varint(len(again)) + again
    struct = b"\x0a" + varint(len(entry)) + entry
    assert struct_items(struct, 100) == 101
    raw = field(1, b"atlas-a2") + field(2, struct)
    assert pb.ResolveRequest.FromString(raw).config.fields["k"].null_value == 0
    assert too_large(pb.ResolveRequest, raw, MAX_CONFIG_ITEMS) == "config"
    assert struct_items(b"\x0a\x04\x0a\x02ab" * 50, 100) == 50  # real keys: not cut short


def test_a_large_batch_of_more_fields_than_items_is_refused_unwalked(
    grpc_target: str,  # noqa: F811
) -> None:
    raw = b"\x10\x00" * 150_000  # ResolveBatchRequest field 2, a varint: unknown
    code, error = _call(grpc_target, BATCH, raw)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "the batch has more than 64 fields besides its requests; it is not a batch this server "
        "reads"
    )
    code, error = _call(grpc_target, BATCH, GROUP + b"\x10\x00" * 150_000)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "holding a group" in error.details()


def test_a_small_batch_of_many_empty_items_is_refused_unwalked(
    grpc_target: str,  # noqa: F811
) -> None:
    """Under 256 KiB a batch still holds 131,072 empty items: counted no further than the
    limit, not cut into items first (which held the worker's event loop for 0.3 s)."""
    raw = field(1, b"") * (128 * 1024)
    assert len(raw) == 256 * 1024
    code, error = _call(grpc_target, BATCH, raw)
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "a batch takes at most 1,000 requests, this one has more; split it into several calls"
    )


@pytest.mark.parametrize(
    "raw",
    [b"\x9b\x06\x38\x01", b"\x9b\x06\x9c\x07", b"\x9c\x06", b"\x9b\x06\x0a\x05ab\x9c\x06"],
    ids=["never ends", "ends another", "ends unopened", "cut inside"],
)
def test_a_group_the_walk_cannot_read_gives_up_as_the_decoder_does(raw: bytes) -> None:
    assert struct_items(raw, 100) is None
    with pytest.raises(Exception, match="Error parsing"):
        pb.ResolveRequest.FromString(raw)


def test_a_number_of_thousands_of_digits_in_config_json_is_refused_in_the_resolvers_words(
    grpc_target: str,  # noqa: F811
) -> None:
    """Valid JSON that Python will not convert (over 4,300 digits): the caller was told its
    JSON was invalid and to call sys.set_int_max_str_digits(), advice for no gRPC caller."""
    request = pb.ResolveRequest(
        product="atlas-a2", config_json='{"hccl_timeout": ' + "9" * 5000 + "}", validate_only=True
    )
    code, reply = _call(grpc_target, RESOLVE, request.SerializeToString())
    assert code is grpc.StatusCode.OK
    (said,) = pb.ResolveResponse.FromString(reply).diagnostics
    assert said.code == "INVALID_VALUE" and said.option == "config"
    assert "more than 4,300 digits; no option takes such a number" in said.message
    assert "sys." not in said.message and "not valid JSON" not in said.message


LARGE_ATTACHMENT = "op_debug_config = oom\nop_debug_list = " + ",".join(["GatherV2"] * 20_000)
"""About 180 KB: a request over OFF_LOOP_BYTES."""


def _large(method: str) -> Any:
    """A request of `method` carrying LARGE_ATTACHMENT, with its unary stub's method path."""
    config = '{"op_debug_config": "/job/debug.cfg"}'
    attachments = {"op_debug_config": LARGE_ATTACHMENT}
    item = pb.ResolveRequest(product="atlas-a2", config_json=config, attachments=attachments)
    if method == "Resolve":
        return item
    if method == "ResolveBatch":
        return pb.ResolveBatchRequest(requests=[item])
    return pb.DiffRequest(
        products=["atlas-a2", "atlas-a3"], config_json=config, attachments=attachments
    )


def _hold_large_requests(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Requests with attachments wait in the core until `release` is set; `entered` is set
    when the first of them gets there."""
    import threading

    import npu_resolver

    entered, release = threading.Event(), threading.Event()

    def held(real: Any) -> Any:
        def call(request: ResolveRequest, *args: Any, **kwargs: Any) -> Any:
            if request.attachments:
                entered.set()
                release.wait(20)
            return real(request, *args, **kwargs)

        return call

    monkeypatch.setattr(npu_resolver, "resolve", held(npu_resolver.resolve))
    monkeypatch.setattr(npu_resolver, "diff", held(npu_resolver.diff))
    return entered, release


@pytest.mark.parametrize("method", ["Resolve", "ResolveBatch", "Diff"])
def test_a_large_request_leaves_health_probes_and_small_calls_answered_meanwhile(
    monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Attachments of a megabyte take up to half a second to read: resolved on the event loop,
    they held every other call of the worker (health probes failed the liveness check). The
    large request is held here until a probe and a small Resolve have been answered."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from npu_resolver_server._servicer import OFF_LOOP_BYTES
    from tests._server import ThreadServer

    assert _large(method).ByteSize() > OFF_LOOP_BYTES
    entered, release = _hold_large_requests(monkeypatch)
    with ThreadServer() as server, grpc.insecure_channel(server.target) as channel:
        large = channel.unary_unary(f"/npu.resolver.v1.Resolver/{method}")
        pending = large.future(_large(method).SerializeToString(), timeout=30)
        try:
            assert entered.wait(20)
            small = pb.ResolveRequest(product="atlas-a2", config_json='{"hccl_timeout": 600}')
            reply = pb.ResolveResponse.FromString(
                channel.unary_unary(RESOLVE)(small.SerializeToString(), timeout=5)
            )
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
            assert not pending.done()
        finally:
            release.set()
        assert reply.ok and reply.options["hccl_timeout"] == 600
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert pending.result(timeout=20)


@pytest.mark.parametrize("method", ["Resolve", "ResolveBatch", "Diff"])
def test_large_requests_past_the_bound_a_worker_holds_are_answered_unavailable_at_once(
    monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Large requests wait their turn in memory (several MB each): past MAX_HELD, one more is
    told to retry (UNAVAILABLE, which clients retry) instead of held; a batch's item says so
    in its own status. Those held are all answered."""
    from google.rpc import code_pb2

    from npu_resolver_server._large import MAX_HELD
    from tests._server import ThreadServer

    entered, release = _hold_large_requests(monkeypatch)
    with ThreadServer() as server, grpc.insecure_channel(server.target) as channel:
        resolve_ = channel.unary_unary(RESOLVE)
        payload = _large("Resolve").SerializeToString()
        held = [resolve_.future(payload, timeout=30) for _ in range(MAX_HELD)]
        try:
            assert entered.wait(20)
            large = server.built.service.large
            for _ in range(200):  # the rest reach the server and wait their turn
                if large.full:
                    break
                time.sleep(0.05)
            assert large.full
            code, answer = _call(
                server.target,
                f"/npu.resolver.v1.Resolver/{method}",
                _large(method).SerializeToString(),
            )
        finally:
            release.set()
        if method == "ResolveBatch":
            assert code is grpc.StatusCode.OK
            (item,) = pb.ResolveBatchResponse.FromString(answer).results
            status = item.status
            assert (status.code, status.message) == (code_pb2.UNAVAILABLE, _BUSY_MESSAGE)
        else:
            assert code is grpc.StatusCode.UNAVAILABLE
            assert answer.details() == _BUSY_MESSAGE
        assert all(pb.ResolveResponse.FromString(f.result(timeout=30)).ok for f in held)


_BUSY_MESSAGE = (
    "this server holds 64 requests over 64 KiB already (resolved one at a time); retry shortly"
)


def test_the_large_request_thread_says_how_long_its_request_has_run() -> None:
    """What the heartbeat reads to tell a stuck large request; and the thread switch interval
    that gives the event loop its turns is the large request's alone."""
    import sys
    import threading

    from npu_resolver_server._large import SWITCH_INTERVAL_S, LargeRequests

    large = LargeRequests()
    usual = sys.getswitchinterval()
    started, release = threading.Event(), threading.Event()

    def work() -> int:
        started.set()
        release.wait(10)
        return 7

    async def run() -> None:
        task = asyncio.ensure_future(large.run(work))
        assert await asyncio.to_thread(started.wait, 10)
        await asyncio.sleep(0.05)
        assert large.running_for() >= 0.05
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
        release.set()
        assert await task == 7
        assert large.running_for() == 0.0 and sys.getswitchinterval() == usual

    try:
        asyncio.run(run())
    finally:
        release.set()
        large.close()


def test_overlapping_large_requests_of_two_servers_restore_the_usual_switch_interval() -> None:
    """The interval is the process's: lowered by the first large request running, restored by
    the last (each restoring what it found would leave it lowered for good)."""
    import sys
    import threading

    from npu_resolver_server._large import SWITCH_INTERVAL_S, LargeRequests

    first, second = LargeRequests(), LargeRequests()
    usual = sys.getswitchinterval()
    go_on = [threading.Event(), threading.Event()]
    started = [threading.Event(), threading.Event()]

    def work(index: int) -> int:
        started[index].set()
        go_on[index].wait(10)
        return index

    async def run() -> None:
        one = asyncio.ensure_future(first.run(work, 0))
        assert await asyncio.to_thread(started[0].wait, 10)
        two = asyncio.ensure_future(second.run(work, 1))
        assert await asyncio.to_thread(started[1].wait, 10)
        go_on[0].set()
        assert await one == 0
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S  # the second still runs
        go_on[1].set()
        assert await two == 1
        assert sys.getswitchinterval() == usual

    try:
        asyncio.run(run())
    finally:
        for event in go_on:
            event.set()
        first.close()
        second.close()


def test_a_large_request_that_never_ends_does_not_hold_the_process_at_its_exit() -> None:
    """A server of one process stops and exits even so (the kubelet's SIGKILL, or nothing
    outside Kubernetes, would have ended it)."""
    import subprocess
    import sys

    script = (
        "import asyncio, threading\n"
        "from npu_resolver_server._large import LargeRequests\n"
        "large, started = LargeRequests(), threading.Event()\n"
        "def forever():\n"
        "    started.set()\n"
        "    threading.Event().wait()\n"
        "async def main():\n"
        "    job = asyncio.ensure_future(large.run(forever))\n"
        "    await asyncio.to_thread(started.wait, 10)\n"
        "    job.cancel()\n"
        "    large.close()\n"
        "asyncio.run(main())\n"
        "print('done')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=30
    )
    assert (proc.returncode, proc.stdout) == (0, "done\n"), proc.stderr


def test_a_large_request_past_the_hung_worker_limit_stops_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests waiting behind a large request that never ends would never be answered, while
    the event loop beats on: the heartbeat stops (said once), so that the supervisor restarts
    the worker as it does one whose loop never yields; it beats again once the request ends."""
    import logging

    from npu_resolver_server import _app

    monkeypatch.setattr(_app, "HEARTBEAT_S", 0.01)
    caplog.set_level(logging.WARNING, logger="npu_resolver_server")
    beats: list[float] = []
    stuck = False

    class Marks:
        def beat(self) -> None:
            beats.append(time.monotonic())

    async def run() -> None:
        nonlocal stuck
        task = asyncio.ensure_future(
            _app._heartbeat(cast(Any, Marks()), lambda: stuck, lambda *gap: None)
        )
        await asyncio.sleep(0.05)
        assert beats
        stuck = True
        await asyncio.sleep(0.05)
        since = len(beats)
        await asyncio.sleep(0.1)
        assert len(beats) == since  # silent while stuck
        stuck = False
        await asyncio.sleep(0.05)
        assert len(beats) > since
        task.cancel()

    asyncio.run(run())
    said = [getattr(r, "fields", {}).get("event") for r in caplog.records]
    assert said == ["large_request_stuck"]


SERVICE_CONFIG_FILE = Path(__file__).resolve().parent.parent / "deploy" / "service-config.json"


def test_the_published_service_config_is_the_python_clients() -> None:
    """deploy/service-config.json is what a launcher in another language gives its channel: the
    Python client's balancing and retry policy (UNAVAILABLE and CANCELLED, a call caught in a
    server's drain), with the health check the headless Service takes."""
    from npu_resolver_client._client import SERVICE_CONFIG

    published = json.loads(SERVICE_CONFIG_FILE.read_text(encoding="utf-8"))
    assert published == {
        **SERVICE_CONFIG,
        "healthCheckConfig": {"serviceName": pb.DESCRIPTOR.services_by_name["Resolver"].full_name},
    }


@pytest.fixture
def busy_server_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every large request finds the server busy (UNAVAILABLE); the list counts the Resolve
    calls the server handled."""
    from npu_resolver_server._large import LargeRequests
    from npu_resolver_server._servicer import ResolverService

    monkeypatch.setattr(LargeRequests, "full", property(lambda self: True))
    calls: list[int] = []
    answer = ResolverService.resolve

    def counted(self: ResolverService, raw: bytes, context: Any) -> Any:
        calls.append(1)
        return answer(self, raw, context)

    monkeypatch.setattr(ResolverService, "resolve", counted)
    return calls


def test_a_channel_given_the_published_service_config_retries_a_busy_server(
    busy_server_calls: list[int],
) -> None:
    """A plain gRPC channel (no client of this package) with the published service config: the
    health check lets it call, and the retry policy sends a busy server's UNAVAILABLE again."""
    from npu_resolver_client._client import RETRY_POLICY
    from tests._server import ThreadServer

    options = [
        ("grpc.service_config", SERVICE_CONFIG_FILE.read_text(encoding="utf-8")),
        ("grpc.per_rpc_retry_buffer_size", 4 * 1024 * 1024),
    ]
    small = pb.ResolveRequest(product="atlas-a2")
    large = pb.ResolveRequest(
        product="atlas-a2",
        config_json=json.dumps({"op_debug_config": "/job/debug.cfg"}),
        attachments={"op_debug_config": LARGE_ATTACHMENT},
    )
    with ThreadServer() as server, grpc.insecure_channel(server.target, options) as channel:
        call = channel.unary_unary(
            "/npu.resolver.v1.Resolver/Resolve",
            request_serializer=pb.ResolveRequest.SerializeToString,
            response_deserializer=pb.ResolveResponse.FromString,
        )
        assert call(small, timeout=10).product == "atlas-a2"
        busy_server_calls.clear()
        with pytest.raises(grpc.RpcError) as info:
            call(large, timeout=20)
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert len(busy_server_calls) == RETRY_POLICY["maxAttempts"]


def test_a_busy_servers_unavailable_is_retried_by_the_client(
    busy_server_calls: list[int],
) -> None:
    """The status comes alone (no reply headers before it), so the client's gRPC retries it,
    as the contract's retries on UNAVAILABLE say; a reply sent after headers would not be."""
    from npu_resolver_client import ResolverClient, ResolverUnavailable
    from npu_resolver_client._client import RETRY_POLICY
    from tests._server import ThreadServer

    request_ = ResolveRequest(
        product="atlas-a2",
        config={"op_debug_config": "/job/debug.cfg"},
        attachments={"op_debug_config": LARGE_ATTACHMENT},
    )
    with (
        ThreadServer() as server,
        ResolverClient(server.target, timeout=20) as client,
        pytest.raises(ResolverUnavailable) as info,
    ):
        client.resolve_request(request_)
    assert _BUSY_MESSAGE in str(info.value)
    assert len(busy_server_calls) == RETRY_POLICY["maxAttempts"]
