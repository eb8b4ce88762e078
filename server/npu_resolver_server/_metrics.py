"""Prometheus metrics: calls by method and status, latency, diagnostics, policy state.

With one process the metrics page is served by the worker itself. With --workers N the parent
sets PROMETHEUS_MULTIPROC_DIR to a fresh folder before forking, each worker writes its samples
there, and the parent serves the page aggregated over all workers (`serve_multiprocess`).
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
MAX_CACHED_CHILDREN: Final = 4096
MAX_KEPT_CODES: Final = 32
"""An answer's list of diagnostic codes is kept (to find its counters at once the next time)
only when this short: a caller can send a request with thousands of diagnostics."""
LATENCY_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""From a cached answer (tens of µs) to what waits by design: a 1,000-item batch (about 0.1 s),
a request of megabyte attachments (about 2 s) and ReloadPolicy, which waits for a reload in
progress (up to 10 s)."""


class Metrics:
    """The server's metrics; every method is cheap and safe to call per request."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = registry if registry is not None else REGISTRY
        self.requests = Counter(
            "npu_resolver_requests",
            "gRPC calls answered, by method and status code.",
            ["method", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "npu_resolver_request_latency_seconds",
            "Time to answer a gRPC call in the handler, by method.",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.diagnostics = Counter(
            "npu_resolver_diagnostics",
            "Diagnostics in answers, by code and product.",
            ["code", "product"],
            registry=registry,
        )
        self.batch_items = Counter(
            "npu_resolver_batch_items",
            "Items resolved through ResolveBatch, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.cache = Counter(
            "npu_resolver_answer_cache",
            "Answer cache look-ups, by result (hit or miss).",
            ["result"],
            registry=registry,
        )
        self.policy_info = Gauge(
            "npu_resolver_policy_info",
            "The policy version in force (value 1 on the current version's series).",
            ["version"],
            multiprocess_mode="livemax",
            registry=registry,
        )
        self.reload_failures = Counter(
            "npu_resolver_policy_reload_failures",
            "Policy reloads that failed (the last good policy stayed in force).",
            registry=registry,
        )
        self.reload_failing = Gauge(
            "npu_resolver_policy_reload_failing",
            "1 while the policy file on disk is refused (the last good policy serves, and a "
            "new worker or pod would not start), else 0.",
            multiprocess_mode="livemax",
            registry=registry,
        )
        self._memory: Any = None
        if MULTIPROC_ENV in os.environ:
            # A worker's process_* series are not on a --workers page (prometheus_client
            # collects them per process only): its resident memory, a series a worker.
            self._memory = Gauge(
                WORKER_MEMORY,
                "Resident memory of each worker (label pid), updated every second; under "
                "--workers only (one worker's page has process_resident_memory_bytes).",
                multiprocess_mode="liveall",
                registry=registry,
            )
        self._registry = registry
        self._tls_expiry: Any = None
        """Made when a certificate is loaded: a server without TLS has no such series (a gauge
        without labels would say 0, an expiry in 1970)."""
        self._version: str | None = None
        self._children: dict[tuple[Any, ...], Any] = {}
        self._calls: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._code_sets: dict[tuple[str, tuple[str, ...]], tuple[Any, ...]] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once: `labels()` costs more than an increment."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= MAX_CACHED_CHILDREN:  # e.g. many unknown product names
                self._children.clear()
            child = self._children[key] = metric.labels(*labels)
        return child

    def _call_children(self, method: str, code: str) -> tuple[Any, Any]:
        """The request counter and latency children of one method and status, as one look-up."""
        key = (method, code)
        pair = self._calls.get(key)
        if pair is None:
            if len(self._calls) >= MAX_CACHED_CHILDREN:
                self._calls.clear()
            pair = self._calls[key] = (
                self._child(self.requests, method, code),
                self._child(self.latency, method),
            )
        return pair

    def observe(
        self, method: str, code: str, seconds: float, product: str, codes: Iterable[str]
    ) -> None:
        counter, latency = self._call_children(method, code)
        counter.inc()
        latency.observe(seconds)
        self.diagnostics_seen(product, codes)

    def refused(self, method: str, code: str) -> None:
        """A call refused before its handler ran: counted, with no latency to observe."""
        self._child(self.requests, method, code).inc()

    def diagnostics_seen(self, product: str, codes: Iterable[str]) -> None:
        """One answer's diagnostics (a batch item's, a diff column's), one count each. The
        answers of a server repeat a few sets of codes: each set's children are found once."""
        if not codes:
            return
        key = (product, codes if isinstance(codes, tuple) else tuple(codes))
        if len(key[1]) > MAX_KEPT_CODES:  # a long report: counted by code, its list not kept
            for code, count in Counter(key[1]).items():
                self._child(self.diagnostics, code, product or "unknown").inc(count)
            return
        children = self._code_sets.get(key)
        if children is None:
            if len(self._code_sets) >= MAX_CACHED_CHILDREN:
                self._code_sets.clear()
            children = self._code_sets[key] = tuple(
                self._child(self.diagnostics, code, product or "unknown") for code in key[1]
            )
        for child in children:
            child.inc()

    def cache_lookup(self, hit: bool) -> None:
        self._child(self.cache, "hit" if hit else "miss").inc()

    def batch(self, ok: int, failed: int) -> None:
        self._child(self.batch_items, "ok").inc(ok)
        self._child(self.batch_items, "failed").inc(failed)

    def policy(self, version: str, *, failing: bool = False) -> None:
        self.reload_failing.set(1 if failing else 0)
        if version != self._version:
            if self._version is not None:
                self.policy_info.labels(self._version).set(0)
                if MULTIPROC_ENV not in os.environ:
                    # Under --workers a series cannot be removed (prometheus_client says so
                    # in a warning, a line that is not JSON in the log): it stays at 0.
                    self.policy_info.remove(self._version)
            self.policy_info.labels(version).set(1)
            self._version = version

    def memory(self) -> None:
        """This worker's resident memory now (under --workers; a no-op otherwise)."""
        if self._memory is None:
            return
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open("/proc/self/statm", "rb") as statm:
                pages = int(statm.read().split()[1])
            self._memory.set(pages * _PAGE_BYTES)

    def serving(self, workers: int) -> None:
        """This worker answers calls from now on. Under --workers the supervisor says how many
        do (a worker's own series would be gone with it, the last one's included)."""
        if MULTIPROC_ENV in os.environ:
            return
        from prometheus_client import Gauge

        for name, value in ((WORKERS_SERVING, 1), (WORKERS_CONFIGURED, workers)):
            Gauge(name, _WORKERS_HELP[name], registry=self._registry).set(value)

    def certificate(self, expires: float | None) -> None:
        """The serving certificate just loaded (its expiry unread: the series says nothing)."""
        if expires is None:
            return
        if self._tls_expiry is None:
            from prometheus_client import Gauge

            self._tls_expiry = Gauge(
                "npu_resolver_tls_certificate_expiry_timestamp_seconds",
                "When the serving TLS certificate expires (seconds since the epoch): alert well "
                "before it, as a renewal that stopped coming is otherwise seen only when "
                "clients fail their handshakes.",
                multiprocess_mode="livemin",
                registry=self._registry,
            )
        self._tls_expiry.set(expires)

    def reload_failed(self, count: int) -> None:
        """Failed reloads this worker counts for the server (see ReloadFailures)."""
        if count:
            self.reload_failures.inc(count)


