"""Blocking and asyncio clients; both return the core's types, never raw protobuf.

Every call has a deadline (10 s unless given; `timeout` in seconds, on the client or per call,
`math.inf` for none, a positive number otherwise: 0, a negative or NaN is a ValueError, and a
deadline beyond MAX_TIMEOUT, about three years, is that long). UNAVAILABLE and CANCELLED (a call
caught in a replica's shutdown) are retried by gRPC itself through the channel's service config
(retryPolicy: 5 attempts, gRPC's most, with 0.1-1 s backoff, so about 1.5 s in all); a batch's
items answered UNAVAILABLE inside its OK reply (a server too busy for them) are sent again by the
client, with the same attempts and backoff within the call's deadline. `wait_for_ready=True`
waits instead for a server that is (re)starting, up to the deadline: it bridges the restart of
a single replica, and makes a call to a server that is down take the whole deadline before
ResolverUnavailable. The channel balances round_robin over every address the target resolves
to, so `dns:///resolver-headless:50051` spreads calls over all replicas.

A request with errors fails INVALID_ARGUMENT with its report packed in the status details. A
report too large for the metadata a client accepts is left out of them; `resolve` then asks
for it once more with `validate_only` (which answers it in the reply body) and raises the same
ResolveError the packed report would have given. That second call carries the request metadata
`x-npu-resolver-report-again: 1`, so that the server's metrics count the report's diagnostics
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import numbers
import random
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, NoReturn, Self

import grpc
from google.protobuf import message

from npu_resolver import (
    Diagnostic,
    DiffError,
    DiffResult,
    Product,
    Resolution,
    ResolveRequest,
    check_diff_products,
)
from npu_resolver.text import cut_text, is_text, plain_text, printable

from ._convert import (
    NotSendableError,
    NotTextError,
    catalog_from_proto,
    check_text,
    config_to_json,
    diff_from_proto,
    error_message,
    product_from_proto,
    request_to_proto,
    resolution_from_proto,
    restore_callers_values,
    sent_env,
    violation_field,
)
from ._errors import (
    REPORT_AGAIN_ADVICE,
    REPORT_AGAIN_METADATA_KEY,
    TLS_HINTS,
    Failure,
    FieldViolation,
    ResolveError,
    ResolverCallError,
    ResolverClientError,
    ResolverUnavailable,
    decode_status,
    failure_error,
    from_rpc_error,
    not_sent,
)
from ._proto.npu.resolver.v1 import resolver_pb2 as pb
from ._proto.npu.resolver.v1 import resolver_pb2_grpc as pb_grpc
from .credentials import checked_pair, checked_pem, checked_token
from .target import checked_target

JSON = Any
DEFAULT_TARGET: Final = "127.0.0.1:50051"
DEFAULT_TIMEOUT: Final = 10.0
MAX_TIMEOUT: Final = 1e8
"""The longest deadline given to gRPC, in seconds (about three years). gRPC takes a deadline
much further off (1e10 s) as one already past, so a longer finite timeout means this one."""
DEFAULT_MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
# gRPC refuses trailers over 8 KiB at random and all over 16 KiB by default; an error report's
# status details may be larger.
DEFAULT_MAX_METADATA_BYTES: Final = 4 * 1024 * 1024
PID_METADATA_KEY: Final = "x-npu-resolver-pid"
SERVICE: Final = "npu.resolver.v1.Resolver"

MAX_ATTEMPTS: Final = 5
INITIAL_BACKOFF_S: Final = 0.1
MAX_BACKOFF_S: Final = 1.0
BACKOFF_MULTIPLIER: Final = 2
RETRY_POLICY: Final[dict[str, JSON]] = {
    "maxAttempts": MAX_ATTEMPTS,
    "initialBackoff": f"{INITIAL_BACKOFF_S:g}s",
    "maxBackoff": f"{MAX_BACKOFF_S:g}s",
    "backoffMultiplier": BACKOFF_MULTIPLIER,
    # Every method is a pure read (ReloadPolicy is idempotent), so a call the server
    # cancelled while draining (still queued when SIGTERM came) is safe to send again.
    "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"],
}
REPLIES: Final[dict[str, type[message.Message]]] = {
    method.name: getattr(pb, method.output_type.name)
    for method in pb.DESCRIPTOR.services_by_name["Resolver"].methods
}
"""Each method of the service and the message it answers with."""


def _deterministic(request: message.Message) -> bytes:
    return request.SerializeToString(deterministic=True)


def resolver_stub(channel: grpc.Channel | grpc.aio.Channel) -> pb_grpc.ResolverStub:
    """The generated stub, its requests written deterministically (map entries in key order).
    protobuf writes a map in an order that changes from process to process, and a server keys
    its answer cache by a request's bytes: two jobs asking the same would miss it."""
    stub = pb_grpc.ResolverStub(channel)
    for name, reply in REPLIES.items():
        call = channel.unary_unary(
            f"/{SERVICE}/{name}",
            request_serializer=_deterministic,
            response_deserializer=reply.FromString,
            _registered_method=True,
        )
        setattr(stub, name, call)
    return stub


SERVICE_CONFIG: Final[dict[str, JSON]] = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [
        {
            "name": [{"service": SERVICE}, {"service": "grpc.health.v1.Health"}],
            "retryPolicy": RETRY_POLICY,
        }
    ],
}

PathOrBytes = str | Path | bytes

MIN_MESSAGE_BYTES: Final = 1024
MAX_MESSAGE_BYTES: Final = 2**31 - 1
"""gRPC's message sizes are C ints."""


def checked_message_bytes(value: object) -> int:
    """`max_message_bytes` as gRPC takes it (-1, gRPC's own "no limit", included): given
    anything else, gRPC would ignore it (a string) or refuse every call (a size below any
    request)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_message_bytes must be an int (bytes), not {type(value).__name__}")
    if value != -1 and not MIN_MESSAGE_BYTES <= value <= MAX_MESSAGE_BYTES:
        raise ValueError(
            f"max_message_bytes must be from {MIN_MESSAGE_BYTES:,} to {MAX_MESSAGE_BYTES:,} "
            f"bytes, or -1 for no limit (the server's default is "
            f"{DEFAULT_MAX_MESSAGE_BYTES:,}), got {value:,}"
        )
    return value


def _checked_flag(name: str, value: object) -> bool:
    """A flag given as a bool: "no" or 0.5 would pass for true, silently."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _checked_product(product: object) -> str:
    """describe_catalog's product: a product id or alias, or None for every product."""
    if product is None:
        return ""
    if not isinstance(product, str):
        raise TypeError(
            f"product must be a str (a product id or alias) or None, not {type(product).__name__}"
        )
    return product


