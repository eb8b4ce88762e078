"""Signals, pauses and cancels at unlucky moments: a stop taken just before a worker is forked,
the whole server paused before the supervisor's first turn or while a large request runs,
callers leaving while their large request waits or while a ReloadPolicy waits for the other
workers, a stop during that wait. Each is one order of events, made deterministic with fakes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from npu_resolver_server import _supervisor
from tests._server import free_port

OTHER = os.getppid()


class _World:
    """The supervisor's processes, faked: fork gives a new pid, a worker sent SIGTERM or SIGINT
    drains and exits 0 at once, one sent SIGKILL dies of it; the clock moves only by sleep."""

    def __init__(self) -> None:
        self.clock = [100.0]
        self.next_pid = 101
        self.alive: set[int] = set()
        self.exited: list[tuple[int, int]] = []  # (pid, wait status)
        self.sent: list[tuple[int, int]] = []

    def fork(self) -> int:
        pid, self.next_pid = self.next_pid, self.next_pid + 1
        self.alive.add(pid)
        return pid

    def kill(self, pid: int, signum: int) -> None:
        self.sent.append((pid, signum))
        if pid not in self.alive:
            raise ProcessLookupError(pid)
        if signum in (signal.SIGTERM, signal.SIGINT):
            self.die(pid, 0)  # a clean drain: exit status 0
        elif signum == signal.SIGKILL:
            self.die(pid, signal.SIGKILL)  # killed by a signal: the status is its number

    def die(self, pid: int, status: int) -> None:
        self.alive.discard(pid)
        self.exited.append((pid, status))

    def waitpid(self, pid: int, options: int) -> tuple[int, int]:
        if self.exited:
            return self.exited.pop(0)
        if self.alive:
            return 0, 0
        raise ChildProcessError

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def sleep(seconds: float) -> None:
            self.clock[0] += seconds

        fake_time = types.SimpleNamespace(
            monotonic=lambda: self.clock[0], time=time.time, sleep=sleep
        )
        fake_os = types.SimpleNamespace(
            getpid=lambda: 4242,
            fork=self.fork,
            kill=self.kill,
            waitpid=self.waitpid,
            WNOHANG=os.WNOHANG,
            waitstatus_to_exitcode=os.waitstatus_to_exitcode,
            _exit=os._exit,
        )
        fake_signal = types.SimpleNamespace(
            **{
                name: getattr(signal, name)
                for name in (
                    "SIGTERM",
                    "SIGINT",
                    "SIGHUP",
                    "SIGKILL",
                    "SIGCHLD",
                    "SIG_DFL",
                    "SIG_BLOCK",
                    "SIG_UNBLOCK",
                )
            },
            signal=lambda signum, handler: None,
            pthread_sigmask=lambda how, mask: None,
        )
        monkeypatch.setattr(_supervisor, "time", fake_time)
        monkeypatch.setattr(_supervisor, "os", fake_os)
        monkeypatch.setattr(_supervisor, "signal", fake_signal)
        monkeypatch.setattr(_supervisor, "ports_problem", lambda settings: "")


@pytest.mark.parametrize("when", ["first start", "restart"])
def test_a_stop_taken_just_before_a_worker_is_forked_reaches_that_worker(
    monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """SIGTERM's handler runs as _spawn is entered (at a first start or a restart): after its
    caller saw `stopping` False, before _spawn blocks the signals. The handler forwards the
    stop to the workers there are; no worker is forked after it. One was, never told to stop:
    it served on and was killed as hung at the stop's allowance (exit 1)."""
    from npu_resolver_server import ServerSettings

    world = _World()
    world.install(monkeypatch)
    supervisor = _supervisor.Supervisor(
        ServerSettings(port=50999, workers=3, grace_seconds=0, drain_delay_seconds=0), None
    )
    spawn = supervisor._spawn
    spawns = [0]
    stop_at = 2 if when == "first start" else 5  # the second worker; the second restart

    def spawned(worker: int) -> None:
        spawns[0] += 1
        if spawns[0] == stop_at:
            supervisor._forward(signal.SIGTERM, None)  # the handler, at _spawn's first line
        if spawns[0] == 3 and when == "restart":
            spawn(worker)
            world.die(102, 1 << 8)  # two workers crash (exit 1): two restarts due
            world.die(103, 1 << 8)
            return
        spawn(worker)

    monkeypatch.setattr(supervisor, "_spawn", spawned)
    code = supervisor.run()
    forked = set(range(101, world.next_pid))
    told = {pid for pid, signum in world.sent if signum == signal.SIGTERM}
    killed = [pid for pid, signum in world.sent if signum == signal.SIGKILL]
    crashed = {102, 103} if when == "restart" else set()
    assert (killed, code) == ([], 0)
    assert told == forked - crashed  # every worker alive at the stop was told of it


