"""Under --workers, when each worker last re-read the policy file, so that a ReloadPolicy call
is answered only once every worker has read the file, not just the one that took the call.

Each worker writes, in a folder its supervisor made, one file named by its pid that holds the
monotonic time (system-wide on Linux) at which its latest finished reload began. The worker
answering the call notes the time, has the supervisor signal every worker, and waits until each
other live worker's mark is at least that time: a reload that began before the file changed
cannot count. A refused file counts too: that worker read it and kept its last good policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

WAIT_S: Final = 10.0
"""How long a ReloadPolicy reply waits for the other workers; a large policy loads in seconds."""
DEADLINE_MARGIN_S: Final = 0.5
"""The wait ends this long before the call's deadline (or the drain's end), for the reply."""
POLL_S: Final = 0.01


def now_ns() -> int:
    return time.monotonic_ns()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: not ours, but not gone
        return True
    return True


class ReloadMarks:
    """One worker's view of the folder of marks."""

    def __init__(self, folder: Path, pid: int | None = None) -> None:
        self.folder = folder
        self.pid = os.getpid() if pid is None else pid
        self._written = -1

    def record(self, started_ns: int) -> None:
        """This worker finished a reload that began at `started_ns` (an older one finishing
        late never moves the mark back)."""
        if started_ns <= self._written:
            return
        staged = self.folder / f".{self.pid}.tmp"
        with contextlib.suppress(OSError):  # the folder is gone: the server is stopping
            staged.write_text(str(started_ns))
            staged.replace(self.folder / str(self.pid))
            self._written = started_ns

    def others(self) -> dict[int, int]:
        """The other live workers' marks, by pid."""
        marks: dict[int, int] = {}
        try:
            entries = list(self.folder.iterdir())
        except OSError:
            return marks
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == self.pid:
                continue
            try:
                mark = int(entry.read_text())
            except (OSError, ValueError):  # gone since, or being replaced: read next time
                mark = -1
            pid = int(entry.name)
            if alive(pid):
                marks[pid] = mark
        return marks

    async def behind(
        self,
        since_ns: int,
        timeout_s: float = WAIT_S,
        wanted: Callable[[], bool] = lambda: True,
    ) -> list[int]:
        """Wait until every other live worker has finished a reload begun at `since_ns` or
        later; the pids of those still behind when `timeout_s` runs out, or once the wait is
        no longer `wanted` (none: all caught up)."""
        deadline = time.monotonic() + timeout_s
        while True:
            late = sorted(pid for pid, mark in self.others().items() if mark < since_ns)
            if not late or time.monotonic() >= deadline or not wanted():
                return late
            await asyncio.sleep(POLL_S)

    def beat(self) -> None:
        """This worker's event loop is turning: its heartbeat file's time is now."""
        with contextlib.suppress(OSError):  # the folder is gone: the server is stopping
            (self.folder / beat_name(self.pid)).touch()

    def leave(self, *, remove_folder: bool) -> None:
        """This worker stops: its mark goes; with `remove_folder` (its supervisor was killed
        outright and cannot remove it) the folder too, with the last one."""
        for name in (str(self.pid), f".{self.pid}.tmp", beat_name(self.pid)):
            forget(self.folder, name)
        if remove_folder:
            with contextlib.suppress(OSError):  # others still there, or already gone
                self.folder.rmdir()


def forget(folder: Path, pid: int | str) -> None:
    """A worker exited: its mark goes (the supervisor's part; a new pid may reuse the name)."""
    with contextlib.suppress(OSError):
        (folder / str(pid)).unlink()


def beat_name(pid: int) -> str:
    return f"beat-{pid}"


def last_beat(folder: Path, pid: int) -> int | None:
    """The time of the worker's last heartbeat (the file's mtime, in ns) as a token that changes
    with each beat; None before its first (it is starting)."""
    try:
        return (folder / beat_name(pid)).stat().st_mtime_ns
    except OSError:
        return None


class FailureCounter:
    """Which worker counts policy reload failures under --workers: the one holding a lock on a
    file in the marks folder. Every worker reads the same file and fails alike, so one counts
    (the sum is the number of bad pushes). The first worker to see a failure takes the lock;
    when it dies, the kernel frees it and the next worker to see one takes it over, so no
    failure goes uncounted while the one that counted is down (its restart failing on that very
    file, say: a start that fails sees no reload, so never holds the lock)."""

    NAME: Final = "reload-failures.lock"

    def __init__(self, folder: Path) -> None:
        self._path = folder / self.NAME
        self._fd: int | None = None

    def __call__(self) -> bool:
        """Whether this worker counts: it holds the lock, or takes it now."""
        if self._fd is not None:
            return True
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:  # the folder is gone: the server is stopping
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another live worker counts
            os.close(fd)
            return False
        self._fd = fd
        return True


class ReloadFailures:
    """The policy reloads that failed, as this worker counts them for the server: every worker
    reads the same file and fails alike, so one of them counts those (`counts`: a
    FailureCounter under --workers), and a failed ReloadPolicy call is counted by the worker
    that answered it when that is another. The metric and GetPolicy's count both take these.
    Under --workers (`folder`: the marks folder) the total is kept in a file there: the same
    whichever worker answers, and never back to 0 when a worker is restarted."""

    NAME: Final = "reload-failures"

    def __init__(self, counts: Callable[[], bool], folder: Path | None = None) -> None:
        self._counts = counts
        self._path = folder / self.NAME if folder is not None else None
        self._seen = 0

    def seen(self, failures: int) -> int:
        """This worker's own count of failed reloads, after a load or a failed one: how many
        of them it counts for the server now."""
        added = 0
        if failures > self._seen:
            added = failures - self._seen if self._counts() else 0
            self._seen = failures
        self._add(added)
        return added

    def call_failed(self) -> int:
        """This worker answered a ReloadPolicy call whose reload failed: how many it counts."""
        added = 0 if self._counts() else 1
        self._add(added)
        return added

    def total(self) -> int | None:
        """The server's count, or None where there is no shared one (a server of one process:
        its own count is the answer)."""
        if self._path is None:
            return None
        try:
            with open(self._path, "rb") as file:
                fcntl.flock(file, fcntl.LOCK_SH)
                return _count(file.read())
        except OSError:  # none failed yet, or the folder is gone: the server is stopping
            return 0

    def _add(self, count: int) -> None:
        if self._path is None or not count:
            return
        with contextlib.suppress(OSError):  # the folder is gone: the server is stopping
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with open(fd, "r+b") as file:
                fcntl.flock(file, fcntl.LOCK_EX)  # the workers' additions one at a time
                total = _count(file.read()) + count
                file.seek(0)
                file.write(str(total).encode())
                file.truncate()


def _count(text: bytes) -> int:
    return int(text) if text.strip().isdigit() else 0
