"""The server writes its hot-path bytes itself; they must mean exactly what the slow, general
way produces.

Replies: parsed, they equal the message the generated classes build (`resolution_to_proto`),
for every answer the core gives and for any JSON a Resolution can hold. Maps have no canonical
order on the wire, so the parsed messages are compared, and so are their deterministic
serializations (which sort map keys and keep -0.0 apart from 0.0). Batch items are cut from the
request as sent, and call log lines are the JsonFormatter's text.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import npu_resolver
from npu_resolver import Code, Diagnostic, Provenance, Resolution, ResolveRequest, Severity, Source
from npu_resolver._model import unset
from npu_resolver_client import ResolverClient
from npu_resolver_client.wire import pb, request_to_proto, resolution_to_proto
from npu_resolver_server import PolicyStore, ServerSettings, _encode, _logging
from npu_resolver_server._encode import encode_resolution, field, length_delimited, write_response
from npu_resolver_server._metrics import Metrics
from tests._server import ThreadServer
from tests.test_grpc_wire import IDS, RESULTS
from tests.test_properties import requests as resolve_requests

FAST = settings(max_examples=300)


def assert_same_message(written: bytes, resolution: Resolution) -> None:
    reference = resolution_to_proto(resolution)
    parsed = pb.ResolveResponse.FromString(written)
    assert parsed == reference
    assert parsed.SerializeToString(deterministic=True) == reference.SerializeToString(
        deterministic=True
    )


@pytest.mark.parametrize(("name", "request_", "resolution"), RESULTS, ids=IDS)
def test_golden_and_varied_answers_are_written_exactly(
    name: str, request_: ResolveRequest, resolution: Resolution
) -> None:
    assert_same_message(write_response(resolution), resolution)
    assert_same_message(write_response(resolution), resolution)  # again, from the memo tables


@FAST
@given(resolve_requests)
def test_any_core_answer_is_written_exactly(request: ResolveRequest) -> None:
    resolution = npu_resolver.resolve(request)
    assert_same_message(write_response(resolution), resolution)


# Every JSON shape a Resolution can hold: floats of every kind, unicode, empty strings, ints
# beyond 2**53 (rounded to a double as the generated code rounds them), bools next to numbers.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.sampled_from(["", "é", "日本", "\U0001f600", "a\x00b", 0, 1, 1.0, -0.0, 0.0, True])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
names = st.sampled_from(["hccl_timeout", "precision_mode", "dump_config", ""]) | st.text(
    max_size=10
)
provenances = st.builds(
    Provenance,
    source=st.sampled_from(list(Source)),
    rules=st.lists(st.text(max_size=6), max_size=3).map(tuple),
    requested=st.just(unset()) | json_values,
    env_var=st.sampled_from(["", "HCCL_EXEC_TIMEOUT"]) | st.text(max_size=5),
    detail=st.text(max_size=10),
)
diagnostics = st.builds(
    Diagnostic,
    severity=st.sampled_from(list(Severity)),
    code=st.sampled_from(list(Code)),
    option=st.text(max_size=10),
    rule=st.text(max_size=6),
    message=st.text(max_size=20),
    suggestion=st.text(max_size=10),
)
resolutions = st.builds(
    Resolution,
    ok=st.booleans(),
    product=st.text(max_size=10),
    options=st.dictionaries(names, json_values, max_size=8),
    provenance=st.dictionaries(names, provenances, max_size=8),
    diagnostics=st.lists(diagnostics, max_size=4).map(tuple),
    paths=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    catalog_version=st.sampled_from(["", npu_resolver.CATALOG_VERSION]),
    policy_version=st.text(max_size=8),
    fingerprint=st.text(max_size=8),
)


@FAST
@given(resolutions)
def test_any_resolution_is_written_exactly(resolution: Resolution) -> None:
    assert_same_message(write_response(resolution), resolution)


def _answer(options: dict[str, Any], provenance: dict[str, Provenance] | None = None) -> Resolution:
    return Resolution(True, "atlas-a2", options, provenance or {}, (), {}, "900", "", "f")


def _number_kind(written: bytes, name: str) -> str | None:
    return pb.ResolveResponse.FromString(written).options.fields[name].WhichOneof("kind")


def test_memo_keeps_bools_numbers_and_signed_zeros_apart() -> None:
    assert _number_kind(write_response(_answer({"a": 1})), "a") == "number_value"
    assert _number_kind(write_response(_answer({"a": True})), "a") == "bool_value"
    for value in (0.0, -0.0, 0, False, 1.0, 1):
        resolution = _answer({"a": value}, {"a": Provenance(Source.USER, ("R",), value)})
        assert_same_message(write_response(resolution), resolution)


def test_the_same_provenance_object_under_two_names() -> None:
    shared = Provenance(Source.DEFAULT, ("R-1",))
    resolution = _answer({"a": 1, "b": 2}, {"a": shared, "b": shared})
    for _ in range(2):
        assert_same_message(write_response(resolution), resolution)


def test_a_provenance_map_holding_a_callers_object_is_written_anew_each_time() -> None:
    """A requested object is the caller's (not copied): the map holding it is never kept
    whole, so what it holds when the answer is written is what is sent."""
    asked: dict[str, Any] = {"a": 1}
    shared = Provenance(Source.DEFAULT, ("R-1",))
    resolution = _answer({"x": 1, "y": 2}, {"x": shared, "y": Provenance(Source.USER, (), asked)})
    assert_same_message(write_response(resolution), resolution)
    asked["a"] = 2
    asked["b"] = [3]
    assert_same_message(write_response(resolution), resolution)
    assert b"\x62" in write_response(resolution)  # the new key "b"


def test_the_same_provenance_records_under_other_names_are_written_with_their_names() -> None:
    one, two = Provenance(Source.DEFAULT, ("R-1",)), Provenance(Source.USER, ("R-2",))
    for provenance in ({"a": one, "b": two}, {"b": one, "a": two}, {"a": one, "c": two}):
        resolution = _answer({}, provenance)
        for _ in range(2):
            assert_same_message(write_response(resolution), resolution)


def test_long_and_non_ascii_paths_are_written_exactly() -> None:
    for path in ("/j", "/jobs/" + "a" * 130, "/数据/" + "é" * 9000, ""):
        resolution = Resolution(True, "atlas-a2", {}, {}, (), {"debug_dir": path}, "900", "", "")
        assert_same_message(write_response(resolution), resolution)


def test_memo_tables_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_encode, "MEMO_ENTRIES", 16)
    for i in range(100):
        resolution = _answer({f"o{i}": i}, {f"o{i}": Provenance(Source.USER, (f"R-{i}",), str(i))})
        assert_same_message(write_response(resolution), resolution)
    tables = (_encode._OPTIONS, _encode._PROVENANCE, _encode._SAME_PROVENANCE)
    assert all(len(table) <= 16 for table in tables)


def test_kept_provenance_maps_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    _encode._PROVENANCE_BLOCKS.clear()
    monkeypatch.setattr(_encode, "MAX_BLOCKS", 4)
    records = [Provenance(Source.USER, (f"R-{i}",)) for i in range(30)]
    for i in range(30):
        resolution = _answer({}, {"a": records[i], "b": records[(i + 1) % 30]})
        assert_same_message(write_response(resolution), resolution)
        assert len(_encode._PROVENANCE_BLOCKS) <= 4


def test_long_pieces_are_written_exactly_and_never_kept() -> None:
    """A caller's long value (a string, a requested object, a path) is written anew each time:
    kept, 4,096 of them would pin gigabytes. Short ones around it are still kept."""
    for table in (_encode._OPTIONS, _encode._PROVENANCE, _encode._DIAGNOSTICS):
        table.clear()  # from empty: what is kept below was kept by this answer
    _encode._SAME_PROVENANCE.clear()
    _encode._PROVENANCE_BLOCKS.clear()
    long = "x" * (2 * _encode.MAX_MEMO_BYTES)
    shared = Provenance(Source.DEFAULT, ("R-1",))
    resolution = Resolution(
        False,
        "atlas-a2",
        {"long": long, "short": 1},
        {"long": Provenance(Source.USER, ("R-2",), long), "short": shared},
        (Diagnostic(Severity.ERROR, Code.INVALID_VALUE, "long", "R-2", long),),
        {"debug_dir": "/" + long},
        "900",
        "",
        "",
    )
    for _ in range(2):
        assert_same_message(write_response(resolution), resolution)
    tables = (_encode._OPTIONS, _encode._PROVENANCE, _encode._DIAGNOSTICS)
    assert all(len(piece) <= _encode.MAX_MEMO_BYTES for table in tables for piece in table.values())
    assert [key[0] for key in _encode._OPTIONS] == ["short"]
    assert [name for name, _ in _encode._SAME_PROVENANCE] == ["short"]
    assert not _encode._DIAGNOSTICS
    assert not _encode._PROVENANCE_BLOCKS  # a map holding a long record is not kept whole


def test_a_provenance_map_past_the_block_bound_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    _encode._PROVENANCE_BLOCKS.clear()
    monkeypatch.setattr(_encode, "MAX_BLOCK_BYTES", 40)
    records = {f"o{i}": Provenance(Source.USER, (f"R-{i}",), i) for i in range(4)}
    resolution = _answer({}, records)
    assert_same_message(write_response(resolution), resolution)
    assert not _encode._PROVENANCE_BLOCKS
    monkeypatch.setattr(_encode, "MAX_BLOCK_BYTES", 4096)
    assert_same_message(write_response(resolution), resolution)
    assert len(_encode._PROVENANCE_BLOCKS) == 1


@pytest.mark.parametrize(
    "options",
    [
        {"a": OrderedDict(b=1)},  # a dict subclass
        {"a": Code.ROUNDED},  # a str subclass
        {"a": (1, "x")},  # a tuple: a list to Struct.update
    ],
)
def test_unusual_types_are_left_to_the_reference_path(options: dict[str, Any]) -> None:
    resolution = _answer(options)
    assert_same_message(encode_resolution(resolution), resolution)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"a": 10**400}, OverflowError),
        ({"a": "\ud800"}, UnicodeEncodeError),
        ({"a": object()}, ValueError),
    ],
)
def test_what_the_reference_path_refuses_is_refused_alike(
    options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        resolution_to_proto(_answer(options)).SerializeToString()
    with pytest.raises(error):
        encode_resolution(_answer(options))


# --------------------------------------------------------------------------- ResolveBatch


def _items(count: int) -> list[pb.ResolveRequest]:
    return [
        request_to_proto(ResolveRequest("atlas-a2", {"hccl_timeout": 600 + i}, {"X": "é"}))
        for i in range(count)
    ]


def test_batch_items_are_cut_from_the_wire_as_sent() -> None:
    items = _items(3)
    raw = pb.ResolveBatchRequest(requests=items).SerializeToString()
    expected = [item.SerializeToString() for item in items]
    assert length_delimited(raw, 1) == expected
    # Unknown fields of every wire type, before, between and after the items, are passed over.
    unknown = b"\x10\x96\x01" + b"\x19" + bytes(8) + b"\x25" + bytes(4) + field(7, b"x" * 200)
    mixed = unknown + raw + unknown
    pb.ResolveBatchRequest.FromString(mixed)  # the generated code accepts it too
    assert length_delimited(mixed, 1) == expected
    assert length_delimited(b"", 1) == []


@pytest.mark.parametrize("raw", [b"\x0b\x0c", b"\x0a\x05ab", b"\x0a", b"\x10\x80"])
def test_batch_walk_refuses_what_it_does_not_expect(raw: bytes) -> None:
    assert length_delimited(raw, 1) is None


def test_batch_items_share_the_answer_cache_with_unary_calls() -> None:
    registry = CollectorRegistry()
    request = ResolveRequest("atlas-a2", {"hccl_timeout": 1234}, {"HCCL_EXEC_TIMEOUT": "900"})
    with (
        ThreadServer(metrics=Metrics(registry)) as server,
        ResolverClient(server.target) as client,
    ):
        first = client.resolve_request(request)  # first sight: resolved, not kept
        results = client.resolve_batch([request, request, request, ResolveRequest("atlas-9000")])
        assert results[:3] == [first, first, first]
        assert server.built.service.cache.hits == 2  # kept at its second sight, in the batch
    value = registry.get_sample_value
    assert value("npu_resolver_answer_cache_total", {"result": "hit"}) == 2
    assert value("npu_resolver_answer_cache_total", {"result": "miss"}) == 3
    assert value("npu_resolver_batch_items_total", {"outcome": "ok"}) == 3
    assert value("npu_resolver_batch_items_total", {"outcome": "failed"}) == 1


def test_a_kept_answer_is_not_given_under_another_policy() -> None:
    """A request answered under one policy is answered anew once another is in force, with
    that policy's version and values, even though its bytes are the same."""
    before = npu_resolver.parse_policy(
        "[profiles.default.defaults]\nop_debug_level = 0\n", "a.toml"
    )
    after = npu_resolver.parse_policy("[profiles.default.defaults]\nop_debug_level = 1\n", "b.toml")
    assert before.version != after.version
    with (
        ThreadServer(store=PolicyStore.fixed(before)) as server,
        ResolverClient(server.target) as client,
    ):
        client.resolve("atlas-a2")
        first = client.resolve("atlas-a2")  # kept from its second sight
        assert (first.policy_version, first.options["op_debug_level"]) == (before.version, 0)
        assert len(server.built.service.cache) == 1
        server.store.current = after  # in force without a reload, which would empty the cache
        then = client.resolve("atlas-a2")
        assert (then.policy_version, then.options["op_debug_level"]) == (after.version, 1)


