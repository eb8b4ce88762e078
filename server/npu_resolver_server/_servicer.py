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
from typing import Final, Literal, TypeVar

import grpc
from google.protobuf import any_pb2, message
from google.rpc import error_details_pb2, status_pb2

import npu_resolver
from npu_resolver import Resolution, ResolveRequest, Severity
from npu_resolver.text import config_refusal
from npu_resolver_client.wire import (
    LimitError,
    catalog_to_proto,
    config_from_wire,
    diff_to_proto,
    pb,
    product_to_proto,
    request_from_proto,
    violation_field,
)

from . import _logging
from ._cache import Answer, AnswerCache
from ._encode import (
    count_fields,
    encode_resolution,
    field,
    length_delimited,
    struct_items,
    without_field,
)
from ._metrics import Metrics
from ._policy_store import PolicyStore
from .settings import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_STRUCT_DEPTH,
    DEFAULT_MAX_STRUCT_KEYS,
    PID_METADATA_KEY,
)

SERVICE: Final = "npu.resolver.v1.Resolver"
STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
ADMIN_METHODS: Final = frozenset({"ReloadPolicy"})
METHODS: Final = frozenset(m.name for m in pb.DESCRIPTOR.services_by_name["Resolver"].methods)
_CODE_NAMES: Final = {code: code.name for code in grpc.StatusCode}
"""A status code's name, looked up (reading an Enum member's name is a descriptor call)."""
RESPONSE_TYPE_URL: Final = f"type.googleapis.com/{pb.ResolveResponse.DESCRIPTOR.full_name}"

log = logging.getLogger("npu_resolver_server.service")

M = TypeVar("M", bound=message.Message)
Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]
Method = Callable[[bytes, grpc.aio.ServicerContext], "Answer | Awaitable[Answer]"]
"""A handler's body: most answer at once; ReloadPolicy awaits a load in a worker thread."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_depth: int = DEFAULT_MAX_STRUCT_DEPTH
    max_keys: int = DEFAULT_MAX_STRUCT_KEYS
    max_reply_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


class _RefusedError(Exception):
    """The request cannot be read: answered INVALID_ARGUMENT with a BadRequest."""

    def __init__(self, message: str, field: str = "", reason: str = "MALFORMED_REQUEST") -> None:
        super().__init__(_cut(message))  # it travels in a trailer, with a budget
        self.field = field
        self.reason = reason

    def answer(self) -> Answer:
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=self.field, reason=self.reason, description=str(self)
        )
        status = _status(
            grpc.StatusCode.INVALID_ARGUMENT,
            str(self),
            [error_details_pb2.BadRequest(field_violations=[violation])],
        )
        return Answer(
            grpc.StatusCode.INVALID_ARGUMENT,
            message=str(self),
            status_details=status.SerializeToString(),
            ok=False,
            codes=(self.reason,),
        )


def _status(
    code: grpc.StatusCode, text: str, details: Sequence[message.Message]
) -> status_pb2.Status:
    packed = []
    for detail in details:
        item = any_pb2.Any()
        item.Pack(detail)
        packed.append(item)
    return status_pb2.Status(code=code.value[0], message=text, details=packed)


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
TRAILER_BYTES: Final = 7800
"""What a failed call's status details and status message (as sent) may take together. A
default gRPC client refuses trailers over 8 KiB at random (over 16 KiB always), and then the
caller gets no report at all. It counts each entry decoded (details as bytes, not base64),
with its key and 32 bytes more: 8,000 bytes of details arrived on every call, 9,000 not; the
status, message and pid entries' keys and overhead take under 200 bytes of the 8,192."""
MAX_MESSAGE_CHARS: Final = 500
SHORT_TEXT_CHARS: Final = 100
"""A report's texts cut further, when even one violation's texts cut to MAX_MESSAGE_CHARS do
not fit (text of which each character is percent-encoded into many bytes)."""
_SENT_AS_IS: Final = bytes(b for b in range(0x20, 0x7F) if b != ord("%"))


def trailer_bytes(message: str, details_size: int) -> int:
    """The trailer bytes a status message and details take: grpc-message percent-encodes each
    byte outside printable ASCII, and "%" (three bytes for one)."""
    sent = message.encode("utf-8", "replace")
    return len(sent) + 2 * len(sent.translate(None, _SENT_AS_IS)) + details_size


