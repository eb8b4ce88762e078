"""The CLI through a real subprocess: exit codes, formats, and the contract's examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from npu_resolver import MAX_OBJECT_DEPTH

CLI = [sys.executable, "-m", "npu_resolver._cli"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in {"HCCL_EXEC_TIMEOUT", "NPU_COLLECT_PATH"}
    }
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, input=stdin, timeout=60, check=False, env=env
    )


def resolve_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = run("resolve", "--format", "json", *args)
    return proc.returncode, json.loads(proc.stdout)


def test_r_hct_3_set_600_on_training_gives_544_user_rounded() -> None:
    code, out = resolve_json("--product", "atlas-training", "--set", "hccl_timeout=600")
    assert code == 0
    assert out["options"]["hccl_timeout"] == 544
    assert out["provenance"]["hccl_timeout"]["source"] == "USER"
    assert out["provenance"]["hccl_timeout"]["requested"] == 600
    rounded = [d for d in out["diagnostics"] if d["code"] == "ROUNDED"]
    assert rounded == [
        {
            "severity": "INFO",
            "code": "ROUNDED",
            "option": "hccl_timeout",
            "rule": "R-HCT-3",
            "message": rounded[0]["message"],
            "suggestion": "",
        }
    ]


def test_r_hct_4_env_600_gives_544_from_env() -> None:
    code, out = resolve_json("--product", "atlas-training", "--env", "HCCL_EXEC_TIMEOUT=600")
    assert code == 0
    assert out["options"]["hccl_timeout"] == 544
    assert out["provenance"]["hccl_timeout"]["source"] == "ENV"
    assert out["provenance"]["hccl_timeout"]["env_var"] == "HCCL_EXEC_TIMEOUT"


def test_r_ibc_1_input_batch_cpy_dropped_on_training() -> None:
    code, out = resolve_json("--product", "atlas-training", "--set", "input_batch_cpy=true")
    assert code == 0
    assert "input_batch_cpy" not in out["options"]
    assert [d["code"] for d in out["diagnostics"]] == ["DROPPED_UNSUPPORTED_PRODUCT"]


def test_r_exd_2_collect_path_forces_dump_and_path() -> None:
    code, out = resolve_json("--product", "atlas-a2", "--env", "NPU_COLLECT_PATH=/x")
    assert code == 0
    assert out["options"]["enable_exception_dump"] == 1
    assert "FORCED" in [d["code"] for d in out["diagnostics"]]
    assert out["paths"]["exception_dump_dir"] == "/x"


def test_json_keys_are_the_contracts() -> None:
    _, out = resolve_json("--product", "atlas-a2")
    assert set(out) == {
        "ok",
        "product",
        "options",
        "provenance",
        "diagnostics",
        "paths",
        "catalog_version",
        "policy_version",
        "fingerprint",
    }
    assert out["catalog_version"] == "900"


def test_errors_exit_1_and_still_print_the_report() -> None:
    code, out = resolve_json("--product", "atlas-training", "--set", "hccl_timeout=17341")
    assert code == 1
    assert out["ok"] is False
    assert out["diagnostics"][0]["code"] == "OUT_OF_RANGE"


def test_unknown_product_exits_1_with_suggestion() -> None:
    code, out = resolve_json("--product", "atlas-trainin")
    assert code == 1
    assert out["diagnostics"][0]["suggestion"] == "atlas-training"


@pytest.mark.parametrize(
    "args",
    [
        ("resolve",),
        ("resolve", "--product", "atlas-a2", "--set", "novalue"),
        ("resolve", "--product", "atlas-a2", "--config", "/nonexistent/config.json"),
        ("resolve", "--product", "atlas-a2", "--format", "yaml"),
        ("explain", "hccl_timout"),
        ("nonsense",),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr


def test_config_from_stdin_and_bad_json_exits_2() -> None:
    proc = run(
        "resolve",
        "--product",
        "atlas-a2",
        "--config",
        "-",
        "--format",
        "json",
        stdin='{"hccl_timeout": 3600}',
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["options"]["hccl_timeout"] == 3600
    assert run("resolve", "--product", "atlas-a2", "--config", "-", stdin="{nope").returncode == 2


def test_server_unreachable_exits_3() -> None:
    proc = run("resolve", "--product", "atlas-a2", "--server", "127.0.0.1:1")
    assert proc.returncode == 3, proc.stderr


def test_table_format_shows_value_source_and_diagnostics() -> None:
    proc = run("resolve", "--product", "atlas-training", "--set", "hccl_timeout=600")
    assert proc.returncode == 0
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("hccl_timeout"))
    assert "544" in line and "USER" in line and "requested 600" in line
    assert "ROUNDED [R-HCT-3]" in proc.stdout
    assert "\033[" not in proc.stdout  # no colour when not a terminal


def test_python_format_is_a_pasteable_call() -> None:
    proc = run(
        "resolve", "--product", "atlas-a2", "--set", "hccl_timeout=3600", "--format", "python"
    )
    assert proc.returncode == 0
    namespace: dict[str, Any] = {"NPURunConfig": lambda **kw: kw}
    exec(proc.stdout, namespace)  # the output is ours: a literal call of known options
    assert namespace["config"] == {"hccl_timeout": 3600}


@pytest.mark.parametrize("fmt", ["python", "env"])
def test_pasteable_formats_report_the_errors_on_stderr(fmt: str) -> None:
    """Exit 1 promises the report is printed: stdout stays pasteable, the report goes to stderr."""
    proc = run("resolve", "--product", "atlas-a2", "--set", "hccl_timeout=abc", "--format", fmt)
    assert proc.returncode == 1
    assert "INVALID_VALUE [R-HCT-1] hccl_timeout" in proc.stderr
    assert "INVALID_VALUE" not in proc.stdout


def test_env_format_exports_only_named_variables() -> None:
    proc = run(
        "resolve",
        "--product",
        "atlas-a2",
        "--format",
        "env",
        "--env",
        "ASCEND_WORK_PATH=/w d",
        "--env",
        "UNRELATED=1",
    )
    assert proc.stdout.strip() == "export ASCEND_WORK_PATH='/w d'"


def test_products_lists_every_id() -> None:
    proc = run("products", "--json")
    ids = [p["id"] for p in json.loads(proc.stdout)]
    assert ids == ["atlas-350", "atlas-a3", "atlas-a2", "atlas-training", "atlas-300i-duo"]


def test_explain_shows_rules_defaults_and_source_wording() -> None:
    proc = run("explain", "hccl_timeout", "--product", "atlas-training")
    assert proc.returncode == 0
    assert "R-HCT-3" in proc.stdout and "(0, 17340]" in proc.stdout
    assert "整除" in proc.stdout  # the source's own wording


def test_explain_json_carries_file_format_example() -> None:
    proc = run("explain", "op_debug_config", "--json")
    data = json.loads(proc.stdout)
    assert "oom" in data["file_format"]["example"]


def test_diff_shows_what_changes_between_products() -> None:
    proc = run(
        "diff",
        "--product",
        "atlas-a2",
        "--product",
        "atlas-training",
        "--set",
        "hccl_timeout=600",
        "--json",
    )
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["options"]["hccl_timeout"]["atlas-training"]["value"] == 544
    assert data["options"]["hccl_timeout"]["atlas-a2"]["value"] == 600
    assert data["options"]["input_batch_cpy"]["atlas-training"] is None


def test_attach_reads_a_local_file_and_applies_r_odc_2(tmp_path: Path) -> None:
    cfg = tmp_path / "debug.cfg"
    cfg.write_text("op_debug_config = oom,ccec_O0\n", encoding="utf-8")
    code, out = resolve_json(
        "--product", "atlas-a2", "--set", f"op_debug_config={cfg}", "--read-files"
    )
    assert code == 1
    assert ("CONFLICT", "R-ODC-2") in [(d["code"], d["rule"]) for d in out["diagnostics"]]


def test_policy_check_reports_version_or_problems(tmp_path: Path) -> None:
    good = tmp_path / "p.toml"
    good.write_text("[profiles.default.defaults]\nhccl_timeout = 3600\n", encoding="utf-8")
    proc = run("policy", "check", str(good))
    assert proc.returncode == 0
    assert len(json.loads(proc.stdout)["version"]) == 12
    bad = tmp_path / "bad.toml"
    bad.write_text("[profiles.default.defaults]\nhccl_timeot = 3600\n", encoding="utf-8")
    proc = run("policy", "check", str(bad))
    assert proc.returncode == 1
    assert "profiles.default.defaults" in proc.stdout and "hccl_timeot" in proc.stdout
    proc = run("policy", "check", str(tmp_path / "missing.toml"))  # unreadable input: exit 2
    assert proc.returncode == 2 and "cannot read" in proc.stderr and proc.stdout == ""


def _config_file(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def test_remote_config_too_deep_prints_the_report_and_exits_1(
    grpc_target: str, tmp_path: Path
) -> None:
    """The server's read limits are request errors with a report, as in process: exit 1."""
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(MAX_OBJECT_DEPTH + 5):
        node["a"] = {}
        node = node["a"]
    config = _config_file(tmp_path, {"dump_config": deep})
    for where in ((), ("--server", grpc_target)):
        proc = run("resolve", "--product", "atlas-a2", "--config", config, *where)
        assert proc.returncode == 1, proc.stderr
        assert "INVALID_VALUE" in proc.stdout and "Traceback" not in proc.stderr


