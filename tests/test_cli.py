"""The CLI through a real subprocess: exit codes, formats, and the contract's examples."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from npu_resolver import MAX_OBJECT_DEPTH, PRODUCTS, Source
from npu_resolver._cli._render import columns
from npu_resolver._options import NAMED_ENV_VARS

CLI = [sys.executable, "-m", "npu_resolver._cli"]


def run(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, in `env` (default: this one's, see _shell), less the
    variables that would change the answers tests expect."""
    unread = {"HCCL_EXEC_TIMEOUT", "NPU_COLLECT_PATH"}
    env = {k: v for k, v in (_shell() if env is None else env).items() if k not in unread}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, input=stdin, timeout=60, check=False, env=env
    )


def _shell() -> dict[str, str]:
    """This process's environment without the rules' variables but HOME: one the shell running
    the tests holds would add a note to the output tests expect."""
    return {k: v for k, v in os.environ.items() if k == "HOME" or k not in NAMED_ENV_VARS}


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
    assert out["provenance"]["enable_exception_dump"]["source"] == "DERIVED"
    assert out["paths"]["exception_dump_dir"] == "/x"
    # The default 2 was nobody's: no FORCED warning. A dump mode the caller set is another
    # matter: it is kept in requested, with the warning.
    assert out["diagnostics"] == []
    code, out = resolve_json(
        "--product", "atlas-a2", "--env", "NPU_COLLECT_PATH=/x", "--set", "enable_exception_dump=2"
    )
    assert out["provenance"]["enable_exception_dump"]["requested"] == 2
    assert [d["code"] for d in out["diagnostics"]] == ["FORCED"]


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
    ("args", "said"),
    [
        (("resolve",), "the following arguments are required: --product"),
        (
            ("resolve", "--product", "atlas-a2", "--set", "novalue"),
            "--set expects NAME=VALUE, got 'novalue'",
        ),
        (  # a blank name is no name
            ("resolve", "--product", "atlas-a2", "--set", " =5"),
            "--set expects NAME=VALUE, got ' =5'",
        ),
        (
            ("resolve", "--product", "atlas-a2", "--env", "\t=x"),
            "--env expects NAME=VALUE, got '\\t=x'",
        ),
        (
            ("resolve", "--product", "atlas-a2", "--config", "/nonexistent/config.json"),
            "cannot read config /nonexistent/config.json: No such file or directory",
        ),
        (
            ("resolve", "--product", "atlas-a2", "--format", "yaml"),
            "argument --format: invalid choice: 'yaml'",
        ),
        (("explain", "hccl_timout"), "unknown option 'hccl_timout'; did you mean 'hccl_timeout'?"),
        (  # as resolve says it: named by the source, not documented (not "did you mean")
            ("explain", "dynamic_dims"),
            "unknown option 'dynamic_dims': the source names it under dynamic_inputs_shape_range",
        ),
        (("nonsense",), "argument command: invalid choice: 'nonsense'"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], said: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith(f"npu-resolve: {said}"), proc.stderr
    assert "Traceback" not in proc.stderr


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
    bad = run("resolve", "--product", "atlas-a2", "--config", "-", stdin="{nope")
    assert bad.returncode == 2
    assert bad.stderr.startswith("npu-resolve: config from standard input is not JSON: "), (
        bad.stderr
    )
    empty = run("resolve", "--product", "atlas-a2", "--config", "-", stdin=" \n")
    assert empty.returncode == 2
    assert empty.stderr.endswith(  # not the decoder's "Expecting value: line 1 column 1"
        "npu-resolve: config from standard input is empty; write a JSON object, {} for none\n"
    )


@pytest.mark.parametrize("text", ["[1]", "null", "5", '"hccl_timeout"'])
@pytest.mark.parametrize("where", [(), ("--server", "127.0.0.1:1")])
def test_a_config_file_that_is_not_a_json_object_is_a_usage_error(
    tmp_path: Path, text: str, where: tuple[str, ...]
) -> None:
    """Valid JSON of another kind than an object is refused as the caller's mistake, before any
    server is reached: exit 2 and one line, never a traceback."""
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    proc = run("resolve", "--product", "atlas-a2", "--config", str(path), *where)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"npu-resolve: config {path} must be a JSON object of option name to value\n"
    )
    assert proc.stdout == ""


def test_server_unreachable_exits_3() -> None:
    proc = run("resolve", "--product", "atlas-a2", "--server", "127.0.0.1:1")
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("npu-resolve: server unreachable: UNAVAILABLE"), proc.stderr
    assert "127.0.0.1:1" in proc.stderr and "Traceback" not in proc.stderr


def test_timeout_bounds_the_wait_for_a_slow_server_and_is_said_with_the_unreachable_exit(
    grpc_target: str,
) -> None:
    """A launcher's own deadline, not the client's 10 s: a server slower than it is exit 3
    naming the time, for every command that takes --server."""
    from tests._server import SlowLink

    link = SlowLink(grpc_target, 3.0)  # every chunk held 3 s: no answer within 0.5 s
    try:
        slow = f"127.0.0.1:{link.port}"
        for command in (["resolve", "--product", "atlas-a2"], ["policy", "show"]):
            proc = run(*command, "--server", slow, "--timeout", "0.5")
            assert proc.returncode == 3, proc.stderr
            assert proc.stderr.startswith("npu-resolve: server unreachable: DEADLINE_EXCEEDED: ")
            assert f"no answer from {slow} within 0.5 s" in proc.stderr and proc.stdout == ""
    finally:
        link.close()


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "-inf"])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(value: str) -> None:
    """Said before any call, not a call that fails at once as if the server were down."""
    proc = run("resolve", "--product", "atlas-a2", "--server", "127.0.0.1:9", f"--timeout={value}")
    assert proc.returncode == 2, proc.stderr
    said = (
        "argument --timeout: expects a positive number of seconds (inf for no deadline), "
        f"got {value!r}"
    )
    assert said in proc.stderr and proc.stdout == ""


def test_a_timeout_without_a_server_is_a_usage_error() -> None:
    """As --max-message-bytes is: in process there is no call to wait for."""
    for command in (["resolve", "--product", "atlas-a2"], ["products"], ["policy", "show"]):
        proc = run(*command, "--timeout", "5")
        assert proc.returncode == 2, proc.stderr
        assert "--timeout goes with --server" in proc.stderr and proc.stdout == ""


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
    assert ids == [p.id for p in PRODUCTS]


def test_explain_shows_rules_defaults_and_source_wording() -> None:
    proc = run("explain", "hccl_timeout", "--product", "atlas-training")
    assert proc.returncode == 0
    assert "R-HCT-3" in proc.stdout and "(0, 17340]" in proc.stdout
    assert "整除" in proc.stdout  # the source's own wording


def test_explain_says_when_the_rules_leave_an_options_default_out_r_prec_1() -> None:
    """R-PREC-1: with neither precision option set, precision_mode carries its R-PM-5 default
    only where precision_mode_v2 has none, so its row says what an answer holds when it is not
    set; an option whose answer holds its default says nothing more."""
    rows = {
        product: run("explain", "precision_mode", "--product", product).stdout
        for product in ("atlas-a2", "atlas-training")
    }
    assert "; when not set: absent / absent (see the rules)\n" in rows["atlas-a2"], rows
    training = rows["atlas-training"]
    assert '; when not set: "allow_fp32_to_fp16" / absent (see the rules)\n' in training, rows
    plain = run("explain", "hccl_timeout", "--product", "atlas-a2")
    assert plain.returncode == 0 and "when not set" not in plain.stdout, plain.stdout


@pytest.mark.parametrize("option", ["debug_dir", "op_compiler_cache_dir", "work_path"])
def test_explain_names_the_answer_path_of_a_folder_option_with_no_fixed_default(
    option: str,
) -> None:
    """R-DBG-1, R-AOE-5 and the cache folder's rule choose the folder when it is not set: the
    answer's paths entry holds it, set or not, and explain says which entry."""
    from npu_resolver import ResolveRequest, resolve
    from npu_resolver._paths import FOLDER_OPTIONS, PATH_KEYS

    key = FOLDER_OPTIONS[option]
    assert key in PATH_KEYS
    proc = run("explain", option, "--product", "atlas-a2")
    assert proc.returncode == 0, proc.stderr
    assert f"in an answer: paths.{key} holds the folder in effect" in proc.stdout
    config: dict[str, Any] = {option: "/set/here"}
    if option == "work_path":
        config["aoe_mode"] = "2"  # R-AOE-1: AOE acts only with a mode
    answer = resolve(ResolveRequest("atlas-a2", config, workdir="/job"))
    assert answer.paths[key].startswith("/set/here")  # the cache: its kernel_cache folder
    unset = resolve(ResolveRequest("atlas-a2", {"aoe_mode": "2"}, workdir="/job"))
    assert unset.paths[key].startswith(("/job", "<home>"))


def test_explain_json_carries_file_format_example() -> None:
    proc = run("explain", "op_debug_config", "--json")
    data = json.loads(proc.stdout)
    assert "oom" in data["file_format"]["example"]


@pytest.mark.parametrize(
    "command",
    [
        ("products",),
        ("explain",),
        ("explain", "hccl_timeout"),
        ("diff", "--product", "atlas-a2", "--product", "atlas-350"),
    ],
)
def test_every_command_takes_format_json_as_resolve_does(command: tuple[str, ...]) -> None:
    """`--format json` is resolve's spelling; the other commands take it too, `--json` being
    its short form, and refuse the two together or a format they do not print."""
    long, short = run(*command, "--format", "json"), run(*command, "--json")
    assert long.returncode == short.returncode == 0
    assert json.loads(long.stdout) == json.loads(short.stdout)
    both = run(*command, "--json", "--format", "table")
    assert both.returncode == 2
    assert "argument --format: not allowed with argument --json" in both.stderr
    other = run(*command, "--format", "env")
    assert other.returncode == 2
    assert "invalid choice: 'env'" in other.stderr


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
    rows = {row["option"]: row for row in data["rows"]}  # the DiffResponse's JSON mapping
    assert rows["hccl_timeout"]["cells"]["atlas-training"] == {"value": 544, "source": "USER"}
    assert rows["hccl_timeout"]["cells"]["atlas-a2"] == {"value": 600, "source": "USER"}
    assert rows["hccl_timeout"]["same"] is False and "hccl_timeout" in data["differing"]
    assert list(rows["input_batch_cpy"]["cells"]) == ["atlas-a2"]  # absent: no cell
    assert rows["graph_run_mode"]["same"] is True


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
    assert proc.stdout.startswith(f"policy {bad} refused:\n")  # not the JSON of a loaded one
    assert "judged once the file loads; check it again after fixing these" in proc.stderr
    proc = run("policy", "check", str(tmp_path / "missing.toml"))  # unreadable input: exit 2
    assert proc.returncode == 2 and "cannot read" in proc.stderr and proc.stdout == ""


