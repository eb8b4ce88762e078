"""The grpc.aio server of one worker process: build, start, serve, drain.

`create_server(settings)` builds a server that is not started yet; `serve(settings)` runs one
until SIGTERM or SIGINT, then drains: health NOT_SERVING, no new calls, in-flight calls get
`grace_seconds` to finish, exit status 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from npu_resolver import PolicyError, PolicyReadError
from npu_resolver_client.wire import pb

from . import _logging
from ._auth import TokenFile, TokenInterceptor
from ._cache import AnswerCache
from ._cert_dates import utc_text
from ._metrics import Metrics
from ._policy_store import PolicyStore, ReloadOutcome
from ._reload_marks import (
    DEADLINE_MARGIN_S,
    WAIT_S,
    FailureCounter,
    ReloadFailures,
    ReloadMarks,
    now_ns,
)
from ._servicer import SERVICE, AfterReload, Limits, ResolverService
from ._start_signals import STOPPED_DETAIL, hold_sighup, sighup_held, stop_held
from ._tls import CertificateFiles, certificate_files, server_credentials
from .settings import HEALTH_SERVICE, ServerSettings

log = logging.getLogger("npu_resolver_server")

KEEPALIVE_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 2),
    # Reconnect clients now and then so that round_robin spreads load over new replicas.
    ("grpc.max_connection_age_ms", 300_000),
    ("grpc.max_connection_age_grace_ms", 30_000),
)
PENDING_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    # Calls received but not yet handed to a handler. gRPC's defaults (1,000, hard 3,000) cancel
    # the rest of a launcher's burst with no trace in the log or the metrics; a burst this size
    # waits its turn instead (a few KiB each), and its deadlines still bound it.
    ("grpc.server.max_pending_requests", 16_384),
    ("grpc.server.max_pending_requests_hard_limit", 20_000),
)
SERVICE_NAMES: Final = (
    pb.DESCRIPTOR.services_by_name["Resolver"].full_name,
    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
    reflection.SERVICE_NAME,
)

assert SERVICE == HEALTH_SERVICE == SERVICE_NAMES[0]

REFLECTION_V1: Final = "grpc.reflection.v1.ServerReflection"
"""gRPC's current reflection service, which clients built on its v1 API ask for: the same
protocol as v1alpha, message for message, which is all grpcio-reflection serves."""


def _reflection_v1_file() -> None:
    """Put grpc/reflection/v1/reflection.proto in the default pool, made from v1alpha's (the
    same messages under another package, as gRPC publishes them), so that the v1 service it
    lists can also be described: a v1 client that lists, then describes every service, would
    meet NOT_FOUND for it."""
    pool = descriptor_pool.Default()
    name = "grpc/reflection/v1/reflection.proto"
    try:
        pool.FindFileByName(name)
        return  # another library registered it
    except KeyError:
        pass
    old, new = reflection_pb2.DESCRIPTOR.package, REFLECTION_V1.rsplit(".", 1)[0]
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name, proto.package = name, new
    proto.ClearField("options")
    proto.options.java_package = "io.grpc.reflection.v1"
    proto.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    prefix = f".{old}."
    for message in proto.message_type:
        for item in message.field:
            if item.type_name:
                item.type_name = item.type_name.replace(prefix, f".{new}.")
    for method in proto.service[0].method:
        method.input_type = method.input_type.replace(prefix, f".{new}.")
        method.output_type = method.output_type.replace(prefix, f".{new}.")
    pool.Add(proto)


def _add_reflection(server: grpc.aio.Server) -> None:
    """Server reflection under v1alpha and v1, one servicer answering both."""
    _reflection_v1_file()
    servicer = reflection.aio.ReflectionServicer((*SERVICE_NAMES, REFLECTION_V1))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    v1 = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": v1}),)
    )


def _address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def server_options(settings: ServerSettings) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        # One worker must own its port (a second server on it is an error); N workers share it.
        ("grpc.so_reuseport", 1 if settings.workers > 1 else 0),
        *KEEPALIVE_OPTIONS,
        *PENDING_OPTIONS,
    ]


class DrainingHealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    """The standard health service, whose Watch streams end when the drain begins.

    Client-side health checking keeps one Watch open per channel; the stock servicer never ends
    it, so a single watcher would hold the shutdown for the whole grace period. Here each Watch
    sends every status change, NOT_SERVING included, and returns once the drain begins. The
    statuses Watch reads are kept here, beside the stock servicer's private ones that Check uses.
    """

    def __init__(self) -> None:
        super().__init__()
        self._statuses: dict[str, health_pb2.HealthCheckResponse.ServingStatus] = {
            "": health_pb2.HealthCheckResponse.SERVING
        }
        self._changed = asyncio.Condition()
        self._shutting_down = False
        self._ending = False

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def set(self, service: str, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        await super().set(service, status)
        if not self._shutting_down:
            self._statuses[service] = status
            await self._notify()

    async def enter_graceful_shutdown(self) -> None:
        await super().enter_graceful_shutdown()
        self._shutting_down = True
        for service in self._statuses:
            self._statuses[service] = health_pb2.HealthCheckResponse.NOT_SERVING
        await self._notify()

    async def Watch(  # noqa: N802 - the gRPC method's name
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> None:
        last = None
        async with self._changed:
            while True:
                status = self._statuses.get(
                    request.service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
                )
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
                if self._ending:
                    return  # after the last status was sent: NOT_SERVING once draining
                await self._changed.wait()

    async def List(  # noqa: N802 - the gRPC method's name
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        """Every service's status, as Check gives it (the stock asyncio servicer lacks List,
        which the health protocol and reflection advertise): a server has a handful."""
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in self._server_status.items()
            }
        )

    async def end_watches(self) -> None:
        """End every open Watch once it has sent the current status (NOT_SERVING)."""
        self._ending = True
        await self._notify()


@dataclass
class ResolverServer:
    """A built server: the grpc.aio server, its health servicer, and where it listens."""

    server: grpc.aio.Server
    health: DrainingHealthServicer
    service: ResolverService
    store: PolicyStore
    port: int
    settings: ServerSettings
    health_server: grpc.aio.Server | None = None
    health_port: int = 0
    metrics: Metrics | None = None
    tls: CertificateFiles | None = None
    _stopped: bool = field(default=False, repr=False)
    _tls_checks: asyncio.Task[None] | None = field(default=None, repr=False)
    _hurry: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def tls_not_after(self) -> float | None:
        """The expiry (seconds since the epoch) of the certificate last taken, if readable."""
        return self.tls.expires if self.tls is not None else None

    async def start(self) -> None:
        await self.server.start()
        if self.health_server is not None:
            await self.health_server.start()
        for name in ("", HEALTH_SERVICE):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.store.start_watching(self.settings.policy_poll_seconds)
        if self.tls is not None and self.tls.renewable:
            self._tls_checks = asyncio.ensure_future(_check_certificates(self.tls))

    async def stop(self, grace: float | None = None, *, delay: float | None = None) -> None:
        """Drain: NOT_SERVING while still answering for `delay` (so that balancers checking
        health move traffic away first), then refuse new calls and let in-flight ones finish
        within `grace`. `hurry()` cuts the delay short."""
        if self._stopped:
            return
        self._stopped = True
        grace = self.settings.grace_seconds if grace is None else grace
        delay = self.settings.drain_delay_seconds if delay is None else delay
        await self.health.enter_graceful_shutdown()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), delay)
        await self.store.stop_watching()
        if self._tls_checks is not None:
            self._tls_checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tls_checks
        await self.health.end_watches()  # they have seen NOT_SERVING; they must not hold the drain
        stops = [self.server.stop(grace)]
        if self.health_server is not None:
            stops.append(self.health_server.stop(grace))
        await asyncio.gather(*stops)
        self.service.close()
        _logging.flush_calls()  # the loop may end before its timer would have written them

    def hurry(self) -> None:
        """End the NOT_SERVING delay of a `stop()` in progress now."""
        self._hurry.set()

    async def wait(self) -> None:
        await self.server.wait_for_termination()


TLS_CHECK_S: Final = 10.0
"""How often the certificate files are judged between handshakes (a renewal's log line and
expiry metric come within this long, whether or not a client connects)."""


async def _check_certificates(files: CertificateFiles) -> None:
    while True:
        await asyncio.sleep(TLS_CHECK_S)
        try:
            await asyncio.to_thread(files.check)
        except Exception:  # a defect must not end the checks, nor go unlogged
            log.exception("tls_check_failed", extra={"fields": {"event": "tls_check_failed"}})


def create_server(
    settings: ServerSettings,
    *,
    store: PolicyStore | None = None,
    metrics: Metrics | None = None,
    marks: ReloadMarks | None = None,
    failures: ReloadFailures | None = None,
    stopping: Callable[[], float | None] = lambda: None,
    supervisor: int | None = None,
) -> ResolverServer:
    """Build (not start) a server. Loads the policy unless a store is given (PolicyError).
    `marks`: under --workers, where the workers say when they last read the policy file;
    `failures`: which failed reloads this worker counts for the server (every one, alone);
    `stopping`: the seconds left until a stop ends the calls, or None while serving;
    `supervisor`: the pid of the process that forked this worker."""
    if store is None:
        store = PolicyStore(settings.policy)
        store.load_initial()
    cache = AnswerCache(settings.cache_entries)
    in_force = [store.version]
    counted = failures if failures is not None else ReloadFailures(lambda: True)

    def on_change(changed: PolicyStore) -> None:
        added = counted.seen(changed.failures)
        if changed.version != in_force[0]:
            in_force[0] = changed.version
            cache.clear()  # answers under the old policy can never be asked for again
        if metrics is not None:
            metrics.policy(changed.version, failing=bool(changed.last_error))
            metrics.reload_failed(added)

    store.add_listener(on_change)
    added = counted.seen(store.failures)
    if metrics is not None:
        metrics.policy(store.version, failing=bool(store.last_error))
        metrics.reload_failed(added)
    service = ResolverService(
        store,
        cache=cache,
        metrics=metrics,
        failures=counted,
        limits=Limits(
            settings.max_struct_depth, settings.max_struct_keys, settings.max_message_bytes
        ),
        # Under --workers, one worker answers the call: the supervisor's SIGHUP has every
        # worker read the file, as a SIGHUP sent by hand does, and the reply waits for them.
        after_reload=(
            _reload_every_worker(marks, stopping, supervisor) if settings.workers > 1 else None
        ),
    )
    interceptors = []
    if settings.admin_token_file is not None:
        token = TokenFile(settings.admin_token_file)
        interceptors.append(
            TokenInterceptor(
                token, protect_all=settings.protect_resolve, on_refused=service.unauthenticated
            )
        )
    options = server_options(settings)
    server = grpc.aio.server(
        interceptors=interceptors,
        options=options,
        maximum_concurrent_rpcs=settings.max_concurrent_rpcs,
    )
    server.add_generic_rpc_handlers((service.generic_handler(),))
    health_servicer = DrainingHealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    _add_reflection(server)
    server.add_generic_rpc_handlers((service.unknown_method_handler(),))  # the last one
    tls = certificate_files(settings, metrics.certificate if metrics is not None else None)
    address = _address(settings.host, settings.port)
    if tls is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, server_credentials(tls))
    if port == 0:
        raise OSError(f"could not listen on {address}")
    resolver_server = ResolverServer(server, health_servicer, service, store, port, settings)
    resolver_server.metrics = metrics
    resolver_server.tls = tls
    if settings.health_port:
        health_only = grpc.aio.server(options=options)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, health_only)
        health_address = _address(settings.host, settings.health_port)
        resolver_server.health_port = health_only.add_insecure_port(health_address)
        resolver_server.health_server = health_only
    return resolver_server


def _reload_every_worker(
    marks: ReloadMarks | None,
    stopping: Callable[[], float | None],
    supervisor: int | None = None,
) -> AfterReload:
    """After a ReloadPolicy call read the file: have the supervisor signal every worker, and
    return once each has read the file too, so that the caller's next request meets the new
    policy whichever worker takes it. The wait is bounded, and ends before the call's deadline
    (`remaining_s`) and before a drain ends, so that a worker that never catches up delays the
    reply but never fails it: a stop that comes during the wait shortens it."""

    async def reload_the_others(remaining_s: float | None, answering: Callable[[], bool]) -> None:
        """`answering`: a reply is still due (its caller has not left): else the others are
        asked to read the file, and nothing is waited for or said of them. A caller that
        leaves during the wait ends it, and nothing is said."""
        since = now_ns()
        parent = os.getppid()
        if supervisor is not None and parent != supervisor:
            return  # the supervisor is gone (this worker stops within a second): not its heir
        with contextlib.suppress(OSError):
            os.kill(parent, signal.SIGHUP)
        if marks is None or not answering():
            return
        wait_s = WAIT_S
        for left in (remaining_s, stopping()):
            if left is not None:
                wait_s = max(0.0, min(wait_s, left - DEADLINE_MARGIN_S))

        def wanted() -> bool:
            """The caller still waits, and the drain (of a stop that came since) not about
            to end: its end would cancel the call, whose reply would be lost."""
            left = stopping()
            return answering() and (left is None or left > DEADLINE_MARGIN_S)

        started = time.monotonic()
        late = await marks.behind(since, wait_s, wanted)
        if late and answering():
            log.warning(
                "ReloadPolicy answered before every worker re-read the policy file",
                extra={
                    "fields": {
                        "event": "reload_not_confirmed",
                        "worker_pids": late,
                        "waited_seconds": round(time.monotonic() - started, 3),
                    }
                },
            )

    return reload_the_others


SUPERVISOR_POLL_S: Final = 1.0
HEARTBEAT_S: Final = 1.0
WATCH_S: Final = 0.1
"""How often the heartbeat's loop turns (it beats every HEARTBEAT_S): the CPU a busy process
spends in one turn's sleep is what a pause that follows it is misjudged by (see LATE_BEAT_S)."""
LATE_BEAT_S: Final = 1.0
"""A turn of the heartbeat's loop this much later than due: the event loop did not run
meanwhile. What of that time the process spent no CPU in either (the whole worker paused) is
no large request's running time; a loop starved by a large request holding the interpreter is
not a pause."""
SAME_STOP_S: Final = 1.0
"""Under a supervisor, a stop signal this soon after the first is the same stop delivered
twice: a signal to the process group (Ctrl-C, `kill -- -PGID`, systemd's control-group kill)
reaches a worker both directly and through its supervisor. Later (or at once, for a server of
one process, which gets no copies), a second signal asks to stop now."""