def test_diff_with_an_unknown_product_is_the_same_report_through_a_server(
    grpc_target: str,
) -> None:
    args = ("diff", "--product", "atlas-a2", "--product", "atlas-9000", "--set", "hccl_timeout=600")
    local, remote = run(*args), run(*args, "--server", grpc_target)
    assert local.returncode == remote.returncode == 1
    assert remote.stdout == local.stdout and "Traceback" not in remote.stderr
    assert "atlas-9000: ERROR UNKNOWN_PRODUCT product:" in local.stdout  # no empty rule brackets


def test_remote_answer_too_large_for_the_wire_exits_2_with_the_reason(
    grpc_target: str, tmp_path: Path
) -> None:
    config = _config_file(tmp_path, {"debug_dir": "/" + "d" * 2_500_000})
    proc = run("resolve", "--product", "atlas-a2", "--config", config, "--server", grpc_target)
    assert proc.returncode == 2
    assert "RESOURCE_EXHAUSTED" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("target", ["127.0.0.1:99999", "127.0.0.1", "localhost:0", "host:5x"])
def test_a_malformed_server_address_is_a_usage_error(target: str) -> None:
    """Not a connection to a port gRPC picks itself (443) or wraps around (99999 -> 34463)."""
    proc = run("resolve", "--product", "atlas-a2", "--server", target)
    assert proc.returncode == 2
    assert "HOST:PORT" in proc.stderr and "unreachable" not in proc.stderr