def channel_options(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    extra: Sequence[tuple[str, Any]] = (),
) -> list[tuple[str, Any]]:
    """The channel options both clients use: service config, sizes, keepalive; an option in
    `extra` replaces the default of the same name."""
    unlimited = checked_message_bytes(max_message_bytes) == -1
    defaults: list[tuple[str, Any]] = [
        ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
        ("grpc.service_config_disable_resolution", 1),
        ("grpc.enable_retries", 1),
        # gRPC retries a call only while its request fits this buffer (256 KiB by default): a
        # full batch or a config with its files attached would fail on the first UNAVAILABLE.
        ("grpc.per_rpc_retry_buffer_size", MAX_MESSAGE_BYTES if unlimited else max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_metadata_size", DEFAULT_MAX_METADATA_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        # Reconnect to a replica or worker quickly, within the retry budget, when one goes away.
        # Not grpc.min_reconnect_backoff_ms: gRPC also takes it as the connect timeout (20 s by
        # default), and a handshake slower than it (TLS over a slow link) would never complete.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2_000),
    ]
    given = {name for name, _ in extra}
    return [*(option for option in defaults if option[0] not in given), *extra]


def _read(name: str, value: PathOrBytes | None) -> bytes | None:
    """A credential given as bytes, or read from the file it names: a file that cannot be read
    is a ValueError naming the argument, as a file that holds no PEM is."""
    if value is None or isinstance(value, bytes):
        return value
    if not str(value):
        raise ValueError(f"{name} is an empty path; name the PEM file, or pass its bytes")
    try:
        return Path(value).read_bytes()
    except OSError as exc:
        raise ValueError(f"{name}: cannot read {str(value)!r}: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True, repr=False)
class ResolveFailure:
    """A batch item that failed, as Resolve would have failed for it."""

    index: int
    code: grpc.StatusCode
    message: str
    resolution: Resolution | None
    violations: tuple[FieldViolation, ...] = ()

    @property
    def details(self) -> str:
        """`message`, under the name every ResolverClientError gives it."""
        return self.message

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return () if self.resolution is None else self.resolution.errors

    def __repr__(self) -> str:
        """One line for a log (the report, several kilobytes, is left to `resolution`)."""
        fields = [f"violations={[v.reason for v in self.violations][:5]}"]
        if self.resolution is not None:
            fields.append(f"product={self.resolution.product!r}")
        return (
            f"ResolveFailure(index={self.index}, code={self.code.name}, "
            f"message={cut_text(self.message, 200)!r}, {', '.join(fields)})"
        )

    def error(self) -> ResolverClientError:
        """The exception Resolve would have raised for this item."""
        return failure_error(Failure(self.code, self.message, self.violations, self.resolution))


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """The policy a server has in force, and how its last reload went."""

    policy_version: str
    canonical_text: str
    source: str
    profiles: tuple[str, ...]
    last_reload_error: str
    refused_version: str
    reload_failures: int

    def to_json(self) -> dict[str, JSON]:
        return {
            "policy_version": self.policy_version,
            "canonical_text": self.canonical_text,
            "source": self.source,
            "profiles": list(self.profiles),
            "last_reload_error": self.last_reload_error,
            "refused_version": self.refused_version,
            "reload_failures": self.reload_failures,
        }


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What a ReloadPolicy call did. A file the server refused is not an exception: `error`
    says why (the last good policy stays in force, `version` is its version), so check it."""

    changed: bool
    version: str
    error: str

    @property
    def policy_version(self) -> str:
        """`version`, under the name PolicyInfo and every answer give it."""
        return self.version


def _build_request(
    *,
    product: str,
    config: Mapping[str, JSON] | None,
    env: Mapping[str, str] | None,
    workdir: str,
    profile: str,
    strict: bool,
    validate_only: bool,
    attachments: Mapping[str, str] | None,
) -> ResolveRequest:
    # Passed as given: ResolveRequest copies them, and refuses a field that is not a mapping
    # with a TypeError naming it, as it does in process (a list of pairs is no config).
    return ResolveRequest(
        product=product,
        config={} if config is None else config,
        env={} if env is None else env,
        workdir=workdir,
        profile=profile,
        strict=strict,
        validate_only=validate_only,
        attachments={} if attachments is None else attachments,
    )


def _closed_error() -> ResolverCallError:
    return not_sent(grpc.StatusCode.FAILED_PRECONDITION, "the client is closed; create a new one")


def _closed_during_call() -> ResolverCallError:
    """A call cut short by the client's close(): an error the caller can catch with the others
    (not a CancelledError in a task nobody cancelled)."""
    return ResolverCallError(
        grpc.StatusCode.CANCELLED, "the client was closed during the call; create a new one"
    )


_GRPC_DEADLINE: Final = "Deadline Exceeded"
"""gRPC's own words for a deadline that passed, which name neither the server nor the time."""


def _tls_hint(settings: _Settings, said: str) -> str:
    """Which of TLS_HINTS fits an UNAVAILABLE's text for a client so configured, or ""."""
    if "WRONG_VERSION_NUMBER" in said:  # what a plaintext server answers TLS with
        return TLS_HINTS["plaintext_server"]
    if settings.tls and ("Hostname Verification" in said or "Peer name" in said):
        return TLS_HINTS["wrong_host"]
    if settings.tls and "CERTIFICATE_VERIFY_FAILED" in said:
        if "certificate has expired" in said:
            return TLS_HINTS["expired_server"]
        if settings.root_certificates is None:  # the system's bundle was used
            return TLS_HINTS["untrusted_by_system"]
        return TLS_HINTS["untrusted_server"]
    if "Socket closed" not in said:  # refused, unresolved, the server's own UNAVAILABLE: no hint
        return ""
    if settings.tls:
        # A server that requires a client certificate closes the handshake, which gRPC reports
        # as any lost connection: the likely cause is worth a line.
        return TLS_HINTS["mutual_tls"] if settings.certificate_chain is None else ""
    # What a TLS server's closing of a plaintext connection looks like (a server that is down
    # refuses the connection instead).
    return TLS_HINTS["tls_server"]


def _failure(
    closed: bool, error: ResolverClientError, settings: _Settings, deadline: float | None
) -> ResolverClientError:
    """A call close() cancelled says so, rather than a bare CANCELLED; a deadline that passed
    names the server and the time (a tool that calls several resolvers can act on it); a
    connection a TLS mismatch lost says the likely cause."""
    target = settings.target
    if closed and error.code is grpc.StatusCode.CANCELLED:
        return _closed_during_call()
    if error.code is grpc.StatusCode.UNAVAILABLE:
        hint = _tls_hint(settings, error.details)
        if hint:
            return ResolverUnavailable(error.code, error.details + hint)
    if (
        error.code is grpc.StatusCode.DEADLINE_EXCEEDED
        and error.details == _GRPC_DEADLINE
        and deadline is not None
    ):
        return ResolverUnavailable(
            error.code,
            f"no answer from {target} within {deadline:g} s, retries included ({_GRPC_DEADLINE})",
        )
    return error


def _check_open(closed: bool) -> None:
    if closed:
        raise _closed_error()


def _bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    """The authorization metadata."""
    return () if token is None else (("authorization", f"Bearer {checked_token(token)}"),)


def _report_request(message: pb.ResolveRequest) -> pb.ResolveRequest:
    """The same request, asking for the report in the reply body (status OK)."""
    again = pb.ResolveRequest()
    again.CopyFrom(message)
    again.validate_only = True
    return again


def _report_ask(
    error: ResolveError, message: pb.ResolveRequest, deadline: float | None, started: float
) -> tuple[pb.ResolveRequest, float] | None:
    """The request and time left to ask again, with validate_only, for the report the status
    details of `error` left out (too large for them); None when it is not missing, asking
    cannot fetch it, or the call's deadline, which the second ask shares, is spent. A call
    with no deadline asks again with none (math.inf), not with the client's default."""
    if error.resolution is not None or not error.report_cut or message.validate_only:
        return None
    remaining = math.inf if deadline is None else deadline - (time.monotonic() - started)
    if remaining <= 0:
        return None
    return _report_request(message), remaining


def _checked(request: object, index: int | None = None) -> None:
    """A request that is not a ResolveRequest (a dict of its fields, say) is a TypeError here,
    not an AttributeError from inside the conversion; `index`, its place in a batch, is named
    (both clients' resolve_batch come here, through _batch)."""
    if isinstance(request, ResolveRequest):
        return
    build = "(build one: ResolveRequest(product=..., config=...)"
    if index is None:
        raise TypeError(
            f"expected an npu_resolver.ResolveRequest, got {type(request).__name__} {build}, "
            "or call resolve(product, config))"
        )
    kind = type(request).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    raise TypeError(
        f"requests[{index}] is {article} {kind}, not an npu_resolver.ResolveRequest {build})"
    )


def _diff_request(request: ResolveRequest, products: Sequence[str]) -> pb.DiffRequest:
    _checked(request)
    try:  # a diff in process's checks, in its order: its TypeErrors (every name is a str
        # once it passes), then its limits
        check_diff_products(products)
    except DiffError as exc:  # what a server would answer, without the call
        refused = ResolveError(str(exc), None, (FieldViolation("products", exc.reason, str(exc)),))
        refused.sent = False
        raise refused from None
    names = [plain_text(name) for name in products]
    try:
        for index, text in enumerate(names):
            if not is_text(text):  # protobuf would refuse it, in its own words
                raise NotTextError(
                    f"products[{index}] {printable(text[:100])!r} is text that is not Unicode "
                    "(a lone surrogate)"
                )
        check_text(request)
        config_json = config_to_json(request.config)
    except NotSendableError as exc:
        raise _not_sent(exc) from None
    return pb.DiffRequest(
        products=names,
        env=sent_env(request.env),
        workdir=request.workdir,
        profile=request.profile,
        strict=request.strict,
        attachments=dict(request.attachments),
        config_json=config_json,
    )


def _not_sent(exc: NotSendableError, index: int | None = None) -> ResolverCallError:
    """A request the wire cannot carry (text that is not Unicode outside the config, a value
    JSON cannot hold) is refused before any call, as a server would refuse what it cannot
    read (INVALID_ARGUMENT), with the field named; in a batch, with the item's index too."""
    if index is None:
        return not_sent(grpc.StatusCode.INVALID_ARGUMENT, f"{exc}; not sent")
    return not_sent(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"requests[{index}]: {exc}; the batch was not sent (fix or leave out that item)",
    )


def _to_proto(request: ResolveRequest, index: int | None = None) -> pb.ResolveRequest:
    """`index`: the request's place in a batch, which a refusal names."""
    _checked(request, index)
    try:
        return request_to_proto(request)
    except NotSendableError as exc:
        raise _not_sent(exc, index) from None


def _restored(resolution: Resolution | None, request: ResolveRequest) -> Resolution | None:
    return None if resolution is None else restore_callers_values(resolution, request)


def _batch(requests: list[ResolveRequest]) -> pb.ResolveBatchRequest:
    """The batch of `requests`: a list, read once here and once for the answers (an iterator
    would be spent by the first read, and every answer dropped). An item the wire cannot carry
    stops the batch before it is sent, the message naming the item by its index."""
    return pb.ResolveBatchRequest(requests=[_to_proto(r, i) for i, r in enumerate(requests)])


def _batch_results(
    response: pb.ResolveBatchResponse, requests: Sequence[ResolveRequest]
) -> list[Resolution | ResolveFailure]:
    if len(response.results) != len(requests):  # a reply that lost or invented answers
        raise ResolverCallError(
            grpc.StatusCode.INTERNAL,
            f"ResolveBatch answered {len(response.results)} results for {len(requests)} requests",
        )
    out: list[Resolution | ResolveFailure] = []
    for index, (item, request) in enumerate(zip(response.results, requests, strict=True)):
        if item.WhichOneof("result") == "response":
            out.append(restore_callers_values(resolution_from_proto(item.response), request))
        else:
            failure = decode_status(item.status)
            resolution = _restored(failure.resolution, request)
            out.append(
                ResolveFailure(index, failure.code, failure.message, resolution, failure.violations)
            )
    return out


@dataclass(slots=True)
class _BusyItems:
    """A batch's answers, and its items the server was too busy for sent again. Such an item
    is answered UNAVAILABLE inside an OK reply, which gRPC's retry policy never sees: the
    client sends those items again, as the policy would a call (MAX_ATTEMPTS in all, a random
    pause up to a backoff growing from INITIAL_BACKOFF_S to MAX_BACKOFF_S), within the call's
    deadline. Each alone: an answer that names a place in its batch (one left out at the reply's
    size limit, or by the deadline) then names it as an item the caller can send on its own,
    not a place in a batch it never sent. A resend that fails (the server gone, the deadline)
    ends the resends: the items not answered since keep their busy answers. An answer this
    client cannot read fails the call, as in the first reply."""

    asked: list[ResolveRequest]
    sent: pb.ResolveBatchRequest
    results: list[Resolution | ResolveFailure]
    deadline: float | None
    started: float
    attempts: int = 1
    busy: list[int] = field(default_factory=list)

    def resends(self) -> Iterator[tuple[float, int, pb.ResolveBatchRequest, float]]:
        """Each resend: the pause before it (a round's backoff, before the round's first item),
        the item's place, its batch of one and the seconds it has. The caller sends it and
        gives its reply to answered(), or stops."""
        while (pause := self._pause()) is not None:
            for index in self.busy:
                left = self.left() - pause
                if left <= 0:
                    break
                yield (
                    pause,
                    index,
                    pb.ResolveBatchRequest(requests=[self.sent.requests[index]]),
                    left,
                )
                pause = 0.0

    def _pause(self) -> float | None:
        """The pause before the next round, which sends each busy item (`busy`) again; None
        when no item is busy, the attempts are spent, or the deadline would pass first."""
        self.busy = [
            index
            for index, result in enumerate(self.results)
            if type(result) is ResolveFailure and result.code is grpc.StatusCode.UNAVAILABLE
        ]
        if not self.busy or self.attempts >= MAX_ATTEMPTS:
            return None
        backoff = min(INITIAL_BACKOFF_S * BACKOFF_MULTIPLIER ** (self.attempts - 1), MAX_BACKOFF_S)
        pause = random.uniform(0, backoff)
        self.attempts += 1
        return pause if self.left() > pause else None

    def left(self) -> float:
        """Seconds before the call's deadline (math.inf for none)."""
        if self.deadline is None:
            return math.inf
        return self.deadline - (time.monotonic() - self.started)

    def answered(self, index: int, response: pb.ResolveBatchResponse) -> None:
        """A busy item's new answer, at its place in the whole batch."""
        (result,) = _batch_results(response, [self.asked[index]])
        self.results[index] = (
            replace(result, index=index) if type(result) is ResolveFailure else result
        )


def _report_too_large(details: str, too_large: ResolverClientError) -> str:
    """`details` of a report cut from the trailer, once asking again for it with validate_only
    had a reply larger than this client's max_message_bytes: not the advice to ask again,
    which this client has followed, but the limit to raise."""
    sizes = too_large._reply_sizes
    if sizes is None:
        said = "is larger than this client's max_message_bytes"
    else:
        said = f"is {sizes[0]:,} bytes and this client's max_message_bytes is {sizes[1]:,}"
    listed = details.removesuffix(f": {REPORT_AGAIN_ADVICE}")
    return (
        f"{listed}; the full report, asked for again with validate_only, {said}: raise "
        "max_message_bytes to read it all"
    )


def _resolve_error(
    error: ResolveError,
    request: ResolveRequest,
    report: pb.ResolveResponse | ResolverClientError | None = None,
) -> ResolveError:
    """The same error, its report holding the caller's own values (see restore_callers_values).
    `report` is the report asked for again when the status details had no room for it; one
    that holds no error (the policy changed in between) does not explain the failure, nor
    does one this client cannot read (a newer server's values: the violations stand). An error
    given its report reads as if it had fit: the server's message as it writes it for a whole
    report, not the cut one's advice to ask again, which this client has followed. When the
    report's reply was too large for this client (`report` is that error), the message says
    so, and the limit to raise."""
    resolution, violations, details = error.resolution, error.violations, error.details
    report_cut = error.report_cut
    if isinstance(report, ResolverClientError):
        details, report = _report_too_large(details, report), None
    fetched = None
    if resolution is None and report is not None:
        with contextlib.suppress(ResolverClientError):
            fetched = resolution_from_proto(report)
    if fetched is not None:
        if fetched.errors:
            resolution, report_cut = fetched, False
            first = violation_field(
                fetched.errors[0], request, policy_version=fetched.policy_version
            )
            details = error_message(fetched.errors, first)
        if len(violations) < len(fetched.errors):  # a list the server shortened to fit
            violations = tuple(
                FieldViolation(
                    violation_field(d, request, policy_version=fetched.policy_version),
                    d.code.value,
                    d.message,
                )
                for d in fetched.errors
            )
    restored = ResolveError(details, _restored(resolution, request), violations)
    restored.report_cut = report_cut
    restored.__traceback__ = error.__traceback__
    return restored


def _policy_info(response: pb.GetPolicyResponse) -> PolicyInfo:
    return PolicyInfo(
        policy_version=response.policy_version,
        canonical_text=response.canonical_text,
        source=response.source,
        profiles=tuple(response.profiles),
        last_reload_error=response.last_reload_error,
        refused_version=response.refused_version,
        reload_failures=response.reload_failures,
    )


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _largest_part(request: message.Message) -> str:
    """Which part of an oversize request weighs most, in bytes as sent: a batch's item, the
    config, the attachments or the env (or the one entry that is most of it: an option, an
    attachment, a variable), the workdir, a diff's product names (a few hundred milliseconds
    for a request of many megabytes, on a failure)."""
    parts: list[tuple[int, str]] = []
    if isinstance(request, pb.ResolveBatchRequest):
        parts = [(item.ByteSize(), f"requests[{i}]") for i, item in enumerate(request.requests)]
    elif isinstance(request, pb.ResolveRequest | pb.DiffRequest):
        single = {"workdir": request.workdir, "profile": request.profile}
        if isinstance(request, pb.DiffRequest):
            single["products"] = "".join(request.products)
        else:
            single["product"] = request.product
        parts = [(_utf8(text), name) for name, text in single.items()]
        entries = {
            "attachments": [(_utf8(n + t), n) for n, t in request.attachments.items()],
            "env": [(_utf8(n + t), n) for n, t in request.env.items()],
            "config": [(_utf8(n) + v.ByteSize(), n) for n, v in request.config.fields.items()],
        }
        if request.config_json:
            with contextlib.suppress(ValueError, RecursionError):
                config = json.loads(request.config_json)
                entries["config"] += [
                    (_utf8(name) + _utf8(_compact(value)), name)
                    for name, value in (config.items() if isinstance(config, dict) else ())
                ]
        for group, sizes in entries.items():
            if sizes:
                parts.append(_most_of(group, sizes))
    if not parts:
        return ""
    size, name = max(parts)
    return f"; its largest part is {printable(cut_text(name, 80))}, about {size:,} bytes"


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _most_of(group: str, sizes: list[tuple[int, str]]) -> tuple[int, str]:
    """A map's weight: its one entry when that is at least half of it, else the whole map."""
    total = sum(size for size, _ in sizes)
    size, name = max(sizes)
    return (size, f"{group}.{name}") if 2 * size >= total else (total, group)


def _pid(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == PID_METADATA_KEY:
            return str(value)
    return ""


def _deadline_seconds(timeout: object) -> float | None:
    """A `timeout` as gRPC takes it: None for no deadline (math.inf), else at most
    MAX_TIMEOUT. Zero, a negative or NaN is a ValueError naming the argument, not a call that
    fails at once as if the server were unreachable."""
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(
            f"timeout is a number of seconds (math.inf for no deadline), "
            f"not {type(timeout).__name__}"
        )
    seconds = float(timeout)
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError(
            f"timeout must be a positive number of seconds, or math.inf for no deadline; "
            f"got {timeout!r}"
        )
    return None if math.isinf(seconds) else min(seconds, MAX_TIMEOUT)


class _Settings:
    """What both clients share: target, deadline, credentials, metadata."""

    def __init__(
        self,
        *,
        target: str,
        timeout: float | None,
        root_certificates: PathOrBytes | None,
        private_key: PathOrBytes | None,
        certificate_chain: PathOrBytes | None,
        token: str | None,
        max_message_bytes: int,
        options: Sequence[tuple[str, Any]],
        wait_for_ready: bool,
    ) -> None:
        if (private_key is None) != (certificate_chain is None):
            raise ValueError("private_key and certificate_chain go together (mutual TLS)")
        self.target = checked_target(target)
        self.timeout = None if timeout is None else _deadline_seconds(timeout)
        self.tls = root_certificates is not None or private_key is not None
        roots = _read("root_certificates", root_certificates)
        chain = _read("certificate_chain", certificate_chain)
        key = _read("private_key", private_key)
        self.root_certificates = checked_pem("root_certificates", roots, "CERTIFICATE")
        self.certificate_chain = checked_pem("certificate_chain", chain, "CERTIFICATE")
        self.private_key = checked_pem("private_key", key, "PRIVATE KEY")
        checked_pair(self.certificate_chain, self.private_key)
        self.metadata = _bearer(token)
        self.report_again_metadata = (*self.metadata, (REPORT_AGAIN_METADATA_KEY, "1"))
        self.options = channel_options(max_message_bytes, options)  # checks max_message_bytes
        send_limit = dict(self.options)["grpc.max_send_message_length"]  # or the caller's own
        self.send_limit = send_limit if type(send_limit) is int and send_limit >= 0 else None
        """The size a request may have, as the channel applies it (None: no limit)."""
        self.wait_for_ready = _checked_flag("wait_for_ready", wait_for_ready)

    def check_size(self, request: message.Message) -> None:
        """A request over the channel's send limit is refused here, naming its largest part,
        rather than by gRPC's "Sent message larger than max" (the same status code)."""
        limit = self.send_limit
        if limit is None:
            return
        size = request.ByteSize()
        if size > limit:
            raise not_sent(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the request is {size:,} bytes, more than this client's message size of "
                f"{limit:,} (max_message_bytes){_largest_part(request)}; not sent: shorten "
                "it, or raise max_message_bytes here and --max-message-bytes on the server",
            )

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )

    def open(self, module: Any) -> Any:
        """A channel from `grpc` or `grpc.aio` (same factory names): TLS when configured."""
        if self.tls:
            return module.secure_channel(self.target, self.credentials(), options=self.options)
        return module.insecure_channel(self.target, options=self.options)

    def deadline(self, timeout: float | None) -> float | None:
        """A call's deadline in seconds (None: none): its own `timeout`, else the client's."""
        return self.timeout if timeout is None else _deadline_seconds(timeout)


class ResolverClient:
    """Blocking client. `with ResolverClient("host:50051") as client: client.resolve(...)`.

    Construction is cheap and never blocks: the channel connects on the first call. Raises
    `ResolveError` when the request has errors (INVALID_ARGUMENT, carrying the full report),
    `ResolverUnavailable` when the server cannot be reached in time, `ResolverCallError` for
    anything else.

    `timeout` (seconds; here for every call, or per call, None there meaning the client's) is a
    positive number, or math.inf (or None here) for no deadline; 0, a negative or NaN is a
    ValueError, and one beyond MAX_TIMEOUT waits MAX_TIMEOUT.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        root_certificates: PathOrBytes | None = None,
        private_key: PathOrBytes | None = None,
        certificate_chain: PathOrBytes | None = None,
        token: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        options: Sequence[tuple[str, Any]] = (),
        wait_for_ready: bool = False,
    ) -> None:
        self._settings = _Settings(
            target=target,
            timeout=timeout,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            token=token,
            max_message_bytes=max_message_bytes,
            options=options,
            wait_for_ready=wait_for_ready,
        )
        self._channel: grpc.Channel = self._settings.open(grpc)
        self._stub = resolver_stub(self._channel)
        self._closed = False
        self.last_server_pid = ""
        """Pid of the server worker that answered the last call (debugging aid)."""

    @property
    def target(self) -> str:
        """The server's address, as given."""
        return self._settings.target

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel (for calls of the raw stubs: npu_resolver_client.wire)."""
        return self._channel

    def close(self) -> None:
        """Closes the channel; calls in flight raise ResolverCallError CANCELLED, and later
        calls FAILED_PRECONDITION."""
        self._closed = True
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __reduce__(self) -> NoReturn:
        _not_copied(self)

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        request: message.Message,
        timeout: float | None,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> Any:
        """One call; `metadata` in place of the client's own (which it includes)."""
        _check_open(self._closed)
        self._settings.check_size(request)
        rpc = getattr(self._stub, method)
        try:
            response, call = rpc.with_call(
                request,
                timeout=self._settings.deadline(timeout),
                metadata=(self._settings.metadata if metadata is None else metadata) or None,
                wait_for_ready=self._settings.wait_for_ready or None,
            )
        except grpc.RpcError as error:
            self.last_server_pid = _pid(
                error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
            )
            failure = from_rpc_error(error)
            deadline = self._settings.deadline(timeout)
            raise _failure(self._closed, failure, self._settings, deadline) from None
        except ValueError:
            # close() from another thread between the check above and the call: grpc raises
            # ValueError ("Cannot invoke RPC on closed channel!", "... Channel closed!").
            if not self._closed:
                raise
            raise _closed_error() from None
        self.last_server_pid = _pid(call.trailing_metadata())
        return response

    def resolve(
        self,
        product: str,
        config: Mapping[str, JSON] | None = None,
        env: Mapping[str, str] | None = None,
        *,
        workdir: str = "",
        profile: str = "",
        strict: bool = False,
        validate_only: bool = False,
        attachments: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Resolution:
        """One request's effective config (see npu_resolver.ResolveRequest for the fields).
        Returns the Resolution; with `validate_only` a report with errors is returned too (`ok`
        false). Raises ResolveError when the request has errors (`.resolution` is the full
        report, `.violations` one per error), ResolverUnavailable when no server answered in
        time, ResolverCallError otherwise (and ValueError for a bad `timeout`)."""
        request = _build_request(
            product=product,
            config=config,
            env=env,
            workdir=workdir,
            profile=profile,
            strict=strict,
            validate_only=validate_only,
            attachments=attachments,
        )
        return self.resolve_request(request, timeout=timeout)

    def resolve_request(
        self, request: ResolveRequest, *, timeout: float | None = None
    ) -> Resolution:
        """resolve() of a ResolveRequest built beforehand: the same answer and exceptions."""
        message = _to_proto(request)
        started = time.monotonic()
        try:
            response = self._call("Resolve", message, timeout)
        except ResolveError as error:
            report = self._ask_report(error, message, timeout, started)
            raise _resolve_error(error, request, report) from None
        return restore_callers_values(resolution_from_proto(response), request)

    def _ask_report(
        self, error: ResolveError, message: pb.ResolveRequest, timeout: float | None, started: float
    ) -> pb.ResolveResponse | ResolverClientError | None:
        """The report the status details of `error` left out, or None (the original error
        stands) when it is not missing or cannot be had, or the second ask's error when its
        reply was larger than this client's max_message_bytes (see _resolve_error)."""
        ask = _report_ask(error, message, self._settings.deadline(timeout), started)
        if ask is None:
            return None
        try:
            report: pb.ResolveResponse = self._call(
                "Resolve", *ask, self._settings.report_again_metadata
            )
        except ResolverClientError as again:
            return again if again.reply_too_large else None
        return report

    def resolve_batch(
        self, requests: Iterable[ResolveRequest], *, timeout: float | None = None
    ) -> list[Resolution | ResolveFailure]:
        """Every request under one catalog and policy snapshot (at most 1,000 a call), answered
        in order: a Resolution, or a ResolveFailure for an item that failed (raised by none;
        `.error()` is the exception Resolve would have raised). Items the server was too busy
        for are sent again, each alone, within the deadline. Raises as resolve() does for the
        call itself (a batch the server refuses whole: ResolveError with no resolution); an
        item that is not a ResolveRequest is a TypeError naming its index, before any call."""
        asked = list(requests)
        deadline, started = self._settings.deadline(timeout), time.monotonic()
        sent = _batch(asked)
        first = _batch_results(self._call("ResolveBatch", sent, timeout), asked)
        items = _BusyItems(asked, sent, first, deadline, started)
        for pause, index, alone, left in items.resends():
            time.sleep(pause)
            try:
                reply = self._call("ResolveBatch", alone, left)
            except ResolverClientError:
                break  # the resends end: see _BusyItems
            items.answered(index, reply)
        return items.results

    def diff(
        self,
        request: ResolveRequest,
        products: Sequence[str],
        *,
        timeout: float | None = None,
    ) -> DiffResult:
        """`request` resolved for each of `products` (its own product is ignored), side by
        side, as `npu_resolver.diff` does in process: a DiffResult, whose columns hold each
        product's report, errors included (a product named twice, by id or alias, is one
        column: ["atlas-a2", "atlas-a2"] gives a one-column DiffResult). Raises as resolve();
        fewer than 2 names, more than 16 distinct products, or a name longer than 256
        characters is a ResolveError before anything is sent."""
        message = _diff_request(request, products)
        return diff_from_proto(self._call("Diff", message, timeout), request)

    def list_products(self, *, timeout: float | None = None) -> list[Product]:
        """The server's products (id, display name, aliases, family). Raises as resolve()."""
        response = self._call("ListProducts", pb.ListProductsRequest(), timeout)
        return [product_from_proto(p) for p in response.products]

    def describe_catalog(
        self, product: str | None = None, *, timeout: float | None = None
    ) -> dict[str, JSON]:
        """The server's catalog as `npu-resolve explain --format json` prints it: every option,
        or one product's view of them. Raises as resolve(); an unknown product is a
        ResolveError naming the known ids."""
        request = pb.DescribeCatalogRequest(product=_checked_product(product))
        return catalog_from_proto(self._call("DescribeCatalog", request, timeout))

    def get_policy(self, *, timeout: float | None = None) -> PolicyInfo:
        """The policy the server has in force, and how its last reload went (PolicyInfo).
        Raises as resolve()."""
        return _policy_info(self._call("GetPolicy", pb.GetPolicyRequest(), timeout))

    def reload_policy(self, *, timeout: float | None = None) -> ReloadResult:
        """Asks the server to read its policy file again (an admin call: the client's `token`
        must be the server's admin token). Returns a ReloadResult: a file the server refused
        is not raised, `error` says why. Raises as resolve(); UNAUTHENTICATED as
        ResolverCallError."""
        response = self._call("ReloadPolicy", pb.ReloadPolicyRequest(), timeout)
        return ReloadResult(response.changed, response.policy_version, response.error)


CLOSE_ELSEWHERE_S: Final = 5.0
"""How long close() from another loop waits for the channel's own loop to close it."""


def _not_copied(client: object) -> NoReturn:
    """Pickling or copying a client: a copy would share its channel (closed with either, or
    never) and no channel crosses processes."""
    raise TypeError(
        f"this {type(client).__name__} holds a gRPC channel and cannot be pickled or copied: "
        "create one in each process (after a fork, too) from its target"
    )


async def _close_quietly(channel: grpc.aio.Channel) -> None:
    """Close a channel whose loop is closed, in the running one: its calls ended with that
    loop, and closing ends its connection (kept open until collected, it broke the grpc.aio
    of every process forked meanwhile)."""
    with contextlib.suppress(Exception):
        await channel.close()


async def _close_in(loop: asyncio.AbstractEventLoop, channel: grpc.aio.Channel) -> None:
    """Close `channel` in its own running `loop`, from another one. The wait ends when the
    close ran, when that loop stops first (it would never run it: it was waited for forever),
    or after CLOSE_ELSEWHERE_S; a close that loop's own shutdown cancelled is no error here
    (it was this task's CancelledError, though nobody cancelled this task)."""
    future = asyncio.run_coroutine_threadsafe(channel.close(), loop)
    closing = asyncio.wrap_future(future)
    deadline = time.monotonic() + CLOSE_ELSEWHERE_S
    while not closing.done() and loop.is_running() and time.monotonic() < deadline:
        await asyncio.wait([closing], timeout=0.05)
    if not closing.done():
        future.cancel()  # not run yet: it never will be; grpc closes the channel when collected
    elif not closing.cancelled():
        closing.result()


class AsyncResolverClient:
    """The asyncio twin of ResolverClient (grpc.aio); same methods, awaited.

    Construction is cheap and never blocks, and needs no event loop: the channel is opened by
    the first call, in the loop that makes it (a grpc.aio channel belongs to one loop), so a
    client made at module level serves the `asyncio.run(main())` that follows. A client is
    tied to that loop. Once the loop is closed (a client kept from one `asyncio.run()` to the
    next, or across tests that each get a loop) nothing can use its channel any more, and the
    next call opens a new one in its own loop, and the old one is closed there (as is one that
    close() finds so). While the first loop is still open, a call from
    another loop raises ResolverCallError FAILED_PRECONDITION: its channel cannot be shared
    between two live loops, and a second channel in secret would double the connections and
    leave the first for nobody to close; make one client per loop.

    `timeout` as for ResolverClient: positive seconds, math.inf for no deadline.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        root_certificates: PathOrBytes | None = None,
        private_key: PathOrBytes | None = None,
        certificate_chain: PathOrBytes | None = None,
        token: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        options: Sequence[tuple[str, Any]] = (),
        wait_for_ready: bool = False,
    ) -> None:
        self._settings = _Settings(
            target=target,
            timeout=timeout,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            token=token,
            max_message_bytes=max_message_bytes,
            options=options,
            wait_for_ready=wait_for_ready,
        )
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.ResolverStub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening = threading.Lock()
        """Held while the loop is checked and a channel opened: two loops of two threads
        making their first calls at once would each open one (the second never closed)."""
        self._old: set[asyncio.Task[None]] = set()
        """Closes of channels left by closed loops, running in the current one."""
        self._closed = False
        self.last_server_pid = ""

    @property
    def target(self) -> str:
        """The server's address, as given."""
        return self._settings.target

    @property
    def channel(self) -> grpc.aio.Channel:
        """The channel of the running loop, opened on first use (so only inside that loop)."""
        return self._open()[0]

    def _open(self) -> tuple[grpc.aio.Channel, pb_grpc.ResolverStub]:
        """The channel and stub of the running loop; see the class docstring for loops."""
        _check_open(self._closed)
        loop = asyncio.get_running_loop()
        with self._opening:
            _check_open(self._closed)  # again: close() may have run since
            if self._loop is not loop or self._channel is None or self._stub is None:
                if self._loop is not None and not self._loop.is_closed():
                    raise not_sent(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        "this AsyncResolverClient belongs to the event loop of its first call, "
                        "which is still open; an async client serves one event loop: create "
                        "one in each loop",
                    )
                old = self._channel
                self._channel = self._settings.open(grpc.aio)
                self._stub = resolver_stub(self._channel)
                self._loop = loop
                if old is not None:  # left by a closed loop: closed here (its connection)
                    # Those a closed loop ended before their callbacks ran are dropped here.
                    self._old = {task for task in self._old if not task.done()}
                    task = loop.create_task(_close_quietly(old))
                    self._old.add(task)
                    task.add_done_callback(self._old.discard)
            return self._channel, self._stub

    async def close(self) -> None:
        """Closes the channel; calls in flight raise ResolverCallError CANCELLED, and later
        calls FAILED_PRECONDITION. A channel whose loop still exists but is not running (the
        client used with loop.run_until_complete, closed from another loop) cannot be closed
        from here: its connection lasts until the client is collected; close the client on
        the loop that used it."""
        with self._opening:  # a first call opening a channel now is done, or will see this
            self._closed = True
            channel, loop = self._channel, self._loop
        if channel is None or loop is None:
            return  # never opened
        if loop.is_closed():  # its calls are gone with it; its connection is not, until closed
            await _close_quietly(channel)
        elif loop is asyncio.get_running_loop():
            await channel.close()
        elif loop.is_running():  # closed from another thread's loop
            await _close_in(loop, channel)
        # else its loop is idle and nothing can run there: grpc closes it when it is collected.

    async def __aenter__(self) -> Self:
        return self

    def __reduce__(self) -> NoReturn:
        _not_copied(self)

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self,
        method: str,
        request: message.Message,
        timeout: float | None,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> Any:
        """One call; `metadata` in place of the client's own (which it includes)."""
        rpc = getattr(self._open()[1], method)
        self._settings.check_size(request)
        call = rpc(
            request,
            timeout=self._settings.deadline(timeout),
            metadata=(self._settings.metadata if metadata is None else metadata) or None,
            wait_for_ready=self._settings.wait_for_ready or None,
        )
        try:
            response = await call
            trailing = await call.trailing_metadata()
        except asyncio.CancelledError:
            # close() cancels the calls in flight, and grpc.aio raises CancelledError in the
            # awaiting task, which nobody cancelled. A cancellation of the task itself stays one.
            task = asyncio.current_task()
            if self._closed and (task is None or not task.cancelling()):
                raise _closed_during_call() from None
            raise
        except grpc.RpcError as error:
            trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
            self.last_server_pid = _pid(trailing)
            failure = from_rpc_error(error, trailing)
            deadline = self._settings.deadline(timeout)
            raise _failure(self._closed, failure, self._settings, deadline) from None
        self.last_server_pid = _pid(trailing)
        return response

    async def resolve(
        self,
        product: str,
        config: Mapping[str, JSON] | None = None,
        env: Mapping[str, str] | None = None,
        *,
        workdir: str = "",
        profile: str = "",
        strict: bool = False,
        validate_only: bool = False,
        attachments: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Resolution:
        """One request's effective config (see npu_resolver.ResolveRequest for the fields).
        Returns the Resolution; with `validate_only` a report with errors is returned too (`ok`
        false). Raises ResolveError when the request has errors (`.resolution` is the full
        report, `.violations` one per error), ResolverUnavailable when no server answered in
        time, ResolverCallError otherwise (and ValueError for a bad `timeout`)."""
        request = _build_request(
            product=product,
            config=config,
            env=env,
            workdir=workdir,
            profile=profile,
            strict=strict,
            validate_only=validate_only,
            attachments=attachments,
        )
        return await self.resolve_request(request, timeout=timeout)

    async def resolve_request(
        self, request: ResolveRequest, *, timeout: float | None = None
    ) -> Resolution:
        """resolve() of a ResolveRequest built beforehand: the same answer and exceptions."""
        message = _to_proto(request)
        started = time.monotonic()
        try:
            response = await self._call("Resolve", message, timeout)
        except ResolveError as error:
            report = await self._ask_report(error, message, timeout, started)
            raise _resolve_error(error, request, report) from None
        return restore_callers_values(resolution_from_proto(response), request)

    async def _ask_report(
        self, error: ResolveError, message: pb.ResolveRequest, timeout: float | None, started: float
    ) -> pb.ResolveResponse | ResolverClientError | None:
        """The report the status details of `error` left out, or None (the original error
        stands) when it is not missing or cannot be had, or the second ask's error when its
        reply was larger than this client's max_message_bytes (see _resolve_error)."""
        ask = _report_ask(error, message, self._settings.deadline(timeout), started)
        if ask is None:
            return None
        try:
            report: pb.ResolveResponse = await self._call(
                "Resolve", *ask, self._settings.report_again_metadata
            )
        except ResolverClientError as again:
            return again if again.reply_too_large else None
        return report

    async def resolve_batch(
        self, requests: Iterable[ResolveRequest], *, timeout: float | None = None
    ) -> list[Resolution | ResolveFailure]:
        """Every request under one catalog and policy snapshot (at most 1,000 a call), answered
        in order: a Resolution, or a ResolveFailure for an item that failed (raised by none;
        `.error()` is the exception Resolve would have raised). Items the server was too busy
        for are sent again, each alone, within the deadline. Raises as resolve() does for the
        call itself (a batch the server refuses whole: ResolveError with no resolution); an
        item that is not a ResolveRequest is a TypeError naming its index, before any call."""
        asked = list(requests)
        deadline, started = self._settings.deadline(timeout), time.monotonic()
        sent = _batch(asked)
        first = _batch_results(await self._call("ResolveBatch", sent, timeout), asked)
        items = _BusyItems(asked, sent, first, deadline, started)
        for pause, index, alone, left in items.resends():
            await asyncio.sleep(pause)
            try:
                reply = await self._call("ResolveBatch", alone, left)
            except ResolverClientError:
                break  # the resends end: see _BusyItems
            items.answered(index, reply)
        return items.results

    async def diff(
        self,
        request: ResolveRequest,
        products: Sequence[str],
        *,
        timeout: float | None = None,
    ) -> DiffResult:
        """`request` resolved for each of `products` (its own product is ignored), side by
        side, as `npu_resolver.diff` does in process: a DiffResult, whose columns hold each
        product's report, errors included (a product named twice, by id or alias, is one
        column: ["atlas-a2", "atlas-a2"] gives a one-column DiffResult). Raises as resolve();
        fewer than 2 names, more than 16 distinct products, or a name longer than 256
        characters is a ResolveError before anything is sent."""
        message = _diff_request(request, products)
        return diff_from_proto(await self._call("Diff", message, timeout), request)

    async def list_products(self, *, timeout: float | None = None) -> list[Product]:
        """The server's products (id, display name, aliases, family). Raises as resolve()."""
        response = await self._call("ListProducts", pb.ListProductsRequest(), timeout)
        return [product_from_proto(p) for p in response.products]

    async def describe_catalog(
        self, product: str | None = None, *, timeout: float | None = None
    ) -> dict[str, JSON]:
        """The server's catalog as `npu-resolve explain --format json` prints it: every option,
        or one product's view of them. Raises as resolve(); an unknown product is a
        ResolveError naming the known ids."""
        request = pb.DescribeCatalogRequest(product=_checked_product(product))
        return catalog_from_proto(await self._call("DescribeCatalog", request, timeout))

    async def get_policy(self, *, timeout: float | None = None) -> PolicyInfo:
        """The policy the server has in force, and how its last reload went (PolicyInfo).
        Raises as resolve()."""
        return _policy_info(await self._call("GetPolicy", pb.GetPolicyRequest(), timeout))

    async def reload_policy(self, *, timeout: float | None = None) -> ReloadResult:
        """Asks the server to read its policy file again (an admin call: the client's `token`
        must be the server's admin token). Returns a ReloadResult: a file the server refused
        is not raised, `error` says why. Raises as resolve(); UNAUTHENTICATED as
        ResolverCallError."""
        response = await self._call("ReloadPolicy", pb.ReloadPolicyRequest(), timeout)
        return ReloadResult(response.changed, response.policy_version, response.error)


def remote_resolve(
    target: str, request: ResolveRequest, timeout: float | None = DEFAULT_TIMEOUT
) -> Resolution:
    """One Resolve through a server, answered like the in-process `npu_resolver.resolve`: a
    request with errors comes back as its report (ok false) instead of raising. Raises
    ResolverUnavailable when the server cannot be reached, ResolveError only when the server
    could not read the request at all."""
    with ResolverClient(target, timeout=timeout) as client:
        try:
            return client.resolve_request(request)
        except ResolveError as error:
            if error.resolution is not None:
                return error.resolution
            raise
