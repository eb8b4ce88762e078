"""The Resolver service: decode, call the core, encode. No rule logic lives here.

Handlers receive the raw request bytes and parse them themselves, so that a malformed message
or invalid UTF-8 is INVALID_ARGUMENT (not INTERNAL), and so that a repeated request can be
answered from the answer cache without parsing it at all. Any unexpected exception is logged
and answered INTERNAL with a message; nothing escapes as UNKNOWN.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import grpc

import npu_resolver
from npu_resolver import Resolution, ResolveRequest
from npu_resolver.text import config_refusal, cut_text, too_deep, too_wide
from npu_resolver_client.wire import (
    REPORT_AGAIN_METADATA_KEY,
    LimitError,
    catalog_to_proto,
    config_from_wire,
    diff_to_proto,
    pb,
    product_to_proto,
    request_from_proto,
)

from . import _logging
from ._cache import MAX_KEY_BYTES, Answer, AnswerCache
from ._encode import count_fields, field, length_delimited, without_field
from ._large import MAX_HELD, LargeRequests
from ._metrics import Metrics
from ._policy_store import PolicyStore, ReloadOutcome
from ._reading import (
    DECODER_DEPTH,
    LARGE_REQUEST_BYTES,
    parse,
    parse_with_config,
    too_large,
    unreadable,
    without_map,
)
from ._reload_marks import ReloadFailures
from ._replies import (
    STATUS_DETAILS_KEY,
    RefusedError,
    alone_too_large,
    batch_result,
    fit_trailer,
    left_out_answer,
    refuse,
    resolution_answer,
)
from .settings import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_STRUCT_DEPTH,
    DEFAULT_MAX_STRUCT_KEYS,
    PID_METADATA_KEY,
)

SERVICE: Final = "npu.resolver.v1.Resolver"
ADMIN_METHODS: Final = frozenset({"ReloadPolicy"})
METHODS: Final = frozenset(m.name for m in pb.DESCRIPTOR.services_by_name["Resolver"].methods)
_CODE_NAMES: Final = {code: code.name for code in grpc.StatusCode}
"""A status code's name, looked up (reading an Enum member's name is a descriptor call)."""

log = logging.getLogger("npu_resolver_server.service")

Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]
AfterReload = Callable[[float | None, Callable[[], bool]], Awaitable[None]]
"""What follows a ReloadPolicy call's good load: (seconds before its deadline, whether its
caller still waits for the reply)."""
Method = Callable[[bytes, grpc.aio.ServicerContext], "Answer | Awaitable[Answer]"]
"""A handler's body: most answer at once; ReloadPolicy, and a large request, await work on
another thread."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int = DEFAULT_MAX_STRUCT_DEPTH
    max_keys: int = DEFAULT_MAX_STRUCT_KEYS
    max_reply_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


MAX_BATCH_ITEMS: Final = 1000
MAX_OTHER_BATCH_FIELDS: Final = 64
"""Top-level fields of a batch besides its items (fields a newer client may add): a full batch
with one of them is still a batch, and the walk before decoding stays bounded."""
BATCH_SLICE: Final = 16
"""Items answered between two yields to the event loop."""
BATCH_SLICE_S: Final = 0.02
"""Or fewer, once this long has passed: items with megabyte attachments take a tenth of a
second each, and a health probe should not wait for sixteen of them."""
MAX_DIFF_PRODUCTS: Final = npu_resolver.MAX_DIFF_PRODUCTS
OFF_LOOP_BYTES: Final = MAX_KEY_BYTES
"""Requests larger than this (attachments of hundreds of kilobytes: a tenth to half a second
each) are resolved on the service's own thread, one at a time, so that health probes and small
calls on this worker are answered meanwhile. Never less than the answer cache's key bound: the
cache, on the event loop alone, never holds such a request."""
DEADLINE_SLACK_S: Final = 0.05
"""A call cancelled this close to its deadline was ended by it: the caller's own timer fires
first and cancels the call before the server's copy of the deadline has passed."""
_BUSY: Final = Answer(
    grpc.StatusCode.UNAVAILABLE,
    message=(
        f"this server holds {MAX_HELD} requests over {OFF_LOOP_BYTES // 1024} KiB already "
        "(resolved one at a time); retry shortly"
    ),
    ok=False,
)