def _bare(host: str) -> str:
    """The address as a socket takes it: `--host [::1]` is written as gRPC takes it."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def start_http(port: int, host: str = "0.0.0.0") -> None:
    """Serve this process's metrics on `port` (one-worker mode)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=_bare(host))


WORKER_MEMORY: Final = "npu_resolver_worker_resident_memory_bytes"
_PAGE_BYTES: Final = os.sysconf("SC_PAGE_SIZE")
WORKERS_SERVING: Final = "npu_resolver_workers_serving"
WORKERS_CONFIGURED: Final = "npu_resolver_workers_configured"
_WORKERS_HELP: Final = {
    WORKERS_SERVING: "Workers answering calls: below npu_resolver_workers_configured, part of "
    "the server is down (under --workers, 0 when every worker is).",
    WORKERS_CONFIGURED: "The workers the server runs when all is well (--workers).",
}


WORKER_EXITS: Final = "npu_resolver_worker_exits"
_WORKER_EXITS_HELP: Final = (
    "Workers that ended without a stop, each restarted (or the server stopped), by reason: "
    "died (a signal or an error), hung (killed after its heartbeat stopped), start_failed (a "
    "worker that could not start). Under --workers only."
)


class _Workers:
    """The supervisor's count of its workers, and of those that ended without a stop, read at
    each scrape."""

    def __init__(
        self,
        count: Callable[[], tuple[int, int]],
        exits: Callable[[], Mapping[str, int]] | None,
    ) -> None:
        self._count = count
        self._exits = exits

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        serving, configured = self._count()
        for name, value in ((WORKERS_SERVING, serving), (WORKERS_CONFIGURED, configured)):
            yield GaugeMetricFamily(name, _WORKERS_HELP[name], value=value)
        if self._exits is not None:
            family = CounterMetricFamily(WORKER_EXITS, _WORKER_EXITS_HELP, labels=("reason",))
            for reason, count in self._exits().items():
                family.add_metric((reason,), count)
            yield family


def serve_multiprocess(
    port: int,
    host: str = "0.0.0.0",
    workers: Callable[[], tuple[int, int]] | None = None,
    exits: Callable[[], Mapping[str, int]] | None = None,
) -> int:
    """Serve the metrics of every worker, aggregated from PROMETHEUS_MULTIPROC_DIR, and
    `workers()` (serving, configured) and `exits()` (reason -> count) as the supervisor counts
    them; returns the listening socket's file descriptor (for the workers forked later to
    close)."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=os.environ[MULTIPROC_ENV])  # type: ignore[no-untyped-call]
    if workers is not None:
        registry.register(_Workers(workers, exits))
    server, _thread = start_http_server(port, addr=_bare(host), registry=registry)
    return int(server.socket.fileno())


def mark_dead(pid: int, *, never_served: bool = False) -> None:
    """A worker is gone: its live gauges leave the page. One that never served (its start
    failed) counted nothing, and its files go too: a restart retried every 5 s against a
    refused policy left a file per attempt, about 17,000 a day, each read at every scrape."""
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
    if never_served:
        for path in Path(folder).glob(f"*_{pid}.db"):
            with contextlib.suppress(OSError):
                path.unlink()