def test_a_server_without_an_answer_cache_counts_no_cache_lookups() -> None:
    """--cache-entries 0: no answer_cache series, rather than every call counted a miss."""
    registry = CollectorRegistry()
    settings = ServerSettings(port=0, grace_seconds=2.0, cache_entries=0)
    with (
        ThreadServer(settings, metrics=Metrics(registry)) as server,
        ResolverClient(server.target) as client,
    ):
        for _ in range(3):
            client.resolve("atlas-a2")
    value = registry.get_sample_value
    assert value("npu_resolver_requests_total", {"method": "Resolve", "code": "OK"}) == 3
    assert value("npu_resolver_answer_cache_total", {"result": "miss"}) is None
    assert value("npu_resolver_answer_cache_total", {"result": "hit"}) is None


# --------------------------------------------------------------------------- call log lines


def _call_lines(product: str, ok: bool | None, codes: tuple[str, ...]) -> list[str]:
    """The same call logged the direct way and through a LogRecord and JsonFormatter."""
    stream = io.StringIO()
    saved = logging.getLogger("npu_resolver_server").handlers[:], _logging._Sink.handler
    try:
        _logging.configure("INFO")
        handler = _logging._Sink.handler
        assert handler is not None
        handler.setStream(stream)
        for direct in (True, False):
            _logging._Sink.handler = handler if direct else None
            _logging.log_call(
                "Resolve", code="OK", latency_s=0.0012345, product=product, ok=ok, codes=codes
            )
    finally:
        logging.getLogger("npu_resolver_server").handlers[:], _logging._Sink.handler = saved
    return stream.getvalue().removesuffix("\n").split("\n")  # not splitlines: U+2028 is text