def error_answer(resolution: Resolution, response: bytes) -> Answer:
    """INVALID_ARGUMENT with a BadRequest (one violation per error) and the full response (a
    serialized ResolveResponse). A batch item carries it whole in the reply's body; a unary
    reply cuts it to fit a trailer when sent (fit_trailer)."""
    errors = resolution.errors
    violations = [
        error_details_pb2.BadRequest.FieldViolation(
            field=violation_field(d), reason=d.code.value, description=d.message
        )
        for d in errors
    ]
    first = errors[0]
    text = _cut(f"{violation_field(first)}: {first.code.value}: {first.message}")
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    bad_request = error_details_pb2.BadRequest(field_violations=violations)
    status = _status(grpc.StatusCode.INVALID_ARGUMENT, text, [bad_request])
    status.details.add(type_url=RESPONSE_TYPE_URL, value=response)  # as Any.Pack would
    return Answer(
        grpc.StatusCode.INVALID_ARGUMENT,
        message=status.message,
        status_details=status.SerializeToString(),
        product=resolution.product,
        ok=False,
        codes=tuple(resolution.codes()),
    )


def fit_trailer(message: str, details: bytes) -> tuple[str, bytes]:
    """The status message and details of a failed unary call, cut to fit a trailer: a report
    too large keeps as many violations as fit and leaves the packed response out, which the same
    request with validate_only returns in full (the Python client asks for it by itself)."""
    if trailer_bytes(message, len(details)) <= TRAILER_BYTES:
        return message, details
    status = status_pb2.Status.FromString(details)
    bad_request = error_details_pb2.BadRequest()
    if not status.details or not status.details[0].Unpack(bad_request):
        return _cut(message), b""
    violations = list(bad_request.field_violations)
    kept = len(violations)
    del status.details[1:]  # the packed response

    def noted(kept: int) -> str:  # the message travels in the details too: counted below
        return message + (
            f"; the report is too large for the error details ({kept} of {len(violations)} "
            "errors listed): send the request with validate_only for all of it"
        )

    def over() -> bool:
        return trailer_bytes(status.message, status.ByteSize()) > TRAILER_BYTES

    status.message = noted(kept)
    while kept > 1 and over():
        kept = max(1, kept * 3 // 4)
        status.details[0].Pack(error_details_pb2.BadRequest(field_violations=violations[:kept]))
        status.message = noted(kept)
    for limit in (MAX_MESSAGE_CHARS, SHORT_TEXT_CHARS):  # one violation too long on its own
        if not over():
            break
        for violation in violations[:kept]:
            violation.description = _cut(violation.description, limit)
            violation.field = _cut(violation.field, limit)
        status.details[0].Pack(error_details_pb2.BadRequest(field_violations=violations[:kept]))
        status.message = noted(kept) if len(message) <= limit else _cut(message, limit)
    return status.message, status.SerializeToString()


def refuse(
    context: grpc.aio.ServicerContext,
    code: grpc.StatusCode,
    message: str,
    trailing: Sequence[tuple[str, str | bytes]],
) -> bytes:
    """End a call with a failure status; the handler returns what this returns (a message gRPC
    drops for a failure status). Not `context.abort`: it raises, and grpc.aio keeps that
    exception on the call's state, so its traceback ties the handler's frame (the request's
    bytes among its locals) to the call in a reference cycle that only a full collection frees,
    and those are rare. Large refused requests then held about their own size each, without
    bound in practice (tests/test_refusals_released.py)."""
    context.set_trailing_metadata(tuple(trailing))
    context.set_code(code)
    context.set_details(message)
    return b""


def _cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def resolution_answer(resolution: Resolution, validate_only: bool) -> Answer:
    response = encode_resolution(resolution)
    if not validate_only and any(d.severity is Severity.ERROR for d in resolution.diagnostics):
        return error_answer(resolution, response)
    return Answer(
        grpc.StatusCode.OK,
        payload=response,
        product=resolution.product,
        ok=resolution.ok,
        codes=tuple(resolution.codes()),
    )


def _config_refused(
    message_: pb.ResolveRequest, refused: _RefusedError, policy: npu_resolver.PolicyLike | None
) -> Resolution:
    """The report for a request whose config cannot be taken (too deep, too wide, not JSON)."""
    version = policy.version if policy is not None else ""
    return npu_resolver.config_refused(message_.product, str(refused), policy_version=version)


def _left_out(first: int, count: int, limit: int) -> Answer:
    """A batch item left out of a reply that reached the message limit at item `first`:
    RESOURCE_EXHAUSTED, saying which items to send again (the same for each)."""
    return Answer(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        message=(
            f"not answered: the batch's reply reached its {limit} byte message limit at item "
            f"{first} of {count} (counting from 0); send the items from {first} on in another "
            "call"
        ),
        ok=False,
    )


def _alone_too_large(size: int, limit: int) -> Answer:
    """A batch item whose own answer is over the message limit: sent again in a batch it would
    never fit, so it says what to do instead (Resolve cuts a long report to fit its trailer)."""
    return Answer(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        message=(
            f"not answered: this item's answer alone takes {size} bytes, over the batch reply's "
            f"{limit} byte message limit; send it with Resolve (or validate_only), which cuts "
            "a long report to fit"
        ),
        ok=False,
    )


def _batch_result(answer: Answer) -> bytes:
    """A `results` item of ResolveBatchResponse (with its tag and length) from an answer's
    bytes, with no re-parsing."""
    if answer.code is grpc.StatusCode.OK:
        return field(1, field(1, answer.payload))  # result.response
    status = answer.status_details or _status(answer.code, answer.message, []).SerializeToString()
    return field(1, field(2, status))  # result.status


def parse(kind: type[M], raw: bytes) -> M:
    try:
        return kind.FromString(raw)
    except message.DecodeError as exc:
        raise _RefusedError(f"the request is not a valid {kind.DESCRIPTOR.name}: {exc}") from None


LeftOut = Literal["deep", "wide"] | None
CONFIG_FIELD: Final = 2
"""`config` in ResolveRequest and DiffRequest alike."""
DECODER_DEPTH: Final = 32
"""About the JSON depth of a config Struct that protobuf's decoder (upb: 100 message levels,
three a JSON level) still reads."""


LARGE_REQUEST_BYTES: Final = 256 * 1024
"""Below this size no map in a request is large enough to matter. protobuf's decoder reads a
map in time quadratic in its size: 80,000 entries take about 90 ms, 300,000 about 1.1 s."""
MAX_MAP_ENTRIES: Final = 8192
"""Entries of one map (env, attachments) read: a job's environment holds a few hundred."""
MAX_TOP_LEVEL_FIELDS: Final = 65_536
"""Fields at a request's top level looked at, before protobuf, for its maps' sizes (a few tens
of milliseconds); a request with more is refused unread."""


UNREADABLE: Final = "unreadable"
"""A large request the walk before decoding cannot read: cut short, or holding a group (long
deprecated, never in this API) that protobuf would read as an unknown field. Such a request is
refused unread: handing it to the decoder would let a group hide a map behind it."""


_MAPS: dict[str, dict[int, str]] = {}


def _maps(kind: type[message.Message]) -> dict[int, str]:
    """The map fields of a request message, by number (found once per message type)."""
    found = _MAPS.get(kind.DESCRIPTOR.full_name)
    if found is None:
        found = _MAPS[kind.DESCRIPTOR.full_name] = {
            f.number: f.name
            for f in kind.DESCRIPTOR.fields
            if f.message_type is not None and f.message_type.GetOptions().map_entry
        }
    return found


def too_large(kind: type[message.Message], raw: bytes, max_keys: int) -> str | None:
    """The field of a request too large to decode, read from its bytes before protobuf reads
    them: a map (env, attachments) of more than MAX_MAP_ENTRIES entries, "config" for a config
    Struct of more than `max_keys` keys and items in all, at any level (more than the server
    reads), "request" for more than MAX_TOP_LEVEL_FIELDS fields in all; UNREADABLE for one this
    walk cannot read."""
    if len(raw) <= LARGE_REQUEST_BYTES:
        return None
    counts = count_fields(raw, MAX_TOP_LEVEL_FIELDS + 1)
    if counts is None:  # a group, or bytes cut short: not decoded either (see UNREADABLE)
        return UNREADABLE
    for number, name in _maps(kind).items():
        if counts.get(number, 0) > MAX_MAP_ENTRIES:
            return name
    if sum(counts.values()) > MAX_TOP_LEVEL_FIELDS:
        return "request"
    keys = 0
    for config in length_delimited(raw, CONFIG_FIELD) or ():  # each occurrence adds its keys
        # Occurrences merge into one Struct: their keys and items add up.
        items = struct_items(config, max_keys - keys)
        if items is None:
            return UNREADABLE
        keys += items
        if keys > max_keys:
            return "config"
    return None


def _unreadable(kind: type[message.Message]) -> _RefusedError:
    """The refusal of a large request the walk before decoding cannot read (see UNREADABLE)."""
    return _RefusedError(
        f"the request is not a valid {kind.DESCRIPTOR.name} as this server reads one over "
        f"{LARGE_REQUEST_BYTES // 1024} KiB (cut short, or holding a group)"
    )


def parse_with_config(kind: type[M], raw: bytes, max_keys: int) -> tuple[M, LeftOut]:
    """The request, and why its config Struct was left out unread: "deep" when it is nested
    deeper than the protobuf decoder reads (about 32 levels), "wide" when it has more keys than
    the server reads (`max_keys`), which the decoder would spend seconds on. Such a config is
    refused in a report, as a deep or wide config_json is, rather than the whole request as
    malformed: callers in other languages send Struct, and a batch must not fail as a whole for
    one item. A request with a map of thousands of entries is refused."""
    large = too_large(kind, raw, max_keys)
    if large == UNREADABLE:
        raise _unreadable(kind)
    if large == "config":
        refused = _RefusedError(f"the request's {kind.DESCRIPTOR.name} config is too large")
        return _without_config(kind, raw, refused), "wide"
    if large is not None:
        what = (
            f"more than {MAX_TOP_LEVEL_FIELDS} fields"
            if large == "request"
            else f"more than {MAX_MAP_ENTRIES} {large} entries"
        )
        raise _RefusedError(
            f"the request has {what}; send the job's own variables and only the attachments "
            "its options name",
            large,
            "TOO_MANY_ENTRIES",
        )
    try:
        return parse(kind, raw), None
    except _RefusedError as refused:
        if "MaxDepth" not in str(refused):  # upb's words; another protobuf runtime: malformed
            raise
        return _without_config(kind, raw, refused), "deep"


def _without_config(kind: type[M], raw: bytes, refused: _RefusedError) -> M:
    """The request read without its config Struct; `refused` when even that does not read."""
    rest = without_field(raw, CONFIG_FIELD)
    if rest is None:
        raise refused
    try:
        return kind.FromString(rest)
    except message.DecodeError:
        raise refused from None


async def _awaited(outcome: Answer | Awaitable[Answer]) -> Answer:
    """The answer of a handler body that awaits (ReloadPolicy and ResolveBatch)."""
    return await outcome if inspect.isawaitable(outcome) else outcome


class ResolverService:
    """The handlers of npu.resolver.v1.Resolver, on raw bytes."""

    def __init__(
        self,
        store: PolicyStore,
        *,
        cache: AnswerCache | None = None,
        metrics: Metrics | None = None,
        limits: Limits = Limits(),
        after_reload: Callable[[float | None], Awaitable[None]] | None = None,
    ) -> None:
        """`after_reload`: awaited after a ReloadPolicy call read the file, with the seconds
        left before the call's deadline (to reach the other workers of a --workers server
        before the reply)."""
        self.store = store
        self.after_reload = after_reload
        self.cache = cache if cache is not None else AnswerCache(0)
        self.metrics = metrics
        self.limits = limits
        self._pid = str(os.getpid())
        self._catalog_cache: dict[str, bytes] = {}

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

        async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
            start = _logging.now()
            try:
                outcome = fn(raw, context)
                answer = outcome if type(outcome) is Answer else await _awaited(outcome)
            except _RefusedError as refused:
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
                        f"the reply ({len(answer.payload)} bytes) exceeds the "
                        f"{self.limits.max_reply_bytes} byte message limit"
                    ),
                    ok=False,
                )
            elapsed = _logging.now() - start
            code = _CODE_NAMES[answer.code]
            if self.metrics is not None:
                counted = () if answer.codes_counted else answer.codes
                self.metrics.observe(method, code, elapsed, answer.product, counted)
            _logging.log_call(
                method,
                code=code,
                latency_s=elapsed,
                product=answer.product,
                ok=answer.ok,
                codes=answer.codes,
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
            return refuse(context, answer.code, message, trailing)

        return handler

    def unauthenticated(self, method: str) -> None:
        """A call the token check refused before any handler ran: logged and counted too, under
        "unknown" when the caller named no method of the service (labels stay bounded)."""
        name = method if method in METHODS else "unknown"
        code = grpc.StatusCode.UNAUTHENTICATED.name
        if self.metrics is not None:
            self.metrics.refused(name, code)
        _logging.log_call(name, code=code, latency_s=0.0, ok=False)

    def _policy(self) -> npu_resolver.PolicyLike | None:
        return self.store.current

    # ----------------------------------------------------------------------- resolve

    def _request(self, message_: pb.ResolveRequest) -> ResolveRequest:
        try:
            return request_from_proto(
                message_, max_depth=self.limits.max_depth, max_keys=self.limits.max_keys
            )
        except LimitError as exc:
            raise _RefusedError(str(exc), "config", "REQUEST_LIMIT") from None

    def _resolve_one(
        self,
        raw: bytes,
        parsed: pb.ResolveRequest | None,
        policy: npu_resolver.PolicyLike | None,
        version: str,
    ) -> Answer:
        cached = self.cache.get(version, raw)
        if self.metrics is not None and self.cache.enabled:
            self.metrics.cache_lookup(cached is not None)
        if cached is not None:
            return cached
        try:
            message_, left_out = (
                (parsed, None)
                if parsed is not None
                else parse_with_config(pb.ResolveRequest, raw, self.limits.max_keys)
            )
        except _RefusedError as refused:
            return refused.answer()  # not a ResolveRequest at all, or one too large to read
        try:
            if left_out is not None:
                raise self._left_out(left_out)
            request = self._request(message_)
        except _RefusedError as refused:
            if refused.reason != "REQUEST_LIMIT":
                return refused.answer()  # not a ResolveRequest at all
            # Read, but its config cannot be taken: a report like any other error, so that
            # validate_only still answers OK and a client gets the full response.
            report = _config_refused(message_, refused, policy)
            return resolution_answer(report, message_.validate_only)
        answer = resolution_answer(
            npu_resolver.resolve(request, policy=policy), request.validate_only
        )
        self.cache.put(version, raw, answer)
        return answer

    def _left_out(self, why: Literal["deep", "wide"]) -> _RefusedError:
        """A config Struct left unread. Within the server's own limits (18 levels, 10,000 keys
        by default), the answer is the one in process; a depth limit raised past the decoder's
        reach is said as the decoder's."""
        if why == "wide":
            shape = f"more than {self.limits.max_keys} keys and items in all"
            return _RefusedError(config_refusal(shape), "config", "REQUEST_LIMIT")
        shape = f"nested deeper than {self.limits.max_depth} levels"
        if self.limits.max_depth >= DECODER_DEPTH:
            shape = (
                f"nested deeper than a Struct can be read (about {DECODER_DEPTH} levels); "
                "send it as config_json"
            )
        return _RefusedError(config_refusal(shape), "config", "REQUEST_LIMIT")

    def resolve(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        policy = self._policy()
        return self._resolve_one(raw, None, policy, policy.version if policy is not None else "")

    async def resolve_batch(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        # Walked field by field below, whatever its size: bound the fields first. Under 256 KiB
        # a batch still holds up to 131,072 empty items, which the walk would take 0.3 s over.
        counts = count_fields(raw, MAX_BATCH_ITEMS + MAX_OTHER_BATCH_FIELDS + 1)
        if counts is None and len(raw) > LARGE_REQUEST_BYTES:
            raise _unreadable(pb.ResolveBatchRequest)
        if counts is not None and (
            counts.get(1, 0) > MAX_BATCH_ITEMS
            or sum(counts.values()) > MAX_BATCH_ITEMS + MAX_OTHER_BATCH_FIELDS
        ):
            raise _RefusedError(
                f"a batch takes at most {MAX_BATCH_ITEMS} requests (and "
                f"{MAX_OTHER_BATCH_FIELDS} other fields), this one has more fields than that; "
                "split it into several calls",
                "requests",
                "TOO_MANY_REQUESTS",
            )
        # Each item's own bytes: the answer-cache key a unary Resolve of it would use.
        item_bytes = length_delimited(raw, 1)
        try:
            if item_bytes is not None and any(
                too_large(pb.ResolveRequest, item, self.limits.max_keys) for item in item_bytes
            ):  # the decoder would spend seconds on the batch: each item is read on its own
                raise _RefusedError("an item holds a map too large to decode")
            items: Sequence[pb.ResolveRequest | None] = parse(pb.ResolveBatchRequest, raw).requests
        except _RefusedError:
            # An item the decoder cannot read (its config too deep, text that is not UTF-8):
            # each item is read, and answered, on its own, as the proto promises, as long as
            # the rest of the batch (fields a newer client may add) reads.
            rest = without_field(raw, 1)
            if item_bytes is None or rest is None:
                raise
            parse(pb.ResolveBatchRequest, rest)
            items = [None] * len(item_bytes)
        if len(items) > MAX_BATCH_ITEMS:  # each item holds the event loop: refuse, fast
            raise _RefusedError(
                f"a batch takes at most {MAX_BATCH_ITEMS} requests, this one has {len(items)}; "
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
        reserve = len(_batch_result(_left_out(len(items), len(items), limit)))  # the longest
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
            answer = self._resolve_one(item_bytes[index], item, policy, version)
            part = _batch_result(answer)
            if len(tail) + len(part) > limit:  # this item's answer fits in no batch reply
                answer = _alone_too_large(len(part), limit)
                part = _batch_result(answer)
            if size + len(part) + reserve * (len(items) - index - 1) > limit:
                # gRPC would refuse to send the reply: the items answered so far keep their
                # answers, and this one and the rest each say why they have none.
                left_out = _batch_result(_left_out(index, len(items), limit))
                if size + len(left_out) * (len(items) - index) > limit:
                    return Answer(  # not even that fits (a tiny --max-message-bytes)
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        message=(
                            f"the reply to this batch would exceed the {limit} byte message "
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

    def diff(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        request, left_out = parse_with_config(pb.DiffRequest, raw, self.limits.max_keys)
        try:  # before any work: the core's limits, the same as in process
            # A product named twice, by id or alias, is one column: the cap counts columns.
            products = npu_resolver.check_diff_products(request.products)
        except npu_resolver.DiffError as exc:
            raise _RefusedError(str(exc), "products", exc.reason) from None
        # Each column once; two names of one product still make a diff, as in process.
        names = products if len(products) > 1 else list(request.products[:2])
        policy = self._policy()
        # An unknown product is not refused here: its column carries UNKNOWN_PRODUCT, as the
        # resolver in process reports it.
        try:
            if left_out is not None:
                raise LimitError(str(self._left_out(left_out)))
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
        response = diff_to_proto(result)
        if self.metrics is not None:
            for resolution in result.results.values():
                self.metrics.diagnostics_seen(resolution.product, resolution.codes())
        codes = sorted({c for r in result.results.values() for c in r.codes()})
        return Answer(
            grpc.StatusCode.OK,
            payload=response.SerializeToString(),
            ok=all(r.ok for r in result.results.values()),
            codes=tuple(codes),
            codes_counted=True,
        )

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
                raise _RefusedError(str(exc), "product", "UNKNOWN_PRODUCT") from None
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
            reload_failures=status.reload_failures,
        )
        return Answer(grpc.StatusCode.OK, payload=response.SerializeToString())

    async def reload_policy(self, raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        parse(pb.ReloadPolicyRequest, raw)
        if self.store.path is None:
            return Answer(
                grpc.StatusCode.FAILED_PRECONDITION,
                message="the server was started without --policy; there is nothing to reload",
                ok=False,
            )
        outcome = await self.store.reload_async()
        if self.after_reload is not None and not outcome.error:
            await self.after_reload(context.time_remaining())  # the reply is due by then
        if outcome.error and self.metrics is not None:
            self.metrics.call_reload_failed()
        response = pb.ReloadPolicyResponse(
            changed=outcome.changed, policy_version=outcome.version, error=outcome.error
        )
        return Answer(
            grpc.StatusCode.OK, payload=response.SerializeToString(), ok=not outcome.error
        )
