"""Caller text that is not Unicode (lone UTF-16 surrogates, as JSON "\\ud800" escapes give) and
JSON objects that name a key twice: refused with a structured answer, in process, through a
server and on the command line; never an exception, never INTERNAL."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from npu_resolver import Code, ResolveRequest, resolve
from npu_resolver._model import JSON
from npu_resolver._options import ENV_VAR_RULES
from npu_resolver._rules import RULES
from npu_resolver_client import ResolveFailure, ResolverClient
from npu_resolver_client.wire import NotSendableError, pb, request_to_proto
from tests._server import grpc_server, grpc_target  # noqa: F401
from tests.test_cli import CLI, run

LONE = "\ud800"
BAD_CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    ("path option", {"debug_dir": f"/job/{LONE}"}, "debug_dir"),
    (
        "free string option",
        {"enable_scope_fusion_passes": f"Pass{LONE}"},
        "enable_scope_fusion_passes",
    ),
    ("choice option", {"jit_compile": LONE}, "jit_compile"),
    ("object value", {"distribute": {"a": [LONE]}}, "distribute"),
    ("object key", {"dump_config": {LONE: 1}}, "dump_config"),
]


def _sendable(answer: dict[str, Any]) -> None:
    """The answer can be written as UTF-8 JSON and so travels on the wire."""
    json.dumps(answer, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(("name", "config", "option"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_lone_surrogate_in_a_value_is_invalid_value_on_its_option(
    name: str, config: dict[str, Any], option: str
) -> None:
    answer = resolve(ResolveRequest("atlas-a2", {**config, "hccl_timeout": 600}))
    assert [(d.code, d.option) for d in answer.errors] == [(Code.INVALID_VALUE, option)]
    assert "surrogate" in answer.errors[0].message
    assert answer.options["hccl_timeout"] == 600  # the rest of the config is still resolved
    _sendable(answer.to_json())


def test_a_lone_surrogate_in_an_option_name_is_echoed_escaped() -> None:
    answer = resolve(ResolveRequest("atlas-a2", {f"x{LONE}": 1}))
    assert [(d.code, d.option) for d in answer.errors] == [(Code.UNKNOWN_OPTION, "x\\ud800")]
    _sendable(answer.to_json())


def _unset(env: dict[str, str], var: str) -> dict[str, str]:
    return {name: text for name, text in env.items() if name != var}


@pytest.mark.parametrize(("var", "rule"), sorted(ENV_VAR_RULES.items()))
def test_a_named_variable_that_is_not_text_is_an_error_and_counts_as_unset(
    var: str, rule: str
) -> None:
    """os.environ gives bytes that are not UTF-8 as lone surrogates: env=dict(os.environ) in
    process must not put them in an answer's paths, where no client can read them back."""
    env = {
        "ASCEND_WORK_PATH": "/job/work",
        "HOME": "/home/user",
        "HCCL_EXEC_TIMEOUT": "600",
        var: os.fsdecode(b"/job/\xff"),
    }
    request = ResolveRequest("atlas-a2", {"op_compiler_cache_mode": "enable"}, env=env)
    answer = resolve(request)
    assert [(d.code, d.option, d.rule) for d in answer.errors] == [
        (Code.INVALID_VALUE, f"env.{var}", rule)
    ]
    assert rule in RULES
    assert "/job/\\udcff" in answer.errors[0].message
    unset = resolve(ResolveRequest("atlas-a2", request.config, env=_unset(env, var)))
    assert (answer.options, answer.paths) == (unset.options, unset.paths)
    assert answer.fingerprint == unset.fingerprint
    _sendable(answer.to_json())


def test_a_variable_no_rule_reads_is_not_looked_at_whatever_its_text() -> None:
    env = {"LS_COLORS": os.fsdecode(b"\xff\xfe"), "HOME": "/home/user"}
    answer = resolve(ResolveRequest("atlas-a2", env=env))
    assert answer.ok and not answer.diagnostics
    assert answer.paths["op_cache_dir"] == "/home/user/atc_data"