def test_a_pause_before_the_loops_first_turn_is_no_workers_start_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole server stopped (Ctrl-Z) after the workers were forked and before the loop's
    first turn, for longer than a start is allowed: the first turn sees the gap as a pause (the
    clock was read before the forks). It took it for every worker's start, killed them all as
    hung (phase starting), and six such deaths at once stopped the server (exit 1)."""
    from npu_resolver_server import ServerSettings

    world = _World()
    world.install(monkeypatch)
    supervisor = _supervisor.Supervisor(ServerSettings(port=50999, workers=6), tmp_path)
    tick, turns, paused = supervisor._tick, [0], [False]

    def turn() -> None:
        if supervisor.children and not paused[0]:
            paused[0] = True
            world.clock[0] += 100.0  # paused after the forks, before the loop's first turn
        tick()
        turns[0] += 1
        if turns[0] == 40:  # 2 s of turns after the resume
            raise RuntimeError("still serving")

    monkeypatch.setattr(supervisor, "_tick", turn)
    with pytest.raises(RuntimeError, match="still serving"):
        supervisor.run()
    assert paused[0]
    assert [pid for pid, signum in world.sent if signum == signal.SIGKILL] == []
    assert supervisor.exit_code == 0


def test_large_requests_whose_callers_left_still_count_until_the_thread_drops_them() -> None:
    """A large request's caller leaves (its deadline, a cancel) while it waits behind a long
    one: its bytes stay queued until the thread reaches it. Its count was given back at once,
    so the queue grew past the bound unseen while one request ran; it now counts until the
    thread drops it, the worker is full at the bound, and empty again once the thread is past
    them."""
    from npu_resolver_server._large import MAX_HELD, LargeRequests

    async def main() -> None:
        large = LargeRequests()
        release = threading.Event()
        running = asyncio.ensure_future(large.run(release.wait, 5))  # a long request runs
        await asyncio.sleep(0.05)
        sent = 0
        while not large.full and sent < 3 * MAX_HELD:  # the servicer answers busy when full
            call = asyncio.ensure_future(large.run(len, bytes(100 * 1024)))
            await asyncio.sleep(0)
            call.cancel()
            await asyncio.sleep(0)
            sent += 1
        assert large.full and sent == MAX_HELD - 1, sent  # the running one holds a place
        release.set()
        await running
        for _ in range(200):
            if not large.full and large._held == 0:
                break
            await asyncio.sleep(0.01)
        assert large._held == 0  # every dropped request given back
        large.close()

    asyncio.run(main())


@contextlib.asynccontextmanager
async def _a_large_request_running(large: Any) -> AsyncIterator[None]:
    """A large request running on `large`'s thread until the block ends; then the thread is
    told to stop."""
    release, began = threading.Event(), threading.Event()

    def request() -> None:
        began.set()
        release.wait(5)

    running = asyncio.ensure_future(large.run(request))
    while not began.is_set():
        await asyncio.sleep(0.001)
    try:
        yield
    finally:
        release.set()
        await running
        large.close()


@pytest.mark.parametrize("paused", [True, False], ids=["paused", "starved"])
def test_a_pause_of_the_whole_worker_is_no_large_requests_running_time(
    monkeypatch: pytest.MonkeyPatch, paused: bool
) -> None:
    """A large request has run 0.2 s when the heartbeat's next turn comes 10 s late. The whole
    worker paused (Ctrl-Z: no CPU spent meanwhile), that time is given back to the request,
    which has still run 0.2 s, not past half the hung limit (7.5 s of 15), and the heartbeat
    goes on (it was held, with a large_request_stuck line, for a request of 0.2 s). The loop
    starved by the request itself (CPU spent all along) is no pause: the request has run 10.2 s
    and the heartbeat is held. Turns late by less than LATE_BEAT_S give nothing back: a request
    that runs on is still seen, paused or not."""
    from npu_resolver_server import _app, _large

    clock, cpu = [100.0], [5.0]
    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], process_time=lambda: cpu[0])
    monkeypatch.setattr(_large, "time", fake_time)
    monkeypatch.setattr(_app, "time", fake_time)
    monkeypatch.setattr(_app, "HEARTBEAT_S", 0.01)
    limit = 15.0 / 2  # hung_worker_seconds' default, halved as serve() does
    beats: list[float] = []

    class Marks:
        def beat(self) -> None:
            beats.append(clock[0])

    async def main() -> None:
        large = _large.LargeRequests()
        async with _a_large_request_running(large):
            await beating(large)

    async def beating(large: _large.LargeRequests) -> None:
        heartbeat = asyncio.ensure_future(
            _app._heartbeat(cast(Any, Marks()), lambda: large.running_for() > limit, large.skip)
        )
        await asyncio.sleep(0.03)
        clock[0] += 0.2  # it runs 0.2 s
        cpu[0] += 0.2
        await asyncio.sleep(0.03)
        clock[0] += 10.0  # 10 s without a turn of the loop
        cpu[0] += 0.0 if paused else 10.0
        await asyncio.sleep(0.05)  # a few turns of the heartbeat after it
        if paused:
            assert 0.2 <= large.running_for() < 0.3
            assert beats[-1] == clock[0]  # beating on
            for _ in range(16):  # now it runs on, 0.5 s at a time: 8 s more
                clock[0] += 0.5
                await asyncio.sleep(0.03)
        assert large.running_for() > limit
        assert beats[-1] < clock[0]  # held: the request is stuck
        heartbeat.cancel()

    asyncio.run(main())


def test_a_pause_right_after_a_busy_second_is_given_back_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large request burns CPU for a second, then the whole worker is paused for 10 s: the
    heartbeat's loop turns often (WATCH_S), so the CPU of that second is not taken out of the
    pause (with one turn a second, the request was said to have run 2 s, not 1, and with two
    busy threads more: a short hung-worker limit then held the heartbeat falsely)."""
    from npu_resolver_server import _app, _large

    clock, cpu = [100.0], [5.0]
    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], process_time=lambda: cpu[0])
    monkeypatch.setattr(_large, "time", fake_time)
    monkeypatch.setattr(_app, "time", fake_time)
    monkeypatch.setattr(_app, "WATCH_S", 0.005)  # HEARTBEAT_S stays 1 s

    class Marks:
        def beat(self) -> None:
            pass

    async def main() -> None:
        large = _large.LargeRequests()
        async with _a_large_request_running(large):
            heartbeat = asyncio.ensure_future(
                _app._heartbeat(cast(Any, Marks()), lambda: False, large.skip)
            )
            await asyncio.sleep(0.02)
            for _ in range(4):  # busy: 1 s of CPU in 1 s, two threads' worth at the end
                clock[0] += 0.25
                cpu[0] += 0.25
                await asyncio.sleep(0.02)
            cpu[0] += 0.25
            clock[0] += 10.0  # paused
            await asyncio.sleep(0.05)
            heartbeat.cancel()
            assert 1.0 <= large.running_for() <= 1.3, large.running_for()

    asyncio.run(main())