def _map_refused(
    message_: pb.ResolveRequest, refused: RefusedError, policy: npu_resolver.PolicyLike | None
) -> Resolution:
    """The report for a validate_only request refused for a map too large to decode (env or
    attachments): "report only: never fails at the transport level", so that one error is the
    report, the rest of the request unread."""
    version = policy.version if policy is not None else ""
    diagnostic = npu_resolver.Diagnostic(
        npu_resolver.Severity.ERROR,
        npu_resolver.Code.INVALID_VALUE,
        refused.field,
        "",
        str(refused),
    )
    return npu_resolver.unresolved(message_.product, diagnostic, policy_version=version)


def _config_refused(
    message_: pb.ResolveRequest, refused: RefusedError, policy: npu_resolver.PolicyLike | None
) -> Resolution:
    """The report for a request whose config cannot be taken (too deep, too wide, not JSON)."""
    version = policy.version if policy is not None else ""
    return npu_resolver.config_refused(message_.product, str(refused), policy_version=version)


async def _awaited(outcome: Answer | Awaitable[Answer]) -> Answer:
    """The answer of a handler body that awaits (ReloadPolicy and ResolveBatch)."""
    return await outcome if inspect.isawaitable(outcome) else outcome


_SMALLER_REPLY: Final = {
    "Resolve": "shorten the long values, or ",
    "Diff": "diff fewer products, shorten the long values or product names, or ",
    "DescribeCatalog": "describe one product a call, or ",
}
"""What a caller can do for a smaller reply, by method (where it can do anything)."""


@dataclass(slots=True)
class _Caller:
    """A ReloadPolicy caller, which may leave (cancel, or its deadline pass) while the work it
    asked for goes on."""

    left: bool = False

    def failed_unheard(self, work: asyncio.Future[ReloadOutcome]) -> None:
        """An error of the work after its caller left reaches no reply: logged as any internal
        error (asyncio would print it as plain text when the task is collected)."""
        if self.left and not work.cancelled() and (error := work.exception()) is not None:
            log.error(
                "unexpected error",
                exc_info=error,
                extra={"fields": {"event": "internal", "method": "ReloadPolicy"}},
            )


def _reported_again(context: grpc.aio.ServicerContext) -> bool:
    """Whether the call is a client's second ask for a report cut from a failed Resolve's
    trailer (REPORT_AGAIN_METADATA_KEY): the failed call counted its diagnostics already.
    Anyone may send the mark, unchecked against any earlier call: all it can do is keep the
    sender's own call's diagnostics out of the counters, which is acceptable."""
    for key, value in context.invocation_metadata() or ():
        if key == REPORT_AGAIN_METADATA_KEY:
            return bool(value == "1")
    return False


MAX_LOGGED_PATH: Final = 256
"""A refused call's method path is logged cut to this many characters."""


class _EveryMethod(grpc.GenericRpcHandler):  # type: ignore[misc]
    """A generic handler that serves any method, with a handler made for its path (streaming,
    so that it answers without waiting for a message a streaming caller may never send)."""

    def __init__(self, handler: Callable[[str], grpc.RpcMethodHandler]) -> None:
        self._handler = handler

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return self._handler(handler_call_details.method)