@settings(max_examples=100)
@given(
    st.text(max_size=12) | st.sampled_from(['a"b\\c', "é\n\t\x00\u2028", "\U0001f600"]),
    st.sampled_from([True, False, None]),
    st.lists(st.sampled_from([c.value for c in Code]), max_size=4).map(tuple),
)
@example("\u2028\x85", True, ())  # line breaks JSON leaves raw: both ways escape them
def test_call_lines_are_the_formatters_text(
    product: str, ok: bool | None, codes: tuple[str, ...]
) -> None:
    direct, formatted = _call_lines(product, ok, codes)
    # The two were made a moment apart: the same text but for the time stamp.
    stamp = re.compile(r'^\{"ts": [0-9.]+, ')
    assert stamp.sub("", direct) == stamp.sub("", formatted)
    assert json.loads(direct)["product"] == product


def test_recurring_diagnostic_code_sets_are_each_counted_per_answer() -> None:
    """The children of a set of codes are found once and reused: every answer still counts."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.diagnostics_seen("atlas-a2", ("FORCED", "ADVICE", "FORCED"))
    metrics.diagnostics_seen("atlas-a2", ["FORCED", "ADVICE", "FORCED"])
    metrics.diagnostics_seen("atlas-a3", iter(("FORCED",)))
    metrics.diagnostics_seen("", ("ADVICE",))
    metrics.observe("Resolve", "OK", 0.001, "atlas-a2", ("ADVICE",))
    metrics.observe("Resolve", "OK", 0.002, "atlas-a2", ())
    metrics.observe("Resolve", "INVALID_ARGUMENT", 0.003, "atlas-a2", ())
    value = registry.get_sample_value
    assert value("npu_resolver_diagnostics_total", {"code": "FORCED", "product": "atlas-a2"}) == 4
    assert value("npu_resolver_diagnostics_total", {"code": "ADVICE", "product": "atlas-a2"}) == 3
    assert value("npu_resolver_diagnostics_total", {"code": "FORCED", "product": "atlas-a3"}) == 1
    assert value("npu_resolver_diagnostics_total", {"code": "ADVICE", "product": "unknown"}) == 1
    assert value("npu_resolver_requests_total", {"method": "Resolve", "code": "OK"}) == 2
    assert (
        value("npu_resolver_requests_total", {"method": "Resolve", "code": "INVALID_ARGUMENT"}) == 1
    )
    assert value("npu_resolver_request_latency_seconds_count", {"method": "Resolve"}) == 3


def test_recurring_call_lines_keep_each_calls_own_fields() -> None:
    """Lines share their recurring middle text, never another call's product, status or codes."""
    calls = [
        ("atlas-a2", True, ("FROM_ENV",)),
        ("atlas-a3", True, ("FROM_ENV",)),
        ("atlas-a2", False, ("FROM_ENV",)),
        ("atlas-a2", True, ()),
        ("atlas-a2", True, ("FROM_ENV",)),
    ]
    lines = [_call_lines(product, ok, codes)[0] for product, ok, codes in calls]
    for line, (product, ok, codes) in zip(lines, calls, strict=True):
        record = json.loads(line)
        assert (record["product"], record["ok"], record["codes"]) == (product, ok, list(codes))
        assert record["latency_ms"] == 1.234
        assert record["pid"] == record["worker_pid"]


def test_call_lines_time_stamps_are_the_formatters_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Milliseconds as the formatter writes them (1700000000.1, never 1700000000.100)."""
    import time

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.1)
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_100_000_000)
    direct, formatted = _call_lines("atlas-a2", True, ("FROM_ENV",))
    assert direct == formatted
    assert direct.startswith('{"ts": 1700000000.1, ')