def test_a_workdir_that_is_not_text_is_an_error_and_the_paths_keep_the_placeholder() -> None:
    answer = resolve(ResolveRequest("atlas-a2", workdir=os.fsdecode(b"/job/\xff")))
    assert [(d.code, d.option) for d in answer.errors] == [(Code.INVALID_VALUE, "workdir")]
    assert answer.paths["debug_dir"] == "<workdir>"
    _sendable(answer.to_json())


def test_a_long_product_name_is_cut_short_in_the_message() -> None:
    answer = resolve(ResolveRequest("x" * 5000))
    assert answer.errors[0].code is Code.UNKNOWN_PRODUCT
    assert len(answer.errors[0].message) < 200


def _raw(target: str, method: str, payload: bytes) -> bytes:
    with grpc.insecure_channel(target) as channel:
        reply: bytes = channel.unary_unary(f"/npu.resolver.v1.Resolver/{method}")(
            payload, timeout=10
        )
    return reply


def test_surrogate_escapes_in_config_json_get_a_report_not_internal(
    grpc_target: str,  # noqa: F811
) -> None:
    text = '{"debug_dir":"\\ud800","\\udc00":1,"distribute":{"a":"\\ud800"},"hccl_timeout":600}'
    request = pb.ResolveRequest(product="atlas-a2", config_json=text, validate_only=True)
    reply = pb.ResolveResponse.FromString(_raw(grpc_target, "Resolve", request.SerializeToString()))
    assert sorted((d.code, d.option) for d in reply.diagnostics) == [
        ("INVALID_VALUE", "debug_dir"),
        ("INVALID_VALUE", "distribute"),
        ("UNKNOWN_OPTION", "\\udc00"),
    ]
    assert reply.options["hccl_timeout"] == 600


def test_one_bad_batch_item_does_not_lose_the_others(grpc_target: str) -> None:  # noqa: F811
    good = pb.ResolveRequest(product="atlas-a2", config_json='{"hccl_timeout":600}')
    bad = pb.ResolveRequest(product="atlas-a2", config_json='{"debug_dir":"\\ud800"}')
    batch = pb.ResolveBatchRequest(requests=[good, bad, good])
    reply = pb.ResolveBatchResponse.FromString(
        _raw(grpc_target, "ResolveBatch", batch.SerializeToString())
    )
    kinds = [item.WhichOneof("result") for item in reply.results]
    assert kinds == ["response", "status", "response"]
    assert reply.results[1].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


_UNREADABLE_ITEM: bytes = b"\x0a\x02\xff\xfe"  # a ResolveRequest whose product is not UTF-8


@pytest.mark.parametrize(
    "extra",
    [b"", b"\x78\x01", b"\x12\x01x"],
    ids=["items only", "an unknown varint field", "an unknown string field"],
)
def test_an_unreadable_batch_item_fails_alone_whatever_other_fields_the_batch_has(
    grpc_target: str,  # noqa: F811
    extra: bytes,
) -> None:
    """A newer client may add batch-level fields: one item the decoder cannot read still fails
    alone beside them, as the proto promises."""
    good = pb.ResolveRequest(product="atlas-a2", validate_only=True).SerializeToString()
    batch = (
        pb.ResolveBatchRequest(requests=[pb.ResolveRequest.FromString(good)]).SerializeToString()
        + b"\x0a"
        + bytes((len(_UNREADABLE_ITEM),))
        + _UNREADABLE_ITEM
        + extra
    )
    reply = pb.ResolveBatchResponse.FromString(_raw(grpc_target, "ResolveBatch", batch))
    assert [item.WhichOneof("result") for item in reply.results] == ["response", "status"]
    assert reply.results[1].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_a_batch_protobuf_calls_corrupt_is_refused_as_a_unary_call_is(
    grpc_target: str,  # noqa: F811
) -> None:
    """A key written as a 6-byte varint (over-long: keys are 32-bit) is corrupt to protobuf's
    parser; the walk that cuts a batch into items refuses it too, rather than answer it."""
    item = pb.ResolveRequest(product="atlas-a2", validate_only=True).SerializeToString()
    batch = b"\x8a\x80\x80\x80\x80\x00" + bytes((len(item),)) + item + _UNREADABLE_ITEM
    with pytest.raises(grpc.RpcError) as caught:
        _raw(grpc_target, "ResolveBatch", batch)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_the_client_batch_takes_any_iterable_of_requests(grpc_target: str) -> None:  # noqa: F811
    """A generator is read once: every answer comes back, paired with its request."""
    from npu_resolver_client import AsyncResolverClient, ResolverClient

    requests = [ResolveRequest("atlas-a2", {"hccl_timeout": 600 + i}) for i in range(3)]
    with ResolverClient(grpc_target) as client:
        results = client.resolve_batch(r for r in requests)
    assert [r.options["hccl_timeout"] for r in results] == [600, 601, 602]  # type: ignore[union-attr]

    async def in_async() -> list[Any]:
        async with AsyncResolverClient(grpc_target) as client:
            return await client.resolve_batch(iter(requests))

    assert len(asyncio.run(in_async())) == 3


