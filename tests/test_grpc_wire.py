"""The wire format: generated code is current, and the proto3 JSON mapping is the CLI's JSON."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

import npu_resolver
from npu_resolver import ENV_VARS, ResolveRequest, parse_policy, resolve
from npu_resolver_client._convert import (
    LimitError,
    NotTextError,
    catalog_from_proto,
    catalog_to_proto,
    checked_struct_to_py,
    request_from_proto,
    request_to_proto,
    resolution_from_proto,
    resolution_to_proto,
    restore_callers_values,
)
from npu_resolver_client.wire import pb
from tests.conftest import golden_cases


def message_to_cli_json(message: Any) -> dict[str, Any]:
    """The proto3 JSON mapping (proto field names) of a response, enums by their bare names.

    For a ResolveResponse this equals `Resolution.to_json()` (numbers aside: JSON has one
    number type, and the mapping writes integral values as floats).
    """
    data = json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    return _strip_response(data) if isinstance(message, pb.ResolveResponse) else data


def _strip_response(data: dict[str, Any]) -> dict[str, Any]:
    # Only enum fields are touched: option values that happen to start with SOURCE_ stay.
    for entry in data.get("provenance", {}).values():
        entry["source"] = entry["source"].removeprefix("SOURCE_")
    for entry in data.get("diagnostics", []):
        entry["severity"] = entry["severity"].removeprefix("SEVERITY_")
    return data


ROOT = Path(__file__).resolve().parents[1]

POLICY = """
[profiles.default.defaults]
op_debug_level = 0

