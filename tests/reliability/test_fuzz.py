"""Fuzz at the core and at the wire: any input gets a structured answer, never a crash.

tests/test_properties.py already fuzzes the core with small configs and no attachments; these
add attachments, profiles, deeper JSON of every type, and the same requests through a real
server (as the client sends them, as a Struct, and as mutated or random bytes).
"""

from __future__ import annotations

import json
import time
import traceback
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_resolver import CATALOG, PRODUCTS, Code, Resolution, ResolveRequest, resolve
from npu_resolver._options import NAMED_ENV_VARS
from npu_resolver_client import ResolveError, ResolverClient, ResolverClientError
from npu_resolver_client.wire import LimitError, pb, request_from_proto, request_to_proto
from npu_resolver_server.settings import DEFAULT_MAX_STRUCT_DEPTH, DEFAULT_MAX_STRUCT_KEYS
from tests._server import ThreadServer
from tests.reliability._common import Figures
from tests.test_properties import _structured

QUICK = 300
SOAK = 10_000
OPTION_NAMES = list(CATALOG.by_name)
ATTACHMENT_OPTIONS = [o.name for o in CATALOG.options if o.attachment]
PRODUCT_NAMES = [p.id for p in PRODUCTS] + ["Ascend910B3", "atlas a2", "ATLAS_A2", "bogus", ""]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=40,
)
typical_values = st.sampled_from(
    [0, 1, 2, -1, 600, 17340, 2**31, True, False, "1", "0", "auto", "enable", "mixed_float16"]
)
digit_runs = st.sampled_from(["0", "1", "00", "-1", "9" * 4_301, "0" * 4_300 + "1"]) | st.integers(
    0, 10**20
).map(str)
GRAMMARS = {
    "aicore_num": "{a}|{b}",
    "stream_max_parallel_num": "AIcoreEngine:{a},DNN_VM_AICPU:{b}",
    "dynamic_inputs_shape_range": "data:[{a}~{b}];getnext:[{b},-1]",
    "local_device_list": "{a},{b}",
}
"""The grammar options whose texts hold numbers (R-ACN-1, R-SMP-1, R-DEP-8, R-LRI-1)."""
grammar_configs = st.sampled_from(sorted(GRAMMARS)).flatmap(
    lambda name: st.builds(
        lambda a, b: {name: GRAMMARS[name].format(a=a, b=b)}, digit_runs, digit_runs
    )
)
"""One of them with digit runs of any length: past 4,300 digits int() refuses to read them."""
names = st.sampled_from(OPTION_NAMES) | st.text(min_size=1, max_size=30)
file_texts = st.text(max_size=200) | st.sampled_from(
    [
        "",
        "{}",
        '{"black-list": {"to-add": ["Conv2D"]}}',
        "[ascend]\nop_precision_mode=high_precision\n",
        "OpType::Pooling:high_precision\n",
        "Conv2D:float16\n",
        '{"Switch":{"GraphFusion":{"ALL":"off"}}}',
        "not json {",
        "\x00\x01\x02",
    ]
)
requests = st.builds(
    ResolveRequest,
    product=st.sampled_from(PRODUCT_NAMES) | st.text(max_size=20),
    config=st.builds(
        lambda config, grammar: {**config, **grammar},
        st.dictionaries(names, typical_values | json_values, max_size=16),
        st.just({}) | grammar_configs,
    ),
    env=st.dictionaries(
        st.sampled_from(NAMED_ENV_VARS) | st.text(max_size=12),
        st.sampled_from(["", "0", "1", "600", "/w", "-1"]) | st.text(max_size=20),
        max_size=6,
    ),
    workdir=st.sampled_from(["", "/job", "relative/dir"]) | st.text(max_size=20),
    profile=st.sampled_from(["", "default"]) | st.text(max_size=8),
    strict=st.booleans(),
    validate_only=st.booleans(),
    attachments=st.dictionaries(
        st.sampled_from(ATTACHMENT_OPTIONS) | st.text(max_size=12), file_texts, max_size=3
    ),
)