def _said_unchanged(task: asyncio.Task[ReloadOutcome]) -> None:
    """A SIGHUP that found the file as it was is acknowledged in the log (a new policy, a
    refused file and a recovery say so themselves): an operator who sent one sees it taken."""
    if task.cancelled() or task.exception() is not None:
        return
    outcome = task.result()
    if not (outcome.changed or outcome.error or outcome.recovered):
        log.info(
            "policy file unchanged",
            extra={
                "fields": {"event": "policy_reload_unchanged", "policy_version": outcome.version}
            },
        )


def _failures_counted(worker: int, marks: ReloadMarks | None) -> ReloadFailures:
    """Under --workers, the worker holding a lock in the marks folder counts the failed reloads
    every worker makes alike: the first to see one takes it (a worker whose start fails sees
    none), another once that one is gone. With no shared folder, the first worker counts."""
    if marks is None:
        return ReloadFailures(lambda: worker == 0)
    return ReloadFailures(FailureCounter(marks.folder), marks.folder)


async def serve(
    settings: ServerSettings,
    *,
    worker: int = 0,
    metrics: Metrics | None = None,
    parent: int | None = None,
    marks: ReloadMarks | None = None,
    tell_person: bool = False,
) -> int:
    """Run one worker until SIGTERM/SIGINT, or until its supervisor (`parent`) is gone, then
    drain. Returns the exit status. `tell_person`: see run_worker."""
    started = now_ns()
    first_stop: list[float] = []  # once stopping: when the first stop came (monotonic)
    drain_s = settings.drain_delay_seconds + settings.grace_seconds

    def stopping() -> float | None:
        return first_stop[0] + drain_s - time.monotonic() if first_stop else None

    try:
        built = create_server(
            settings,
            metrics=metrics,
            marks=marks,
            failures=_failures_counted(worker, marks),
            stopping=stopping,
            supervisor=parent,
        )
    except Exception as exc:  # bad policy, unreadable certificate, port taken
        if tell_person and isinstance(exc, PolicyError) and _first_to_tell(marks, worker):
            _tell_refused_policy(exc)
        _start_failed(str(exc), worker)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def on_stop(cause: str) -> None:
        """`cause`: the signal's name, or why the worker stops without one."""
        if stop.is_set():
            if parent is not None and time.monotonic() - first_stop[0] < SAME_STOP_S:
                return  # under a supervisor: its copy of a signal the group got
            built.hurry()  # a second signal: stop now
            task = loop.create_task(built.server.stop(0))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if not first_stop:
            first_stop.append(time.monotonic())
        stop.set()
        log.info(
            "draining",
            extra={
                "fields": {
                    "event": "draining",
                    "signal": cause,
                    "drain_delay_seconds": settings.drain_delay_seconds,
                    "grace_seconds": settings.grace_seconds,
                }
            },
        )

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_stop, signal.Signals(signum).name)
    held = stop_held()  # sent while it started, its exception lost where Python only reports it
    if held:  # nothing served yet: nothing to drain
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await built.stop(0, delay=0)
        fields = {"event": "stopped", "signal": held, "detail": STOPPED_DETAIL, "worker": worker}
        log.info("stopped", extra={"fields": fields})
        return 0
    reloads: set[asyncio.Task[Any]] = set()  # held until done: the loop keeps weak references

    def on_hup() -> None:
        began = now_ns()
        task = loop.create_task(built.store.reload_async())
        reloads.add(task)
        task.add_done_callback(reloads.discard)
        task.add_done_callback(_said_unchanged)
        if marks is not None:
            task.add_done_callback(lambda _: marks.record(began))

    if marks is not None:
        marks.record(started)  # a worker (re)started since a reload has read the file anew

    loop.add_signal_handler(signal.SIGHUP, on_hup)
    if sighup_held():  # asked for while the policy loaded: read the file again now
        on_hup()
    await built.start()
    if metrics is not None:
        metrics.serving(settings.workers)
    if settings.policy is not None and settings.admin_token_file is None and worker == 0:
        log.warning(
            "ReloadPolicy is open to every caller that reaches the port",
            extra={"fields": {"event": "reload_unprotected", "hint": "--admin-token-file"}},
        )
    if marks is not None:
        # The first heartbeat before the worker says it serves: the supervisor watches only a
        # worker it has heard beat, and one stopped before its heartbeat task first ran (right
        # after "serving") went unwatched for good.
        marks.beat()
    log.info(
        "serving",
        extra={
            "fields": {
                "event": "serving",
                "host": settings.host,
                "port": built.port,
                "health_port": built.health_port,
                "tls": settings.tls,
                **(
                    {}
                    if built.tls_not_after is None
                    else {"tls_not_after": utc_text(built.tls_not_after)}
                ),
                "worker": worker,
                "policy_version": built.store.version,
            }
        },
    )
    watch = None
    if parent is not None:
        watch = loop.create_task(_until_orphaned(parent, worker, stop, on_stop))
    # The heartbeat goes on through the drain, which may last longer than the supervisor's
    # patience with a silent worker: a draining worker is not a hung one.
    beat = None
    if marks is not None:
        # Past half the limit: with the supervisor's own wait for that much silence, the
        # worker is restarted about one and a half limits after such a request began.
        large, limit = built.service.large, settings.hung_worker_seconds / 2
        beat = loop.create_task(
            _heartbeat(
                marks,
                lambda: large.running_for() > limit,
                large.skip,
                metrics.memory if metrics is not None else None,
            )
        )
    await stop.wait()
    if watch is not None:
        watch.cancel()
    await built.stop()
    if beat is not None:
        beat.cancel()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signum)
    # A reload another worker's call asks for now must not kill a worker that is done (a
    # reload still running in its thread holds the loop's close a while).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if marks is not None:
        # The folder is the supervisor's to remove, unless it is gone (killed outright): a
        # worker restarted beside this one still writes its marks and heartbeat there.
        marks.leave(remove_folder=parent is not None and os.getppid() != parent)
    log.info("stopped", extra={"fields": {"event": "stopped", "worker": worker}})
    return 0