def test_read_files_takes_relative_paths_from_the_jobs_workdir(tmp_path: Path) -> None:
    """A config's relative path is the job's, so --read-files looks under --workdir, not in
    the folder the CLI happens to run in."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "dt.cfg").write_text("OpType::MatMul:InputDtype:bfloat16,OutputDtype:bfloat16\n")
    config = _config_file(tmp_path, {"customize_dtypes": "dt.cfg"})
    code, out = resolve_json(
        "--product", "atlas-training", "--config", config, "--read-files", "--workdir", str(job)
    )
    assert code == 1
    assert [(d["code"], d["rule"]) for d in out["diagnostics"]] == [
        ("UNSUPPORTED_VALUE", "R-PREC-2")
    ]


def test_an_attachment_not_in_utf8_is_unreadable_input_with_line_and_rule(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cfg"
    bad.write_bytes(b"op_debug_config = oom\nop_debug_list = Relu\xff\n")
    proc = run(
        "resolve", "--product", "atlas-a2", "--set", "op_debug_config=/x",
        "--attach", f"op_debug_config={bad}",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "(R-ODC-1): line 2, column 21" in proc.stderr and "Traceback" not in proc.stderr


def test_diff_table_says_why_rows_differ() -> None:
    proc = run(
        "diff", "--product", "atlas-a2", "--product", "atlas-training",
        "--set", "input_batch_cpy=true", "--set", "hccl_timeout=600",
    )  # fmt: skip
    assert proc.returncode == 0
    assert "atlas-training: WARNING DROPPED_UNSUPPORTED_PRODUCT [R-IBC-1]" in proc.stdout
    assert "atlas-training: INFO ROUNDED [R-HCT-3] hccl_timeout" in proc.stdout


def test_set_env_and_product_take_several_values_after_one_flag() -> None:
    """The contract writes `[--set NAME=VALUE ...]`: both one flag with several values and the
    flag repeated are accepted, and mean the same."""
    code, one = resolve_json(
        "--product", "atlas-training", "--set", "hccl_timeout=600", "deterministic=1",
        "--env", "ASCEND_WORK_PATH=/w", "NPU_COLLECT_PATH=/c",
    )  # fmt: skip
    code2, repeated = resolve_json(
        "--product", "atlas-training", "--set", "hccl_timeout=600", "--set", "deterministic=1",
        "--env", "ASCEND_WORK_PATH=/w", "--env", "NPU_COLLECT_PATH=/c",
    )  # fmt: skip
    assert code == code2 == 0
    assert one == repeated
    assert one["options"]["hccl_timeout"] == 544 and one["options"]["deterministic"] == 1
    assert one["paths"]["exception_dump_dir"] == "/c"
    proc = run("diff", "--product", "atlas-a2", "atlas-training", "--set", "hccl_timeout=600")
    assert proc.returncode == 0 and "544" in proc.stdout


def test_a_token_file_that_cannot_be_a_header_is_a_usage_error(tmp_path: Path) -> None:
    for name, content in (("empty", b"\n"), ("two-lines", b"abc\ndef\n"), ("binary", b"\x00k")):
        token = tmp_path / name
        token.write_bytes(content)
        proc = run(
            "resolve", "--product", "atlas-a2", "--server", "127.0.0.1:9", "--token-file",
            str(token),
        )  # fmt: skip
        assert proc.returncode == 2, (name, proc.stderr)
        assert "--token-file" in proc.stderr and "Traceback" not in proc.stderr