def _fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _check_core(request: ResolveRequest) -> Resolution:
    """Structured, deterministic, and (when valid) a fixpoint."""
    first = resolve(request)
    _structured(first)
    again = resolve(request)
    assert again.to_json() == first.to_json()
    if first.ok:
        fed_back = resolve(
            ResolveRequest(
                product=first.product,
                config=dict(first.options),
                env=request.env,
                workdir=request.workdir,
                profile=request.profile,
                attachments=request.attachments,
            )
        )
        assert fed_back.ok, fed_back.diagnostics
        assert fed_back.options == first.options
        assert fed_back.fingerprint == first.fingerprint
    return first


def _core(examples: int) -> tuple[int, list[str]]:
    """The examples run, and for each that raised (a crash or a broken property) the request
    with its traceback."""
    seen = 0
    failures: list[str] = []

    @_fuzz(examples)
    @given(requests)
    def run(request: ResolveRequest) -> None:
        nonlocal seen
        seen += 1
        try:
            _check_core(request)
        except Exception:
            failures.append(f"{request!r}\n{traceback.format_exc()}")

    run()
    return seen, failures


def _core_fuzz(figures: Figures, examples: int) -> None:
    start = time.perf_counter()
    seen, failures = _core(examples)
    figures(
        "core fuzz",
        examples=seen,
        exceptions=len(failures),
        seconds=round(time.perf_counter() - start, 1),
    )
    assert not failures, f"{len(failures)} of {seen} examples raised; the first:\n{failures[0]}"


def test_core_fuzz(figures: Figures) -> None:
    _core_fuzz(figures, QUICK)


@pytest.mark.soak
def test_core_fuzz_soak(figures: Figures) -> None:
    _core_fuzz(figures, SOAK)


def _reordered(request: ResolveRequest) -> ResolveRequest:
    return ResolveRequest(
        product=request.product,
        config=dict(list(request.config.items())[::-1]),
        env=dict(list(request.env.items())[::-1]),
        workdir=request.workdir,
        profile=request.profile,
        strict=request.strict,
        validate_only=request.validate_only,
        attachments=dict(list(request.attachments.items())[::-1]),
    )


@_fuzz(QUICK)
@given(requests.map(lambda r: ResolveRequest(r.product, r.config, r.env, r.workdir, r.profile)))
def test_map_order_does_not_change_the_answer(request: ResolveRequest) -> None:
    """Protobuf maps keep no order: equal config and env maps must give equal answers."""
    assert resolve(_reordered(request)).to_json() == resolve(request).to_json()


def test_attachment_order_does_not_change_the_answer() -> None:
    attachments = {"op_debug_config": "", "modify_mixlist": ""}
    forward = ResolveRequest(product="atlas-350", attachments=attachments)
    assert resolve(_reordered(forward)).to_json() == resolve(forward).to_json()


# --------------------------------------------------------------------------- the wire


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    with ThreadServer() as running:
        yield running


def _canonical(result: Resolution) -> str:
    return json.dumps(result.to_json(), sort_keys=True)


def _as_server_reads_it(request: ResolveRequest) -> ResolveRequest | None:
    """The request as the server decodes it (maps in wire order); None when over its limits."""
    wire = pb.ResolveRequest.FromString(request_to_proto(request).SerializeToString())
    try:
        return request_from_proto(
            wire, max_depth=DEFAULT_MAX_STRUCT_DEPTH, max_keys=DEFAULT_MAX_STRUCT_KEYS
        )
    except LimitError:
        return None


ANSWERS = frozenset({"OK", "INVALID_ARGUMENT"})
"""The codes any request, however malformed, may get."""
FAULTS = ("INTERNAL", "UNKNOWN")
"""Codes that mean the server failed: the `internal` figure counts them."""


def _wire_one(
    client: ResolverClient, channel: grpc.Channel, request: ResolveRequest
) -> tuple[str, str]:
    """One request two ways; returns the gRPC codes the client's form and the Struct form got."""
    decoded = _as_server_reads_it(request)
    code = "OK"
    try:
        remote = client.resolve_request(request)
    except ResolveError as error:  # INVALID_ARGUMENT: the report rides in the status details
        code = error.code.name
        assert error.resolution is not None and error.violations, error.details
        remote = error.resolution
        assert not remote.ok and not request.validate_only
    except ResolverClientError as error:  # any other failure: counted and checked by the caller
        return error.code.name, _struct_code(channel, request)
    if decoded is None:  # over the server's read limits: reported on `config`, not resolved
        assert [(d.code, d.option) for d in remote.errors] == [(Code.INVALID_VALUE, "config")]
        assert not remote.options
    else:
        local = resolve(decoded)
        assert remote.fingerprint == local.fingerprint
        assert _canonical(remote) == _canonical(local)
    return code, _struct_code(channel, request)