async def _heartbeat(
    marks: ReloadMarks,
    stuck: Callable[[], bool],
    skipped: Callable[[float, float], None],
    measure: Callable[[], None] | None = None,
) -> None:
    """Under --workers: a heartbeat each second from the event loop, until cancelled once the
    worker has drained, by which the supervisor tells a worker that hangs (a stopped process,
    a loop that never yields) from a busy one. A large request that has run too long
    (`stuck`) is a hang too: the requests waiting behind it would never be answered. A turn
    over LATE_BEAT_S late gives `skipped` (since, seconds) about the time meanwhile the
    process spent no CPU in (paused, less at most the CPU of one turn's sleep), which the
    supervisor too leaves out of its clock when the whole server was paused. `measure`: the
    worker's metrics of itself, updated with each beat."""
    said = False
    watch = min(WATCH_S, HEARTBEAT_S)
    last, last_cpu, beaten = time.monotonic(), time.process_time(), -math.inf
    while True:
        now, cpu = time.monotonic(), time.process_time()
        late = now - last - watch
        if late > LATE_BEAT_S and (idle := late - (cpu - last_cpu)) > 0:
            skipped(last, idle)
        last, last_cpu = now, cpu
        if now - beaten >= HEARTBEAT_S:
            beaten = now
            if measure is not None:  # the worker's own figures, which a scrape cannot read
                measure()
            if not stuck():
                marks.beat()
                said = False
            elif not said:
                said = True
                log.warning(
                    "a large request has run half the hung-worker limit: heartbeat held until "
                    "it ends",
                    extra={"fields": {"event": "large_request_stuck"}},
                )
        await asyncio.sleep(watch)


