"""The worker's thread for large requests, which would hold its event loop for a tenth to half a
second each (attachments of hundreds of kilobytes): one resolved at a time, a bounded number
held, and how long the one running has run, so that a request stuck there is seen."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, ParamSpec, TypeVar

MAX_HELD: Final = 64
"""Large requests a worker holds at once, the one resolved and those waiting their turn (at most
64 times the message limit in memory, and a wait of up to half a minute for the last): one
more is answered UNAVAILABLE at once, rather than held for a turn its caller's deadline would
not see; a client's gRPC retries it (this project's client: 5 attempts over about 1.5 s, spread
over the replicas it balances across)."""
SWITCH_INTERVAL_S: Final = 0.0005
"""Python's thread switch interval while a large request is resolved (5 ms otherwise): the
event loop, which needs the interpreter for a moment at each of its turns, gets it back ten
times sooner. 32 callers of small calls beside one to four callers of 3.5 MB requests: 1,100 to
1,500 small calls a second at p50 19 to 27 ms, against 260 to 310 at 112 to 124 ms with 5 ms;
the large requests take about half as long again (6 to 10 answered in 6 s, against 11 to 14)."""

_P = ParamSpec("_P")
_T = TypeVar("_T")
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class _Faster:
    """The lowered switch interval, process-wide: lowered by the first large request running in
    the process (any server's), restored by the last to end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._usual = sys.getswitchinterval()

    def __enter__(self) -> None:
        with self._lock:
            if not self._running:
                self._usual = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._running += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._running -= 1
            if not self._running:
                sys.setswitchinterval(self._usual)


_FASTER: Final = _Faster()


class LargeRequests:
    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._held = 0
        """Requests queued or running, counted on the event loop: each from the moment it is
        queued until the thread is done with it, so that one whose caller left while it
        waited (its bytes still queued) or while it ran still counts."""
        self._running: list[float] | None = None
        """The running request's [start, seconds of it the worker did not run], set anew by
        the thread for each request (added to on the event loop: see skip)."""

    @property
    def full(self) -> bool:
        return self._held >= MAX_HELD

    def running_for(self) -> float:
        """Seconds the request on the thread has run (0 with none), less the time the worker
        did not run meanwhile: a whole worker paused (Ctrl-Z, a paused container) is no
        request's running time."""
        running = self._running
        return 0.0 if running is None else time.monotonic() - running[0] - running[1]

    def skip(self, since: float, seconds: float) -> None:
        """The worker did not run for `seconds` since `since` (found by the heartbeat's turns):
        the running request is given back what of them must fall after its start (taken as
        early as it can be), so that one begun during that time is not given time it may have
        run."""
        running = self._running
        if running is not None:  # the thread may set another meanwhile: this one's is moot
            running[1] += max(0.0, seconds - max(0.0, running[0] - since))

    async def run(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """`fn` on the thread, in its turn; a caller that leaves before it begins drops it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        if self._thread is None:  # started by the first large request, in the worker
            # A daemon: a request stuck there does not hold the process's exit once the
            # server has stopped (the interpreter joins other threads). Kept once started: a
            # start that failed (a thread limit) is tried again by the next request, not
            # taken for a thread that would never take the requests queued for it.
            thread = threading.Thread(target=self._work, name="large-requests", daemon=True)
            thread.start()
            self._thread = thread
        self._held += 1
        self._jobs.put((loop, future, functools.partial(fn, *args, **kwargs)))
        return await future

    def _done(self, future: asyncio.Future[Any], settle: Callable[[Any], None], value: Any) -> None:
        """On the event loop, once the thread is done with a request: its count given back,
        and its answer given to its caller if that one still waits."""
        self._held -= 1
        if not future.cancelled():
            settle(value)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, call = job
            outcome: tuple[Callable[[Any], None], Any] = (future.set_result, None)
            if not future.cancelled():  # else its caller left before its turn
                self._running = [time.monotonic(), 0.0]
                try:
                    with _FASTER:
                        outcome = (future.set_result, call())
                except Exception as exc:
                    outcome = (future.set_exception, exc)
                finally:
                    self._running = None
            del job, call  # the request's bytes, held no longer than its turn
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self._done, future, *outcome)

    def close(self) -> None:
        """After the server stopped: the thread ends after the request it runs; those not yet
        begun are dropped (their callers are gone)."""
        self._jobs.put(None)
