"""Policy files that must be refused without harm: FIFOs, devices, oversized and deeply nested
files. Each is a failed load (last good policy kept, counted, a clear message) and a clean start
failure, never a hang, a memory blow-up or an internal error."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npu_resolver import Policy, PolicyError, load_policy, parse_policy
from npu_resolver import _policy as npu_resolver_policy
from npu_resolver._catalog import Catalog
from npu_resolver._options import OPTIONS
from npu_resolver._policy import MAX_POLICY_BYTES, PolicyReadError
from npu_resolver_client import ResolverClient
from npu_resolver_server import HEALTH_SERVICE, PolicyStore
from tests._server import ROOT, ProcessServer, free_port
from tests.test_cli import run as run_cli
from tests.test_grpc_policy import FakePolicy, fake_loader

GOOD = "[profiles.default.defaults]\nhccl_timeout = 3600\n"
OTHER = "[profiles.default.defaults]\nhccl_timeout = 1224\n"
DEEP_ARRAYS = "hccl_timeout = " + "[" * 100_000
DEEP_TABLES = (
    '[profiles.default.defaults]\n# a comment with [[ {{ in it\nnote = "[[[{{"\n'
    "hccl_timeout = " + "{a=" * 50_000
)


def _mv_t(target: str | Path, path: Path) -> None:
    """Replace `path` by a symlink to `target` in one step, as `ln -s target tmp; mv -T tmp
    path` does."""
    staged = path.with_name(path.name + ".staged")
    staged.unlink(missing_ok=True)
    staged.symlink_to(target)
    os.replace(staged, path)


def _put(path: Path, text: str) -> None:
    staged = path.with_name(path.name + ".new")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:12]


def _store(path: Path, text: str = GOOD) -> PolicyStore:
    path.write_text(text, encoding="utf-8")
    store = PolicyStore(path)
    store.load_initial()
    return store


# -- FIFOs, devices, directories, size ------------------------------------------------------


def test_a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "policy.fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []

    def load() -> None:
        try:
            outcome.append(load_policy(fifo))
        except BaseException as exc:
            outcome.append(exc)

    loading = threading.Thread(target=load, daemon=True)
    loading.start()
    loading.join(5)
    try:
        assert not loading.is_alive(), "opening the FIFO blocked"
    finally:
        if loading.is_alive():  # let the blocked open return so the thread ends
            os.close(os.open(fifo, os.O_WRONLY))
            loading.join(5)
    (error,) = outcome
    assert isinstance(error, PolicyReadError)
    assert str(error) == f"{fifo}: is a FIFO (named pipe), not a regular file"


def test_a_symlink_to_a_device_is_refused_naming_it(tmp_path: Path) -> None:
    link = tmp_path / "policy.toml"
    link.symlink_to("/dev/zero")
    with pytest.raises(PolicyReadError) as caught:
        load_policy(link)
    assert str(caught.value) == (
        f"{link}: is a symlink to /dev/zero, a character device, not a regular file"
    )
    with pytest.raises(PolicyReadError, match="is a directory, not a regular file"):
        load_policy(tmp_path)


def test_reload_of_a_device_keeps_the_last_good_policy_without_reading_it(
    tmp_path: Path,
) -> None:
    """The ReloadPolicy and SIGHUP path: a failed reload with the device named, not an
    exception (the call would answer INTERNAL) after reading /dev/zero until out of memory."""
    path = tmp_path / "policy.toml"
    store = _store(path)
    good = store.version
    _mv_t("/dev/zero", path)
    outcome = store.reload()
    assert not outcome.changed and outcome.version == good
    assert "a character device, not a regular file" in outcome.error
    status = store.status()
    assert status.version == good and status.reload_failures == 1
    assert status.refused_version == ""  # nothing was read, so there is nothing to hash
    assert store.check_file() is None  # refused once, not again every second


def test_an_oversized_file_is_refused_by_size_without_being_read(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    store = _store(path)
    good = store.version
    big = tmp_path / "big.toml"
    with big.open("wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse: costs no disk, only reading costs memory
    os.replace(big, path)
    tracemalloc.start()
    try:
        outcome = store.check_file()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome is not None and not outcome.changed and store.version == good
    assert outcome.error == (
        f"{path}: the file is {64 * 1024 * 1024:,} bytes, "
        f"over the limit of {MAX_POLICY_BYTES:,} bytes"
    )
    assert peak < 4 * 1024 * 1024, f"{peak} bytes allocated to refuse the file"
    assert store.status().refused_version == ""


def test_a_file_longer_than_its_size_says_is_read_only_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some files report a size below their content (/proc files say 0, a file may grow after
    fstat): the limit must hold while reading, not only at fstat."""
    from npu_resolver._policy import read_policy_bytes

    path = tmp_path / "policy.toml"
    path.write_bytes(b"#" * 1000)
    real_fstat = os.fstat

    def understated(fd: int) -> os.stat_result:
        info = real_fstat(fd)
        return os.stat_result((info.st_mode, *info[1:6], 0, *info[7:10]))  # st_size 0

    monkeypatch.setattr(os, "fstat", understated)
    with pytest.raises(PolicyReadError, match="over the limit of 100 bytes"):
        read_policy_bytes(path, limit=100)
    assert read_policy_bytes(path, limit=MAX_POLICY_BYTES) == b"#" * 1000


