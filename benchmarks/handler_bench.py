"""The Resolve handler in process: what one call costs the server before and after the
transport, and where a distinct call's time goes.

The handler runs in an event loop (as served: call log lines are held and written in bursts)
with the server's defaults (answer cache on, log level INFO, lines written to the null device),
on the load generator's own requests. Stages are timed on every other distinct request, the
whole handler on the others, so both see the same mix of memo hits and misses. `make bench`
reports these figures; alone:

    python -m benchmarks.handler_bench --count 20000     (prints one JSON object)

With `--evict-mb N`, N MB of other memory is read before each timed call, as a server's other
work (gRPC's, between two calls) may leave the caches: what a call costs served rather than
in a loop that keeps the handler's data and code warm. Stages are then not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import npu_resolver
from benchmarks.echo_server import Echo
from benchmarks.load import distinct, working_set
from npu_resolver_client.wire import pb
from npu_resolver_server import _logging
from npu_resolver_server._cache import AnswerCache
from npu_resolver_server._policy_store import PolicyStore
from npu_resolver_server._reading import parse_with_config
from npu_resolver_server._replies import resolution_answer
from npu_resolver_server._servicer import ResolverService
from npu_resolver_server.settings import DEFAULT_CACHE_ENTRIES, DEFAULT_MAX_STRUCT_KEYS

STAGES = ("parse", "build", "core", "encode")


class _Context:
    """What the handlers use of a ServicerContext on an OK answer."""

    def set_trailing_metadata(self, metadata: object) -> None:
        pass

    async def abort(self, *args: object) -> None:
        raise RuntimeError(f"the benchmark's request was refused: {args}")


def _us(samples: list[int]) -> float:
    return round(statistics.median(samples) / 1000.0, 1)


Handler = Callable[[bytes, Any], Awaitable[bytes]]


async def _timed_calls(
    handler: Handler,
    items: list[bytes],
    evict: Callable[[], None] | None = None,
) -> list[int]:
    context = _Context()
    clock = time.perf_counter_ns
    samples = []
    for raw in items:
        if evict is not None:
            evict()
        start = clock()
        await handler(raw, context)
        samples.append(clock() - start)
    return samples


def _evicting(megabytes: float) -> Callable[[], None] | None:
    """A function that reads `megabytes` of other memory, every byte of it (reads only: no
    line it leaves in the caches needs writing back when the handler's data displaces it)."""
    if megabytes <= 0:
        return None
    memory = bytearray(b"\x01" * int(megabytes * 1024 * 1024))

    def evict() -> None:
        memory.count(0)

    return evict


async def _warmed_handler(count: int) -> tuple[ResolverService, Handler, list[bytes]]:
    """The service with the server's defaults, its Resolve handler, and the launcher's working
    set, the handler warmed as a server's would be: the working set seen twice (kept from the
    second sight, as in the server) and `count` / 4 distinct requests."""
    store = PolicyStore(None)
    store.load_initial()
    service = ResolverService(store, cache=AnswerCache(DEFAULT_CACHE_ENTRIES))
    handler = service._wrap("Resolve", service.resolve)
    hot = [raw for raw, _ in working_set()]
    await _timed_calls(handler, hot * 2)
    await _timed_calls(handler, [raw for raw, _ in distinct(count // 4, "handler-warm")])
    return service, handler, hot


async def _evicted_figures(count: int, megabytes: float) -> dict[str, float]:
    """The whole handler, distinct requests and cached answers, each call after the eviction."""
    _, handler, hot = await _warmed_handler(count)
    evict = _evicting(megabytes)
    whole = await _timed_calls(handler, [raw for raw, _ in distinct(count, "handler")], evict)
    hits = await _timed_calls(handler, (hot * (count // len(hot) + 1))[:count], evict)
    echo = await _timed_calls(Echo().resolve, hot, evict)
    return {
        "evict_mb": megabytes,
        "handler_distinct_us": _us(whole),
        "handler_hit_us": _us(hits),
        "handler_echo_us": _us(echo),
    }


async def _figures(count: int) -> dict[str, float]:
    service, handler, hot = await _warmed_handler(count)

    stages: dict[str, list[int]] = {name: [] for name in STAGES}
    whole: list[int] = []
    clock = time.perf_counter_ns
    for index, (raw, _) in enumerate(distinct(count, "handler")):
        if index % 2:
            whole += await _timed_calls(handler, [raw])
            continue
        t0 = clock()
        message, _left_out = parse_with_config(pb.ResolveRequest, raw, DEFAULT_MAX_STRUCT_KEYS)
        t1 = clock()
        request = service._request(message)
        t2 = clock()
        resolution = npu_resolver.resolve(request, policy=None)
        t3 = clock()
        resolution_answer(resolution, request.validate_only)
        t4 = clock()
        for name, spent in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            stages[name].append(spent)
    rounds = max(1, count // len(hot))
    hits = await _timed_calls(handler, hot * rounds)
    echo = await _timed_calls(Echo().resolve, hot * rounds)
    out = {f"handler_stage_{name}_us": _us(samples) for name, samples in stages.items()}
    out["handler_distinct_us"] = _us(whole)
    out["handler_hit_us"] = _us(hits)
    out["handler_echo_us"] = _us(echo)
    return out


def handler_figures(count: int, evict_mb: float = 0.0) -> dict[str, float]:
    """Median µs per call of the Resolve handler: a distinct request (and its stages), a cached
    answer, and the echo server's handler on the same requests; with `evict_mb`, each call after
    reading that much other memory (see the module's docstring). The process's logging is as it
    was afterwards."""
    root = logging.getLogger("npu_resolver_server")
    saved = root.handlers[:], root.level, root.propagate, _logging._Sink.handler
    try:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            _logging.configure("INFO")
            assert _logging._Sink.handler is not None
            _logging._Sink.handler.setStream(sink)
            try:
                if evict_mb > 0:
                    return asyncio.run(_evicted_figures(count, evict_mb))
                return asyncio.run(_figures(count))
            finally:
                _logging.flush_calls()
    finally:
        root.handlers[:], root.level, root.propagate, _logging._Sink.handler = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--count", type=int, default=2000, help="distinct requests timed")
    parser.add_argument(
        "--evict-mb", type=float, default=0.0, help="MB of other memory read before each call"
    )
    args = parser.parse_args()
    print(json.dumps(handler_figures(args.count, args.evict_mb)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