def test_a_pause_before_a_large_request_began_is_not_given_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker was paused for 100 s, and a large request began in the second after it and
    before the heartbeat's late turn: only what of the pause falls after its start (none) is
    given back; more would be allowance for a request stuck from its start."""
    from npu_resolver_server import _large

    clock = [100.0]
    monkeypatch.setattr(_large, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))

    async def main() -> None:
        large = _large.LargeRequests()
        clock[0] = 200.5  # paused from 100 to 200; the request begins at 200.5
        async with _a_large_request_running(large):
            clock[0] = 201.0  # the heartbeat's turn: late by 100 s, none of it spent running
            large.skip(100.0, 100.0)
            assert large.running_for() == 0.5

    asyncio.run(main())


def test_a_thread_that_could_not_start_is_started_by_the_next_large_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread limit reached as the first large request came: that request fails, and the
    next one starts the thread. Kept as started, the failed thread took every later request
    into a queue nobody read, held them all, and the worker refused large requests for life."""
    from npu_resolver_server import _large

    start = threading.Thread.start
    failed = [False]

    def start_once_failing(thread: threading.Thread) -> None:
        if not failed[0]:
            failed[0] = True
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_once_failing)

    async def main() -> None:
        large = _large.LargeRequests()
        with pytest.raises(RuntimeError, match="can't start new thread"):
            await large.run(len, b"first")
        assert await asyncio.wait_for(large.run(len, b"second"), 5) == 6
        assert not large.full and large._held == 0
        large.close()

    asyncio.run(main())