def test_policy_check_names_what_the_policys_own_values_make_every_job_hear_r_esc_1_r_hct_3(
    tmp_path: Path,
) -> None:
    """A lock R-ESC-1 overrides in online inference, and a timeout R-HCT-3 rounds on two
    products, are said to every job under the policy; `policy check` says so before it is
    pushed, once per table entry with the products and modes it reaches."""
    policy = tmp_path / "p.toml"
    policy.write_text(
        "[profiles.default.locked]\nenable_small_channel = 0\nhccl_timeout = 600\n"
        "[profiles.x.defaults]\nmix_compile_mode = true\n"
        "[profiles.x.locked]\niterations_per_loop = 10\n",
        encoding="utf-8",
    )
    proc = run("policy", "check", str(policy))
    assert proc.returncode == 0, proc.stderr
    said = json.loads(proc.stdout)["diagnostics_from_the_policy"]
    assert [line.split(": ", 1)[0] for line in said] == [
        "enable_small_channel locked from [profiles.default.locked]",
        "hccl_timeout locked from [profiles.default.locked]",
        "mix_compile_mode default from [profiles.x.defaults]",
    ]
    forced, rounded, superseded = said
    assert "WARNING FORCED (R-ESC-1) on every product, in online inference" in forced
    assert "for every profile" in forced  # a default profile's lock reaches every one
    assert "INFO ROUNDED (R-HCT-3) on atlas-training, atlas-300i-duo, in training and " in rounded
    assert "takes effect as 544" in rounded
    assert "DROPPED_SUPERSEDED (R-IPL-2)" in superseded and ", for profile" not in superseded
    clean = tmp_path / "clean.toml"
    clean.write_text("[profiles.default.locked]\nhccl_timeout = 544\n", encoding="utf-8")
    proc = run("policy", "check", str(clean))
    assert proc.returncode == 0 and "diagnostics_from_the_policy" not in json.loads(proc.stdout)


def test_policy_check_exits_1_when_a_lock_fails_every_job_of_a_mode_r_pm_3(tmp_path: Path) -> None:
    """A lock to `force_fp16`, which R-PM-3 keeps for online inference, loads (a job may run
    in inference) but fails every training job under it: `check` prints the report and exits
    1, so a platform team's pipeline does not push the file. Warnings alone still exit 0."""
    policy = tmp_path / "p.toml"
    policy.write_text(
        '[profiles.default.locked]\nprecision_mode = "force_fp16"\nhccl_timeout = 600\n',
        encoding="utf-8",
    )
    proc = run("policy", "check", str(policy))
    assert proc.returncode == 1, proc.stderr
    said = json.loads(proc.stdout)["diagnostics_from_the_policy"]
    (refused,) = [line for line in said if " ERROR " in line]
    assert refused.startswith(
        "precision_mode locked from [profiles.default.locked]: ERROR UNSUPPORTED_VALUE (R-PM-3) "
        "on every product, in training"
    )
    assert "1 of its diagnostics_from_the_policy is an ERROR" in proc.stderr
    assert any(line.startswith("hccl_timeout ") for line in said)  # the rest is listed too
    policy.write_text("[profiles.default.locked]\nhccl_timeout = 600\n", encoding="utf-8")
    proc = run("policy", "check", str(policy))
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["diagnostics_from_the_policy"]


def test_policy_check_format_json_prints_a_refused_file_as_json_and_exits_1(
    tmp_path: Path,
) -> None:
    """A CI job reads a refusal, as it reads a loaded file's summary, from one JSON object:
    the refusal's own fields, `ok` false; the exit status is still 1."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[profiles.default.defaults]\nhccl_timeot = 3600\n", encoding="utf-8")
    for flag in (["--format", "json"], ["--json"]):
        proc = run("policy", "check", str(bad), *flag)
        assert proc.returncode == 1, proc.stderr
        refusal = json.loads(proc.stdout)
        assert refusal.keys() == {"ok", "source", "problems", "digest"}
        assert refusal["ok"] is False and refusal["source"] == str(bad)
        (problem,) = refusal["problems"]
        assert "[profiles.default.defaults] hccl_timeot: unknown option" in problem
        assert len(refusal["digest"]) == 12  # the refused bytes, as a server's log names them
        assert "check it again after fixing these" in proc.stderr  # the note stays on stderr
    latin = tmp_path / "latin.toml"  # read, but not text: refused, as one that does not parse
    latin.write_bytes(b"# caf\xe9\n")
    proc = run("policy", "check", str(latin), "--format", "json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["problems"] == ["not UTF-8 at byte 5"]


@pytest.mark.parametrize("kind", ["missing", "directory", "too large"])
def test_policy_check_format_json_prints_an_unreadable_file_as_json_and_exits_2(
    tmp_path: Path, kind: str
) -> None:
    """A file that cannot be read at all is unreadable input (exit 2, its line on stderr as
    before), and with --format json the same JSON object as a refusal, its digest empty: no
    byte was read."""
    path = tmp_path / "p.toml"
    if kind == "directory":
        path.mkdir()
    elif kind == "too large":
        with open(path, "wb") as file:  # sparse: the size alone refuses it
            file.truncate(1024 * 1024 + 1)
    proc = run("policy", "check", str(path), "--format", "json")
    assert proc.returncode == 2
    refusal = json.loads(proc.stdout)
    assert refusal["ok"] is False and refusal["source"] == str(path) and refusal["digest"] == ""
    (problem,) = refusal["problems"]
    assert problem in proc.stderr and proc.stderr.startswith(f"npu-resolve: policy {path}: ")
    said = {"missing": "cannot read", "directory": "directory", "too large": "over the limit"}
    assert said[kind] in problem


def test_policy_check_default_output_is_kept_and_format_json_adds_ok(tmp_path: Path) -> None:
    """Without --format a loaded file prints the summary it always did (no `ok` key, which
    callers parsing it do not expect); --format json prints the same summary with `ok`, true
    only when the exit status is 0 (a lock failing every training job, R-PM-3, exits 1)."""
    good = tmp_path / "p.toml"
    good.write_text("[profiles.default.locked]\nhccl_timeout = 600\n", encoding="utf-8")
    plain = run("policy", "check", str(good))
    assert plain.returncode == 0 and "ok" not in json.loads(plain.stdout)
    proc = run("policy", "check", str(good), "--format", "json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout) == {"ok": True, **json.loads(plain.stdout)}
    good.write_text('[profiles.default.locked]\nprecision_mode = "force_fp16"\n', encoding="utf-8")
    proc = run("policy", "check", str(good), "--json")
    assert proc.returncode == 1 and "is an ERROR" in proc.stderr
    assert json.loads(proc.stdout)["ok"] is False


def test_policy_check_format_table_prints_text_whatever_the_outcome(tmp_path: Path) -> None:
    """--format table: a refused file as without the flag, and a loaded one as lines headed the
    same way (its version, tables, and what the policy makes every job hear), exit statuses
    unchanged."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[profiles.default.defaults]\nhccl_timeot = 3600\n", encoding="utf-8")
    plain = run("policy", "check", str(bad))
    proc = run("policy", "check", str(bad), "--format", "table")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, plain.stdout, plain.stderr)
    good = tmp_path / "p.toml"
    good.write_text(
        "[profiles.default.locked]\nhccl_timeout = 600\n[profiles.x.defaults]\nhccl_timeout = 68\n",
        encoding="utf-8",
    )
    version = json.loads(run("policy", "check", str(good)).stdout)["version"]
    proc = run("policy", "check", str(good), "--format", "table")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:6] == [
        f"policy {good} loads: version {version}",
        "profiles",
        "  default",
        "    all products locked: hccl_timeout",
        "  x",
        "    all products defaults: hccl_timeout",
    ]
    assert lines[6] == "defaults_that_never_act" and lines[7].startswith("  - hccl_timeout ")
    assert "diagnostics_from_the_policy" in lines
    assert any("INFO ROUNDED (R-HCT-3)" in line for line in lines)
    missing = run("policy", "check", str(tmp_path / "missing.toml"), "--format", "table")
    assert missing.returncode == 2 and missing.stdout == "" and "cannot read" in missing.stderr
    cased = tmp_path / "cased.toml"
    cased.write_text("[profiles.Default.defaults]\nhccl_timeout = 3600\n", encoding="utf-8")
    lines = run("policy", "check", str(cased), "--format", "table").stdout.splitlines()
    at = lines.index("no_default_profile")
    assert lines[at + 1].startswith("  - no profile is named 'default': ")


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
    # Its column left out: every row would differ from its absent cells, above its error.
    lines = local.stdout.splitlines()
    assert lines[0].split() == ["option", "atlas-a2"]
    assert "(absent)" not in local.stdout
    assert "not resolved, so not in the table: atlas-9000" in lines


def test_a_diffs_unknown_product_line_gives_its_suggestion_as_resolves_does() -> None:
    proc = run("diff", "--product", "atlas-a2", "--product", "atlas-a3x")
    assert proc.returncode == 1
    [line] = [line for line in proc.stdout.splitlines() if "UNKNOWN_PRODUCT" in line]
    assert line.startswith("atlas-a3x: ERROR UNKNOWN_PRODUCT product: ")
    assert line.endswith("(suggestion: atlas-a3)")


def test_a_diff_table_beside_an_unknown_product_keeps_the_servers_rows() -> None:
    """A server's catalog may be newer than the command's: the rows of an option only it
    knows stay in the table when an unknown product's column is left out (the table was
    made again from the command's own catalog, and lost them)."""
    from npu_resolver import DiffResult, ResolveRequest, Source, diff
    from npu_resolver._cli._explain import render_diff
    from npu_resolver._diff import DiffCell, DiffRow

    local = diff(ResolveRequest("atlas-a2"), ["atlas-a2", "atlas-a3", "nope"])
    cells = {
        "atlas-a2": DiffCell(1, Source.DEFAULT),
        "atlas-a3": DiffCell(2, Source.DEFAULT),
        "nope": None,
    }
    newer = DiffResult(
        local.products, local.results, (*local.rows, DiffRow("new_opt", cells, same=False))
    )
    lines = render_diff(newer, show_all=False).splitlines()
    assert lines[0].split() == ["option", "atlas-a2", "atlas-a3"]
    assert lines[1].split() == ["new_opt", "1", "DEFAULT", "2", "DEFAULT"]
    assert lines[2] == "not resolved, so not in the table: nope"


def test_a_diff_table_of_known_products_beside_an_unknown_one_shows_their_differences() -> None:
    known = ("--product", "atlas-a2", "--product", "atlas-300i-duo")
    alone = run("diff", *known).stdout.splitlines()
    table = alone[: next(i for i, line in enumerate(alone) if line.startswith("atlas-"))]
    beside = run("diff", *known, "--product", "nope").stdout.splitlines()
    assert len(table) > 2 and beside[: len(table)] == table
    assert beside[len(table)] == "not resolved, so not in the table: nope"
    assert set(alone[len(table) :]) < set(beside)  # and the same notes below
    nothing = run("diff", "--product", "nope", "--product", "nada").stdout.splitlines()
    assert nothing[:2] == ["(no product resolved)", "not resolved, so not in the table: nope, nada"]


def test_a_request_too_large_to_send_says_it_was_not_sent_not_that_the_server_refused_it(
    grpc_target: str, tmp_path: Path
) -> None:
    """Five attached files of 900 KB: over the client's 4 MiB, refused before the call."""
    names = ["op_debug_config", "aoe_config_file", "modify_mixlist", "op_precision_mode"]
    attach = []
    for name in [*names, "fusion_switch_file"]:
        (tmp_path / name).write_text("x" * 900_000)
        attach += ["--attach", f"{name}={tmp_path / name}"]
    proc = run("resolve", "--product", "atlas-a2", *attach, "--server", grpc_target)
    assert proc.returncode == 2
    assert proc.stderr.startswith("npu-resolve: the request was not sent: RESOURCE_EXHAUSTED")
    assert "largest part is attachments, about 4,500," in proc.stderr  # five alike: all of them
    assert "server refused" not in proc.stderr
    assert "raise --max-message-bytes here" in proc.stderr  # the flag, not the library's name
    assert "max_message_bytes" not in proc.stderr


def test_a_report_too_large_for_this_commands_limit_names_the_flag_to_raise(
    grpc_target: str,
) -> None:
    """40 unknown options: the trailer lists some, the client asks again with validate_only,
    and the full report passes --max-message-bytes: the flag to raise, not the advice to send
    the request with validate_only (the client did)."""
    bogus = [arg for i in range(40) for arg in ("--set", f"bogus_option_{i}=1")]
    args = ["resolve", "--product", "atlas-a2", *bogus, "--server", grpc_target]
    proc = run(*args, "--max-message-bytes", "6000")
    assert proc.returncode == 2
    assert (
        "and this command's --max-message-bytes is 6,000: raise --max-message-bytes to read "
        in (proc.stderr)
    )
    assert "max_message_bytes" not in proc.stderr and "send the request" not in proc.stderr
    assert run(*args).returncode == 1  # the whole report, read under the default limit