class ResolverService:
    """The handlers of npu.resolver.v1.Resolver, on raw bytes."""

    def __init__(
        self,
        store: PolicyStore,
        *,
        cache: AnswerCache | None = None,
        metrics: Metrics | None = None,
        failures: ReloadFailures | None = None,
        limits: Limits = Limits(),
        after_reload: AfterReload | None = None,
    ) -> None:
        """`after_reload`: awaited after a ReloadPolicy call read the file, with the seconds
        left before the call's deadline (to reach the other workers of a --workers server
        before the reply) and whether a reply is still due (its caller may leave meanwhile);
        `failures`: the failed reloads this worker counts for the server,
        and their total under --workers, which GetPolicy says (else this worker's own)."""
        self.store = store
        self.failures = failures
        self.after_reload = after_reload
        self.cache = cache if cache is not None else AnswerCache(0)
        self.metrics = metrics
        self.limits = limits
        self._pid = str(os.getpid())
        self._catalog_cache: dict[str, bytes] = {}
        self._reloading: set[asyncio.Future[ReloadOutcome]] = set()
        """ReloadPolicy work still running after its caller left (the loop keeps only weak
        references to tasks)."""
        self.large = LargeRequests()

    def close(self) -> None:
        self.large.close()

    # ----------------------------------------------------------------------- plumbing

    def generic_handler(self) -> grpc.GenericRpcHandler:
        methods: dict[str, Method] = {
            "Resolve": self.resolve,
            "ResolveBatch": self.resolve_batch,
            "Diff": self.diff,
            "ListProducts": self.list_products,
            "DescribeCatalog": self.describe_catalog,
            "GetPolicy": self.get_policy,
            "ReloadPolicy": self.reload_policy,
        }
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                name: grpc.unary_unary_rpc_method_handler(self._wrap(name, fn))
                for name, fn in methods.items()
            },
        )

    def _wrap(
        self,
        method: str,
        fn: Method,
    ) -> Handler:
        pid = self._pid
        sent_ok = ((PID_METADATA_KEY, pid),)
        reports = method == "Resolve"  # the one method a client asks again for a cut report

        async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
            start = _logging.now()
            try:
                outcome = fn(raw, context)
                answer = outcome if type(outcome) is Answer else await _awaited(outcome)
            except asyncio.CancelledError:
                # The caller cancelled, or its deadline passed, while the handler awaited (a
                # batch between slices, a reload): no reply goes out, but the call is counted
                # and logged, so that calls failing this way show on the server too.
                self._cancelled(method, context, _logging.now() - start)
                raise
            except RefusedError as refused:
                answer = refused.answer()
            except Exception as exc:
                log.exception(
                    "unexpected error", extra={"fields": {"event": "internal", "method": method}}
                )
                answer = Answer(
                    grpc.StatusCode.INTERNAL,
                    message=f"internal error in {method} ({type(exc).__name__}); see server log",
                    ok=False,
                )
            if (
                answer.code is grpc.StatusCode.OK
                and len(answer.payload) > self.limits.max_reply_bytes
            ):  # gRPC would refuse to send it; say so here, where it is logged and counted
                answer = Answer(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    message=(
                        f"the reply ({len(answer.payload):,} bytes) exceeds the "
                        f"{self.limits.max_reply_bytes:,} byte message limit; "
                        f"{_SMALLER_REPLY.get(method, '')}have the server's "
                        "--max-message-bytes raised"
                    ),
                    ok=False,
                )
            elapsed = _logging.now() - start
            code = _CODE_NAMES[answer.code]
            # A report of errors answered OK is validate_only's, the one a client asks again for:
            # only then is the metadata read, so an ordinary call pays nothing for it.
            again = (
                reports
                and answer.ok is False
                and answer.code is grpc.StatusCode.OK
                and _reported_again(context)
            )
            if self.metrics is not None:
                # The call is counted (it is load, and its latency is observed); its report's
                # diagnostics were counted with the failed call whose trailer cut it.
                counted = () if answer.codes_counted or again else answer.codes
                self.metrics.observe(method, code, elapsed, answer.product, counted)
            _logging.log_call(
                method,
                code=code,
                latency_s=elapsed,
                product=answer.product,
                ok=answer.ok,
                codes=answer.codes,
                report_again=again,
            )
            if answer.code is grpc.StatusCode.OK:
                context.set_trailing_metadata(sent_ok)
                return answer.payload
            trailing: list[tuple[str, str | bytes]] = [(PID_METADATA_KEY, pid)]
            message = answer.message
            if answer.status_details:
                message, details = fit_trailer(message, answer.status_details)
                if details:
                    trailing.append((STATUS_DETAILS_KEY, details))
            if answer.code is grpc.StatusCode.UNAVAILABLE:
                # A client's gRPC retries it only when the status comes alone, with no reply
                # headers before it, as context.abort sends it. The request's bytes go first:
                # the exception abort raises is kept with the call, this frame in its traceback.
                del raw
                await context.abort(answer.code, message, tuple(trailing))
            return refuse(context, answer.code, message, trailing)

        return handler

    def _cancelled(self, method: str, context: grpc.aio.ServicerContext, elapsed: float) -> None:
        remaining = context.time_remaining()
        expired = remaining is not None and remaining <= DEADLINE_SLACK_S
        code = "DEADLINE_EXCEEDED" if expired else "CANCELLED"
        if self.metrics is not None:
            self.metrics.observe(method, code, elapsed, "", ())
        _logging.log_call(method, code=code, latency_s=elapsed, ok=False)

    def unknown_method_handler(self) -> grpc.GenericRpcHandler:
        """The last handler: a call to a method no service here has (a client built from
        another version of the proto, a typo in a hand-written path) is answered UNIMPLEMENTED
        as gRPC would, and logged and counted under "unknown", so that it shows."""

        def handler(path: str) -> grpc.RpcMethodHandler:
            async def unimplemented(requests: object, context: grpc.aio.ServicerContext) -> None:
                await self._unimplemented(path, context)

            return grpc.stream_stream_rpc_method_handler(unimplemented)

        return _EveryMethod(handler)

    async def _unimplemented(self, path: str, context: grpc.aio.ServicerContext) -> None:
        code = grpc.StatusCode.UNIMPLEMENTED
        if self.metrics is not None:
            self.metrics.refused("unknown", code.name)
        # The path the caller asked for is in the line (cut, as JSON writes it), not a label.
        caller = {"peer": context.peer(), "path": cut_text(path, MAX_LOGGED_PATH)}
        _logging.log_call("unknown", code=code.name, latency_s=0.0, ok=False, caller=caller)
        refuse(context, code, "no such method on this server", ((PID_METADATA_KEY, self._pid),))

    def unauthenticated(self, method: str, path: str = "", peer: str = "") -> None:
        """A call the token check refused before any handler ran: logged (with its peer and,
        for a method of no service here, its path) and counted too, under "unknown" when the
        caller named no method of the service (labels stay bounded)."""
        name = method if method in METHODS else "unknown"
        code = grpc.StatusCode.UNAUTHENTICATED.name
        if self.metrics is not None:
            self.metrics.refused(name, code)
        caller = {"peer": peer}
        if name == "unknown":
            caller["path"] = cut_text(path or method, MAX_LOGGED_PATH)
        _logging.log_call(name, code=code, latency_s=0.0, ok=False, caller=caller)

    def _policy(self) -> npu_resolver.PolicyLike | None:
        return self.store.current

    # ----------------------------------------------------------------------- resolve

    def _request(self, message_: pb.ResolveRequest) -> ResolveRequest:
        try:
            return request_from_proto(
                message_, max_depth=self.limits.max_depth, max_keys=self.limits.max_keys
            )
        except LimitError as exc:
            raise RefusedError(str(exc), "config", "REQUEST_LIMIT") from None

    def _resolve_one(
        self,
        raw: bytes,
        parsed: pb.ResolveRequest | None,
        policy: npu_resolver.PolicyLike | None,
        version: str,
    ) -> Answer | Awaitable[Answer]:
        """The answer, from the cache or made; a request over OFF_LOOP_BYTES (which the cache
        never holds) is made on the large-request thread."""
        cached = self.cache.get(version, raw)
        if self.metrics is not None and self.cache.enabled:
            self.metrics.cache_lookup(cached is not None)
        if cached is not None:
            return cached
        if len(raw) > OFF_LOOP_BYTES:
            return _BUSY if self.large.full else self.large.run(self._answer, raw, parsed, policy)
        answer = self._answer(raw, parsed, policy)
        self.cache.put(version, raw, answer)
        return answer

    def _answer(
        self, raw: bytes, parsed: pb.ResolveRequest | None, policy: npu_resolver.PolicyLike | None
    ) -> Answer:
        """Read, resolve and encode one request: no state of the service is touched, so that
        it may run off the event loop."""
        try:
            message_, left_out = (
                (parsed, None)
                if parsed is not None
                else parse_with_config(pb.ResolveRequest, raw, self.limits.max_keys)
            )
        except RefusedError as refused:
            if refused.reason == "TOO_MANY_ENTRIES":  # a map (env, attachments) of thousands
                rest = without_map(pb.ResolveRequest, raw, refused.field, self.limits.max_keys)
                if rest is not None and rest.validate_only:
                    return resolution_answer(_map_refused(rest, refused, policy), True)
            return refused.answer()  # not a ResolveRequest at all, or one too large to read
        try:
            if left_out is not None:
                raise self._unread_config(left_out)
            request = self._request(message_)
        except RefusedError as refused:
            if refused.reason != "REQUEST_LIMIT":
                return refused.answer()  # not a ResolveRequest at all
            # Read, but its config cannot be taken: a report like any other error, so that
            # validate_only still answers OK and a client gets the full response.
            report = _config_refused(message_, refused, policy)
            return resolution_answer(report, message_.validate_only)
        return resolution_answer(
            npu_resolver.resolve(request, policy=policy), request.validate_only, request
        )

    def _unread_config(self, why: Literal["deep", "wide"]) -> RefusedError:
        """A config Struct left unread. Within the server's own limits (18 levels, 10,000 keys
        by default), the answer is the one in process; a depth limit raised past the decoder's
        reach is said as the decoder's."""
        if why == "wide":
            shape = too_wide(self.limits.max_keys)
            return RefusedError(config_refusal(shape), "config", "REQUEST_LIMIT")
        shape = too_deep(self.limits.max_depth)
        if self.limits.max_depth >= DECODER_DEPTH:
            shape = (
                f"nested deeper than a Struct can be read (about {DECODER_DEPTH} levels); "
                "send it as config_json"
            )
        return RefusedError(config_refusal(shape), "config", "REQUEST_LIMIT")

    def resolve(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer | Awaitable[Answer]:
        policy = self._policy()
        return self._resolve_one(raw, None, policy, policy.version if policy is not None else "")

    async def resolve_batch(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        # Walked field by field below, whatever its size: bound the fields first. Under 256 KiB
        # a batch still holds up to 131,072 empty items, which the walk would take 0.3 s over.
        counts = count_fields(raw, MAX_BATCH_ITEMS + MAX_OTHER_BATCH_FIELDS + 1)
        if counts is None and len(raw) > LARGE_REQUEST_BYTES:
            raise unreadable(pb.ResolveBatchRequest)
        if counts is not None and counts.get(1, 0) > MAX_BATCH_ITEMS:
            raise RefusedError(
                f"a batch takes at most {MAX_BATCH_ITEMS:,} requests, this one has more; split "
                "it into several calls",
                "requests",
                "TOO_MANY_REQUESTS",
            )
        if counts is not None and sum(counts.values()) > MAX_BATCH_ITEMS + MAX_OTHER_BATCH_FIELDS:
            raise RefusedError(
                f"the batch has more than {MAX_OTHER_BATCH_FIELDS} fields besides its requests; "
                "it is not a batch this server reads",
                "request",
                "MALFORMED_REQUEST",
            )
        # Each item's own bytes: the answer-cache key a unary Resolve of it would use.
        item_bytes = length_delimited(raw, 1)
        try:
            if item_bytes is not None and any(
                too_large(pb.ResolveRequest, item, self.limits.max_keys) for item in item_bytes
            ):  # the decoder would spend seconds on the batch: each item is read on its own
                raise RefusedError("an item holds a map too large to decode")
            items: Sequence[pb.ResolveRequest | None] = parse(pb.ResolveBatchRequest, raw).requests
        except RefusedError:
            # An item the decoder cannot read (its config too deep, text that is not UTF-8):
            # each item is read, and answered, on its own, as the proto promises, as long as
            # the rest of the batch (fields a newer client may add) reads.
            rest = without_field(raw, 1)
            if item_bytes is None or rest is None:
                raise
            parse(pb.ResolveBatchRequest, rest)
            items = [None] * len(item_bytes)
        if len(items) > MAX_BATCH_ITEMS:  # each item holds the event loop: refuse, fast
            raise RefusedError(
                f"a batch takes at most {MAX_BATCH_ITEMS:,} requests, this one has {len(items):,}; "
                "split it into several calls",
                "requests",
                "TOO_MANY_REQUESTS",
            )
        if item_bytes is None or len(item_bytes) != len(items):
            item_bytes = [item.SerializeToString() for item in items if item is not None]
            assert len(item_bytes) == len(items)  # unread items come only with their own bytes
        policy = self._policy()  # one snapshot for the whole batch
        version = policy.version if policy is not None else ""
        parts: list[bytes] = []
        tail = (field(2, version.encode()) if version else b"") + field(
            3, npu_resolver.CATALOG_VERSION.encode()
        )
        size = len(tail)
        limit = self.limits.max_reply_bytes
        reserve = len(batch_result(left_out_answer(len(items), len(items), limit)))  # the longest
        failed = 0
        codes: set[str] = set()
        seen: list[tuple[str, tuple[str, ...]]] = []
        clock = time.monotonic
        since = clock()
        for index, item in enumerate(items):
            if index % BATCH_SLICE == BATCH_SLICE - 1 or clock() - since > BATCH_SLICE_S:
                # A thousand items take most of a second: let the worker's other calls (a
                # health probe, a small Resolve) run between slices.
                await asyncio.sleep(0)
                since = clock()
                remaining = context.time_remaining()
                if remaining is not None and remaining <= 0:
                    return Answer(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        message=f"deadline exceeded after {index} of {len(items)} items",
                        ok=False,
                    )
            outcome = self._resolve_one(item_bytes[index], item, policy, version)
            if type(outcome) is Answer:
                answer = outcome
            else:  # made on the large-request thread, the loop free meanwhile
                answer = await _awaited(outcome)
                since = clock()
            part = batch_result(answer)
            if len(tail) + len(part) > limit:  # this item's answer fits in no batch reply
                answer = alone_too_large(answer, len(part), limit)
                part = batch_result(answer)
            if size + len(part) + reserve * (len(items) - index - 1) > limit:
                # gRPC would refuse to send the reply: the items answered so far keep their
                # answers, and this one and the rest each say why they have none.
                left_out = batch_result(left_out_answer(index, len(items), limit))
                if size + len(left_out) * (len(items) - index) > limit:
                    return Answer(  # not even that fits (a tiny --max-message-bytes)
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        message=(
                            f"the reply to this batch would exceed the {limit:,} byte message "
                            f"limit after {index} of {len(items)} items; send smaller batches"
                        ),
                        ok=False,
                    )
                parts += [left_out] * (len(items) - index)
                failed += len(items) - index
                break
            seen.append((answer.product, answer.codes))
            failed += answer.code is not grpc.StatusCode.OK
            codes.update(answer.codes)
            parts.append(part)
            size += len(part)
        if self.metrics is not None:  # only now: the caller gets these answers
            self.metrics.batch(len(parts) - failed, failed)
            for product, item_codes in seen:
                self.metrics.diagnostics_seen(product, item_codes)
        parts.append(tail)
        return Answer(
            grpc.StatusCode.OK,
            payload=b"".join(parts),
            ok=failed == 0,
            codes=tuple(sorted(codes)),
            codes_counted=True,
        )

    # ----------------------------------------------------------------------- the rest

    def diff(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer | Awaitable[Answer]:
        policy = self._policy()
        if len(raw) > OFF_LOOP_BYTES:
            return self._diff_large(raw, policy)
        return self._diff_answer(*self._diff(raw, policy))

    async def _diff_large(self, raw: bytes, policy: npu_resolver.PolicyLike | None) -> Answer:
        if self.large.full:
            return _BUSY
        return self._diff_answer(*await self.large.run(self._diff, raw, policy))

    def _diff_answer(self, result: npu_resolver.DiffResult, payload: bytes) -> Answer:
        if self.metrics is not None:
            for resolution in result.results.values():
                self.metrics.diagnostics_seen(resolution.product, resolution.codes())
        codes = sorted({c for r in result.results.values() for c in r.codes()})
        return Answer(
            grpc.StatusCode.OK,
            payload=payload,
            ok=all(r.ok for r in result.results.values()),
            codes=tuple(codes),
            codes_counted=True,
        )

    def _diff(
        self, raw: bytes, policy: npu_resolver.PolicyLike | None
    ) -> tuple[npu_resolver.DiffResult, bytes]:
        """Read, diff and encode: no state of the service is touched (see _answer)."""
        request, left_out = parse_with_config(pb.DiffRequest, raw, self.limits.max_keys)
        try:  # before any work: the core's limits, the same as in process
            # A product named twice, by id or alias, is one column: the cap counts columns.
            products = npu_resolver.check_diff_products(request.products)
        except npu_resolver.DiffError as exc:
            raise RefusedError(str(exc), "products", exc.reason) from None
        # Each column once; two names of one product still make a diff, as in process.
        names = products if len(products) > 1 else list(request.products[:2])
        # An unknown product is not refused here: its column carries UNKNOWN_PRODUCT, as the
        # resolver in process reports it.
        try:
            if left_out is not None:
                raise LimitError(str(self._unread_config(left_out)))
            config = config_from_wire(
                request.config,
                request.config_json,
                "config",
                max_depth=self.limits.max_depth,
                max_keys=self.limits.max_keys,
            )
        except LimitError as exc:  # as in Resolve: a report, every column refusing the config
            version = policy.version if policy is not None else ""
            refused = [
                (name, npu_resolver.config_refused(name, str(exc), policy_version=version))
                for name in npu_resolver.diff_columns(names)
            ]
            result = npu_resolver.diff_of(refused)
        else:
            core_request = ResolveRequest(
                product=products[0] if products else "",
                config=config,
                env=dict(request.env),
                workdir=request.workdir,
                profile=request.profile,
                strict=request.strict,
                attachments=dict(request.attachments),
            )
            result = npu_resolver.diff(core_request, names, policy=policy)
        return result, diff_to_proto(result).SerializeToString()

    def list_products(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        parse(pb.ListProductsRequest, raw)
        response = pb.ListProductsResponse(
            products=[product_to_proto(p) for p in npu_resolver.list_products()],
            catalog_version=npu_resolver.CATALOG_VERSION,
        )
        return Answer(grpc.StatusCode.OK, payload=response.SerializeToString())

    def describe_catalog(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        request = parse(pb.DescribeCatalogRequest, raw)
        cached = self._catalog_cache.get(request.product)
        if cached is None:
            try:
                data = npu_resolver.describe_catalog(request.product or None)
            except ValueError as exc:
                raise RefusedError(str(exc), "product", "UNKNOWN_PRODUCT") from None
            cached = catalog_to_proto(data).SerializeToString()
            if len(self._catalog_cache) < 64:
                self._catalog_cache[request.product] = cached
        return Answer(grpc.StatusCode.OK, payload=cached)

    def get_policy(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        parse(pb.GetPolicyRequest, raw)
        status = self.store.status()
        response = pb.GetPolicyResponse(
            policy_version=status.version,
            canonical_text=status.canonical_text,
            source=status.source,
            profiles=list(status.profiles),
            last_reload_error=status.last_reload_error,
            refused_version=status.refused_version,
            reload_failures=self._reload_failures(status.reload_failures),
        )
        payload = response.SerializeToString()
        limit = self.limits.max_reply_bytes
        policy = self.store.current
        if len(payload) > limit and policy is not None and policy.version == status.version:
            # A policy of long lists, indented, can be six times its file: the same content
            # without whitespace is about the file's size, which any accepted file fits.
            response.canonical_text = getattr(policy, "compact_text", status.canonical_text)
            payload = response.SerializeToString()
        if len(payload) > limit:
            return Answer(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                message=(
                    f"the policy in force ({len(payload):,} bytes as canonical JSON without "
                    f"whitespace) exceeds the {limit:,} byte message limit; read it from its "
                    "file, or have the server's --max-message-bytes raised"
                ),
                ok=False,
            )
        return Answer(grpc.StatusCode.OK, payload=payload)

    async def _reload_everywhere(
        self, context: grpc.aio.ServicerContext, caller: _Caller
    ) -> ReloadOutcome:
        outcome = await self.store.reload_async()
        if self.after_reload is not None and not outcome.error:
            # The reply is due by the deadline; a caller gone needs none, nor any wait.
            await self.after_reload(context.time_remaining(), lambda: not caller.left)
        if outcome.error and self.failures is not None:
            added = self.failures.call_failed()
            if self.metrics is not None:
                self.metrics.reload_failed(added)
        return outcome

    def _reload_failures(self, own: int) -> int:
        """The server's count of failed reloads (`own`: this worker's, the answer when there
        is no shared count)."""
        total = self.failures.total() if self.failures is not None else None
        return own if total is None else total

    async def reload_policy(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        parse(pb.ReloadPolicyRequest, raw)
        if self.store.path is None:
            return Answer(
                grpc.StatusCode.FAILED_PRECONDITION,
                message="the server was started without --policy; there is nothing to reload",
                ok=False,
            )
        # Shielded: a caller that cancels (or whose deadline passes) while the file loads does
        # not stop the rest, which the load already began: the other workers are still asked to
        # read it, and a failure is still counted server-wide.
        caller = _Caller()
        reloading = asyncio.ensure_future(self._reload_everywhere(context, caller))
        self._reloading.add(reloading)
        reloading.add_done_callback(self._reloading.discard)
        reloading.add_done_callback(caller.failed_unheard)
        try:
            outcome = await asyncio.shield(reloading)
        except asyncio.CancelledError:
            caller.left = True
            raise
        response = pb.ReloadPolicyResponse(
            changed=outcome.changed, policy_version=outcome.version, error=outcome.error
        )
        return Answer(
            grpc.StatusCode.OK, payload=response.SerializeToString(), ok=not outcome.error
        )
