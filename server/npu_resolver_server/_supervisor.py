"""--workers N: N processes sharing one port (SO_REUSEPORT), forked before any grpc object.

This module never imports grpc. The parent forks the workers, forwards SIGTERM, SIGINT and
SIGHUP to them, restarts a worker that dies unexpectedly (with a backoff, and gives up when
they keep dying), serves the aggregated metrics when --metrics-port is set, keeps the folder in
which workers mark when they last read the policy file (see _reload_marks), and exits 0 when
every worker has drained cleanly after a stop signal.

A worker that cannot start at all stops the server, but only at the server's own start. A
restart that cannot start (a bad policy pushed since, which the running workers refused and
survive) is retried every few seconds, while the other workers serve if any are left: a lost
worker must not turn a refused policy into an outage, and the server comes back by itself once
the file is fixed. Until then each failed restart is logged (`worker_restart_failed`), and
the gauge `npu_resolver_policy_reload_failing` of the running workers is 1.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Final

from ._reload_marks import alive, beat_name, forget, last_beat
from ._start_signals import STOPPED_DETAIL, hold_sighup, stop_held
from .settings import LogLevel, ServerSettings

RESTART_WINDOW_S: Final = 60.0
MAX_RESTARTS_IN_WINDOW: Final = 5
START_FAILED: Final = 2
RESTART_BACKOFF_S: Final = 0.5
FAILED_RESTART_BACKOFF_S: Final = 5.0


_LEVELS: Final = logging.getLevelNamesMapping()
_SHOWN: Final = {"from": logging.INFO}
"""The supervisor writes its own lines (it holds no logging setup to fork into workers): the
least level it writes, from --log-level."""


def show_from(level: LogLevel) -> None:
    """The least level `say` writes (--log-level)."""
    _SHOWN["from"] = _LEVELS[level]


def say(event: str, level: LogLevel = "INFO", **fields: object) -> None:
    """One JSON line as the workers' logs write them, at the level the event deserves (a start
    that failed and workers that keep dying are errors an alert must see)."""
    if _LEVELS[level] < _SHOWN["from"]:
        return
    line: dict[str, object] = {
        "ts": round(time.time(), 3),
        "level": level,
        "logger": "npu_resolver_server.supervisor",
    }
    line.update({"msg": event, "event": event, "pid": os.getpid(), **fields})
    print(json.dumps(line, default=str), file=sys.stderr, flush=True)


EXIT_REASONS: Final = ("died", "hung", "start_failed")
"""Why a worker ended without a stop: a signal or an error, killed after its heartbeat stopped
(or it never began), a start that failed (a restart against a policy refused since, say; at
the server's first start, which then ends)."""


def _child(
    settings: ServerSettings,
    worker: int,
    parent: int,
    marks: Path | None,
    inherited: tuple[int, ...] = (),
    *,
    first_start: bool = False,
) -> None:
    """In the forked child: run one worker and never return into the parent's code. `parent`
    is the supervisor's pid as read before the fork (read after it, a supervisor already gone
    would go unnoticed). `inherited`: the supervisor's own listening sockets, closed here, so
    that workers outliving a killed supervisor do not hold its metrics port open unanswered."""
    code = 1
    try:
        # The signals are blocked across the fork (see Supervisor._spawn): the child's own
        # dispositions are set first, and a stop sent meanwhile then ends it as it should,
        # rather than running the supervisor's forwarding in the child, which ignored it.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        hold_sighup()  # a reload asked for while it starts is noted, not its end
        stop_held()  # the supervisor's, if any: this worker was sent none
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        from ._app import run_worker

        code = run_worker(
            settings,
            worker=worker,
            serve_metrics=False,
            parent=parent,
            marks_folder=marks,
            tell_person=first_start,
        )
    except BaseException as exc:
        say("worker_failed", "ERROR", worker=worker, error=repr(exc))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _taken(host: str, port: int) -> OSError | None:
    """Why host:port cannot be served, or None. SO_REUSEPORT lets the workers share their
    port, and would as readily let them join another server already listening there, each
    answering part of the calls with its own policy. A plain bind (SO_REUSEADDR only, so that a
    restart's closing connections do not count) is refused by any listener, as one worker's
    own bind is."""
    try:
        addresses = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:  # said here: gRPC says only "Failed to bind"
        return exc
    except OSError:
        return None
    for family, kind, proto, _, address in addresses:  # "localhost": 127.0.0.1 and ::1
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:  # other failures (no IPv6 here) are gRPC's to say
                return exc
    return None


_FORWARDED: Final = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""The signals the supervisor forwards to its workers."""
HUNG_CHECK_S: Final = 1.0
"""How often the supervisor looks at the workers' heartbeats."""
PAUSE_S: Final = HUNG_CHECK_S * 1.25
"""A gap between two turns of the supervisor's 0.05 s loop longer than this is a pause."""
STOP_MARGIN_S: Final = 3.0
"""Past a stop's drain delay and grace, what a worker gets to leave (its spans' 2 s flush, its
call lines) before it is killed as hung: with deploy/'s 5 s preStop, before the kubelet's
SIGKILL at 30 s, so the log says why."""
PORT_WAIT_S: Final = 5.0
"""How long a start waits for a taken port: a server stopping on it (the previous run of this
one, its workers draining) frees it within its drain delay."""


def _taken_for_a_while(host: str, port: int) -> OSError | None:
    deadline = time.monotonic() + PORT_WAIT_S
    while (error := _taken(host, port)) is not None and time.monotonic() < deadline:
        if error.errno != errno.EADDRINUSE:
            break  # a name that does not resolve will not in a few seconds either
        time.sleep(0.2)
    return error


def ports_problem(settings: ServerSettings) -> str:
    """Why the server's port or health port cannot be served (taken by another listener, an
    address that does not resolve), in its own words, or "": said before gRPC tries, which
    only says "Failed to bind" (and writes its reason in a line of its own format)."""
    shared = (("port", settings.port), ("health port", settings.health_port))
    for what, port in shared:
        error = _taken_for_a_while(settings.host, port) if port else None
        if error is not None:
            return f"{what} {port} on {settings.host}: {error.strerror or error}"
    return ""


class Supervisor:
    def __init__(self, settings: ServerSettings, marks: Path | None) -> None:
        """`marks`: the folder where workers say when they last read the policy file (None:
        no temporary folder could be made; a ReloadPolicy reply then does not wait)."""
        self.settings = settings
        self.marks = marks
        self.children: dict[int, int] = {}  # pid -> worker index
        self.stopping = False
        self.exit_code = 0
        self._restarts: list[float] = []
        self._pending: list[tuple[float, int]] = []
        """(when, worker index): restarts due."""
        self._restarting: set[int] = set()
        """Workers whose current process is a restart, not the server's first start."""
        self._own_sockets: tuple[int, ...] = ()
        """The supervisor's listening sockets (metrics), which no worker keeps."""
        self._killed_hung: set[int] = set()
        self.exits: dict[str, int] = dict.fromkeys(EXIT_REASONS, 0)
        """Workers that ended without a stop, by reason, for the metrics page (each one was
        restarted, or the server stopped): a crash between two scrapes shows here when the
        serving count is back already."""
        self._beats: dict[int, tuple[int, float]] = {}
        """pid -> (its last heartbeat seen, when the supervisor first saw it, on its clock)."""
        self._spawned: dict[int, float] = {}
        """pid -> when it was started (on the clock), until its first heartbeat is seen."""
        self._last_check: float | None = None
        self._stop_began: float | None = None
        """When the stop began, on the clock."""
        self._paused = 0.0
        """Time the supervisor did not run, left out of its clock (see _tick)."""
        self._last_turn: float | None = None
        """When the last turn of the loop read the clock (monotonic)."""

    def _clock(self) -> float:
        """The supervisor's own clock: monotonic time less the time it did not run, as the
        loop's last turn read it. Read once a turn: a pause that falls within a turn (after
        the reading, before a worker is judged) is then counted by the next turn as a pause;
        read again when judging, it was taken for the worker's silence or delay."""
        if self._last_turn is None:  # before the loop's first turn
            return time.monotonic()
        return self._last_turn - self._paused

    def workers_serving(self) -> tuple[int, int]:
        """(serving, configured) for the metrics page, read from its thread: the workers that
        have begun serving (heard beat; alive, without the heartbeat folder), and --workers."""
        children = list(self.children)
        if self.marks is None:
            return len(children), self.settings.workers
        return sum(1 for pid in children if pid in self._beats), self.settings.workers

    def _tick(self) -> None:
        """A turn of the loop. A gap since the last one longer than PAUSE_S is time the
        supervisor did not run (the whole server stopped, a paused container): nobody's silence
        or delay, so left out of the clock that times the workers' heartbeats, starts and stop."""
        now = time.monotonic()
        if self._last_turn is not None and now - self._last_turn > PAUSE_S:
            self._paused += now - self._last_turn
        self._last_turn = now

    def _kill_hung(self) -> None:
        """A worker whose heartbeat stopped (SIGSTOP, a loop that never yields) would keep its
        share of the port's connections and answer none of them, and its probes would pass
        and fail by turns: it is killed, and restarted as any worker that dies. So is one that
        never beat within its start allowance (stuck after the fork, or reading the policy),
        which would otherwise leave the server a worker short, unseen. Silence is what
        the supervisor itself watched, on its own clock: a whole server stopped and resumed
        (Ctrl-Z, a paused container) or a wall clock stepped forward kills no worker."""
        if self.marks is None or self.stopping:
            return
        now = self._clock()
        if self._last_check is not None and now < self._last_check + HUNG_CHECK_S:
            return
        self._last_check = now
        settings = self.settings
        for pid, worker in list(self.children.items()):
            beat = last_beat(self.marks, pid)
            seen = self._beats.get(pid)
            if beat is not None and seen is not None and seen[0] == beat:
                self._judge(pid, worker, "serving", now - seen[1], settings.hung_worker_seconds)
            elif beat is not None:
                self._beats[pid] = (beat, now)
                self._spawned.pop(pid, None)
            elif pid in self._spawned:  # never beat yet: still starting, or stuck there
                since = now - self._spawned[pid]
                self._judge(pid, worker, "starting", since, settings.worker_start_seconds)

    def _judge(self, pid: int, worker: int, phase: str, silent: float, limit: float) -> None:
        """Kill a worker silent for `limit` seconds or more (once: it is restarted when
        reaped, unless the server stops). `phase`: "serving" (its heartbeat stopped),
        "starting" (it never beat) or "stopping" (still there past the stop's allowance)."""
        if silent < limit or pid in self._killed_hung:
            return
        say(
            "worker_hung",
            "ERROR",
            worker=worker,
            worker_pid=pid,
            phase=phase,
            silent_s=round(silent, 1),
        )
        self._killed_hung.add(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def _begin_stop(self) -> None:
        self.stopping = True
        if self._stop_began is None:
            self._stop_began = self._clock()

    def _kill_overdue(self) -> None:
        """A worker still there past the stop's drain delay and grace (stopped with SIGSTOP, a
        loop that never yields) would hold the supervisor, and a pod, until the kubelet's
        SIGKILL, with nothing said: it is killed as hung (phase "stopping"), and the exit
        status says the stop was not clean. Timed on the supervisor's clock, as the
        heartbeats are: a server paused mid-stop is no overdue stop."""
        if self._stop_began is None:
            return
        settings = self.settings
        limit = settings.drain_delay_seconds + settings.grace_seconds + STOP_MARGIN_S
        since = self._clock() - self._stop_began
        for pid, worker in list(self.children.items()):
            self._judge(pid, worker, "stopping", since, limit)

    def _spawn(self, worker: int) -> None:
        parent = os.getpid()
        # Blocked until each side has its own handlers: a stop that comes as the worker is
        # forked is then its default action in the child, and forwarded by the parent.
        signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            # A stop taken before the signals were blocked (its handler runs as the call
            # blocking them returns, at the latest) went to the workers there were: none is
            # started after it (at the first start or a restart), as it would never be told
            # to stop.
            if self.stopping:
                return
            pid = os.fork()
            if pid == 0:
                first = worker not in self._restarting
                _child(
                    self.settings, worker, parent, self.marks, self._own_sockets, first_start=first
                )
            self.children[pid] = worker
            self._spawned[pid] = self._clock()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
        say("worker_started", worker=worker, worker_pid=pid)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self._begin_stop()
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            worker = self.children.pop(pid, -1)
            code = os.waitstatus_to_exitcode(status)
            from ._metrics import mark_dead

            mark_dead(pid, never_served=code == START_FAILED)
            if self.marks is not None:
                forget(self.marks, pid)
                forget(self.marks, beat_name(pid))
            hung = pid in self._killed_hung
            self._killed_hung.discard(pid)
            self._beats.pop(pid, None)
            self._spawned.pop(pid, None)
            # A worker still starting (before its handlers are set) ends by the stop signal
            # itself: that is the stop asked for, not a failure.
            stopped = code == 0 or (self.stopping and code in (-signal.SIGTERM, -signal.SIGINT))
            say(
                "worker_exited",
                "INFO" if stopped else "WARNING",
                worker=worker,
                worker_pid=pid,
                code=code,
            )
            if self.stopping:
                if not stopped and self.exit_code != START_FAILED:  # the first cause is said
                    self.exit_code = 1
                continue
            if not stopped:  # a worker stopped by a signal sent to it alone is no failure
                reason = "hung" if hung else "start_failed" if code == START_FAILED else "died"
                self.exits[reason] += 1
            now = time.monotonic()
            if code == START_FAILED:
                if worker in self._restarting:
                    say(
                        "worker_restart_failed",
                        "ERROR",
                        worker=worker,
                        retry_in_s=FAILED_RESTART_BACKOFF_S,
                        running_workers=len(self.children),
                    )
                    self._pending.append((now + FAILED_RESTART_BACKOFF_S, worker))
                    continue
                say("worker_could_not_start", "ERROR", worker=worker)
                self.exit_code = START_FAILED
                self._stop_all()
                continue
            if not stopped:  # a worker stopped on its own signal uses none of the budget
                self._restarts = [t for t in self._restarts if now - t < RESTART_WINDOW_S]
                if len(self._restarts) >= MAX_RESTARTS_IN_WINDOW:
                    say("workers_keep_dying", "ERROR", restarts=len(self._restarts))
                    self.exit_code = 1
                    self._stop_all()
                    continue
                self._restarts.append(now)
            self._pending.append((now + RESTART_BACKOFF_S, worker))

    def _stop_all(self) -> None:
        self._begin_stop()
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def run(self) -> int:
        # First of all: a SIGHUP (or a stop) that comes during the checks below must not end
        # the supervisor by its default action.
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._forward)
        held = stop_held()  # sent while it started, its exception lost where Python reports it
        if held:
            say("stopped", signal=held, detail=STOPPED_DETAIL)
            return 0
        problem = ports_problem(self.settings)
        if problem:  # another server listens there: never share it silently
            say("start_failed", "ERROR", error=problem)
            return START_FAILED
        if self.settings.metrics_port:  # before any worker: a taken port stops the start
            from ._metrics import serve_multiprocess

            try:
                self._own_sockets = (
                    serve_multiprocess(
                        self.settings.metrics_port,
                        self.settings.host,
                        self.workers_serving,
                        lambda: dict(self.exits),
                    ),
                )
            except OSError as exc:
                port = self.settings.metrics_port
                say("start_failed", "ERROR", error=f"metrics port {port}: {exc}")
                return START_FAILED
        # An ignored SIGCHLD survives exec: under a launcher that ignores it the kernel would
        # reap dead workers unseen, none would be restarted, and the exit status would hide it.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # The clock's first reading, before the workers are started: a pause between their
        # start and the loop's first turn is then a gap that turn sees, not their start time.
        self._tick()
        for worker in range(self.settings.workers):
            self._spawn(worker)  # none once a stop was taken (see _spawn)
        while self.children or (self._pending and not self.stopping):
            self._tick()
            self._reap()
            self._kill_hung()
            self._kill_overdue()
            if self._pending and not self.stopping:
                now = time.monotonic()
                for due, worker in [p for p in self._pending if p[0] <= now]:
                    self._pending.remove((due, worker))
                    self._restarting.add(worker)
                    self._spawn(worker)
            time.sleep(0.05)
        say("supervisor_stopped", "INFO" if self.exit_code == 0 else "ERROR", code=self.exit_code)
        return self.exit_code


def run_workers(settings: ServerSettings) -> int:
    """Serve with settings.workers processes; returns the exit status."""
    show_from(settings.log_level)
    from ._metrics import MULTIPROC_ENV

    _remove_stale_folders()

    multiproc_dir = None
    if settings.metrics_port:
        try:
            multiproc_dir = tempfile.mkdtemp(prefix=_folder_prefix("metrics"))
        except OSError as exc:  # the workers' metrics need it: a start failure, said plainly
            why = f"metrics of --workers need a temporary folder: {exc}"
            say("start_failed", "ERROR", error=why)
            return START_FAILED
        os.environ[MULTIPROC_ENV] = multiproc_dir  # before prometheus_client is imported
    marks = _marks_folder()
    try:
        return Supervisor(settings, marks).run()
    finally:
        if marks is not None:
            shutil.rmtree(marks, ignore_errors=True)
        if multiproc_dir is not None:
            shutil.rmtree(multiproc_dir, ignore_errors=True)


_FOLDER: Final = re.compile(r"npu-resolver-(?:metrics|workers)-([0-9]+)-[^/]+")


def _folder_prefix(kind: str) -> str:
    """A temporary folder's name carries its supervisor's pid, so that one left by a killed
    supervisor can be told from a running server's."""
    return f"npu-resolver-{kind}-{os.getpid()}-"


def _remove_stale_folders() -> None:
    """The temporary folders of supervisors that were killed (SIGKILL, the OOM killer) before
    they could remove them: a pod's /tmp outlives its container, and each restart would leave
    a few MiB of worker metrics. A folder is stale when its supervisor is gone, or has this
    process's pid (a container's PID 1 restarted); only this user's folders are touched."""
    root = Path(tempfile.gettempdir())
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        found = _FOLDER.fullmatch(entry.name)
        if found is None:
            continue
        pid = int(found.group(1))
        with contextlib.suppress(OSError):
            if entry.lstat().st_uid != os.getuid() or not entry.is_dir() or entry.is_symlink():
                continue
            if pid == os.getpid() or not alive(pid):
                shutil.rmtree(entry, ignore_errors=True)


def _marks_folder() -> Path | None:
    """A private temporary folder for the workers' reload marks; without one (no writable
    temporary folder) the server still serves, and says what it cannot promise."""
    try:
        return Path(tempfile.mkdtemp(prefix=_folder_prefix("workers")))
    except OSError as exc:
        say(
            "reload_marks_unavailable",
            "WARNING",
            error=str(exc),
            effect="a ReloadPolicy reply will not wait for the other workers",
        )
        return None