def test_a_reply_over_this_commands_own_limit_is_said_so_and_the_limit_can_be_raised(
    grpc_target: str,
) -> None:
    """A diff's reply is several times its request: past --max-message-bytes (default 4 MiB)
    the command says the limit is its own, not that the server refused, and how to raise it."""
    args = ["diff", "--product", "atlas-a2", "--product", "atlas-a3", "--product", "atlas-350"]
    args += ["--set", "debug_dir=/" + "d" * 30_000, "--server", grpc_target]
    proc = run(*args, "--max-message-bytes", "65536")
    assert proc.returncode == 2
    assert proc.stderr.startswith("npu-resolve: the reply was not taken: RESOURCE_EXHAUSTED: ")
    assert "more than this command's --max-message-bytes of 65,536: raise --max-message-bytes" in (
        proc.stderr
    )
    assert "max_message_bytes" not in proc.stderr  # the library's argument, not the flag
    assert run(*args, "--max-message-bytes", "1048576").returncode == 0
    alone = run(
        "diff", "--product", "atlas-a2", "--product", "atlas-a3", "--max-message-bytes", "1"
    )
    assert alone.returncode == 2 and "--max-message-bytes goes with --server" in alone.stderr
    small = run(*args, "--max-message-bytes", "100")
    assert small.returncode == 2 and small.stderr.startswith(
        "npu-resolve: --max-message-bytes: must be from 1,024 to 2,147,483,647 bytes, or -1 "
        "for no limit"
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [([], "resolve, products, explain, diff, policy, serve"), (["policy"], "check, show")],
)
def test_a_missing_command_is_named_by_the_commands_to_give(args: list[str], named: str) -> None:
    """Not by argparse's destination ('required: command', 'policy_command')."""
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"npu-resolve: give a command: {named}", proc.stderr


def test_remote_answer_too_large_for_the_wire_exits_2_with_the_reason(
    grpc_target: str, tmp_path: Path
) -> None:
    """A 1 MB object, well within a request, in each of five columns of a diff: over 4 MiB."""
    config = _config_file(tmp_path, {"distribute": {"note": "d" * 1_000_000}})
    products = [arg for p in PRODUCTS for arg in ("--product", p.id)]
    proc = run("diff", *products, "--config", config, "--server", grpc_target)
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


