"""The client's exceptions, and the decoding of a failed call's status details.

- `ResolveError`: the request has errors (INVALID_ARGUMENT). Carries the full `resolution`
  decoded from the status details, or asked for again when they had no room for it, its error
  `diagnostics`, and the BadRequest `violations`. A config too deep or too wide is a report
  with an INVALID_VALUE on `config`. `resolution` is None when the call was refused before
  anything was resolved; `violations[0].reason` then says why: MALFORMED_REQUEST (bytes that
  are not the request), TOO_MANY_REQUESTS (a batch over 1,000 items), TOO_MANY_ENTRIES (an env
  or attachments map of thousands), TOO_FEW_PRODUCTS, TOO_MANY_PRODUCTS or
  PRODUCT_NAME_TOO_LONG (a diff, as npu_resolver.DiffError's reason in process),
  UNKNOWN_PRODUCT (describe_catalog).
- `ResolverUnavailable`: the server cannot be reached, or did not answer in time (UNAVAILABLE,
  after the retries of the service config, or DEADLINE_EXCEEDED).
- `ResolverCallError`: any other failed call (UNAUTHENTICATED, RESOURCE_EXHAUSTED, INTERNAL ...).

All three derive from `ResolverClientError`, which carries the gRPC `code` and `details`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf import message
from google.rpc import error_details_pb2, status_pb2

from npu_resolver import Diagnostic, Resolution, Severity

from ._convert import resolution_from_proto, suggestion_unsaid
from ._proto.npu.resolver.v1 import resolver_pb2 as pb

STATUS_DETAILS_KEY: Final = "grpc-status-details-bin"
REPORT_CUT: Final = "REPORT_CUT"
"""The google.rpc.ErrorInfo reason of a report left out of the status details for room."""
REPORT_AGAIN_ADVICE: Final = "send the request with validate_only for all of it"
"""How the message of a report cut from the trailer ends, after ": " (the client, which follows
that advice by itself, says what came of it instead)."""
REPORT_AGAIN_METADATA_KEY: Final = "x-npu-resolver-report-again"
"""Request metadata (value "1") marking the second ask for a report cut from the trailer: the
server counts that report's diagnostics once, with the first answer."""


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One google.rpc.BadRequest field violation: `field`, `reason` (the code), description."""

    field: str
    reason: str
    description: str


class ResolverClientError(Exception):
    """A call to the resolver service failed."""

    sent: bool = True
    """False when this client refused the request before sending it (over the message size,
    text the wire cannot carry): no server saw it."""
    reply_too_large: bool = False
    """True when the server answered with a reply larger than this client's max_message_bytes
    (the limit to raise is this client's)."""
    _reply_sizes: tuple[int, int] | None = None
    """With reply_too_large: the reply's size and this client's limit, in bytes, as gRPC said
    them (not pickled: the message says them too)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable with its own arguments: an error raised in a process pool's worker reaches
        # the caller whole (the default pickling would call __init__ with the message alone).
        return (type(self), (self.code, self.details), self._flags())

    def _flags(self) -> dict[str, bool]:
        """What pickling keeps besides the constructor's arguments."""
        return {"sent": self.sent, "reply_too_large": self.reply_too_large}


def not_sent(code: grpc.StatusCode, details: str) -> ResolverCallError:
    """The error of a request this client refused to send."""
    error = ResolverCallError(code, details)
    error.sent = False
    return error


class ResolveError(ResolverClientError):
    """The request has errors; `.resolution` is the server's full report."""

    report_cut: bool = False
    """True when the server's status details left the report out for room (a google.rpc.
    ErrorInfo with reason REPORT_CUT): the one case where asking again with validate_only
    fetches it. A request refused before anything was resolved has no report to fetch. False
    again once the client's resolve has fetched it: the error is then the one a report that fit
    gives."""

    def __init__(
        self,
        details: str,
        resolution: Resolution | None,
        violations: tuple[FieldViolation, ...] = (),
    ) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, details)
        self.resolution = resolution
        self.violations = violations
        said = _with_suggestion(details, resolution)
        if said != details:  # `details` stays the server's own words
            self.args = (f"{self.code.name}: {said}",)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.details, self.resolution, self.violations), self._flags())

    def _flags(self) -> dict[str, bool]:
        return {**super()._flags(), "report_cut": self.report_cut}

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """The error diagnostics (all diagnostics are in `.resolution.diagnostics`)."""
        if self.resolution is None:
            return ()
        return tuple(d for d in self.resolution.diagnostics if d.severity is Severity.ERROR)