def _reload_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first_stop: list[float]) -> Any:
    """A worker of a --workers server (in process, on a free port of 127.0.0.1) whose other
    worker (OTHER, alive) never re-reads the policy file; no signal is really sent. Stopping
    once `first_stop` holds the time of the stop signal."""
    from npu_resolver_server import ServerSettings, _app
    from npu_resolver_server._policy_store import PolicyStore
    from npu_resolver_server._reload_marks import ReloadMarks
    from tests.test_grpc_policy import fake_loader

    monkeypatch.setattr(_app, "os", types.SimpleNamespace(getppid=os.getppid, kill=lambda *a: None))
    policy = tmp_path / "policy.toml"
    policy.write_text("v1")
    store = PolicyStore(policy, loader=fake_loader)
    store.load_initial()
    (tmp_path / "marks").mkdir()
    ReloadMarks(tmp_path / "marks", pid=OTHER).record(1)  # read long before any call
    settings = ServerSettings(
        host="127.0.0.1",
        port=free_port(),
        workers=2,
        grace_seconds=1.0,
        drain_delay_seconds=0.0,
    )
    drain_s = settings.drain_delay_seconds + settings.grace_seconds

    def stopping() -> float | None:  # as serve() has it
        return first_stop[0] + drain_s - time.monotonic() if first_stop else None

    return _app.create_server(
        settings, store=store, marks=ReloadMarks(tmp_path / "marks"), stopping=stopping
    )


def test_a_stop_that_comes_during_the_reload_wait_still_gets_its_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply's wait ends before the drain does, so that a worker that never catches up
    delays the reply but never fails it: a stop that comes during the wait shortens it. Read
    once as the wait began, the drain's end (1 s later) cancelled the call, its reply lost."""

    first_stop: list[float] = []

    async def main() -> str:
        built = _reload_server(tmp_path, monkeypatch, first_stop)
        await built.start()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{built.port}") as channel:
            reload = channel.unary_unary("/npu.resolver.v1.Resolver/ReloadPolicy")
            call = reload(b"", timeout=30)
            await asyncio.sleep(0.3)  # the reply waits for OTHER now
            first_stop.append(time.monotonic())  # SIGTERM, as on_stop notes it
            began = time.monotonic()
            await built.stop()  # drain delay 0, grace 1 s
            try:
                await call
                outcome = "OK"
            except grpc.aio.AioRpcError as error:
                outcome = f"{error.code().name}: {error.details()}"
            return f"{outcome} ({time.monotonic() - began:.2f} s after the stop)"

    outcome = asyncio.run(main())
    assert outcome.startswith("OK"), outcome


def test_a_caller_that_leaves_during_the_reload_wait_is_said_no_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that cancels while its reply waits for the other workers ends the wait, and
    nothing is said of a reply never sent. Read once as the wait began, the wait ran its whole
    length, then logged reload_not_confirmed ("ReloadPolicy answered before every worker
    re-read the policy file") for a call that got no reply."""
    from npu_resolver_server import _app
    from tests.test_call_log import _configured

    monkeypatch.setattr(_app, "WAIT_S", 2.0)

    class NoDeadline:
        def time_remaining(self) -> float | None:
            return None

    async def main() -> float:
        built = _reload_server(tmp_path, monkeypatch, [])
        service = built.service
        call = asyncio.ensure_future(service.reload_policy(b"", cast(Any, NoDeadline())))
        await asyncio.sleep(0.2)  # loaded; now waiting for OTHER
        call.cancel()  # the caller leaves
        with pytest.raises(asyncio.CancelledError):
            await call
        left = time.monotonic()
        while service._reloading:
            await asyncio.sleep(0.01)
        return time.monotonic() - left

    with _configured() as log:
        waited = asyncio.run(main())
    lines = [json.loads(text) for text in log.getvalue().splitlines()]
    said = [line for line in lines if line.get("event") == "reload_not_confirmed"]
    assert not said
    assert waited < 1.0  # the wait ended with its caller (within a poll), not 2 s later