def _run_shell(redirect: str, *args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    """The CLI with a shell redirection (`<&-`, `>&-`, `> /dev/full`) and extra environment."""
    return subprocess.run(
        ["sh", "-c", f'"$@" {redirect}', "sh", *CLI, *args],
        capture_output=True,
        timeout=60,
        check=False,
        env={**_shell(), **env},
    )


def test_configs_and_attachments_without_a_size_are_read_only_up_to_the_limit(
    tmp_path: Path,
) -> None:
    """stat says 0 bytes for a device or a pipe: the bound is on what is read, and what is too
    large says so, as a big regular file does."""
    proc = run("resolve", "--product", "atlas-a2", "--config", "/dev/zero")
    assert proc.returncode == 2
    assert "config /dev/zero is larger than 4,194,304 bytes" in proc.stderr
    assert "Traceback" not in proc.stderr
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (4 * 1024 * 1024 + 1))
    proc = run("resolve", "--product", "atlas-a2", "--config", str(big))
    assert proc.returncode == 2 and "is larger than 4,194,304 bytes" in proc.stderr
    proc = run("resolve", "--product", "atlas-a2", "--config", "-", stdin='"' + "a" * 5_000_000)
    assert proc.returncode == 2
    assert "config from standard input is larger than 4,194,304 bytes" in proc.stderr
    assert "Unterminated" not in proc.stderr
    proc = run(
        "resolve", "--product", "atlas-a2", "--set", "op_debug_config=/x",
        "--attach", "op_debug_config=/dev/zero",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "op_debug_config file /dev/zero (R-ODC-1)" in proc.stderr
    assert "larger than the limit of 1,048,576 bytes" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_nested_too_deeply_for_the_decoder_is_refused_as_any_config_too_deep(
    tmp_path: Path,
    grpc_target: str,
) -> None:
    """Valid JSON deeper than Python's json can read (a config file or a --set value): the
    report of a config nested too deep (INVALID_VALUE on `config`, exit 1), the one a server
    gives for the same JSON, not a usage error; 25 levels and 5,000 answer alike."""
    config = tmp_path / "deep.json"
    for levels in (25, 5000):
        deep = "[" * levels + "]" * levels
        config.write_text('{"dump_config": ' + deep + "}", encoding="utf-8")
        for args in (
            ("resolve", "--product", "atlas-a2", "--config", str(config), "--format", "json"),
            (
                "resolve",
                "--product",
                "atlas-a2",
                "--set",
                f"dump_config={deep}",
                "--format",
                "json",
            ),
            ("diff", "--product", "atlas-a2", "atlas-training", "--config", str(config), "--json"),
        ):
            local = run(*args)
            assert local.returncode == 1, (levels, args, local.stderr)
            assert (
                "nested deeper than 18 levels" in local.stdout and "Traceback" not in local.stderr
            )
            if args[0] == "resolve":
                diagnostics = json.loads(local.stdout)["diagnostics"]
                assert [(d["code"], d["option"]) for d in diagnostics] == [
                    ("INVALID_VALUE", "config")
                ]
            remote = run(*args, "--server", grpc_target)
            assert (remote.returncode, remote.stdout) == (local.returncode, local.stdout), args


def test_a_refusal_without_a_report_exits_2_through_a_server(grpc_target: str) -> None:
    """Exit 1 promises a printed report; INVALID_ARGUMENT with none is a refusal: exit 2. (The
    CLI refuses such a diff itself before calling; its transport is asked directly here.)"""
    from npu_resolver import ResolveRequest
    from npu_resolver._cli._transport import RefusedError, Remote

    names = [f"product-{i}" for i in range(40)]
    with pytest.raises(RefusedError) as info:
        Remote(grpc_target).diff(ResolveRequest(product=""), names)
    assert info.value.exit_status == 2
    assert "INVALID_ARGUMENT" in str(info.value) and "at most" in str(info.value)


def test_closed_or_failing_standard_streams_are_one_line_errors() -> None:
    proc = _run_shell("<&-", "resolve", "--product", "atlas-a2", "--config", "-")
    assert proc.returncode == 2
    assert b"standard input: it is closed" in proc.stderr and b"Traceback" not in proc.stderr
    closed: list[tuple[str, ...]] = [
        ("products",),
        ("resolve", "--product", "atlas-a2"),
        ("--version",),
        ("resolve", "--help"),
    ]
    for args in closed:
        proc = _run_shell(">&-", *args)
        assert proc.returncode == 2, args
        assert proc.stderr.strip().splitlines() == [
            b"npu-resolve: cannot write the answer: standard output is closed"
        ]
    if Path("/dev/full").exists():
        full: list[tuple[str, ...]] = [
            ("resolve", "--product", "atlas-a2", "--format", "json"),
            ("products",),
            ("--version",),  # a traceback, exit status 1
            ("--help",),  # exit status 0, the text lost
        ]
        for args in full:
            proc = _run_shell("> /dev/full", *args)
            assert proc.returncode == 2, args
            assert proc.stderr.strip().splitlines() == [
                b"npu-resolve: cannot write the answer: standard output: No space left on device"
            ]


def test_output_is_utf8_whatever_pythonioencoding_says() -> None:
    proc = _run_shell(
        "",
        "resolve", "--product", "atlas-a2", "--set", "debug_dir=/数据", "--format", "json",
        PYTHONIOENCODING="ascii",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.decode("utf-8"))["paths"]["debug_dir"] == "/数据"


@pytest.mark.parametrize(
    "args",
    [
        ("--product", "atlas-a2\udcff"),
        ("--product", "atlas-a2", "--profile", "\udcff"),
        ("--product", "atlas-a2", "--set", "debug_dir\udcff=1"),
        ("--product", "atlas-a2", "--set", "debug_dir=/job/\udcff"),
        ("--product", "atlas-a2", "--attach", "op_debug_config\udcff=/x"),
        # (an --attach file's name is the system's to open, whatever its bytes: test_caller_text)
    ],
)
def test_names_and_values_not_in_utf8_are_usage_errors(
    grpc_target: str, args: tuple[str, ...]
) -> None:
    """argv holds bytes that are not UTF-8 as lone surrogates: refused before any call."""
    for where in ((), ("--server", grpc_target)):
        proc = run("resolve", *args, *where)
        assert proc.returncode == 2, (where, proc.stderr)
        assert "is not valid UTF-8 text" in proc.stderr and "Traceback" not in proc.stderr
        assert "\\xff" in proc.stderr, proc.stderr  # the byte given, not Python's \\udcff
    proc = run("diff", "--product", "atlas-a2", "atlas-training\udcff", "--server", grpc_target)
    assert proc.returncode == 2 and "--product" in proc.stderr


def test_a_surrogate_escape_in_a_config_file_is_reported_through_a_server(
    grpc_target: str, tmp_path: Path
) -> None:
    """Not argv: the value is the resolver's to judge, as in process."""
    config = tmp_path / "c.json"
    config.write_text('{"debug_dir": "\\ud800"}', encoding="utf-8")
    proc = run(
        "resolve", "--product", "atlas-a2", "--config", str(config), "--format", "json",
        "--server", grpc_target,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    diagnostic = json.loads(proc.stdout)["diagnostics"][0]
    assert (diagnostic["code"], diagnostic["option"]) == ("INVALID_VALUE", "debug_dir")


def test_table_escapes_control_characters_from_the_caller() -> None:
    proc = run(
        "resolve", "--product", "atlas-a2",
        "--set", "enable_scope_fusion_passes=x\x1b[31mRED\x1b[0m", "--workdir", "/w\x1b[2J",
        "--set", "bad\x1b[1mopt=1", "--set", "debug_dir=/a\nb",
    )  # fmt: skip
    assert proc.returncode == 1
    assert "\x1b" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("enable_scope_fusion_passes") for ln in lines)
    assert "x\\x1b[31mRED\\x1b[0m" in proc.stdout
    assert "  fusion_result_file  /w\\x1b[2J/fusion_result.json" in lines
    assert "UNKNOWN_OPTION bad\\x1b[1mopt:" in proc.stdout
    debug = next(ln for ln in lines if ln.startswith("debug_dir"))
    assert "/a\\nb" in debug and "USER" in debug  # one row, not two
    diff = run(
        "diff", "--product", "atlas-a2", "atlas-training", "--set", "debug_dir=/a\x1b[1m", "--all"
    )
    assert diff.returncode == 0 and "\x1b" not in diff.stdout
    raw = run("resolve", "--product", "atlas-a2", "--format", "json", "--workdir", "/w\x1b[2J")
    assert json.loads(raw.stdout)["paths"]["debug_dir"] == "/w\x1b[2J"  # json keeps the value


def test_table_columns_stay_aligned_with_wide_characters_in_values() -> None:
    """A Chinese path takes two terminal columns a character (the source allows Chinese
    characters in paths): the source column still starts at one place on every row."""
    proc = run(
        "resolve", "--product", "atlas-a2", "--set", "debug_dir=/数据/作业/第一",
        "--set", "op_compiler_cache_dir=/缓存", "--workdir", "/w",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[1]
    start = columns(header[: header.index("source")])
    rows = lines[2 : lines.index("")]
    source = re.compile("  (?:" + "|".join(s.value for s in Source) + ") ")
    for row in rows:
        found = source.search(row)
        assert found is not None, row
        assert columns(row[: found.start() + 2]) == start, row
    assert any("/数据/作业/第一" in row for row in rows)


def test_an_env_name_that_is_not_utf8_is_the_one_named() -> None:
    proc = run("resolve", "--product", "atlas-a2", "--env", "X\udcff=1")  # argv bytes X\xff
    assert proc.returncode == 2
    assert "--env: the name 'X\\xff' is not valid UTF-8 text" in proc.stderr  # as --set's


def test_an_inherited_variable_that_is_not_utf8_is_named_with_its_escape_shown_once() -> None:
    env = {**os.environ, "HOME": "/home/\udcff"}  # the job's environment held the byte \xff
    proc = run("resolve", "--product", "atlas-a2", "--inherit-env", env=env)
    assert proc.returncode == 2
    assert "environment variable HOME: '/home/\\xff' is not valid UTF-8 text" in proc.stderr


def test_an_env_variable_the_resolver_never_reads_gets_a_note_naming_the_close_one() -> None:
    """A misspelt variable has no effect and the answer cannot show it (it holds only what is
    read): a note on stderr says so; the answer and the exit status are unchanged."""
    proc = run(
        "resolve", "--product", "atlas-a2", "--env", "HCCL_EXEC_TIMOUT=5", "--env",
        "HOME=/home/u", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0
    assert proc.stderr == (
        "npu-resolve: note: --env HCCL_EXEC_TIMOUT is not a variable the resolver reads, so it "
        "has no effect; did you mean HCCL_EXEC_TIMEOUT?\n"
    )
    assert json.loads(proc.stdout)["ok"] is True
    proc = run("resolve", "--product", "atlas-a2", "--env", "home=/home/u")
    assert "npu-resolve: note: --env home is not a variable the resolver reads" in proc.stderr
    assert proc.stderr.rstrip().endswith("did you mean HOME?")  # names are case-sensitive


def test_a_set_value_that_replaces_the_config_files_gets_a_note(tmp_path: Path) -> None:
    """--set wins over the file (the answer shows only the --set value, as the caller's): the
    note says which value it replaced; one --set equal to the file's says nothing."""
    job = tmp_path / "job.json"
    job.write_text('{"hccl_timeout": 600, "enable_exception_dump": 1}', encoding="utf-8")
    proc = run(
        "resolve", "--product", "atlas-a2", "--config", str(job), "--set", "hccl_timeout=700",
        "--set", "enable_exception_dump=1", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0
    assert (
        proc.stderr == "npu-resolve: note: --set hccl_timeout replaces the config's 600 with 700\n"
    )
    assert json.loads(proc.stdout)["options"]["hccl_timeout"] == 700


def test_a_config_files_nan_gets_no_note_without_a_set(tmp_path: Path) -> None:
    """NaN equals nothing, itself included: the note is about --set's options only."""
    job = tmp_path / "job.json"
    job.write_text('{"hccl_timeout": NaN}', encoding="utf-8")
    proc = run("resolve", "--product", "atlas-a2", "--config", str(job), "--format", "json")
    assert proc.returncode == 1  # the resolver refuses NaN on its option
    assert "replaces" not in proc.stderr


def test_a_refused_policy_file_lists_its_problems_a_line_each(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "[profiles.default.locked]\nhccl_timeout = -1\nprecison_mode = 'force_fp16'\n",
        encoding="utf-8",
    )
    proc = run("resolve", "--product", "atlas-a2", "--policy", str(policy))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0] == f"npu-resolve: policy {policy} refused:"
    assert len(lines) == 3 and all(line.startswith("  - ") for line in lines[1:]), lines
    assert any("hccl_timeout" in line for line in lines[1:])
    assert any("precison_mode" in line for line in lines[1:])


def test_terminal_columns_count_wide_characters_twice_and_joining_marks_not_at_all() -> None:
    assert columns("/w") == 2 and columns("/数据") == 5
    assert columns("e\u0301") == 1  # e and a combining acute accent
    assert columns("\u0e01\u0e31") == 1  # Thai: a consonant and a vowel sign above it
    assert columns("\u0915\u0941") == 1  # Devanagari: a consonant and a vowel sign below it
    assert columns("\u2764\ufe0f") == 1  # a variation selector takes no column
    assert columns("\u1112\u1161\u11ab") == 2  # Hangul jamo: one syllable, as "\ud55c"
    assert columns("\ud55c") == 2


def test_diff_columns_stay_aligned_with_wide_characters_in_values() -> None:
    proc = run(
        "diff", "--product", "atlas-a2", "atlas-training", "--set", "debug_dir=/数据/作业", "--all"
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    second = columns(lines[0][: lines[0].index("atlas-training")])
    row = next(line for line in lines if line.startswith("debug_dir"))
    assert columns(row[: row.index('"/数据/作业"', row.index("USER"))]) == second, row


def test_a_byte_order_mark_before_the_config_is_accepted(tmp_path: Path) -> None:
    config = tmp_path / "bom.json"
    config.write_bytes(b'\xef\xbb\xbf{"hccl_timeout": 3600}')
    code, out = resolve_json("--product", "atlas-a2", "--config", str(config))
    assert code == 0 and out["options"]["hccl_timeout"] == 3600
    proc = run(
        "resolve", "--product", "atlas-a2", "--config", "-", "--format", "json",
        stdin='\ufeff{"hccl_timeout": 3600}',
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["options"]["hccl_timeout"] == 3600


def test_python_format_keeps_object_options_as_comments_holding_their_values() -> None:
    dump = {"enable_dump": True, "path": "/x"}
    proc = run(
        "resolve", "--product", "atlas-a2", "--set", f"dump_config={json.dumps(dump)}",
        "--set", "hccl_timeout=3600", "--format", "python",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(ln.strip() for ln in proc.stdout.splitlines() if "dump_config" in ln)
    assert line.startswith("# dump_config={")
    literal = line.removeprefix("# dump_config=").split(",  # ")[0].removesuffix(",")
    assert ast.literal_eval(literal) == dump
    namespace: dict[str, Any] = {"NPURunConfig": lambda **kw: kw}
    exec(proc.stdout, namespace)  # the output is ours: a literal call of known options
    assert namespace["config"] == {"hccl_timeout": 3600}
    notes = [ln for ln in proc.stderr.splitlines() if "note:" in ln]
    assert len(notes) == 1 and "dump_config" in notes[0]


def test_readme_worked_example_is_the_output_of_its_command() -> None:
    """The first console block of README: each line it shows is a line of the command's
    table output, in that order (`...` stands for the rows left out)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("```console\n", 1)[1].split("```", 1)[0]
    command, *shown = block.replace("\\\n", " ").splitlines()
    assert command.startswith("$ npu-resolve resolve ")
    proc = run(*shlex.split(command.removeprefix("$ npu-resolve ")))
    assert proc.returncode == 0, proc.stderr
    lines = iter(proc.stdout.splitlines())
    for line in (ln for ln in shown if ln != "..."):
        assert any(out.rstrip() == line.rstrip() for out in lines), line


def test_readme_json_example_is_the_output_of_the_command_above_it() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    before, block = readme.split("```json\n", 1)
    shown = json.loads(block.split("```", 1)[0])
    command = before.rstrip().removesuffix("```").rstrip().splitlines()[-1]
    assert command.startswith("$ npu-resolve resolve ")
    proc = run(*shlex.split(command.removeprefix("$ npu-resolve ")))
    assert proc.returncode == 0, proc.stderr
    actual = json.loads(proc.stdout)
    for key, value in shown.items():
        if key in ("options", "provenance"):  # the README keeps two options of them
            assert {name: actual[key][name] for name in value} == value
        else:
            assert actual[key] == value, key


@pytest.mark.parametrize(("text", "value"), [("True", True), ("FALSE", False), ("true", True)])
def test_set_reads_bool_texts_as_the_core_does(text: str, value: bool) -> None:
    code, report = resolve_json("--product", "atlas-a2", "--set", f"external_weight={text}")
    assert code == 0
    assert report["options"]["external_weight"] is value
    assert report["diagnostics"] == []


def test_set_refuses_a_bool_text_the_core_refuses_as_in_a_config_r_exw_1(tmp_path: Path) -> None:
    """`--set` parses per the option's type and no further: what a config may not say, the
    command line may not either (R-EXW-1's bool, INVALID_VALUE)."""
    by_set = resolve_json("--product", "atlas-a2", "--set", "external_weight=tRuE")
    config = _config_file(tmp_path, {"external_weight": "tRuE"})
    by_config = resolve_json("--product", "atlas-a2", "--config", config)
    assert by_set == by_config
    code, report = by_set
    assert code == 1
    assert [(d["code"], d["option"]) for d in report["diagnostics"]] == [
        ("INVALID_VALUE", "external_weight")
    ]


@pytest.mark.parametrize("where", [(), ("--server", "127.0.0.1:1"), ("--config", "-")])
def test_diff_of_one_product_is_a_usage_error_naming_the_rule(where: tuple[str, ...]) -> None:
    """Said before anything is read or any server is reached (standard input stays unread)."""
    proc = run("diff", "--product", "atlas-a2", *where, stdin="{not json")
    assert proc.returncode == 2
    assert proc.stderr.endswith(
        "npu-resolve: diff: a diff needs 2 or more products (--product A --product B)\n"
    ), proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--workers", "0"], "--workers (or NPU_RESOLVER_WORKERS) 0: must be greater than"),
        (
            ["--max-message-bytes", "10"],
            "--max-message-bytes (or NPU_RESOLVER_MAX_MESSAGE_BYTES) 10",
        ),
        (["--tls-cert", "{tmp}/cert.pem"], "--tls-cert and --tls-key go together"),
        (["--protect-resolve"], "protecting resolve calls needs --admin-token-file"),
        (
            ["--admin-token-file", "{tmp}/missing"],
            "--admin-token-file {tmp}/missing does not exist",
        ),
        (["--tls-cert", "{tmp}", "--tls-key", "{tmp}/k"], "--tls-cert {tmp} is a directory"),
        (
            ["--tls-cert", "{tmp}/der", "--tls-key", "{tmp}/der"],
            "--tls-cert {tmp}/der is not PEM text (no -----BEGIN line)",
        ),
        (  # as a key the server's user may not read; /proc/self/mem fails for root too
            ["--tls-cert", "/proc/self/mem", "--tls-key", "/proc/self/mem"],
            "--tls-cert /proc/self/mem cannot be read: Input/output error",
        ),
        (
            ["--admin-token-file", "/proc/self/mem"],
            "--admin-token-file /proc/self/mem cannot be read: Input/output error",
        ),
        (  # gRPC takes it as a C int
            ["--max-message-bytes", "3000000000"],
            "--max-message-bytes (or NPU_RESOLVER_MAX_MESSAGE_BYTES) 3000000000: must be less "
            "than or equal to 2147483647",
        ),
        (["--grace-seconds", "inf"], "--grace-seconds (or NPU_RESOLVER_GRACE_SECONDS) inf: must"),
        (  # not the current folder, which "" read as a path would be
            ["--policy", ""],
            "--policy (or NPU_RESOLVER_POLICY) '': is given no file name; name the file, or "
            "leave the flag out",
        ),
    ],
)
def test_serve_refuses_bad_settings_naming_the_flag_in_plain_words(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """Before anything starts: exit 2, one line naming the flag, no validation library's
    wording ("Value error", "Input should be") and no traceback."""
    (tmp_path / "der").write_bytes(b"0\x82\x01\x0a")
    proc = run("serve", "--port", "0", *(a.format(tmp=tmp_path) for a in args))
    assert proc.returncode == 2
    assert proc.stderr.startswith("npu-resolve serve: ")
    assert said.format(tmp=tmp_path) in proc.stderr
    for leaked in ("Value error", "Input should", "Traceback", "Errno"):
        assert leaked not in proc.stderr


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [  # settings with no flag are named by their variable alone, not by a flag that is not
        ("NPU_RESOLVER_MAX_STRUCT_DEPTH", "0", "NPU_RESOLVER_MAX_STRUCT_DEPTH 0: must be"),
        (  # a poll of a nanosecond would keep a core busy
            "NPU_RESOLVER_POLICY_POLL_SECONDS",
            "1e-9",
            "NPU_RESOLVER_POLICY_POLL_SECONDS 1e-9: must be greater than or equal to 0.05",
        ),
    ],
)
def test_serve_refuses_bad_setting_variables_naming_the_variable(
    variable: str, value: str, said: str
) -> None:
    proc = run("serve", "--port", "0", env={**os.environ, variable: value})
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"npu-resolve serve: {said}")
    assert "--max-struct-depth" not in proc.stderr and "--policy-poll" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (
            [],
            {"NPU_RESOLVER_PORT": "abc"},
            "--port (or NPU_RESOLVER_PORT) abc: must be a valid integer",
        ),
        (
            ["--port", "99999", "--log-level", "ERROR"],
            {},
            "--port (or NPU_RESOLVER_PORT) 99999: must be less than or equal to 65535",
        ),
        (
            ["--port", "0"],
            {"NPU_RESOLVER_MAX_STRUCT_DEPTH": "0"},
            "NPU_RESOLVER_MAX_STRUCT_DEPTH 0: must be",
        ),
    ],
)
def test_serve_bad_settings_are_a_start_failed_json_line_too(
    args: list[str], env: dict[str, str], said: str
) -> None:
    """A log pipeline reading the server's JSON lines sees why it never started, as for a taken
    port: a `start_failed` ERROR (written at any --log-level) whose error is the plain line's
    text, after that line; exit 2 as before."""
    proc = run("serve", *args, env={**os.environ, **env})
    assert proc.returncode == 2
    plain, line = proc.stderr.splitlines()
    assert plain.startswith(f"npu-resolve serve: {said}")
    failed = json.loads(line)
    assert failed["event"] == "start_failed" and failed["level"] == "ERROR"
    assert failed["logger"] == "npu_resolver_server"
    assert failed["error"] == plain.removeprefix("npu-resolve serve: ")


def test_a_misspelt_setting_variable_is_named_at_start() -> None:
    """NPU_RESOLVER_WORKER=2 sets nothing; the operator is told, with the setting meant. The
    server's start is not refused for it (stopped by SIGINT while starting, exit 0)."""
    # A setting's variable in another case is read (as pydantic-settings matches names): not
    # named as unknown.
    env = {
        **os.environ,
        "NPU_RESOLVER_WORKER": "2",
        "NPU_RESOLVER_Call_Log": "failed",
        "npu_resolver_worker": "2",  # a lowercase misspelling gets its suggestion too
    }
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--host", "127.0.0.1"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        first = json.loads(proc.stderr.readline())
        lowercase = json.loads(proc.stderr.readline())  # the names in order: upper case first
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # the test failed with the server up: stop it by its PID
            proc.kill()
            proc.wait(10)
    assert "unknown_setting_variable" not in (rest or "")  # NPU_RESOLVER_Call_Log is read
    assert first["event"] == "unknown_setting_variable"
    assert lowercase["variable"] == "npu_resolver_worker"
    assert "did you mean NPU_RESOLVER_WORKERS?" in lowercase["detail"]
    assert first["level"] == "WARNING"
    assert first["variable"] == "NPU_RESOLVER_WORKER"
    assert "did you mean NPU_RESOLVER_WORKERS?" in first["detail"]


def test_a_setting_variable_set_to_nothing_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """`NPU_RESOLVER_POLICY= npu-resolve serve` (a variable blanked in a manifest or a shell)
    starts without a policy, not with the current folder as one; a blank port is the default."""
    from npu_resolver_server.settings import DEFAULT_PORT, load_settings

    monkeypatch.setenv("NPU_RESOLVER_POLICY", "")
    monkeypatch.setenv("NPU_RESOLVER_PORT", "")
    settings = load_settings()
    assert settings.policy is None
    assert settings.port == DEFAULT_PORT


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["resolve", "--product", "atlas-a2", "--bogus"], "usage: npu-resolve resolve "),
        (["policy", "check", "p.toml", "--bogus"], "usage: npu-resolve policy check "),
        (["explain", "hccl_timeout", "--bogus"], "usage: npu-resolve explain "),
    ],
)
def test_an_unknown_flag_shows_the_usage_of_its_subcommand(args: list[str], usage: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(usage)
    assert "unrecognized arguments: --bogus" in proc.stderr


def test_explain_names_the_known_products_and_the_closest_for_an_unknown_one() -> None:
    """The words resolve uses for an unknown product."""
    proc = run("explain", "hccl_timeout", "--product", "atlas-a4")
    assert proc.returncode == 2
    assert "product 'atlas-a4' is not recognized; use one of atlas-350, atlas-a3" in proc.stderr
    assert "Did you mean 'atlas-a3'?" in proc.stderr
    for option in (("hccl_timeout",), ()):  # an empty --product is not "every product"
        empty = run("explain", *option, "--product", " ")
        assert (empty.returncode, empty.stdout) == (2, "")
        assert "--product is empty: name a product, or leave it out" in empty.stderr


def test_the_table_says_the_type_asked_when_only_the_type_differs(tmp_path: Path) -> None:
    """aoe_mode 2 is read as '2': both print as 2, so the table names what was asked; and a
    long path name still lines up with the others."""
    config = tmp_path / "c.json"
    config.write_text('{"aoe_mode": 2, "hcom_parallel": "true", "hccl_timeout": 600}')
    proc = run("resolve", "--product", "atlas-training", "--config", str(config))
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "requested 2 (as a number)" in lines["aoe_mode"]
    assert "requested true (as a string)" in lines["hcom_parallel"]
    assert "requested 600;" in lines["hccl_timeout"]  # 544: the values differ, nothing to add
    proc = run("resolve", "--product", "atlas-a2", "--set", "external_weight=true")
    paths = proc.stdout.split("\npaths\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len({len(line) - len(line.split()[-1]) for line in paths}) == 1, paths


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "hccl_timeout=1", "--set", "hccl_timeout=2"],
        ["--set", "hccl_timeout=1", "hccl_timeout=2"],
        ["--env", "HCCL_EXEC_TIMEOUT=1", "--env", "HCCL_EXEC_TIMEOUT=2"],
    ],
)
def test_a_name_given_twice_on_the_command_line_is_refused(args: list[str]) -> None:
    """As a config file naming a key twice: which value was meant cannot be told."""
    proc = run("resolve", "--product", "atlas-a2", *args)
    assert proc.returncode == 2
    assert "is given twice ('1' and '2'); give it once" in proc.stderr