def _with_suggestion(details: str, resolution: Resolution | None) -> str:
    """`details` with its first error's suggestion after that error's message, as the CLI's
    report line shows it ("(suggestion: atlas-a3)"), when the status message leaves it out (a
    server of an earlier version; an UNKNOWN_PRODUCT's message, unlike an UNKNOWN_OPTION's, does
    not say the close name).
    Unchanged when there is none, or the message says it already ("did you mean ...")."""
    errors = () if resolution is None else resolution.errors
    if not errors or not errors[0].suggestion:
        return details
    first = errors[0]
    hint = f" (suggestion: {first.suggestion})"
    if hint in details or not suggestion_unsaid(first):
        return details  # the server said it (this version's does), or the message does
    if first.message and first.message in details:
        return details.replace(first.message, first.message + hint, 1)
    return details + hint


TLS_HINTS: Final = {
    "plaintext_server": (
        "; the server does not speak TLS there: leave out root_certificates, certificate_chain "
        "and private_key"
    ),
    "mutual_tls": (
        "; if the server requires client certificates (mutual TLS), pass certificate_chain and "
        "private_key"
    ),
    "tls_server": "; if the server speaks TLS, pass root_certificates (its CA bundle)",
    "untrusted_server": (
        "; the server's certificate does not verify against root_certificates (another CA's?)"
    ),
    "untrusted_by_system": (
        "; the server's certificate does not verify against the system's CAs: pass "
        "root_certificates (its CA bundle)"
    ),
    "expired_server": "; the server's certificate has expired: it must be renewed",
    "wrong_host": (
        "; the server's certificate is for another host name than the target's: connect by a "
        "name it holds"
    ),
}
"""The likely cause of an UNAVAILABLE that a TLS mismatch makes look like any lost connection,
in this client's argument names (the CLI says its flags instead)."""


class ResolverUnavailable(ResolverClientError):  # noqa: N818 - the documented name
    """The server could not be reached or did not answer within the deadline."""


class ResolverCallError(ResolverClientError):
    """Any other failed call."""


@dataclass(frozen=True, slots=True)
class Failure:
    """A decoded failure status: code, message, BadRequest violations, the response if any."""

    code: grpc.StatusCode
    message: str
    violations: tuple[FieldViolation, ...]
    resolution: Resolution | None
    report_cut: bool = False


_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}


def decode_status(status: status_pb2.Status) -> Failure:
    violations: list[FieldViolation] = []
    resolution = None
    report_cut = False
    for detail in status.details:
        try:
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations += [
                    FieldViolation(v.field, v.reason, v.description) for v in bad.field_violations
                ]
            elif detail.Is(pb.ResolveResponse.DESCRIPTOR):
                response = pb.ResolveResponse()
                detail.Unpack(response)
                resolution = resolution_from_proto(response)
            elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                report_cut = report_cut or info.reason == REPORT_CUT
        except (message.DecodeError, ValueError, KeyError, ResolverClientError):
            # A detail this client cannot read (a newer server's values): the others stand,
            # the violations first of all, which name every error by its code as text.
            continue
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    return Failure(code, status.message, tuple(violations), resolution, report_cut)


def _status_from_metadata(metadata: Any) -> status_pb2.Status | None:
    for key, value in metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except message.DecodeError:
                return None
    return None


def failure_error(failure: Failure) -> ResolverClientError:
    if failure.code is grpc.StatusCode.INVALID_ARGUMENT:
        error = ResolveError(failure.message, failure.resolution, failure.violations)
        error.report_cut = failure.report_cut
        return error
    if failure.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return ResolverUnavailable(failure.code, failure.message)
    return ResolverCallError(failure.code, failure.message)


_RECEIVED_TOO_LARGE: Final = re.compile(
    r"CLIENT: Received message larger than max \((\d+) vs\. (\d+)\)"
)


def from_rpc_error(error: grpc.RpcError, trailing: Any = None) -> ResolverClientError:
    """The client exception for a failed call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = (error.details() if hasattr(error, "details") else None) or str(error)
    over = (
        _RECEIVED_TOO_LARGE.search(details) if code is grpc.StatusCode.RESOURCE_EXHAUSTED else None
    )
    if over is not None:  # gRPC's words blame no one; the limit is this client's own
        size, limit = int(over.group(1)), int(over.group(2))
        too_large = ResolverCallError(
            code,
            f"the reply is {size:,} bytes, more than this client's max_message_bytes of "
            f"{limit:,}: raise max_message_bytes, or ask for less",
        )
        too_large.reply_too_large = True
        too_large._reply_sizes = (size, limit)
        return too_large
    if trailing is None and hasattr(error, "trailing_metadata"):
        trailing = error.trailing_metadata()
    status = _status_from_metadata(trailing)
    if status is not None:
        failure = decode_status(status)
        return failure_error(
            Failure(code, details, failure.violations, failure.resolution, failure.report_cut)
        )
    return failure_error(Failure(code, details, (), None))