def test_the_refused_version_is_the_hash_of_the_bytes_refused_not_a_second_read(
    tmp_path: Path,
) -> None:
    """The file is replaced right after the loader read it: the refused version must still
    be that of the content refused, which the loader hashed as it read it."""
    path = tmp_path / "policy.toml"
    path.write_text(GOOD, encoding="utf-8")

    def loader(file: Path) -> Policy:
        try:
            return load_policy(file)
        finally:
            if file.read_text(encoding="utf-8") != GOOD:
                _put(file, GOOD)

    store = PolicyStore(path, loader=loader)
    store.load_initial()
    bad = "[profiles.default.defaults]\nno_such_option = 1\n"
    _put(path, bad)
    outcome = store.reload()
    assert "no_such_option" in outcome.error
    assert store.status().refused_version == _digest(bad.encode())


def test_a_loader_that_reads_the_file_itself_still_gets_a_refused_version(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("v1", encoding="utf-8")
    store = PolicyStore(path, loader=fake_loader)
    store.load_initial()
    _put(path, "garbage")
    outcome = store.reload()
    assert "line 1" in outcome.error
    assert store.status().refused_version == _digest(b"garbage")


async def test_the_watcher_refuses_a_device_and_recovers_when_the_file_is_fixed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.toml"
    store = _store(path)
    good = store.version
    store.start_watching(0.02)
    try:
        with caplog.at_level(logging.INFO, logger="npu_resolver_server.policy"):
            _mv_t("/dev/zero", path)
            for _ in range(500):
                if store.failures:
                    break
                await asyncio.sleep(0.01)
            assert store.failures == 1 and store.version == good
            assert "character device" in store.last_error
            _put(path, OTHER)
            for _ in range(500):
                if store.version != good:
                    break
                await asyncio.sleep(0.01)
            assert store.version == parse_policy(OTHER).version and store.last_error == ""
    finally:
        await store.stop_watching()
    assert not [r for r in caplog.records if r.getMessage() == "policy watch failed"]
    assert not [r for r in caplog.records if r.exc_info]


async def test_the_watcher_loads_off_the_event_loop_and_a_later_reload_wins(
    tmp_path: Path,
) -> None:
    """A slow load by the watcher leaves the loop free, and its result, older than that of a
    reload started meanwhile, is dropped: the stale policy is never put in force."""
    path = tmp_path / "policy.toml"
    path.write_text("v1", encoding="utf-8")
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def slow_loader(file: Path) -> FakePolicy:
        policy = fake_loader(file)
        if policy.version == "v22":
            entered.set()
            release.wait(30)
            returned.set()
        return policy

    store = PolicyStore(path, loader=slow_loader)
    store.load_initial()
    applied: list[str] = []
    store.add_listener(lambda s: applied.append(s.version))
    store.start_watching(0.01)
    try:
        _put(path, "v22")
        await _until(entered.is_set, "the watcher never started loading v22")
        # This coroutine runs on the event loop while the watcher's load is still blocked.
        assert not returned.is_set(), "the watcher's load held the event loop"
        _put(path, "v333")
        assert store.reload().version == "v333"
        release.set()
        # The watcher handles its stale v22 load before it sees the next change, so once v4444
        # is in force the v22 result has been dealt with.
        _put(path, "v4444")
        await _until(lambda: store.version == "v4444", "the watcher never loaded v4444")
        assert returned.is_set()
        assert applied == ["v333", "v4444"], "the stale v22 load was put in force"
    finally:
        release.set()
        await store.stop_watching()


async def _until(condition: Callable[[], bool], failure: str, timeout: float = 10) -> None:
    """Let the event loop run until `condition()` holds; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(failure)
        await asyncio.sleep(0.01)


# -- deep nesting ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "line"), [(DEEP_ARRAYS, 1), (DEEP_TABLES, 4)])
def test_deep_nesting_is_a_policy_error_naming_the_file_key_and_line(text: str, line: int) -> None:
    """Read, and refused for its content (not a file that cannot be read)."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "deep.toml")
    assert not isinstance(caught.value, PolicyReadError)
    assert str(caught.value) == (
        f"deep.toml: nested too deeply: the value of hccl_timeout at line {line} has over 100 "
        "levels of arrays or inline tables"
    )


def test_an_integer_past_pythons_digit_limit_is_a_policy_error_not_a_crash() -> None:
    """tomllib raises a bare ValueError (not TOMLDecodeError) for an int of over 4,300 digits:
    still a file the server cannot read, said as such, the last good policy kept."""
    with pytest.raises(PolicyError) as caught:
        parse_policy("[defaults]\nhccl_timeout = " + "9" * 5000 + "\n", "long.toml")
    assert str(caught.value).startswith("long.toml: invalid TOML: ")
    assert "digits" in str(caught.value)


def test_a_value_wider_than_a_jobs_config_may_be_is_refused_at_load() -> None:
    """Taken, it would give answers no job could send back (not a fixpoint)."""
    wide = "{" + ",".join(f"k{i} = 1" for i in range(10_001)) + "}"
    with pytest.raises(PolicyError, match=r"dump_config: the value is too big for a job's config"):
        parse_policy(f"[profiles.default.defaults]\ndump_config = {wide}\n")


def test_a_value_nested_too_deep_is_refused_by_its_options_own_rule_r_dist_1() -> None:
    """Depth is the option's own check: the policy names its rule and its bound (16)."""
    deep = "1"
    for _ in range(18):
        deep = "{a = " + deep + "}"
    with pytest.raises(PolicyError, match=r"nested at most 16 deep.*\(R-DIST-1\)"):
        parse_policy(f"[profiles.default.defaults]\ndistribute = {deep}\n")


@pytest.mark.parametrize("value", ["nan", "-inf", "1e400", "[inf]", "{a = nan}"])
@pytest.mark.parametrize("kind", ["defaults", "locked"])
def test_nan_for_an_option_no_product_supports_is_refused_at_load_r_erp_1(
    value: str, kind: str
) -> None:
    """No product supports enable_reduce_precision in this version, so no product's check read
    the value; every job it reached refused it, blaming the caller. Refused at load instead,
    with the words and rule a job would have got."""
    with pytest.raises(PolicyError) as caught:
        parse_policy(f"[profiles.default.{kind}]\nenable_reduce_precision = {value}\n")
    assert "NaN and infinities" in str(caught.value) and "(R-ERP-1)" in str(caught.value)


@pytest.mark.parametrize(
    ("kind", "what"), [("defaults", "never acts"), ("locked", "locks nothing")]
)
def test_a_value_for_an_option_no_product_supports_is_taken_and_noted_r_erp_1(
    kind: str, what: str
) -> None:
    """A job's own value for it is dropped with a warning; the policy's is taken the same way,
    and `policy check` says what it does not do, as it does for a default a lock shadows."""
    policy = parse_policy(f"[profiles.default.{kind}]\nenable_reduce_precision = 1\n")
    assert policy.summary()["values_that_never_act"] == [
        f"enable_reduce_precision in [profiles.default.{kind}] {what}: the option is not "
        "supported in this version (R-ERP-1)"
    ]
    with pytest.raises(PolicyError) as caught:
        parse_policy("[profiles.default.products.atlas-a2.defaults]\nenable_reduce_precision = 1\n")
    assert caught.value.problems == [
        "[profiles.default.products.atlas-a2.defaults] enable_reduce_precision: the option is "
        "not supported in this version (R-ERP-1)"
    ]


def test_tables_written_under_another_name_of_the_product_make_another_version() -> None:
    """Answers quote the table as written; a file renamed so must not share cached answers."""
    by_id = parse_policy("[profiles.default.products.atlas-a2.locked]\nop_debug_level = 0\n")
    by_name = parse_policy('[profiles.default.products."Atlas A2".locked]\nop_debug_level = 0\n')
    assert by_id.canonical_text == by_name.canonical_text
    assert by_id.version != by_name.version
    assert (
        by_id.version
        == parse_policy("[profiles.default.products.atlas-a2.locked]\nop_debug_level = 0\n").version
    )


def test_a_policy_file_beginning_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf[profiles.default.defaults]\nhccl_timeout = 900\n")
    assert load_policy(path).layer("default", "atlas-a2").defaults["hccl_timeout"].value == 900  # type: ignore[union-attr]


def test_parse_policy_says_it_takes_text() -> None:
    with pytest.raises(TypeError, match="takes the policy's text"):
        parse_policy(b"[profiles.default.defaults]\n")  # type: ignore[arg-type]


def test_policy_check_of_a_deep_file_refuses_it_with_exit_1_as_for_any_content(
    tmp_path: Path,
) -> None:
    """The file was read: its content is refused as a file that is not UTF-8 is (exit 1, the
    problem on stdout after `policy FILE refused:`); exit 2 is for a file that cannot be read."""
    deep = tmp_path / "deep.toml"
    deep.write_text(DEEP_ARRAYS, encoding="utf-8")
    proc = run_cli("policy", "check", str(deep))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith(f"policy {deep} refused:"), proc.stdout
    assert "nested too deeply: the value of hccl_timeout at line 1" in proc.stdout


@pytest.mark.parametrize("text", [DEEP_ARRAYS, DEEP_TABLES])
def test_a_deep_file_is_a_failed_reload_keeping_the_last_good_policy(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.toml"
    store = _store(path)
    good = store.version
    _put(path, text)
    with caplog.at_level(logging.INFO, logger="npu_resolver_server.policy"):
        outcome = store.check_file()
    assert outcome is not None and not outcome.changed and store.version == good
    assert outcome.error.startswith(f"{path}: nested too deeply: the value of hccl_timeout")
    assert "internal error" not in outcome.error
    status = store.status()
    assert status.reload_failures == 1 and status.refused_version == _digest(text.encode())
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# -- the server process ----------------------------------------------------------------------


def _start_failure(tmp_path: Path, kind: str) -> tuple[Path, str]:
    path = tmp_path / "policy.toml"
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        _mv_t(tmp_path / "fifo", path)
        return path, f"{path}: is a symlink to {tmp_path / 'fifo'}, a FIFO (named pipe), not a"
    if kind == "device":
        _mv_t("/dev/zero", path)
        return path, f"{path}: is a symlink to /dev/zero, a character device, not a regular file"
    path.write_text(DEEP_ARRAYS if kind == "arrays" else DEEP_TABLES, encoding="utf-8")
    return path, f"{path}: nested too deeply: the value of hccl_timeout at line"


@pytest.mark.parametrize("kind", ["fifo", "device", "arrays", "tables"])
def test_the_server_refuses_to_start_with_the_reason(tmp_path: Path, kind: str) -> None:
    path, message = _start_failure(tmp_path.resolve(), kind)
    command = [sys.executable, "-m", "npu_resolver_server", "--host", "127.0.0.1"]
    proc = subprocess.run(  # on a timeout the child is killed by its PID
        [*command, "--port", str(free_port()), "--policy", str(path)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    failed = [json.loads(line) for line in proc.stderr.splitlines() if "start_failed" in line]
    assert failed and failed[0]["error"].startswith(message), proc.stderr


def test_a_policy_swapped_for_a_fifo_leaves_the_server_serving(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(GOOD, encoding="utf-8")
    good, other = parse_policy(GOOD).version, parse_policy(OTHER).version
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "0.1"}
    with ProcessServer(["--host", "127.0.0.1", "--policy", str(path)], env=env) as server:
        os.mkfifo(tmp_path / "fifo")
        _mv_t(tmp_path / "fifo", path)
        failed = server.wait_for("policy_reload_failed", timeout=10)
        assert "a FIFO (named pipe), not a regular file" in failed[0]["error"]
        with (
            ResolverClient(server.target, timeout=5) as client,
            grpc.insecure_channel(server.target) as channel,
        ):
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=5
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert client.resolve("atlas-a2").options["hccl_timeout"] == 3600
            info = client.get_policy()
            assert info.policy_version == good and "FIFO" in info.last_reload_error
            reloaded = client.reload_policy()
            assert reloaded.version == good and "FIFO" in reloaded.error
            if os.path.exists("/dev/zero"):
                _mv_t("/dev/zero", path)
                reloaded = client.reload_policy()
                assert reloaded.version == good and "character device" in reloaded.error
            _put(path, OTHER)
            server.wait_for("policy_reloaded", timeout=10)
            info = client.get_policy()
            assert info.policy_version == other and info.last_reload_error == ""
            assert client.resolve("atlas-a2").options["hccl_timeout"] == 1224
        assert not [line for line in server.raw if "policy watch failed" in line]
        assert not [line for line in server.raw if "Traceback" in line]
        server.signal(signal.SIGTERM)
        assert server.wait() == 0


def test_reload_policy_checks_the_file_off_the_event_loop(tmp_path: Path) -> None:
    """Checking a large policy takes seconds; meanwhile the server keeps answering."""
    from tests._server import ThreadServer

    path = tmp_path / "policy.toml"
    path.write_text("[profiles.default.defaults]\nhccl_timeout = 3600\n", encoding="utf-8")
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()

    def slow_loader(file: Path) -> Policy:
        if "7200" in file.read_text(encoding="utf-8"):
            entered.set()
            release.wait(30)  # a check that takes a while
            returned.set()
        return load_policy(file)

    store = PolicyStore(path, loader=slow_loader)
    store.load_initial()
    with ThreadServer(store=store) as server, ResolverClient(server.target) as client:
        path.write_text("[profiles.default.defaults]\nhccl_timeout = 7200\n", encoding="utf-8")
        with ResolverClient(server.target) as admin:
            reloading = threading.Thread(target=admin.reload_policy)
            reloading.start()
            try:
                assert entered.wait(10), "the reload never reached its loader"
                answer = client.resolve("atlas-a2", timeout=10)
                # Answered while the reload is still blocked in its loader: it did not wait.
                assert not returned.is_set(), "Resolve was answered only after the reload"
            finally:
                release.set()
                reloading.join(10)
        assert answer.options["hccl_timeout"] == 3600  # the last good policy, at once
        assert client.resolve("atlas-a2").options["hccl_timeout"] == 7200


def test_a_token_given_through_a_pipe_is_taken_at_start(tmp_path: Path) -> None:
    """`--admin-token-file <(vault read ...)` names a pipe: the settings take it (the file is
    read once, at start), as they take a regular file."""
    from npu_resolver_server import load_settings

    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    assert load_settings(admin_token_file=str(fifo)).admin_token_file == fifo


async def test_a_policy_file_that_is_gone_is_said_once_and_the_last_good_policy_stays(
    tmp_path: Path,
) -> None:
    """A deleted policy file (a ConfigMap removed) is one failed reload, reported in the
    status and the log, not a silent keep; when the file is back it is read again."""
    path = tmp_path / "policy.toml"
    store = _store(path)
    good = store.version
    store.start_watching(0.02)
    try:
        path.unlink()
        await _until(lambda: store.failures == 1, "the missing file was never reported")
        assert store.version == good and "cannot read" in store.last_error
        await asyncio.sleep(0.3)  # 15 polls more: still one failure, not one per poll
        assert store.failures == 1
        _put(path, OTHER)
        await _until(lambda: store.version != good, "the file that came back was never read")
        assert store.version == parse_policy(OTHER).version and store.last_error == ""
    finally:
        await store.stop_watching()


def test_the_good_file_back_after_a_refused_one_is_said_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused push, then the good file put back: the version in force never changed, so no
    'reloaded' line is due, but the log's last word must not stay the refusal."""
    path = tmp_path / "policy.toml"
    store = _store(path)
    good = path.read_text()
    path.write_text("[[[ not toml")
    assert store.reload().error
    path.write_text(good)
    caplog.clear()
    with caplog.at_level("INFO", logger="npu_resolver_server"):
        outcome = store.reload()
    assert not outcome.changed and not outcome.error and store.status().last_reload_error == ""
    events = [getattr(r, "fields", {}).get("event") for r in caplog.records]
    assert events == ["policy_reload_recovered"]
    with caplog.at_level("INFO", logger="npu_resolver_server"):
        caplog.clear()
        store.reload()  # the same good file again: nothing to say
    assert not caplog.records


def test_a_policy_that_fails_every_job_it_reaches_is_loaded_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A valid file whose lock a mode refuses (force_fp16 is for online inference, R-PM-3)
    fails every training job under it: the server loads it, as `policy check` passes the file
    with exit 1, and says so in a WARNING with the check's own words, at start and at reload."""
    path = tmp_path / "policy.toml"
    bad = '[profiles.default.locked]\nprecision_mode = "force_fp16"\n'
    with caplog.at_level("INFO", logger="npu_resolver_server"):
        store = _store(path, bad)
    said = [getattr(r, "fields", {}) for r in caplog.records]
    warned = [f for f in said if f.get("event") == "policy_fails_jobs"]
    assert len(warned) == 1 and warned[0]["count"] == 1, said
    assert warned[0]["errors"][0].startswith(
        "precision_mode locked from [profiles.default.locked]: ERROR UNSUPPORTED_VALUE (R-PM-3) "
        "on every product, in training"
    )
    caplog.clear()
    path.write_text(GOOD)
    with caplog.at_level("INFO", logger="npu_resolver_server"):
        assert store.reload().changed
    assert [getattr(r, "fields", {}).get("event") for r in caplog.records] == ["policy_reloaded"]
    caplog.clear()
    path.write_text(bad + "# the same policy, another comment\n")
    with caplog.at_level("INFO", logger="npu_resolver_server"):
        assert store.reload().changed
    events = [getattr(r, "fields", {}).get("event") for r in caplog.records]
    assert events == ["policy_reloaded", "policy_fails_jobs"]


def test_a_defect_in_judging_a_policy_does_not_stop_it_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The policy_fails_jobs warning is a warning: a file the loader took is in force even if
    judging it fails (the failure is logged), at start and at reload."""
    import npu_resolver

    def broken(*_: object) -> object:
        raise RecursionError("deep")

    monkeypatch.setattr(npu_resolver, "diagnostics_from_policy", broken)
    path = tmp_path / "policy.toml"
    store = _store(path)
    assert store.version
    path.write_text(OTHER)
    outcome = store.reload()
    assert outcome.changed and not outcome.error and store.status().last_reload_error == ""
    assert "judging the policy for the jobs it fails went wrong" in caplog.text


@pytest.mark.parametrize(
    ("prefix", "key"),
    [
        ("y = ", "y"),
        ("  a.b =  ", "a.b"),
        ('"quoted key" =', '"quoted key"'),
        (" " * 5000, ""),
        ("=", ""),
        ("x", ""),
        ("y = 1, z =", "y = 1, z"),
    ],
)
def test_the_key_before_a_value_too_deep_is_read_from_its_line(prefix: str, key: str) -> None:
    from npu_resolver._policy import _key_before

    assert _key_before(prefix) == key


@pytest.fixture
def policy_checks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The (text, source) of every policy checked from now on in the test."""
    checks: list[tuple[str, str]] = []
    real_parse = npu_resolver_policy.parse_policy

    def counted(text: str, source: str, *args: object) -> Policy:
        checks.append((text, source))
        return real_parse(text, source, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(npu_resolver_policy, "parse_policy", counted)
    return checks


def test_load_policy_gives_back_the_policy_of_the_same_bytes_unchecked(
    tmp_path: Path, policy_checks: list[tuple[str, str]]
) -> None:
    """`reuse`: the same bytes at the same path, for the same catalog, are the same policy, so
    the check (seconds for a large file) is not made again; a byte changed, another path or
    another catalog is checked anew."""
    path = tmp_path / "policy.toml"
    path.write_text(GOOD)
    first = load_policy(path)
    assert first.file_digest == hashlib.sha256(GOOD.encode()).hexdigest()
    policy_checks.clear()
    assert load_policy(path, reuse=first) is first and policy_checks == []
    other = tmp_path / "other.toml"
    other.write_text(GOOD)
    assert load_policy(other, reuse=first) is not first
    assert [source for _, source in policy_checks] == [str(other)]
    assert load_policy(path, Catalog(OPTIONS), reuse=first) is not first
    path.write_text(GOOD + "# a comment\n")
    again = load_policy(path, reuse=first)
    assert again is not first and again.version == first.version and len(policy_checks) == 3


def test_a_reload_of_an_unchanged_file_does_not_check_it_again(
    tmp_path: Path, policy_checks: list[tuple[str, str]]
) -> None:
    """A storm of ReloadPolicy calls or SIGHUPs over an unchanged large policy costs a read
    each, not a check; a changed file is still checked and applied."""
    path = tmp_path / "policy.toml"
    store = _store(path)
    policy_checks.clear()
    before = store.current
    for _ in range(3):
        outcome = store.reload()
        assert not outcome.changed and not outcome.error
    assert policy_checks == [] and store.current is before
    path.write_text(OTHER)
    assert store.reload().changed and [text for text, _ in policy_checks] == [OTHER]