async def _until_orphaned(
    parent: int, worker: int, stop: asyncio.Event, on_stop: Callable[[str], None]
) -> None:
    """A worker whose supervisor was killed (SIGKILL, an OOM kill) would go on serving its
    share of the port with no one to stop, restart or reload it: it drains and stops."""
    while not stop.is_set():
        await asyncio.sleep(SUPERVISOR_POLL_S)
        if os.getppid() != parent:
            log.warning(
                "the supervisor is gone; stopping",
                extra={"fields": {"event": "supervisor_gone", "worker": worker}},
            )
            on_stop("none: the supervisor is gone")
            return


def run_worker(
    settings: ServerSettings,
    *,
    worker: int = 0,
    serve_metrics: bool = True,
    parent: int | None = None,
    marks_folder: Path | None = None,
    tell_person: bool = True,
) -> int:
    """One worker process's life: logging, metrics, the event loop. `parent`: the supervisor's
    pid, for a worker of --workers (it stops when the supervisor is gone). `tell_person`: a
    policy refused at start is also written as a person reads it (the server's first start,
    once for all its workers, see _first_to_tell; a restart's is logged only)."""
    hold_sighup()
    _logging.configure(settings.log_level, settings.call_log)
    flush_spans = None
    if settings.tracing:  # per worker, after any fork: span exporters run threads
        from ._tracing import start_tracing

        try:
            flush_spans = start_tracing()
        except Exception as exc:  # an OTEL_* value the SDK refuses (a timeout 'abc')
            _start_failed(f"--tracing: {type(exc).__name__}: {exc}", worker)
            return 2
    metrics = None
    if settings.metrics_port:
        metrics = Metrics()
        if serve_metrics:
            from ._metrics import start_http

            try:
                start_http(settings.metrics_port, settings.host)
            except OSError as exc:  # the port is taken: a start failure like the gRPC port's
                _start_failed(f"metrics port {settings.metrics_port}: {exc}", worker)
                return 2
    marks = ReloadMarks(marks_folder) if marks_folder is not None else None
    try:
        return asyncio.run(
            serve(
                settings,
                worker=worker,
                metrics=metrics,
                parent=parent,
                marks=marks,
                tell_person=tell_person,
            )
        )
    finally:
        _logging.flush_calls()  # a worker leaves with os._exit: atexit would not write them
        if flush_spans is not None:
            flush_spans()