def test_a_deep_config_file_cut_short_is_not_json(tmp_path: Path) -> None:
    """Too deep for the decoder and never closed: unreadable input (exit 2), not a config
    refused as too deep, which only a whole text can be. As a --set value it is text, which
    the option refuses as it refuses a shallow cut-short one."""
    config = tmp_path / "cut.json"
    config.write_text('{"dump_config": ' + "[" * 5000, encoding="utf-8")
    proc = run("resolve", "--product", "atlas-a2", "--config", str(config))
    assert proc.returncode == 2
    assert "brackets do not close" in proc.stderr and "Traceback" not in proc.stderr
    for levels in (3, 5000):
        code, answer = resolve_json("--product", "atlas-a2", "--set", "dump_config=" + "[" * levels)
        assert code == 1
        assert [(d["code"], d["option"]) for d in answer["diagnostics"]] == [
            ("INVALID_VALUE", "dump_config")
        ]


def test_a_diff_of_more_products_than_a_server_takes_is_refused_alike(grpc_target: str) -> None:
    """In process and through a server the same answer: exit 2, in the same words."""
    names = [f"x{i}" for i in range(1, 18)]
    local = run("diff", "--product", *names)
    remote = run("diff", "--product", *names, "--server", grpc_target)
    assert local.returncode == remote.returncode == 2
    assert local.stderr == remote.stderr and local.stdout == remote.stdout == ""
    assert "a diff takes at most 16 products and this one names 17" in local.stderr
    # Its own words say what to give: no usage line of how to name two products.
    assert local.stderr.endswith(", atlas-300i-duo\n"), local.stderr
    # The CLI refuses before any call; the server, asked directly, refuses in the same words.
    import grpc

    from npu_resolver import ResolveRequest
    from npu_resolver_client import ResolverClient, ResolverClientError

    with ResolverClient(grpc_target) as client, pytest.raises(ResolverClientError) as info:
        client.diff(ResolveRequest("atlas-a2"), names)
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details in local.stderr


@pytest.mark.parametrize("policy", ["", "[profiles.default.locked]\nenable_small_channel = 0\n"])
def test_r_esc_1_python_format_pasted_back_draws_no_warning_for_the_values_rules_derived(
    tmp_path: Path, policy: str
) -> None:
    """R-ESC-1 makes enable_small_channel 1 in online inference, which the source does not
    let a user set there: the call names it in a comment, and pasted back as the config it
    resolves to the same options with no warning, under a lock the rule overrides too (the
    value written out met the lock: POLICY_LOCKED)."""
    extra: tuple[str, ...] = ()
    if policy:
        (tmp_path / "p.toml").write_text(policy)
        extra = ("--policy", str(tmp_path / "p.toml"))
    args = ("resolve", "--product", "atlas-a2", "--set", "graph_run_mode=0", *extra)
    proc = run(*args, "--format", "python")
    assert proc.returncode == 0, proc.stderr
    assert (
        "    # enable_small_channel=1,  # DERIVED from graph_run_mode=0 (online inference); "
        "the runtime derives it\n"
    ) in proc.stdout
    namespace: dict[str, Any] = {"NPURunConfig": lambda **kw: kw}
    exec(proc.stdout, namespace)  # the output is ours: a literal call of known options
    pasted = namespace["config"]
    assert pasted == {"graph_run_mode": 0}
    sets = [f"{name}={value}" for name, value in pasted.items()]
    code, again = resolve_json("--product", "atlas-a2", *extra, "--set", *sets)
    _, first = resolve_json(*args[1:])
    assert code == 0 and again["options"] == first["options"]
    assert [d for d in again["diagnostics"] if d["severity"] != "INFO"] == [
        d for d in first["diagnostics"] if d["severity"] != "INFO"
    ]
    assert again["options"]["enable_small_channel"] == 1


def test_explain_without_an_option_lists_every_option_which_unknown_option_points_to() -> None:
    """UNKNOWN_OPTION with no close name sends the caller to `npu-resolve explain` (and a gRPC
    caller to DescribeCatalog): it lists
    every option (name, type, summary), as text and as JSON, all or one product's."""
    from npu_resolver import CATALOG

    code, out = resolve_json("--product", "atlas-a2", "--set", "zzzzzzzz=1")
    assert code == 1
    [unknown] = out["diagnostics"]
    assert unknown["code"] == "UNKNOWN_OPTION"
    assert unknown["message"].endswith(
        "the catalog lists the options (`npu-resolve explain`, DescribeCatalog over gRPC)."
    )
    proc = run("explain")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{len(CATALOG)} options; `npu-resolve explain OPTION` tells one in full"
    assert len(lines) == 1 + len(CATALOG.options)
    assert lines[1].split() == ["graph_run_mode", "int", *CATALOG.options[0].summary.split()]
    listed = json.loads(run("explain", "--json").stdout)
    assert [o["name"] for o in listed] == [o.name for o in CATALOG.options]
    assert listed[0] == {
        "name": "graph_run_mode",
        "type": "int",
        "section": "basic",
        "summary": CATALOG.options[0].summary,
        "flags": [],
    }
    training = json.loads(run("explain", "--product", "Ascend910ProB", "--json").stdout)
    assert "input_batch_cpy" not in {o["name"] for o in training}  # R-IBC-1: not on training
    unknown_product = run("explain", "--product", "atlas-9000")
    assert unknown_product.returncode == 2 and "atlas-training" in unknown_product.stderr