[profiles.default.locked]
enable_exception_dump = 1
"""

VARIED: list[tuple[str, ResolveRequest]] = [
    ("empty", ResolveRequest(product="atlas-a2")),
    ("alias", ResolveRequest(product="Ascend910B3", workdir="/job")),
    ("out_of_range", ResolveRequest(product="atlas-training", config={"hccl_timeout": 17341})),
    ("rounded", ResolveRequest(product="atlas-training", config={"hccl_timeout": 600})),
    ("normalized", ResolveRequest(product="atlas-a2", config={"hccl_timeout": "600"})),
    ("unknown_product", ResolveRequest(product="atlas-9000")),
    ("unknown_option", ResolveRequest(product="atlas-a2", config={"precison_mode": "x"})),
    ("unknown_profile", ResolveRequest(product="atlas-a2", profile="nope")),
    ("env", ResolveRequest(product="atlas-a2", env={"HCCL_EXEC_TIMEOUT": "900", "X": "y"})),
    ("bad_env", ResolveRequest(product="atlas-a2", env={"HCCL_EXEC_TIMEOUT": "soon"})),
    ("inference", ResolveRequest(product="atlas-300i-duo", config={"graph_run_mode": 0})),
    ("strict", ResolveRequest(product="atlas-a2", config={"input_batch_cpy": True}, strict=True)),
    (
        "nested",
        ResolveRequest(
            product="atlas-a2",
            config={"hccl_timeout": 1.5, "op_debug_config": {"a": [1, None, {"b": False}]}},
        ),
    ),
    ("null", ResolveRequest(product="atlas-a2", config={"precision_mode": None})),
]


def _norm(data: Any) -> Any:
    """JSON with integral floats as ints, keeping bools apart (True != 1 here)."""
    if isinstance(data, dict):
        return {k: _norm(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_norm(v) for v in data]
    if isinstance(data, float) and data.is_integer():
        return int(data)
    return data


def _dump(data: Any) -> str:
    return json.dumps(_norm(data), sort_keys=True)


def _all_results() -> list[tuple[str, ResolveRequest, npu_resolver.Resolution]]:
    policy = parse_policy(POLICY, "test.toml")
    out = [(name, req, resolve(req)) for name, req in VARIED]
    out += [(f"{name}+policy", req, resolve(req, policy=policy)) for name, req in VARIED[:6]]
    for case in golden_cases():
        pol = parse_policy(case["policy"], "golden.toml") if case.get("policy") else None
        req = ResolveRequest.from_json(case["request"])
        out.append((case["name"], req, resolve(req, policy=pol)))
    return out


RESULTS = _all_results()


def test_varied_results_cover_every_source_and_severity() -> None:
    sources = {p.source for _, _, r in RESULTS for p in r.provenance.values()}
    severities = {d.severity for _, _, r in RESULTS for d in r.diagnostics}
    assert severities == set(npu_resolver.Severity)
    assert {
        npu_resolver.Source.USER,
        npu_resolver.Source.ENV,
        npu_resolver.Source.DERIVED,
    } <= sources
    assert any(p.has_requested for _, _, r in RESULTS for p in r.provenance.values())
    assert any(not r.ok for _, _, r in RESULTS) and any(r.ok for _, _, r in RESULTS)


IDS = [n[:60] for n, _, _ in RESULTS]


@pytest.mark.parametrize(("name", "request_", "result"), RESULTS, ids=IDS)
def test_json_mapping_equals_cli_json(
    name: str, request_: ResolveRequest, result: npu_resolver.Resolution
) -> None:
    message = resolution_to_proto(result)
    wire = pb.ResolveResponse.FromString(message.SerializeToString())
    assert _dump(message_to_cli_json(wire)) == _dump(result.to_json())


def test_a_diffs_json_mapping_equals_the_cli_json() -> None:
    """contract.md, gRPC: "the JSON mapping with proto field names equals the CLI JSON" holds
    for a diff too (`diff --format json` prints DiffResult.to_json()): rows with their cells
    (none for a product lacking the option) and `same`, an unknown product's column, and
    objects equal as JSON in another key order counted the same."""
    from npu_resolver import diff
    from npu_resolver_client._convert import diff_to_proto

    policy = parse_policy(
        "[profiles.default.products.atlas-a2.defaults]\ndump_config = {a = 1, b = 2}\n"
        "[profiles.default.products.atlas-a3.defaults]\ndump_config = {b = 2, a = 1}\n"
    )
    request = ResolveRequest("atlas-a2", {"hccl_timeout": 600}, env={"AOE_MODE": "2"})
    pair = {row.option: row for row in diff(request, ["atlas-a2", "atlas-a3"], policy=policy).rows}
    assert pair["dump_config"].same is True and pair["input_batch_cpy"].same is True
    result = diff(request, ["atlas-a2", "atlas-a3", "atlas-training", "atlas-9"], policy=policy)
    assert {row.option: row for row in result.rows}["hccl_timeout"].same is False
    wire = pb.DiffResponse.FromString(diff_to_proto(result).SerializeToString())
    data = json_format.MessageToDict(
        wire, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    for row in data["rows"]:
        for cell in row["cells"].values():
            cell["source"] = cell["source"].removeprefix("SOURCE_")
    data["results"] = {pid: _strip_response(res) for pid, res in data["results"].items()}
    assert _dump(data) == _dump(result.to_json())


@pytest.mark.parametrize(("name", "request_", "result"), RESULTS, ids=IDS)
def test_round_trip_is_exact(
    name: str, request_: ResolveRequest, result: npu_resolver.Resolution
) -> None:
    wire = pb.ResolveResponse.FromString(resolution_to_proto(result).SerializeToString())
    back = restore_callers_values(resolution_from_proto(wire), request_)
    # Exact: the same JSON text, so the same Python types (an int stays an int, a float a
    # float, a bool a bool) and the same order of keys.
    assert json.dumps(back.to_json()) == json.dumps(result.to_json())
    assert back == result


def test_enum_names_follow_buf_and_core() -> None:
    assert pb.Severity.Name(pb.SEVERITY_UNSPECIFIED) == "SEVERITY_UNSPECIFIED"
    assert pb.Source.Name(pb.SOURCE_UNSPECIFIED) == "SOURCE_UNSPECIFIED"
    assert int(pb.SEVERITY_UNSPECIFIED) == int(pb.SOURCE_UNSPECIFIED) == 0
    assert {n.removeprefix("SEVERITY_") for n in pb.Severity.keys()[1:]} == {
        s.value for s in npu_resolver.Severity
    }
    assert {n.removeprefix("SOURCE_") for n in pb.Source.keys()[1:]} == {
        s.value for s in npu_resolver.Source
    }


def test_requested_absent_unless_set() -> None:
    data = message_to_cli_json(resolution_to_proto(resolve(ResolveRequest(product="atlas-a2"))))
    assert all("requested" not in p for p in data["provenance"].values())


@pytest.mark.parametrize(("name", "request_"), VARIED, ids=[n for n, _ in VARIED])
def test_request_round_trip(name: str, request_: ResolveRequest) -> None:
    """Every field travels as given, but the env: only the variables the resolver reads."""
    wire = pb.ResolveRequest.FromString(request_to_proto(request_).SerializeToString())
    back = request_from_proto(wire, max_depth=32, max_keys=1000)
    request_ = dataclasses.replace(
        request_, env={k: v for k, v in request_.env.items() if k in ENV_VARS}
    )
    assert back == request_
    assert json.dumps(back.to_json(), sort_keys=True) == json.dumps(
        request_.to_json(), sort_keys=True
    )
    as_struct = request_to_proto(request_, as_struct=True).SerializeToString()
    back = request_from_proto(pb.ResolveRequest.FromString(as_struct), max_depth=32, max_keys=1000)
    assert json.dumps(back.to_json(), sort_keys=True) == _dump(request_.to_json())


def test_a_request_read_off_the_wire_is_what_the_checked_constructor_builds() -> None:
    """The server builds requests without the constructor's checks (the decoder has typed every
    field): the same fields, types and own mappings as the constructor would give."""
    wire = pb.ResolveRequest(
        product="atlas-a2",
        config_json='{"hccl_timeout": 600}',
        env={"HOME": "/home/u"},
        workdir="/w",
        profile="team",
        strict=True,
        validate_only=True,
        attachments={"fusion_switch_file": "{}"},
    )
    back = request_from_proto(wire, max_depth=8, max_keys=100)
    names = [f.name for f in dataclasses.fields(ResolveRequest)]
    checked = ResolveRequest(**{name: getattr(back, name) for name in names})
    assert back == checked
    assert repr(back) == repr(checked)
    assert [type(getattr(back, n)) for n in names] == [type(getattr(checked, n)) for n in names]
    wire.env["HOME"] = "/elsewhere"
    wire.attachments.clear()
    assert back.env == {"HOME": "/home/u"}
    assert back.attachments == {"fusion_switch_file": "{}"}


def test_config_json_keeps_integral_floats() -> None:
    request_ = ResolveRequest(product="atlas-a2", config={"hccl_timeout": 600.0})
    back = request_from_proto(request_to_proto(request_), max_depth=8, max_keys=100)
    assert type(back.config["hccl_timeout"]) is float


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "must be a JSON object"),
        ("{", "not valid JSON"),
        ('{"a": ' + "[" * 50 + "]" * 50 + "}", "nested deeper"),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nested deeper"),
        ("{" + ",".join(f'"k{i}": {i}' for i in range(200)) + "}", "more than 100 keys"),
    ],
)
def test_config_json_limits(text: str, message: str) -> None:
    wire = pb.ResolveRequest(product="atlas-a2", config_json=text)
    with pytest.raises(LimitError, match=message):
        request_from_proto(wire, max_depth=16, max_keys=100)


def test_config_and_config_json_are_exclusive() -> None:
    wire = pb.ResolveRequest(product="atlas-a2", config_json='{"a": 1}')
    wire.config["b"] = 1
    with pytest.raises(LimitError, match="not both"):
        request_from_proto(wire, max_depth=16, max_keys=100)


def test_struct_limits() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(20):
        node["a"] = {}
        node = node["a"]
    message = request_to_proto(
        ResolveRequest(product="atlas-a2", config={"x": deep}), as_struct=True
    )
    with pytest.raises(LimitError, match="nested deeper"):
        checked_struct_to_py(message.config, "config", max_depth=16, max_keys=1000)
    wide = request_to_proto(
        ResolveRequest(product="atlas-a2", config={"x": {str(i): i for i in range(2000)}}),
        as_struct=True,
    )
    with pytest.raises(LimitError, match="more than 1,000 keys"):
        checked_struct_to_py(wide.config, "config", max_depth=32, max_keys=1000)
    # NaN is left for the resolver, which refuses it on its option (as in process).
    nan = pb.ResolveRequest()
    nan.config["x"] = float("nan")
    value = checked_struct_to_py(nan.config, "config", max_depth=32, max_keys=1000)["x"]
    assert isinstance(value, float) and math.isnan(value)


def test_a_config_holding_nan_travels_as_json_text_and_reads_back() -> None:
    """NaN travels as Python's json writes it, so the server's resolver sees the same config
    (600.0 still a float beside it) and refuses the NaN on its option as in process."""
    config = {"dump_config": {"a": float("inf")}, "hccl_timeout": 600.0}
    message = request_to_proto(ResolveRequest(product="atlas-a2", config=config))
    assert message.config_json == '{"dump_config":{"a":Infinity},"hccl_timeout":600.0}'
    back = request_from_proto(message, max_depth=8, max_keys=100).config
    assert back["dump_config"] == {"a": math.inf} and type(back["hccl_timeout"]) is float


@pytest.mark.parametrize("product", [None, "atlas-a2"])
def test_catalog_mapping_equals_core_dict(product: str | None) -> None:
    data = npu_resolver.describe_catalog(product)
    message = pb.DescribeCatalogResponse.FromString(catalog_to_proto(data).SerializeToString())
    assert _dump(message_to_cli_json(message)) == _dump(data)
    assert _dump(catalog_from_proto(message)) == _dump(data)


def _gen_module() -> Any:
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_proto"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_current() -> None:
    stale = _gen_module().stale()
    assert not stale, f"generated code is stale; run `make proto` ({stale})"


def test_generated_code_imports_no_top_level_npu_package() -> None:
    folder = ROOT / "client" / "npu_resolver_client" / "_proto"
    for path in (*folder.rglob("*.py"), *folder.rglob("*.pyi")):
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(("import npu", "from npu ", "from npu.")):
                pytest.fail(f"{path.name}: {line}")


@pytest.mark.parametrize("number", [1e15, 2.0**53, 1e18, 1e19])
def test_struct_numbers_are_read_as_json_reads_them(number: float) -> None:
    """Whole doubles JSON carries exactly become ints; larger ones stay floats, so the core's
    ±2^53 bound never depends on which way a config travelled."""
    wire = pb.ResolveRequest(product="atlas-a2")
    wire.config.update({"memory_config": {"a": number}})
    decoded = request_from_proto(wire, max_depth=18, max_keys=100)
    value = decoded.config["memory_config"]["a"]
    assert value == number
    assert type(value) is (int if number <= 2**53 else float)
    over_json = ResolveRequest("atlas-a2", {"memory_config": {"a": number}})
    assert resolve(decoded).ok is resolve(over_json).ok is True


PACKAGES = {
    "npu_resolver": ROOT / "resolver" / "npu_resolver",
    "npu_resolver_client": ROOT / "client" / "npu_resolver_client",
    "npu_resolver_server": ROOT / "server" / "npu_resolver_server",
}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_package_uses_only_the_public_modules_of_the_others(package: str) -> None:
    """Each package reaches the others only through their public modules, so that a user who
    installs the client can rely on what it uses being as stable as what they use."""
    found = []
    for path in PACKAGES[package].rglob("*.py"):
        if "_proto" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top, *rest = name.split(".")
                if top in PACKAGES and top != package and any(p.startswith("_") for p in rest):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, found


def test_only_the_variables_the_resolver_reads_are_sent_and_the_answer_is_the_same() -> None:
    """A job's whole environment (`dict(os.environ)`) may be passed: variables no rule reads
    are not sent, even one that is not text (os.environ gives such bytes as lone surrogates),
    and the answer is the one in process; a read one that is not text is still refused."""
    job_env = {"PATH": "/usr/bin", "JOB_ID": "4711", "ODD": "b\udcff", "HCCL_EXEC_TIMEOUT": "900"}
    request_ = ResolveRequest(product="atlas-a2", env=job_env, workdir="/job")
    wire = request_to_proto(request_)
    assert dict(wire.env) == {"HCCL_EXEC_TIMEOUT": "900"}
    other_job = dataclasses.replace(request_, env={**job_env, "JOB_ID": "4712"})
    assert request_to_proto(other_job).SerializeToString() == wire.SerializeToString()
    back = request_from_proto(wire, max_depth=32, max_keys=1000)
    assert resolve(back) == resolve(request_)
    with pytest.raises(NotTextError, match=r"env\.HOME"):
        request_to_proto(dataclasses.replace(request_, env={**job_env, "HOME": "/h\udcff"}))


def test_the_client_exports_every_name_its_methods_take_and_give() -> None:
    """resolve_batch and diff take a ResolveRequest and answers are Resolutions: a client user
    imports them from the client, the core's own classes; every exported name resolves."""
    import npu_resolver
    import npu_resolver_client

    assert npu_resolver_client.ResolveRequest is npu_resolver.ResolveRequest
    assert npu_resolver_client.Resolution is npu_resolver.Resolution
    # And the types those hold or other methods give (diff, list_products), for annotations.
    for held in ("Diagnostic", "DiffResult", "Product", "Provenance"):
        assert getattr(npu_resolver_client, held) is getattr(npu_resolver, held), held
    for name in npu_resolver_client.__all__:
        assert getattr(npu_resolver_client, name) is not None, name
