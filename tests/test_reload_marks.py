"""Under --workers, a ReloadPolicy reply waits until every other live worker has read the file
since the call: the marks each worker leaves, and the wait on them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from npu_resolver_server import _supervisor
from npu_resolver_server._app import _reload_every_worker
from npu_resolver_server._reload_marks import ReloadFailures, ReloadMarks, forget, now_ns

OTHER = os.getppid()
"""A live process that is not this one, standing for another worker."""


def test_each_worker_sees_the_other_live_workers_marks_but_not_its_own(tmp_path: Path) -> None:
    me, other = ReloadMarks(tmp_path), ReloadMarks(tmp_path, pid=OTHER)
    me.record(5)
    other.record(7)
    assert me.others() == {OTHER: 7}
    assert other.others() == {os.getpid(): 5}


def test_a_mark_never_moves_back_when_an_older_reload_finishes_late(tmp_path: Path) -> None:
    other = ReloadMarks(tmp_path, pid=OTHER)
    other.record(20)
    other.record(10)
    assert ReloadMarks(tmp_path).others() == {OTHER: 20}


def test_the_servers_count_of_failed_reloads_counts_each_once_and_outlives_a_worker(
    tmp_path: Path,
) -> None:
    """Both workers fail the same reloads, one counts them; a failed call counts once, in the
    worker that answered it; a restarted worker reads the count so far, not 0."""
    holder = ReloadFailures(lambda: True, tmp_path)
    other = ReloadFailures(lambda: False, tmp_path)
    assert holder.total() == 0
    for tally in (holder, other):  # a bad push: both read it and fail
        tally.seen(1)
    assert holder.total() == other.total() == 1
    holder.seen(1)  # told again with no new failure
    other.call_failed()  # a failed ReloadPolicy answered by the other worker
    holder.seen(2)
    holder.call_failed()  # one answered by the holder: its own failure counted it
    assert other.total() == 3
    restarted = ReloadFailures(lambda: True, tmp_path)
    restarted.seen(1)
    assert restarted.total() == 4


def test_a_worker_that_exited_is_not_waited_for(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    ReloadMarks(tmp_path, pid=int(gone.stdout)).record(1)
    assert ReloadMarks(tmp_path).others() == {}
    ReloadMarks(tmp_path, pid=OTHER).record(1)
    forget(tmp_path, OTHER)  # what the supervisor does when it reaps a worker
    assert ReloadMarks(tmp_path).others() == {}


def test_the_wait_ends_once_the_other_worker_has_read_the_file_since_the_call(
    tmp_path: Path,
) -> None:
    me, other = ReloadMarks(tmp_path), ReloadMarks(tmp_path, pid=OTHER)
    other.record(now_ns())  # read before the call: does not count

    async def call() -> tuple[list[int], int]:
        since = now_ns()
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, other.record, now_ns())  # its reload, begun after the call
        late = await me.behind(since, timeout_s=5)
        return late, ReloadMarks(tmp_path).others()[OTHER] - since

    late, ahead = asyncio.run(call())
    assert late == [] and ahead >= 0


def test_a_worker_still_behind_when_the_wait_runs_out_is_named(tmp_path: Path) -> None:
    me, other = ReloadMarks(tmp_path), ReloadMarks(tmp_path, pid=OTHER)
    other.record(now_ns())
    since = now_ns()
    assert asyncio.run(me.behind(since, timeout_s=0.05)) == [OTHER]


def test_a_missing_folder_means_no_other_worker_and_recording_there_is_harmless(
    tmp_path: Path,
) -> None:
    marks = ReloadMarks(tmp_path / "gone")
    marks.record(1)
    assert marks.others() == {}
    assert asyncio.run(marks.behind(now_ns(), timeout_s=1)) == []


def test_without_a_writable_temporary_folder_the_server_still_starts_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only root with no writable /tmp: the workers serve; only the reply's wait for
    the other workers is lost, and the supervisor's log says so."""

    def refused(prefix: str) -> str:
        raise PermissionError(13, "Permission denied", "/tmp")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    assert _supervisor._marks_folder() is None
    said = json.loads(capsys.readouterr().err)
    assert said["event"] == "reload_marks_unavailable" and "Permission denied" in said["error"]


def test_a_stopping_worker_takes_its_mark_and_the_last_one_the_folder(tmp_path: Path) -> None:
    """A supervisor killed outright cannot remove the folder: its workers, which stop by
    themselves then, leave nothing behind."""
    folder = tmp_path / "marks"
    folder.mkdir()
    me, other = ReloadMarks(folder), ReloadMarks(folder, pid=OTHER)
    me.record(1)
    other.record(1)
    other.beat()
    me.leave(remove_folder=True)
    assert folder.is_dir() and ReloadMarks(folder, pid=OTHER).others() == {}
    other.leave(remove_folder=True)
    assert not folder.exists()