@pytest.mark.parametrize(
    ("command", "flag", "first", "second"),
    [
        ("resolve", "--product", "atlas-a2", "atlas-training"),
        ("resolve", "--config", "a.json", "b.json"),
        ("resolve", "--workdir", "/a", "/b"),
        ("resolve", "--profile", "default", "debug"),
        ("resolve", "--policy", "a.toml", "b.toml"),
        ("resolve", "--server", "127.0.0.1:1", "127.0.0.1:2"),
        ("resolve", "--format", "json", "table"),
        ("resolve", "--tls-ca", "a.pem", "b.pem"),
        ("resolve", "--token-file", "a", "b"),
        ("diff", "--workdir", "/a", "/b"),
        ("explain", "--product", "atlas-a2", "atlas-a3"),
        ("policy show", "--policy", "a.toml", "b.toml"),
    ],
)
def test_a_single_valued_flag_given_twice_is_a_usage_error_naming_it(
    command: str, flag: str, first: str, second: str
) -> None:
    """Not the last one silently: which was meant cannot be told, as for a --set name twice."""
    base = {
        "resolve": ["resolve", "--product", "atlas-a2"],
        "diff": ["diff", "--product", "atlas-a2", "--product", "atlas-a3"],
        "explain": ["explain", "hccl_timeout"],
        "policy show": ["policy", "show"],
    }[command]
    if flag == "--product" and command == "resolve":
        base = ["resolve"]
    proc = run(*base, flag, first, flag, second)
    assert proc.returncode == 2
    said = f"argument {flag}: given twice ({first!r} and {second!r}); give it once"
    assert said in proc.stderr and proc.stdout == ""


