"""The worker's thread for large requests, which would hold its event loop for a tenth to half a
second each (attachments of hundreds of kilobytes): one resolved at a time, a bounded number
held, and how long the one running has run, so that a request stuck there is seen."""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, ParamSpec, TypeVar

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


class LargeRequests:
    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="large-requests")
        self._held = 0
        self._began: float | None = None

    @property
    def full(self) -> bool:
        return self._held >= MAX_HELD

    def running_for(self) -> float:
        """Seconds the request on the thread has run (0 with none)."""
        began = self._began
        return 0.0 if began is None else time.monotonic() - began

    async def run(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """`fn` on the thread, in its turn; a caller that leaves before it begins drops it."""
        loop = asyncio.get_running_loop()
        self._held += 1
        try:
            return await loop.run_in_executor(
                self._thread, functools.partial(self._timed, fn, *args, **kwargs)
            )
        finally:
            self._held -= 1

    def _timed(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        self._began = time.monotonic()
        usual = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setswitchinterval(usual)
            self._began = None

    def close(self) -> None:
        """After the server stopped: requests not yet begun are dropped (their callers are
        gone)."""
        self._thread.shutdown(wait=False, cancel_futures=True)
