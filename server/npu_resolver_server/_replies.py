"""What a call answers when it does not simply succeed: statuses with their details, fitted
to a trailer, and a batch's items that carry one.

A failed call's report travels in the trailer, which gRPC clients cap at 8 KiB: it is cut here to
fit, never lost whole."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import grpc
from google.protobuf import any_pb2, message
from google.rpc import error_details_pb2, status_pb2

from npu_resolver import Resolution, ResolveRequest, Severity
from npu_resolver.text import cut_text
from npu_resolver_client.wire import (
    MAX_MESSAGE_CHARS,
    REPORT_AGAIN_ADVICE,
    REPORT_CUT,
    error_message,
    pb,
    violation_field,
)

from ._cache import Answer
from ._encode import encode_resolution, field

STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
RESPONSE_TYPE_URL: Final = f"type.googleapis.com/{pb.ResolveResponse.DESCRIPTOR.full_name}"


class RefusedError(Exception):
    """The request cannot be read: answered INVALID_ARGUMENT with a BadRequest."""

    def __init__(self, message: str, field: str = "", reason: str = "MALFORMED_REQUEST") -> None:
        super().__init__(cut(message))  # it travels in a trailer, with a budget
        self.field = field
        self.reason = reason

    def answer(self) -> Answer:
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=self.field, reason=self.reason, description=str(self)
        )
        status = rpc_status(
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


def rpc_status(
    code: grpc.StatusCode, text: str, details: Sequence[message.Message]
) -> status_pb2.Status:
    packed = []
    for detail in details:
        item = any_pb2.Any()
        item.Pack(detail)
        packed.append(item)
    return status_pb2.Status(code=code.value[0], message=text, details=packed)


TRAILER_BYTES: Final = 7800
"""What a failed call's status details and status message may take together, as sent. gRPC
clients cap a trailer at 8 KiB by default, and then the caller gets no report at all: Python's
(gRPC core) counts binary entries decoded and refuses over 8 KiB at random (always over 16 KiB);
grpc-java counts them as sent on the wire, in base64, a third larger. So the details count
here as their base64 text, with the message as percent-encoded: the status, message and pid
entries' keys and overhead take under 200 bytes of the 8,192."""
SHORT_TEXT_CHARS: Final = 100
"""A report's texts cut further, when even one violation's texts cut to MAX_MESSAGE_CHARS do
not fit (text of which each character is percent-encoded into many bytes)."""
_SENT_AS_IS: Final = bytes(b for b in range(0x20, 0x7F) if b != ord("%"))