def test_credential_server_and_attach_mistakes_are_said_in_the_clis_terms(tmp_path: Path) -> None:
    """Each a usage error that says what to do on the command line: not Python advice, not a
    silent in-process answer for an empty --server, the --attach form as its help writes it."""
    empty = tmp_path / "token"
    empty.write_text("\n")
    server = ("--server", "127.0.0.1:9")
    cases = [
        (
            [*server, "--token-file", str(empty)],
            f"--token-file {empty} is empty (or only whitespace); write the bearer token in it, "
            "or leave --token-file out to call without a token",
        ),
        (["--attach", "op_debug_config"], "--attach expects OPTION=FILE, got 'op_debug_config'"),
        (["--server", ""], "--server '' is not HOST:PORT"),
        (  # the client's reason too, not only the form
            ["--server", "grpc://127.0.0.1:5"],
            "--server 'grpc://127.0.0.1:5' is not HOST:PORT with a port in 1-65535 (or a gRPC "
            "target such as dns:///host:port): gRPC knows no scheme 'grpc'",
        ),
        ([*server, "--tls-ca", ""], "--tls-ca is given no file name; name the file"),
        (["--token-file", str(empty)], "--token-file go with --server"),
    ]
    for args, said in cases:
        proc = run("resolve", "--product", "atlas-a2", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert said in proc.stderr and proc.stdout == "", args
        assert "token=None" not in proc.stderr


def test_diagnostics_read_as_english_and_as_the_answer_shows_the_values() -> None:
    """One rule not checked 'was'; a range without an upper bound is open ([0, +inf)); R-SST-2
    names the configured HCCL timeout it compares with beside the rounded one shown."""
    _, out = resolve_json(
        "--product", "atlas-a2", "--set", "modify_mixlist=m.json",
        "precision_mode=allow_mix_precision", "session_device_id=-1",
    )  # fmt: skip
    messages = {d["option"]: d["message"] for d in out["diagnostics"]}
    assert "so R-MML-1 was not checked; attach it to check that rule." in messages["modify_mixlist"]
    assert "session_device_id -1 is outside [0, +inf) on atlas-a2" in messages["session_device_id"]
    _, out = resolve_json(
        "--product", "atlas-training", "--set", "hccl_timeout=600", "stream_sync_timeout=600000"
    )
    assert out["options"]["hccl_timeout"] == 544
    [advice] = [d for d in out["diagnostics"] if d["code"] == "ADVICE"]
    assert advice["message"] == (
        "stream_sync_timeout 600000 ms is not above the configured HCCL timeout, 600 s (544 s "
        "after rounding); in a cluster job set it above 600000 ms."
    )


@pytest.mark.parametrize(
    "args",
    [("--port", "1", "--port=2"), ("--policy=a", "--policy", "b"), ("--port", "1", "--por", "2")],
)
def test_a_serve_flag_given_twice_is_a_usage_error_before_anything_starts(
    args: tuple[str, ...],
) -> None:
    """Which port or policy was meant cannot be told: refused, and no server starts."""
    proc = run("serve", "--host", "127.0.0.1", *args)
    assert proc.returncode == 2
    flag = args[0].split("=")[0]
    said = "unrecognized arguments: --por" if "--por" in args else f"{flag} given twice"
    assert said in proc.stderr
    assert "serving" not in proc.stderr


def test_the_packages_say_their_version_as_installed_and_read_it_only_when_asked() -> None:
    """`npu_resolver.__version__` and `npu_resolver_client.__version__` are the installed
    distribution's (what a tool logs beside a report); reading it costs an import of
    importlib.metadata, which a cold `import npu_resolver` does not pay."""
    from importlib.metadata import version

    script = (
        "import sys, npu_resolver, npu_resolver_client;"
        "cold = 'importlib.metadata' in sys.modules;"
        "print(cold, npu_resolver.__version__, npu_resolver_client.__version__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    program = version("npu-config-resolver")
    assert out == ["False", program, program]


def _with_stderr(how: str, out: Path, *args: str, env: dict[str, str]) -> tuple[int, bytes]:
    """The CLI under bash with its stderr redirected as `how` says (`2>&-`: closed; a pipe to
    `true`: broken; /dev/full), stdout to `out`: the exit status and what stdout received."""
    import shlex

    command = " ".join(map(shlex.quote, [*CLI, *args]))
    script = {
        "closed": f"{command} 2>&- >{out}",
        "broken": f"{command} 2>&1 >{out} | true; exit ${{PIPESTATUS[0]}}",
        "full": f"{command} 2>/dev/full >{out}",
    }[how]
    code = subprocess.run(["bash", "-c", script], env=env, timeout=60, check=False).returncode
    return code, out.read_bytes()


@pytest.mark.parametrize("how", ["closed", "broken", "full"])
def test_a_note_with_no_stderr_to_take_it_costs_neither_the_answer_nor_the_exit_status(
    how: str, tmp_path: Path
) -> None:
    """Notes (a rule's variable set in the shell but not sent, a --read-files path not here, an
    --env name not read) go to stderr or nowhere: with stderr closed, print() wrote them to
    stdout, in the middle of what a pipe parses or a shell sources (a config value in a note,
    unquoted, ran when --format env was sourced); with it broken or full the answer was lost
    and the exit status wrong. Nor does a usage error put its usage on stdout."""
    env = {**_shell(), "HCCL_EXEC_TIMEOUT": "600"}
    hostile, marker, out = tmp_path / "c.json", tmp_path / "ran", tmp_path / "job.env"
    hostile.write_text(json.dumps({"op_debug_config": f"/nope/$(touch {marker}).cfg"}))
    common = ["resolve", "--product", "atlas-a2", "--env", "HCCL_EXEC_TIMOT=1"]
    code, written = _with_stderr(
        how, out, *common, "--config", str(hostile), "--read-files", "--format", "env", env=env
    )
    assert code == 0 and written.startswith(b"# "), written
    subprocess.run(["bash", "-c", f"source {out}"], check=True, timeout=30)
    assert not marker.exists()
    code, written = _with_stderr(
        how, out, *common, "--set", "hccl_timeout=-1", "--format", "json", env=env
    )
    assert code == 1 and json.loads(written)["ok"] is False
    assert _with_stderr(how, out, "resolve", "--bogus", env=env) == (2, b"")


def test_version_names_the_program_and_the_catalog() -> None:
    """What a bug report needs: the program's version and the source document's."""
    from importlib.metadata import version

    from npu_resolver import CATALOG_VERSION

    proc = run("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    program = version("npu-config-resolver")
    assert proc.stdout == f"npu-resolve {program} (catalog {CATALOG_VERSION})\n"
    # `python -m npu_resolver` is the same command, for a venv whose scripts are not on PATH
    package = subprocess.run(
        [sys.executable, "-m", "npu_resolver", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (package.returncode, package.stdout) == (0, proc.stdout)


def test_a_named_pipe_nothing_is_written_to_is_said_while_it_is_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Opening a named pipe waits for a writer, silently and for ever when there is none:
    --config and --attach say what they wait for, and still read a slow writer whole (as a
    slow `<(command)` is)."""
    from npu_resolver._cli import _inputs

    monkeypatch.setattr(_inputs, "WRITER_NOTICE_S", 0.1)
    noticed = threading.Event()

    def say(*args: Any, **kwargs: Any) -> None:
        print(*args, **kwargs)
        noticed.set()

    monkeypatch.setattr(_inputs, "print", say, raising=False)  # the module's print
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)

    def write() -> None:
        noticed.wait(30)  # a writer slower than the notice, however the threads are run
        with open(fifo, "w", encoding="utf-8") as pipe:
            pipe.write('{"hccl_timeout": 900}')

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert _inputs.read_config(str(fifo)) == {"hccl_timeout": 900}
    finally:
        writer.join(10)
        if writer.is_alive():  # the read failed first: let the writer's open return
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            writer.join()
    notice = capsys.readouterr().err
    assert f"waiting for config from the named pipe {fifo}: nothing is written" in notice


def test_standard_input_named_by_two_flags_is_a_usage_error() -> None:
    """The config would read all of it and the attachment get nothing: an error about an empty
    file nobody meant. Said before anything is read."""
    proc = run(
        "resolve",
        "--product",
        "atlas-a2",
        "--config",
        "-",
        "--attach",
        "op_debug_config=-",
        stdin='{"op_debug_config": "x.cfg"}',
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        "npu-resolve: standard input feeds one input, and --config - and --attach "
        "op_debug_config=- each ask for it; name a file for all but one\n"
    )


def test_the_env_format_of_a_request_with_errors_says_so_on_stdout() -> None:
    """`eval "$(npu-resolve ... --format env)"` without checking $? still sees it, as the
    python format's reader does."""
    proc = run("resolve", "--product", "nope", "--format", "env", "--env", "HOME=/h")
    assert proc.returncode == 1
    assert proc.stdout == (
        "# the request has errors: fix them before using this environment\nexport HOME=/h\n"
    )


def test_the_env_format_marks_a_variable_dropped_rounded_or_refused_r_aoe_1_r_hct_3() -> None:
    """Whoever evals the export lines may not read the report on stderr: AOE_MODE where AOE does
    not act (R-AOE-1), HCCL_EXEC_TIMEOUT rounded on a training-series card (R-HCT-3) and a
    value the resolver refuses each say so on their own line."""
    proc = run(
        "resolve",
        "--product",
        "atlas-300i-duo",
        "--env",
        "AOE_MODE=2",
        "--env",
        "HCCL_EXEC_TIMEOUT=600",
        "--format",
        "env",
    )
    assert proc.returncode == 0
    assert proc.stdout == (
        "export AOE_MODE=2  # no effect here: aoe_mode is dropped "
        "(DROPPED_UNSUPPORTED_PRODUCT [R-AOE-1])\n"
        "export HCCL_EXEC_TIMEOUT=600  # takes effect as 544 here [R-HCT-3]\n"
    )
    kept = run("resolve", "--product", "atlas-training", "--env", "HCCL_EXEC_TIMEOUT=544",
               "--env", "AOE_MODE=2", "--format", "env")  # fmt: skip
    assert kept.stdout == "export AOE_MODE=2\nexport HCCL_EXEC_TIMEOUT=544\n"
    refused = run("resolve", "--product", "atlas-a2", "--env", "AOE_MODE=1", "--format", "env")
    assert refused.returncode == 1
    assert refused.stdout == (
        "# the request has errors: fix them before using this environment\n"
        "export AOE_MODE=1  # not valid here: UNSUPPORTED_VALUE [R-AOE-3]\n"
    )


def test_the_env_format_marks_a_variable_the_explicit_option_overrides_r_hct_4() -> None:
    """R-HCT-4: the explicit hccl_timeout wins over HCCL_EXEC_TIMEOUT; exporting the variable
    is harmless, but its line says it has no effect here, as the report's ENV_OVERRIDDEN does."""
    proc = run(
        "resolve",
        "--product",
        "atlas-a2",
        "--set",
        "hccl_timeout=600",
        "--env",
        "HCCL_EXEC_TIMEOUT=100",
        "--env",
        "ASCEND_WORK_PATH=/w",
        "--format",
        "env",
    )
    assert proc.returncode == 0
    assert proc.stdout == (
        "export ASCEND_WORK_PATH=/w\n"
        "export HCCL_EXEC_TIMEOUT=100  # no effect here: the explicit hccl_timeout wins\n"
    )


def _env_format_under(
    tmp_path: Path, policy_text: str, product: str, variable: str
) -> subprocess.CompletedProcess[str]:
    """`resolve --format env` of one job variable under a policy file of `policy_text`."""
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text, encoding="utf-8")
    return run(
        "resolve", "--product", product, "--policy", str(policy), "--env", variable,
        "--format", "env",
    )  # fmt: skip


def test_the_env_format_marks_a_variable_a_policy_lock_overrides(tmp_path: Path) -> None:
    """A lock wins over the job's variable too (the report says POLICY_LOCKED)."""
    proc = _env_format_under(
        tmp_path,
        "[profiles.default.locked]\nhccl_timeout = 3600\n",
        "atlas-a2",
        "HCCL_EXEC_TIMEOUT=100",
    )
    assert proc.returncode == 0
    assert proc.stdout == (
        "export HCCL_EXEC_TIMEOUT=100  # no effect here: the policy's lock of hccl_timeout wins\n"
    )


def test_the_env_format_leaves_a_blank_variable_unmarked_beside_a_rounded_policy_default_r_hct_4(
    tmp_path: Path,
) -> None:
    """R-HCT-4: a blank HCCL_EXEC_TIMEOUT sets nothing, so the policy's default is what R-HCT-3
    rounds; the variable's line is exported blank as the job gave it, with no claim that it
    takes effect as the rounded value."""
    proc = _env_format_under(
        tmp_path,
        "[profiles.default.defaults]\nhccl_timeout = 600\n",
        "atlas-training",
        "HCCL_EXEC_TIMEOUT=",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "export HCCL_EXEC_TIMEOUT=''\n"
    assert "ROUNDED [R-HCT-3] hccl_timeout: the policy's hccl_timeout 600" in proc.stderr


def test_the_env_format_marks_a_folder_variable_its_option_outranks_r_ocd_1_r_dbg_1(
    tmp_path: Path,
) -> None:
    """R-OCD-1: beside op_compiler_cache_dir (the caller's or a lock) ASCEND_CACHE_PATH places
    nothing; R-DBG-1: beside debug_dir, ASCEND_WORK_PATH still places the dumps. Both lines were
    unmarked, though the report said ENV_OVERRIDDEN."""
    env = ["--env", "ASCEND_CACHE_PATH=/ac", "--env", "ASCEND_WORK_PATH=/w", "--format", "env"]
    base = ["resolve", "--product", "atlas-a2", *env]
    expected = (
        "export ASCEND_WORK_PATH=/w  # debug_dir wins for its files; the variable places the "
        "others [R-DBG-1]\n"
        "export ASCEND_CACHE_PATH=/ac  # no effect here: op_compiler_cache_dir wins [R-OCD-1]\n"
    )
    proc = run(*base, "--set", "op_compiler_cache_dir=/oc", "--set", "debug_dir=/dbg")
    assert proc.returncode == 0 and proc.stdout == expected, proc.stdout
    policy = tmp_path / "lock.toml"
    policy.write_text(
        '[profiles.default.locked]\nop_compiler_cache_dir = "/oc"\ndebug_dir = "/dbg"\n'
    )
    proc = run(*base, "--policy", str(policy))
    assert proc.returncode == 0 and proc.stdout == expected, proc.stdout
    unmarked = run(*base)  # nothing outranks them: plain lines
    assert unmarked.stdout == "export ASCEND_WORK_PATH=/w\nexport ASCEND_CACHE_PATH=/ac\n"


@pytest.mark.parametrize(
    "cache_off",
    [
        ("op_compiler_cache_mode=disable", "op_compiler_cache_dir=/oc"),  # R-OCD-1
        ("op_debug_level=1",),  # R-OCC-2 turns the cache off
    ],
)
def test_the_env_format_marks_the_cache_variable_when_the_cache_is_off_r_ocd_1(
    cache_off: tuple[str, ...],
) -> None:
    """With the operator compile cache off, ASCEND_CACHE_PATH places no folder: its line is
    marked (it was unmarked, as if the cache were kept there)."""
    sets = [arg for pair in cache_off for arg in ("--set", pair)]
    env = ["--env", "ASCEND_CACHE_PATH=/ac", "--env", "ASCEND_MAX_OP_CACHE_SIZE=100"]
    proc = run("resolve", "--product", "atlas-a2", *env, *sets, "--format", "env")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "export ASCEND_CACHE_PATH=/ac  # no effect here: it places op_cache_dir, and there is "
        "none here [R-OCD-1]\n"
        "export ASCEND_MAX_OP_CACHE_SIZE=100  # no effect here: it sizes op_cache_dir, and "
        "there is none here [R-OCC-4]\n"
    )
    # An answer that resolved nothing (an unknown product) has no paths at all: no mark.
    unknown = run("resolve", "--product", "nope", *env, "--format", "env")
    assert unknown.stdout.splitlines()[1:] == [
        "export ASCEND_CACHE_PATH=/ac",
        "export ASCEND_MAX_OP_CACHE_SIZE=100",
    ]


def test_diff_table_columns_are_as_wide_as_their_widest_cell() -> None:
    """A cell wider than the others (a precision mode with its source) widens its own column
    instead of shifting every column after it; lines carry no trailing blanks."""
    proc = run("diff", "--product", "atlas-training", "atlas-a2", "atlas-300i-duo")
    assert proc.returncode == 0
    table = proc.stdout.splitlines()[:4]
    assert table == [
        "option             atlas-training                        atlas-a2                  "
        "atlas-300i-duo",
        "input_batch_cpy    (absent)                              false DEFAULT             "
        "(absent)",
        'precision_mode_v2  (absent)                              "origin" PRODUCT_DEFAULT  '
        "(absent)",
        'precision_mode     "allow_fp32_to_fp16" PRODUCT_DEFAULT  (absent)                  '
        "(absent)",
    ]


@pytest.mark.parametrize(
    ("option", "product", "allowed"),
    [
        ("aicore_num", "atlas-a2", "the form above"),  # 'CUBE|VECTOR', said in the summary
        ("input_batch_cpy", "atlas-350", "true, false"),
        ("input_batch_cpy", "atlas-training", "-"),  # the product lacks the option
        ("debug_dir", "atlas-a2", "a path (see the rules)"),
        ("distribute", "atlas-a2", "a config object"),  # R-DIST-1: not 'any', which it refuses
        ("hccl_timeout", "atlas-training", "(0, 17340]"),
        ("local_rank_id", "atlas-a2", "[0, +inf)"),  # R-LRI-1: no upper bound, said as one
        ("iterations_per_loop", "atlas-a2", "[1, +inf)"),
    ],
)
def test_explain_says_what_each_product_allows(option: str, product: str, allowed: str) -> None:
    proc = run("explain", option, "--product", product)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith(f"  {product} "))
    assert row.split("  ")[-1].strip().split(";")[0] == allowed, row


def test_diff_cells_are_cut_to_sixty_terminal_columns() -> None:
    """A long CJK path takes two columns a character: cut by the columns it takes."""
    from npu_resolver._cli._render import columns

    folder = "/数据" + "/很长的目录名称" * 8
    proc = run(
        "diff", "--all", "--product", "atlas-a2", "atlas-training", "--set", f"debug_dir={folder}"
    )
    row = next(line for line in proc.stdout.splitlines() if line.startswith("debug_dir "))
    cells = [cell for cell in row.split("  ") if cell.strip()][1:]
    assert len(cells) == 2 and all(cell.strip().endswith(" USER") for cell in cells), row
    assert all(columns(cell.strip()) <= 60 for cell in cells), row
    assert all("... #" in cell for cell in cells), row  # cut, and marked with a digest


def test_diff_digests_follow_the_value_not_its_key_order_and_mark_long_headers(
    tmp_path: Path,
) -> None:
    """Equal objects in another key order are equal (the row is the same but for the source),
    so their cut cells carry one digest."""
    policy = tmp_path / "policy.toml"
    long = '"' + "x" * 60 + '"'
    policy.write_text(
        f"[profiles.default.products.atlas-a2.defaults]\ndump_config = {{a = {long}, b = 2}}\n"
        f"[profiles.default.products.atlas-a3.locked]\ndump_config = {{b = 2, a = {long}}}\n"
    )
    proc = run("diff", "--product", "atlas-a2", "--product", "atlas-a3", "--policy", str(policy))
    row = next(line for line in proc.stdout.splitlines() if line.startswith("dump_config "))
    marks = [cell.split(" #")[1].split()[0] for cell in row.split("  ") if " #" in cell]
    assert len(marks) == 2 and marks[0] == marks[1], row


def test_diff_cells_cut_keep_their_source_and_tell_long_values_apart(tmp_path: Path) -> None:
    """Two long paths that differ only past the cut, and a third equal to the first from
    another source: the row differs, and each cell says how (digest, source)."""
    base = "/mnt/" + "shared" * 12
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[profiles.default.products.atlas-a2.defaults]\ndebug_dir = "{base}/job-a"\n'
        f'[profiles.default.products.atlas-a3.locked]\ndebug_dir = "{base}/job-a"\n'
        f'[profiles.default.products.atlas-350.defaults]\ndebug_dir = "{base}/job-b"\n'
    )
    products = ["--product", "atlas-a2", "--product", "atlas-a3", "--product", "atlas-350"]
    proc = run("diff", *products, "--policy", str(policy))
    row = next(line for line in proc.stdout.splitlines() if line.startswith("debug_dir "))
    a2, a3, a350 = [cell.strip() for cell in row.split("  ") if cell.strip()][1:]
    assert a2.endswith(" POLICY") and a3.endswith(" POLICY_LOCKED") and a350.endswith(" POLICY")
    digest = [cell.split(" #")[1].split()[0] for cell in (a2, a3, a350)]
    assert digest[0] == digest[1] != digest[2]


# The request's own flags: each must change the answer as the contract says ---------------------


def test_set_gives_a_str_option_its_text_without_reading_it_as_json() -> None:
    """`--set` values are parsed per the option's type: aoe_mode and jit_compile are strings,
    so `2` and `false` are their text as written, not a number or a bool normalized back."""
    code, out = resolve_json(
        "--product", "atlas-training", "--set", "aoe_mode=2", "jit_compile=false"
    )  # fmt: skip
    assert code == 0
    assert out["options"]["aoe_mode"] == "2" and out["options"]["jit_compile"] == "false"
    assert [d["code"] for d in out["diagnostics"] if d["code"] == "NORMALIZED"] == []


def test_set_reads_a_str_or_path_option_written_as_a_json_string_as_its_content() -> None:
    """Quoted past the shell ('precision_mode_v2="origin"'), a str option's value was refused
    with its quotes, while hccl_timeout='"600"' was read as 600: a JSON string is its content
    for every type; text that only looks quoted stays as written."""
    code, out = resolve_json(
        "--product", "atlas-training", "--set", 'precision_mode_v2="origin"', 'aoe_mode="2"',
        'debug_dir="/my dir"', 'optypelist_for_implmode="Pooling"',
    )  # fmt: skip
    assert code == 0, out
    assert out["options"]["precision_mode_v2"] == "origin" and out["options"]["aoe_mode"] == "2"
    assert out["options"]["debug_dir"] == "/my dir"
    assert out["provenance"]["precision_mode_v2"]["source"] == "USER"
    assert "requested" not in out["provenance"]["precision_mode_v2"]
    code, out = resolve_json("--product", "atlas-training", "--set", 'precision_mode_v2= "origin" ')
    assert out["options"]["precision_mode_v2"] == "origin"
    for written in ('"a"b"', '"C:\\temp"', '"/data/a\\d"', '"'):  # kept as written, whole
        code, out = resolve_json("--product", "atlas-training", "--set", f"debug_dir={written}")
        assert out["options"]["debug_dir"] == written


def test_env_splits_at_the_first_equals_sign_so_values_may_hold_one() -> None:
    proc = run(
        "resolve", "--product", "atlas-a2", "--env", "ASCEND_WORK_PATH=/w/a=b", "--format", "json"
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads(proc.stdout)["paths"]["debug_dir"] == "/w/a=b"


def test_inherit_env_takes_only_the_variables_rules_md_names() -> None:
    """A job host's environment holds much else (secrets, bytes that are not UTF-8): only the
    named variables are read, so an unrelated variable cannot fail or leak into the request."""
    env = {**os.environ, "ASCEND_DEVICE_ID": "3", "UNRELATED_TOKEN": "\udcff"}
    proc = run("resolve", "--product", "atlas-a2", "--inherit-env", "--format", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["options"]["session_device_id"] == 3
    assert out["provenance"]["session_device_id"]["env_var"] == "ASCEND_DEVICE_ID"


def test_a_rules_variable_of_this_shell_not_sent_gets_a_note() -> None:
    """HCCL_EXEC_TIMEOUT=600 in the shell is not the job's unless sent: a note says so (not
    for HOME, which every shell holds); none with --inherit-env, or when --env gives it."""
    env = {**_shell(), "ASCEND_DEVICE_ID": "3", "HOME": "/home/u"}
    proc = run("resolve", "--product", "atlas-a2", "--format", "json", env=env)
    assert proc.returncode == 0
    assert proc.stderr == (
        "npu-resolve: note: ASCEND_DEVICE_ID is set in this shell but not sent; --inherit-env "
        "sends the rules' variables of this shell (or give them with --env)\n"
    )
    assert "session_device_id" not in json.loads(proc.stdout)["options"]
    for sent in (("--inherit-env",), ("--env", "ASCEND_DEVICE_ID=1")):
        proc = run("resolve", "--product", "atlas-a2", *sent, "--format", "json", env=env)
        assert proc.returncode == 0 and proc.stderr == ""
    blank = {**env, "ASCEND_DEVICE_ID": " "}  # a blank variable sets nothing
    assert run("resolve", "--product", "atlas-a2", env=blank).stderr == ""
    proc = run("resolve", "--product", "atlas-a2", "--env", "ascend_device_id=1", env=env)
    assert proc.stderr.count("note:") == 1  # the misspelt name's own note, not a second one


def test_env_wins_over_an_inherited_variable() -> None:
    env = {**os.environ, "HOME": "/home/inherited"}
    proc = run(
        "resolve", "--product", "atlas-a2", "--inherit-env", "--env", "HOME=/home/given",
        "--format", "json", env=env,
    )  # fmt: skip
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["paths"]["op_cache_dir"] == "/home/given/atc_data"


def test_strict_makes_a_dropped_option_an_error_and_exit_1() -> None:
    code, out = resolve_json(
        "--product", "atlas-training", "--set", "input_batch_cpy=true", "--strict"
    )  # fmt: skip
    assert code == 1
    assert [(d["severity"], d["code"]) for d in out["diagnostics"]] == [
        ("ERROR", "DROPPED_UNSUPPORTED_PRODUCT")
    ]


def test_profile_picks_the_policy_profile(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.debug.defaults]\nhccl_timeout = 7200\n")
    code, out = resolve_json("--product", "atlas-a2", "--policy", str(policy), "--profile", "debug")
    assert code == 0
    assert out["options"]["hccl_timeout"] == 7200
    assert out["provenance"]["hccl_timeout"]["source"] == "POLICY"
    code, plain = resolve_json("--product", "atlas-a2", "--policy", str(policy))
    assert plain["options"]["hccl_timeout"] == 1836  # the default profile has no such default


def test_attach_to_an_option_that_names_no_file_is_a_usage_error(tmp_path: Path) -> None:
    attached = tmp_path / "a.txt"
    attached.write_text("600\n")
    proc = run("resolve", "--product", "atlas-a2", "--attach", f"hccl_timeout={attached}")
    assert proc.returncode == 2
    assert "--attach hccl_timeout: only these options name a file: op_debug_config" in proc.stderr


def test_policy_with_server_is_a_usage_error_not_a_policy_silently_ignored(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.locked]\nhccl_timeout = 3600\n")
    proc = run(
        "resolve", "--product", "atlas-a2", "--server", "127.0.0.1:1", "--policy", str(policy)
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--policy is for in-process resolution" in proc.stderr


def test_read_files_passes_over_a_folder_the_config_names(tmp_path: Path) -> None:
    """--read-files attaches the files that exist here; a folder is not one (not checked)."""
    folder = tmp_path / "debug.cfg"
    folder.mkdir()
    code, out = resolve_json(
        "--product", "atlas-a2", "--set", f"op_debug_config={folder}", "--read-files"
    )  # fmt: skip
    assert code == 0
    assert [(d["code"], d["option"]) for d in out["diagnostics"]] == [
        ("NOT_CHECKED", "op_debug_config")
    ]


def test_read_files_says_which_named_file_it_did_not_find(tmp_path: Path) -> None:
    """The flag asked for the files to be checked: one that is not there is said on stderr
    (its rules stay NOT_CHECKED); the answer and the exit status are as without the note."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "fusion.cfg").write_text('{"Switch": {"GraphFusion": {}}}')
    proc = run(
        "resolve", "--product", "atlas-a2", "--workdir", str(job), "--read-files",
        "--set", "op_debug_config=debug.cfg", "--set", "fusion_switch_file=fusion.cfg",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"npu-resolve: note: --read-files: op_debug_config names {job / 'debug.cfg'}, which is "
        "not a file here; not attached"
    ]
    (tmp_path / "fusion.cfg").write_text('{"Switch": {"GraphFusion": {}}}')
    attached = run(  # a file --attach gives is the one read, and nothing is said of the other
        "resolve", "--product", "atlas-a2", "--workdir", str(job), "--read-files",
        "--format", "json",
        "--set", "fusion_switch_file=/remote/fusion.cfg",
        "--attach", f"fusion_switch_file={tmp_path / 'fusion.cfg'}",
    )  # fmt: skip
    assert (attached.returncode, attached.stderr) == (0, "")
    assert not [d for d in json.loads(attached.stdout)["diagnostics"] if d["code"] == "NOT_CHECKED"]


def test_python_format_says_errors_in_the_pasteable_text_and_warnings_on_stderr() -> None:
    errors = run(
        "resolve", "--product", "atlas-training", "--set", "hccl_timeout=17341",
        "--format", "python",
    )  # fmt: skip
    assert errors.returncode == 1
    assert errors.stdout.startswith("# the request has errors")
    warned = run(
        "resolve", "--product", "atlas-training", "--set", "input_batch_cpy=true",
        "--format", "python",
    )  # fmt: skip
    assert warned.returncode == 0
    assert "WARNING DROPPED_UNSUPPORTED_PRODUCT [R-IBC-1] input_batch_cpy" in warned.stderr
    assert "input_batch_cpy" not in warned.stdout


def test_table_header_says_errors_and_diagnostics_carry_their_suggestion() -> None:
    proc = run("resolve", "--product", "atlas-a2", "--set", "hccl_timout=1")
    assert proc.returncode == 1
    words = proc.stdout.splitlines()[0].split()
    assert words[:4] == ["product", "atlas-a2", "catalog", "900"] and words[-1] == "ERRORS"
    as_json = json.loads(
        run("resolve", "--product", "atlas-a2", "--set", "hccl_timout=1", "--format", "json").stdout
    )
    assert words[4:6] == ["fingerprint", as_json["fingerprint"]]  # the whole answer's identity
    assert "UNKNOWN_OPTION hccl_timout:" in proc.stdout
    assert "(suggestion: hccl_timeout)" in proc.stdout
    fine = run("resolve", "--product", "atlas-a2")
    assert fine.stdout.splitlines()[0].split()[-1] == "ok"


def test_table_names_the_variable_a_value_came_from() -> None:
    proc = run("resolve", "--product", "atlas-training", "--env", "HCCL_EXEC_TIMEOUT=600")
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("hccl_timeout "))
    assert "ENV" in row and "from HCCL_EXEC_TIMEOUT" in row and "requested 600" in row


def test_diff_leaves_out_notes_about_options_that_do_not_differ(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"op_wait_timeout": "200", "hccl_timeout": 600}))
    proc = run(
        "diff", "--product", "atlas-a2", "--product", "atlas-training", "--config", str(config)
    )  # fmt: skip
    assert proc.returncode == 0
    assert "ROUNDED [R-HCT-3] hccl_timeout" in proc.stdout
    assert "op_wait_timeout" not in proc.stdout  # its NORMALIZED note: the same on both


@pytest.mark.parametrize(
    ("command", "said"),
    [(("diff",), True), (("resolve",), False), (("products",), False), (("policy", "show"), False)],
)
def test_only_diff_says_its_reply_may_be_several_times_its_request(
    command: tuple[str, ...], said: bool
) -> None:
    proc = run(*command, "--help")
    assert proc.returncode == 0
    assert ("a diff's reply may be several times" in " ".join(proc.stdout.split())) is said


def test_policy_check_names_a_file_by_its_bytes(tmp_path: Path) -> None:
    """A policy file whose name is not UTF-8 is named with the byte (\\xff), as every argument."""
    named = os.fsencode(tmp_path) + b"/bad\xff.toml"
    with open(named, "w", encoding="utf-8") as file:
        file.write("[profiles.default.locked]\nhccl_timeout = 99999999\n")
    proc = subprocess.run(
        [*CLI, "policy", "check", named], capture_output=True, timeout=60, check=False
    )
    assert proc.returncode == 1
    assert b"bad\\xff.toml refused:" in proc.stdout, proc.stdout


def test_json_output_writes_text_as_it_is_not_as_escapes() -> None:
    """A path in Chinese reads, and greps, as the job wrote it (R-DBG-1's debug_dir here)."""
    proc = run("resolve", "--product", "atlas-a2", "--workdir", "/data/训练", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert '"debug_dir": "/data/训练' in proc.stdout and "\\u" not in proc.stdout