def _struct_code(channel: grpc.Channel, request: ResolveRequest) -> str:
    """The request as a Struct (numbers travel as doubles): the gRPC code it gets."""
    call = channel.unary_unary("/npu.resolver.v1.Resolver/Resolve")
    payload = request_to_proto(request, as_struct=True).SerializeToString()
    try:
        call(payload, timeout=10)
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


def _wire(target: str, examples: int) -> tuple[Counter[str], Counter[str]]:
    """The codes the Struct form got, and those the client's form got."""
    codes: Counter[str] = Counter()
    typed: Counter[str] = Counter()
    with ResolverClient(target, timeout=10) as client, grpc.insecure_channel(target) as channel:

        @_fuzz(examples)
        @given(requests.filter(_encodable))
        def run(request: ResolveRequest) -> None:
            typed_code, struct_code = _wire_one(client, channel, request)
            typed[typed_code] += 1
            codes[struct_code] += 1

        run()
    return codes, typed


def _encodable(request: ResolveRequest) -> bool:
    """A Struct cannot carry integers beyond a double's range; the JSON form can."""
    try:
        request_to_proto(request, as_struct=True)
    except (ValueError, OverflowError):
        return False
    return True


def _bytes_fuzz(target: str, examples: int) -> Counter[str]:
    """Random and mutated bytes: OK or INVALID_ARGUMENT, never INTERNAL or UNKNOWN."""
    seed = request_to_proto(
        ResolveRequest(
            product="atlas-a2",
            config={"hccl_timeout": 600, "dump_config": {"a": [1, 2.5, None]}},
            env={"HCCL_EXEC_TIMEOUT": "10"},
            workdir="/job",
            attachments={"modify_mixlist": "{}"},
        ),
        as_struct=True,
    ).SerializeToString()
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(target) as channel:
        methods = {
            name: channel.unary_unary(f"/npu.resolver.v1.Resolver/{name}")
            for name in ("Resolve", "ResolveBatch", "Diff")
        }
        mutated = st.builds(
            lambda at, junk, cut: seed[:at] + junk + seed[at + cut :],
            st.integers(0, len(seed)),
            st.binary(max_size=8),
            st.integers(0, 8),
        )

        @_fuzz(examples)
        @given(st.sampled_from(sorted(methods)), st.binary(max_size=300) | mutated)
        def run(method: str, payload: bytes) -> None:
            try:
                methods[method](payload, timeout=10)
            except grpc.RpcError as error:
                codes[error.code().name] += 1
                return
            codes["OK"] += 1

        run()
    return codes


def _wire_fuzz(server: ThreadServer, figures: Figures, examples: int) -> None:
    """Random requests and random bytes at the wire; one line of figures."""
    start = time.perf_counter()
    codes, typed = _wire(server.target, examples)
    raw = _bytes_fuzz(server.target, examples)
    internal = sum(counter[fault] for counter in (codes, typed, raw) for fault in FAULTS)
    figures(
        "wire fuzz",
        requests=sum(codes.values()),
        byte_payloads=sum(raw.values()),
        internal=internal,
        struct_codes=dict(codes),
        byte_codes=dict(raw),
        seconds=round(time.perf_counter() - start, 1),
    )
    answers = f"client form {dict(typed)}, Struct form {dict(codes)}, bytes {dict(raw)}"
    assert internal == 0, answers
    assert set(typed) | set(codes) | set(raw) <= ANSWERS, answers


def test_wire_fuzz(server: ThreadServer, figures: Figures) -> None:
    _wire_fuzz(server, figures, QUICK)


@pytest.mark.soak
def test_wire_fuzz_soak(server: ThreadServer, figures: Figures) -> None:
    _wire_fuzz(server, figures, SOAK)