def trailer_bytes(message: str, details_size: int) -> int:
    """The trailer bytes a status message and details take as sent: grpc-message
    percent-encodes each byte outside printable ASCII, and "%" (three bytes for one), and
    binary details travel in base64 (four bytes for three)."""
    sent = message.encode("utf-8", "replace")
    return len(sent) + 2 * len(sent.translate(None, _SENT_AS_IS)) + 4 * -(-details_size // 3)


def error_answer(
    resolution: Resolution, response: bytes, request: ResolveRequest | None = None
) -> Answer:
    """INVALID_ARGUMENT with a BadRequest (one violation per error, naming the `request`'s field
    that gave the value: see violation_field) and the full response (a serialized
    ResolveResponse). A batch item carries it whole in the reply's body; a unary reply cuts it
    to fit a trailer when sent (fit_trailer)."""
    errors = resolution.errors
    fields = [violation_field(d, request, policy_version=resolution.policy_version) for d in errors]
    violations = [
        error_details_pb2.BadRequest.FieldViolation(
            field=named, reason=d.code.value, description=d.message
        )
        for named, d in zip(fields, errors, strict=True)
    ]
    text = error_message(errors, fields[0])
    bad_request = error_details_pb2.BadRequest(field_violations=violations)
    status = rpc_status(grpc.StatusCode.INVALID_ARGUMENT, text, [bad_request])
    status.details.add(type_url=RESPONSE_TYPE_URL, value=response)  # as Any.Pack would
    return Answer(
        grpc.StatusCode.INVALID_ARGUMENT,
        message=status.message,
        status_details=status.SerializeToString(),
        product=resolution.product,
        ok=False,
        codes=tuple(resolution.codes()),
    )


ERROR_DOMAIN: Final = "npu.resolver.v1"


def fit_trailer(message: str, details: bytes) -> tuple[str, bytes]:
    """The status message and details of a failed unary call, cut to fit a trailer: a report
    too large keeps as many violations as fit and leaves the packed response out, which the same
    request with validate_only returns in full (the Python client asks for it by itself). A
    google.rpc.ErrorInfo (reason REPORT_CUT, metadata `errors` and `listed`) says so."""
    if trailer_bytes(message, len(details)) <= TRAILER_BYTES:
        return message, details
    status = status_pb2.Status.FromString(details)
    bad_request = error_details_pb2.BadRequest()
    if not status.details or not status.details[0].Unpack(bad_request):
        return cut(message), b""
    violations = list(bad_request.field_violations)
    kept = len(violations)
    del status.details[1:]  # the packed response
    status.details.add()  # the ErrorInfo, written by pack()

    def pack(kept: int, text: str) -> None:
        status.details[0].Pack(error_details_pb2.BadRequest(field_violations=violations[:kept]))
        status.details[1].Pack(
            error_details_pb2.ErrorInfo(
                reason=REPORT_CUT,
                domain=ERROR_DOMAIN,
                metadata={"errors": str(len(violations)), "listed": str(kept)},
            )
        )
        status.message = text

    def noted(kept: int) -> str:  # the message travels in the details too: counted below
        return message + (
            f"; the report is too large for the error details ({kept} of {len(violations)} "
            f"errors listed): {REPORT_AGAIN_ADVICE}"
        )

    def over() -> bool:
        return trailer_bytes(status.message, status.ByteSize()) > TRAILER_BYTES

    pack(kept, noted(kept))
    while kept > 1 and over():
        kept = max(1, kept * 3 // 4)
        pack(kept, noted(kept))
    for limit in (MAX_MESSAGE_CHARS, SHORT_TEXT_CHARS):  # one violation too long on its own
        if not over():
            break
        for violation in violations[:kept]:
            violation.description = cut(violation.description, limit)
            violation.field = cut(violation.field, limit)
        pack(kept, noted(kept) if len(message) <= limit else cut(message, limit))
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


def cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return cut_text(text, limit)


def resolution_answer(
    resolution: Resolution, validate_only: bool, request: ResolveRequest | None = None
) -> Answer:
    response = encode_resolution(resolution)
    if not validate_only and any(d.severity is Severity.ERROR for d in resolution.diagnostics):
        return error_answer(resolution, response, request)
    return Answer(
        grpc.StatusCode.OK,
        payload=response,
        product=resolution.product,
        ok=resolution.ok,
        codes=tuple(resolution.codes()),
    )


def left_out_answer(first: int, count: int, limit: int) -> Answer:
    """A batch item left out of a reply that reached the message limit at item `first`:
    RESOURCE_EXHAUSTED, saying which items to send again (the same for each). When not even the
    first item was answered, sending the same items again would be answered the same way: the
    advice is then fewer items a call."""
    if first == 0:
        again = (
            "send fewer items a call (the first item's answer and a note for each of the "
            "others did not fit together)"
        )
    else:
        again = f"send the items from {first} on in another call"
    return Answer(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        message=(
            f"not answered: the batch's reply reached its {limit:,} byte message limit at item "
            f"{first} of {count} (counting from 0); {again}"
        ),
        ok=False,
    )


def alone_too_large(answer: Answer, size: int, limit: int) -> Answer:
    """A batch item whose own answer is over the message limit: sent again in a batch it would
    never fit. A report of errors fits a unary Resolve, which cuts it to its trailer; an answer
    without errors is never cut, so no reply of this server carries it."""
    if answer.ok is not False:  # no error: validate_only's report of errors is OK too
        instead = (
            "no reply of this server can carry it: shorten the long values, or have the "
            "server's --max-message-bytes raised"
        )
    else:
        instead = "send it with Resolve (without validate_only), which cuts a long report to fit"
    return Answer(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        message=(
            f"not answered: this item's answer alone takes {size:,} bytes, over the batch reply's "
            f"{limit:,} byte message limit; {instead}"
        ),
        ok=False,
    )


def batch_result(answer: Answer) -> bytes:
    """A `results` item of ResolveBatchResponse (with its tag and length) from an answer's
    bytes, with no re-parsing."""
    if answer.code is grpc.StatusCode.OK:
        return field(1, field(1, answer.payload))  # result.response
    status = answer.status_details
    if not status:
        status = rpc_status(answer.code, answer.message, []).SerializeToString()
    return field(1, field(2, status))  # result.status