def _first_to_tell(marks: ReloadMarks | None, worker: int) -> bool:
    """Whether this worker writes the plain refusal: under --workers every worker of the first
    start finds the file refused, and the first to claim the shared folder's mark says it (the
    others are soon stopped, worker 0 as likely as any, before it could say it); without the
    folder, worker 0."""
    if marks is None:
        return worker == 0
    try:
        os.close(os.open(marks.folder / "refused-policy-told", os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return worker == 0
    return True


def _tell_refused_policy(refused: PolicyError) -> None:
    """A policy refused at start as a person reads it, beside the start_failed JSON line a log
    pipeline reads (as a refused setting is): the flag, the file, each problem on its line."""
    if isinstance(refused, PolicyReadError):  # not read at all: its one problem is why
        said = f": {'; '.join(refused.problems)}"
    else:
        said = f" refused:{refused.listed}"
    text = f"npu-resolve serve: --policy (or NPU_RESOLVER_POLICY) {refused.source}{said}\n"
    # One write, not print's text and newline apart: another worker's log line, written to the
    # same stderr meanwhile, would land inside it (a pipe takes one write of 4 KiB whole).
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "backslashreplace"))


def _start_failed(error: str, worker: int) -> None:
    log.error(
        "server could not start",
        extra={"fields": {"event": "start_failed", "error": error, "worker": worker}},
    )