def test_a_key_written_twice_in_config_json_is_refused_naming_it(
    grpc_target: str,  # noqa: F811
) -> None:
    text = '{"hccl_timeout":"abc","hccl_timeout":600}'
    request = pb.ResolveRequest(product="atlas-a2", config_json=text, validate_only=True)
    reply = pb.ResolveResponse.FromString(_raw(grpc_target, "Resolve", request.SerializeToString()))
    assert [(d.code, d.option) for d in reply.diagnostics] == [("INVALID_VALUE", "config")]
    assert "'hccl_timeout' appears twice" in reply.diagnostics[0].message


def test_cli_refuses_a_config_file_naming_a_key_twice(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text('{"hccl_timeout": 600, "hccl_timeout": 900}', encoding="utf-8")
    proc = run("resolve", "--product", "atlas-a2", "--config", str(config))
    assert proc.returncode == 2
    assert "'hccl_timeout' appears twice" in proc.stderr


def test_cli_reports_surrogate_escapes_in_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text('{"debug_dir": "\\ud800"}', encoding="utf-8")
    proc = run("resolve", "--product", "atlas-a2", "--config", str(config), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["diagnostics"][0]["option"] == "debug_dir"


def _cli_bytes(
    *args: str | bytes, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_cli_refuses_env_bytes_that_are_not_utf8() -> None:
    proc = _cli_bytes("resolve", "--product", "atlas-a2", b"--env", b"ASCEND_WORK_PATH=/job/\xff")
    assert proc.returncode == 2
    assert b"ASCEND_WORK_PATH" in proc.stderr and b"not valid UTF-8" in proc.stderr


def test_cli_text_arguments_are_read_as_utf8_whatever_the_locale() -> None:
    """Under LC_ALL=C (Python then decodes argv as ASCII) the UTF-8 bytes of '/数据' were
    refused as 'not valid UTF-8', and --format env wrote back what the locale had read: the
    exported variable is now the very bytes given, in every locale."""
    folder = "/数据/dump".encode()
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    proc = _cli_bytes(
        "resolve",
        "--product",
        "atlas-a2",
        b"--env",
        b"NPU_COLLECT_PATH=" + folder,
        b"--set",
        "debug_dir=/数据".encode(),
        "--format",
        "env",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"export NPU_COLLECT_PATH='" + folder + b"'\n"  # shell-quoted
    as_json = _cli_bytes(
        "resolve",
        "--product",
        "atlas-a2",
        b"--set",
        "debug_dir=/数据".encode(),
        "--format",
        "json",
        env=env,
    )
    assert json.loads(as_json.stdout)["options"]["debug_dir"] == "/数据"


def test_cli_attaches_a_file_whose_name_is_not_utf8(tmp_path: Path) -> None:
    """Only an --attach option's name is text for the answer; its file's name is the system's
    to open (--config opened such a name, --attach refused it as not UTF-8)."""
    named = os.fsencode(tmp_path) + b"/debug\xff.cfg"
    with open(named, "w", encoding="utf-8") as file:
        file.write("op_debug_config=ccec_g\n")
    proc = _cli_bytes(
        "resolve",
        "--product",
        "atlas-a2",
        "--set",
        "op_debug_config=/job/debug.cfg",
        b"--attach",
        b"op_debug_config=" + named,
        "--format",
        "json",
    )
    assert proc.returncode in (0, 1), proc.stderr
    notes = [d["code"] for d in json.loads(proc.stdout)["diagnostics"]]
    assert "NOT_CHECKED" not in notes  # the file was read
    missing = _cli_bytes(
        "resolve", "--product", "atlas-a2", "--set", "op_debug_config=/job/debug.cfg",
        b"--attach", b"op_debug_config=" + named + b".gone",
    )  # fmt: skip
    assert missing.returncode == 2
    assert b"debug\\xff.cfg.gone: No such file" in missing.stderr, missing.stderr  # the byte


def test_cli_ctrl_c_says_interrupted_and_ends_by_the_signal() -> None:
    """Ctrl-C while the CLI waits (here on standard input) ended in a 35-line traceback. The
    command still ends by SIGINT, as Python does, so that a shell script running it stops
    (an exit status of 130 would tell bash the command handled the interrupt)."""
    import signal
    import time

    proc = subprocess.Popen(
        [*CLI, "resolve", "--product", "atlas-a2", "--config", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    time.sleep(2.0)  # past the imports, waiting on stdin
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGINT, err
    assert err == b"npu-resolve: interrupted\n" and out == b""


def test_long_caller_strings_are_not_kept_in_memo_tables() -> None:
    """Memo tables hold at most 4,096 entries; megabyte strings in them would pin gigabytes."""
    from npu_resolver import _fingerprint, _paths, _pipeline

    def request(text: str, timeout: str) -> ResolveRequest:
        config = {"debug_dir": text, "hccl_timeout": timeout}
        return ResolveRequest("atlas-a2", config, env={"ASCEND_WORK_PATH": text}, workdir=text)

    resolve(request("/job", "600 "))  # the same shape with short strings: its entries are kept
    tables = (_paths._MEMO, _fingerprint._FRAGMENTS, _pipeline._PROVENANCE)
    before = [len(table) for table in tables]
    for i in range(20):
        long = f"/job/{i}/" + "d" * 60_000  # within MAX_TEXT_VALUE, far past the memo bound
        answer = resolve(request(long, "600" + " " * (5000 + i)))
        assert answer.ok and answer.paths["debug_dir"] == long
    assert [len(table) for table in tables] == before


def test_the_client_sends_a_config_surrogate_escaped_and_gets_the_in_process_report(
    grpc_target: str,  # noqa: F811
) -> None:
    from npu_resolver_client import ResolveError, ResolverClient

    request = ResolveRequest("atlas-a2", {"debug_dir": f"/a{LONE}", "hccl_timeout": 600})
    local = resolve(request)
    with ResolverClient(grpc_target) as client, pytest.raises(ResolveError) as info:
        client.resolve_request(request)
    assert info.value.resolution is not None
    assert [(d.code, d.option) for d in info.value.resolution.errors] == [
        (d.code, d.option) for d in local.errors
    ]


@pytest.mark.parametrize(
    "request_",
    [
        ResolveRequest(f"atlas-a2{LONE}"),
        ResolveRequest("atlas-a2", profile=LONE),
        ResolveRequest("atlas-a2", env={"ASCEND_WORK_PATH": f"/w{LONE}"}),
        ResolveRequest("atlas-a2", workdir=f"/w{LONE}"),
    ],
    ids=["product", "profile", "env", "workdir"],
)
def test_the_client_refuses_other_fields_that_are_not_text_naming_them(
    grpc_target: str,  # noqa: F811
    request_: ResolveRequest,
) -> None:
    """Protobuf cannot carry them: a clear client error, not a UnicodeEncodeError."""
    for details in _refused_by_every_call(grpc_target, request_):
        assert "surrogate" in details


def _refused_by_every_call(target: str, request_: ResolveRequest) -> list[str]:
    """The details of the INVALID_ARGUMENT each blocking call (resolve, batch, diff) raises
    for `request_` without sending it."""
    from npu_resolver_client import ResolverCallError, ResolverClient

    said = []
    batch_tail = "; the batch was not sent (fix or leave out that item)"
    with ResolverClient(target) as client:
        for call in (
            lambda: client.resolve_request(request_),
            lambda: client.resolve_batch([ResolveRequest("atlas-a2"), request_]),
            lambda: client.diff(request_, ["atlas-a2", "atlas-a3"]),
        ):
            with pytest.raises(ResolverCallError) as info:
                call()
            assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
            details = info.value.details
            if details.startswith("requests["):  # a batch names the item it could not send
                assert details.startswith("requests[1]: ") and details.endswith(batch_tail)
                details = details.removeprefix("requests[1]: ")[: -len(batch_tail)] + "; not sent"
            said.append(details)
    assert not said[0].startswith("requests[") and said[1] == said[0]
    return said


@pytest.mark.parametrize(
    "value",
    [b"x", {1, 2}, object(), {"k": [b"x"]}, {"k": (1, 2)}, {1: "a"}, [None, {2: 3}]],
    ids=repr,
)
def test_the_client_refuses_a_config_value_json_cannot_carry_naming_its_option(
    grpc_target: str,  # noqa: F811
    value: Any,
) -> None:
    """In process such a value is an INVALID_VALUE on its option; the wire cannot carry it,
    so every client call refuses it before sending, naming the option, never a TypeError."""
    from npu_resolver_client import AsyncResolverClient, ResolverCallError

    request_ = ResolveRequest("atlas-a2", {"hccl_timeout": 600, "dump_config": value})
    assert [d.option for d in resolve(request_).errors] == ["dump_config"]

    async def asynchronous() -> str:
        async with AsyncResolverClient(grpc_target) as client:
            with pytest.raises(ResolverCallError) as info:
                await client.resolve_request(request_)
        assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
        return info.value.details

    said = [*_refused_by_every_call(grpc_target, request_), asyncio.run(asynchronous())]
    for details in said:
        assert details.startswith("config.dump_config holds ")
        assert "which JSON cannot carry" in details and details.endswith("; not sent")
    with pytest.raises(NotSendableError, match=r"config\.dump_config holds "):
        request_to_proto(request_, as_struct=True)  # the Struct form refuses it alike


def test_the_client_refuses_a_request_that_is_not_a_resolve_request_with_a_type_error(
    grpc_target: str,  # noqa: F811
) -> None:
    from npu_resolver_client import ResolverClient

    fields: Any = {"product": "atlas-a2", "config": {"hccl_timeout": 600}}
    with ResolverClient(grpc_target) as client:
        for call in (
            lambda: client.resolve_request(fields),
            lambda: client.diff(fields, ["atlas-a2", "atlas-a3"]),
        ):
            with pytest.raises(
                TypeError, match=r"expected an npu_resolver\.ResolveRequest, got dict"
            ):
                call()


@pytest.mark.parametrize(
    ("bad", "kind"), [({"product": "atlas-a2"}, "a dict"), ("atlas-a2", "a str")]
)
def test_a_batch_item_that_is_not_a_resolve_request_is_named_by_its_index(
    grpc_target: str,  # noqa: F811
    bad: Any,
    kind: str,
) -> None:
    """A batch of many: the TypeError says which item, from both clients alike."""
    from npu_resolver_client import AsyncResolverClient, ResolverClient

    batch: Any = [ResolveRequest("atlas-a2")] * 3 + [bad, ResolveRequest("atlas-a3")]
    said = rf"^requests\[3\] is {kind}, not an npu_resolver\.ResolveRequest \(build one: "
    with ResolverClient(grpc_target) as client, pytest.raises(TypeError, match=said):
        client.resolve_batch(batch)

    async def asynchronous() -> None:
        async with AsyncResolverClient(grpc_target) as client:
            await client.resolve_batch(batch)

    with pytest.raises(TypeError, match=said):
        asyncio.run(asynchronous())


@pytest.mark.parametrize("option", ["enable_scope_fusion_passes", "aoe_mode"])
def test_a_text_option_given_an_integer_json_cannot_carry_is_refused_as_in_process(
    grpc_target: str,  # noqa: F811
    option: str,
) -> None:
    """Read as text it would be taken, but the answer repeats what was asked (provenance
    `requested`), and past ±2^53 no JSON or Struct number carries it exactly: an INVALID_VALUE,
    the same in process and through a server. Within the bound it is read as text."""
    from npu_resolver_client import ResolveError, ResolverClient

    huge = ResolveRequest("atlas-350", {option: 2**53 + 1})
    local = resolve(huge)
    assert [(d.code, d.option) for d in local.errors] == [(Code.INVALID_VALUE, option)]
    assert f"write '{2**53 + 1}'" in local.errors[0].message
    with ResolverClient(grpc_target) as client:
        with pytest.raises(ResolveError) as info:
            client.resolve_request(huge)
        assert info.value.resolution is not None
        assert info.value.resolution.to_json() == local.to_json()
        if option != "aoe_mode":  # a choice option refuses any other text anyway
            within = ResolveRequest("atlas-350", {option: 2**53})
            assert client.resolve_request(within).to_json() == resolve(within).to_json()


PAST_INT_LIMIT = "1" * 4_301
"""More digits than int() converts from text (4,300 by default)."""
DIGIT_RUNS: list[tuple[str, dict[str, Any], bool]] = [
    ("R-ACN-1 cube", {"aicore_num": f"{PAST_INT_LIMIT}|1"}, True),
    ("R-ACN-1 zeros", {"aicore_num": "0" * 4_300 + "|1"}, False),
    ("R-ACN-1 padded", {"aicore_num": "0" * 4_300 + "2|4"}, True),
    ("R-SMP-1", {"stream_max_parallel_num": f"AIcoreEngine:{PAST_INT_LIMIT}"}, True),
    ("R-SMP-1 zero", {"stream_max_parallel_num": "AIcoreEngine:00"}, False),
    (
        "R-DEP-8",
        {"dynamic_input": True, "dynamic_inputs_shape_range": f"data:[1~{PAST_INT_LIMIT}]"},
        True,
    ),
    (
        "R-DEP-8 empty",
        {"dynamic_input": True, "dynamic_inputs_shape_range": f"data:[{PAST_INT_LIMIT}~9]"},
        False,
    ),
    ("R-DEP-8 padded", {"dynamic_input": True, "dynamic_inputs_shape_range": "data:[09~10]"}, True),
    ("R-HCT-1 padded", {"hccl_timeout": "0" * 4_300 + "1"}, True),  # read as 1, NORMALIZED
    ("R-SDI-1 padded", {"session_device_id": "+" + "0" * 4_300 + "3"}, True),
]


@pytest.mark.parametrize(
    ("config", "valid"), [c[1:] for c in DIGIT_RUNS], ids=[c[0] for c in DIGIT_RUNS]
)
def test_digit_runs_past_int_limit_are_judged_as_numbers_in_process_and_on_the_wire(
    grpc_target: str,  # noqa: F811
    config: dict[str, Any],
    valid: bool,
) -> None:
    """A grammar's counts and bounds are compared as the numbers they write, however many
    digits: never a ValueError from int(), which a server answered as INTERNAL."""
    local = resolve(ResolveRequest("atlas-a2", config))
    assert local.ok is valid
    assert all(d.code is Code.INVALID_VALUE and d.option in config for d in local.errors)
    text = json.dumps(config)
    request = pb.ResolveRequest(product="atlas-a2", config_json=text, validate_only=True)
    reply = pb.ResolveResponse.FromString(_raw(grpc_target, "Resolve", request.SerializeToString()))
    assert reply.ok is valid and reply.fingerprint == local.fingerprint


def test_r_hct_2_r_sdi_1_a_variable_of_zeros_past_int_limit_is_its_number_on_the_wire(
    grpc_target: str,  # noqa: F811
) -> None:
    """HCCL_EXEC_TIMEOUT and ASCEND_DEVICE_ID of 4,300 zeros then 1 are 1 (int() refused the
    text, and a batch holding such an item failed whole as INTERNAL)."""
    padded = "0" * 4_300 + "1"
    env = {"HCCL_EXEC_TIMEOUT": padded, "ASCEND_DEVICE_ID": padded}
    local = resolve(ResolveRequest("atlas-a2", env=env))
    assert local.ok and local.options["hccl_timeout"] == local.options["session_device_id"] == 1
    items = [ResolveRequest("atlas-a2", env=env), ResolveRequest("atlas-a3")]
    with ResolverClient(grpc_target) as client:
        answers = client.resolve_batch(items)
    assert [a if isinstance(a, ResolveFailure) else a.to_json() for a in answers] == [
        resolve(r).to_json() for r in items
    ]


def test_a_policy_value_past_int_limit_in_a_grammar_loads_as_its_number_says() -> None:
    from npu_resolver import PolicyError, parse_policy

    good = parse_policy(
        f'[profiles.default.products.atlas-a2.defaults]\naicore_num = "{PAST_INT_LIMIT}|1"\n'
    )
    assert good.version
    with pytest.raises(PolicyError, match="aicore_num"):
        parse_policy(
            f'[profiles.default.products.atlas-a2.defaults]\naicore_num = "{"0" * 4_300}|1"\n'
        )


@pytest.mark.parametrize(
    ("option", "text"),
    [
        ("dynamic_inputs_shape_range", "data:[" + "1," * 2_000_000 + "x]"),
        ("debug_dir", "/" + "\uf900" * 1_330_000 + "!"),
        ("enable_scope_fusion_passes", "P," * 40_000),
    ],
    ids=["grammar", "path", "list"],
)
def test_a_string_value_past_the_length_bound_is_refused_on_its_option(
    option: str, text: str
) -> None:
    """Read before any grammar, so that a 4 MB value cannot hold a server for seconds."""
    from npu_resolver._model import MAX_TEXT_VALUE

    answer = resolve(ResolveRequest("atlas-a2", {option: text, "dynamic_input": True}))
    [error] = answer.errors
    assert (error.option, error.code) == (option, Code.INVALID_VALUE)
    assert error.rule and f"at most {MAX_TEXT_VALUE:,} characters" in error.message
    assert f"it has {len(text):,}" in error.message


def test_a_path_at_the_length_bound_is_taken_and_one_longer_refused() -> None:
    from npu_resolver._model import MAX_TEXT_VALUE

    path = "/" + "d" * (MAX_TEXT_VALUE - 1)
    answer = resolve(ResolveRequest("atlas-a2", {"debug_dir": path}))
    assert answer.ok and answer.options["debug_dir"] == path
    longer = resolve(ResolveRequest("atlas-a2", {"debug_dir": path + "d"}))
    assert [(d.option, d.code) for d in longer.errors] == [("debug_dir", Code.INVALID_VALUE)]


def test_a_choice_given_a_long_text_is_told_its_choices() -> None:
    """The length bound is for free text and paths; a choice's refusal names the choices."""
    from npu_resolver._model import MAX_TEXT_VALUE

    answer = resolve(ResolveRequest("atlas-a2", {"jit_compile": "x" * (MAX_TEXT_VALUE + 1)}))
    [error] = answer.errors
    assert error.code is Code.INVALID_VALUE and "is not one of 'auto'" in error.message


@pytest.mark.parametrize(
    ("option", "given", "said"),
    [
        ("precision_mode_v2", 5, "precision_mode_v2 5 is not one of"),
        ("ac_parallel_enable", 2, "ac_parallel_enable 2 is not one of '0', '1'"),
        ("precision_mode_v2", "5", "precision_mode_v2 '5' is not one of"),
        ("graph_run_mode", "3", "graph_run_mode '3' is not one of 0, 1"),
    ],
)
def test_r_pm2_1_a_refused_choice_is_said_as_the_caller_wrote_it(
    option: str, given: JSON, said: str
) -> None:
    """A number given for a text choice was read as text before it was refused; the message
    shows what the request held (5), not the text it was read as ('5')."""
    [error] = resolve(ResolveRequest("atlas-a2", {option: given})).errors
    assert error.code is Code.INVALID_VALUE and error.option == option
    assert error.message.startswith(said), error.message


def test_r_pm2_3_r_pm_4_a_suggested_value_is_one_this_product_takes() -> None:
    """A misspelt choice is told the closest value only when this product takes it in some
    mode: 'mixed_hif' was told 'mixed_hif8', which no product supports today (R-PM2-3), and
    'mixed_bfloat' on atlas-training 'mixed_bfloat16', which it lacks (R-PM2-2)."""
    from npu_resolver import CATALOG, PRODUCTS

    told = 0
    for product in PRODUCTS:
        for option in CATALOG.options:
            for choice in option.choices:
                if (
                    not isinstance(choice, str)
                    or len(choice) < 4
                    or option.name == "graph_run_mode"
                ):
                    continue
                [error] = resolve(ResolveRequest(product.id, {option.name: choice[:-1]})).errors
                if not error.suggestion:
                    continue
                told += 1
                taken = [
                    resolve(
                        ResolveRequest(
                            product.id, {option.name: error.suggestion, "graph_run_mode": mode}
                        )
                    )
                    for mode in (0, 1)
                ]
                refused = [
                    [d for d in answer.errors if d.code is Code.UNSUPPORTED_VALUE]
                    for answer in taken
                ]
                assert not all(refused), (product.id, option.name, error.suggestion)
    assert told > 100  # most misspellings are still told a value
    spelt = resolve(ResolveRequest("atlas-350", {"precision_mode_v2": "mixed_hif"}))
    assert [(d.code, d.suggestion) for d in spelt.errors] == [(Code.INVALID_VALUE, "")]


@pytest.mark.parametrize("padded", ["00000000000000000000500", "0" * 5_000 + "500", "+500"])
def test_r_occ_4_a_zero_padded_cache_size_is_its_number_as_an_options_is(padded: str) -> None:
    """HCCL_EXEC_TIMEOUT of leading zeros is its number; a cache size variable of them was
    refused as not an integer (18 digits at most, zeros counted)."""
    answer = resolve(ResolveRequest("atlas-a2", env={"ASCEND_MAX_OP_CACHE_SIZE": padded}))
    assert answer.ok and answer.diagnostics == ()


def test_cli_main_takes_a_callers_arguments_as_the_text_they_are(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only sys.argv is read back as the UTF-8 its bytes are: a list given to main() holds
    text already (in a Latin-1 locale, here made by the encoder os.fsencode would use,
    '/café' given to main() became '/caf\\xe9' and was refused as not UTF-8)."""
    from npu_resolver._cli import main

    monkeypatch.setattr(os, "fsencode", lambda text: text.encode("latin-1", "surrogateescape"))
    code = main(
        ["resolve", "--product", "atlas-a2", "--set", "debug_dir=/café", "--format", "json"]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["options"]["debug_dir"] == "/café"


def test_cli_main_in_process_returns_130_on_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the command (run()) ends its process by the signal: main() called by a host script
    or a test returns 130, and the caller's own SIGINT handler stays as it was."""
    import signal

    from npu_resolver import _cli

    def interrupted() -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(_cli, "build_parser", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    assert _cli.main(["resolve", "--product", "atlas-a2"]) == 130
    assert capsys.readouterr().err == "npu-resolve: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is handler