def test_workers_stopping_under_a_running_supervisor_leave_the_folder(tmp_path: Path) -> None:
    """Every worker may stop while the supervisor runs on (each recycled, say): the folder is
    the supervisor's, and the workers it starts next write their marks and heartbeats there."""
    folder = tmp_path / "marks"
    folder.mkdir()
    me = ReloadMarks(folder)
    me.record(1)
    me.beat()
    me.leave(remove_folder=False)
    assert folder.is_dir() and not list(folder.iterdir())


def test_the_reload_is_asked_of_the_supervisor_only_while_it_is_this_workers_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the supervisor is gone, the worker's parent is some other process (init, a
    subreaper), which must not be sent a SIGHUP."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, signum: sent.append((pid, signum)))
    parent = os.getppid()

    async def ask(supervisor: int) -> None:
        await _reload_every_worker(None, lambda: None, supervisor)(None, lambda: True)

    for supervisor in (parent, parent + 100_000):
        asyncio.run(ask(supervisor))
    assert sent == [(parent, signal.SIGHUP)]


def _supervisor_on_a_fake_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drain_delay_seconds: float = 0.0
) -> tuple[list[float], list[int], _supervisor.Supervisor]:
    """A supervisor of one worker (OTHER) whose clock is `clock[0]` and whose kills are
    recorded in `killed`: the module's own clock and signals, not the interpreter's."""
    from npu_resolver_server import ServerSettings

    clock = [100.0]
    killed: list[int] = []
    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time)
    fake_os = types.SimpleNamespace(kill=lambda pid, signum: killed.append(pid), getpid=os.getpid)
    monkeypatch.setattr("npu_resolver_server._supervisor.time", fake_time)
    monkeypatch.setattr("npu_resolver_server._supervisor.os", fake_os)
    supervisor = _supervisor.Supervisor(
        ServerSettings(
            port=50999,
            workers=2,
            hung_worker_seconds=3,
            drain_delay_seconds=drain_delay_seconds,
            grace_seconds=0,
        ),
        tmp_path,
    )
    supervisor.children = {OTHER: 0}
    return clock, killed, supervisor


def test_time_the_supervisor_did_not_run_is_no_workers_silence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole server stopped for longer than the limit and resumed: the supervisor counts
    only the silence it watched, so a worker that beats again once resumed is not killed for
    the pause; one still silent once the supervisor runs again is, after the limit."""
    from npu_resolver_server._reload_marks import beat_name

    clock, killed, supervisor = _supervisor_on_a_fake_clock(tmp_path, monkeypatch)
    beat = tmp_path / beat_name(OTHER)

    def beats(at: int) -> None:
        beat.touch()
        os.utime(beat, ns=(at, at))

    beats(1)
    for step, beat_at in ((0.0, 1), (1.0, 1), (3.9, 1), (4.9, 2)):  # paused from 1.0 to 3.9
        if beat_at != 1:
            beats(beat_at)  # resumed, it beats again
        clock[0] = 100.0 + step
        supervisor._tick()  # a turn of the supervisor's loop, which sees the pause
        supervisor._kill_hung()
    assert killed == []
    for step in (5.9, 6.9, 7.9):  # and now it is silent: 3 s watched
        clock[0] = 100.0 + step
        supervisor._tick()
        supervisor._kill_hung()
    assert killed == [OTHER]


@pytest.mark.parametrize("stopping", [False, True], ids=["serving", "stopping"])
def test_a_pause_within_a_turn_of_the_supervisor_is_no_workers_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stopping: bool
) -> None:
    """The whole server stopped (Ctrl-Z, a paused container) after a turn of the supervisor's
    loop read its clock and before it judged the workers: the turn judges on the time it read,
    and the next turn counts the gap as a pause. Read again when judging, the clock held the
    pause, and a server paused as it stopped killed both its workers as hung and exited 1."""
    from npu_resolver_server._reload_marks import beat_name

    clock, killed, supervisor = _supervisor_on_a_fake_clock(
        tmp_path, monkeypatch, drain_delay_seconds=1
    )
    beat = tmp_path / beat_name(OTHER)
    beat.touch()
    os.utime(beat, ns=(1, 1))
    supervisor._tick()
    supervisor._kill_hung()  # its heartbeat seen
    if stopping:
        supervisor._begin_stop()  # allowed 1 + 0 + STOP_MARGIN_S seconds
    clock[0] += 0.05
    supervisor._tick()
    clock[0] += 10.0  # paused here, within the turn
    supervisor._kill_hung()
    supervisor._kill_overdue()
    assert killed == []
    clock[0] += 0.05
    supervisor._tick()  # the next turn sees the gap
    supervisor._kill_hung()
    supervisor._kill_overdue()
    assert killed == []
