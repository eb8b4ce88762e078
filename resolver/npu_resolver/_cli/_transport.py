"""Where the CLI's answers come from: this process, or a running server.

Both give the same Resolution; the CLI does not know which it talks to. The remote transport
imports the gRPC client only when used, so the in-process path never loads grpc.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._model import Resolution, ResolveRequest
from .._products import PRODUCTS

_TLS_HINTS_AS_FLAGS: Final = {
    "plaintext_server": "; the server does not speak TLS there: leave out the --tls-* flags",
    "mutual_tls": (
        "; if the server requires client certificates (mutual TLS), give --tls-cert and --tls-key"
    ),
    "tls_server": "; if the server speaks TLS, give --tls-ca (its CA bundle)",
    "untrusted_server": (
        "; the server's certificate does not verify against --tls-ca (another CA's?)"
    ),
    "untrusted_by_system": (
        "; the server's certificate does not verify against the system's CAs: give --tls-ca "
        "(its CA bundle)"
    ),
    "expired_server": "; the server's certificate has expired: it must be renewed",
    "wrong_host": (
        "; the server's certificate is for another host name than --server's: connect by a name "
        "it holds"
    ),
}
"""The client's hints for a TLS mismatch (npu_resolver_client.wire.TLS_HINTS) in this command's
words."""

if TYPE_CHECKING:
    from .._diff import DiffResult
    from .._policy import Policy


class UnreachableError(Exception):
    """The server could not be reached (exit status 3)."""


class RefusedError(Exception):
    """The server answered the call with a failure that carries no report."""

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class Transport(Protocol):
    def resolve(self, request: ResolveRequest) -> Resolution: ...

    def diff(self, request: ResolveRequest, products: Sequence[str]) -> DiffResult: ...

    def products(self) -> list[dict[str, Any]]: ...

    def policy(self) -> dict[str, Any]: ...


class InProcess:
    def __init__(self, policy: Policy | None = None) -> None:
        self._policy = policy

    def resolve(self, request: ResolveRequest) -> Resolution:
        from .._pipeline import resolve

        return resolve(request, policy=self._policy)

    def diff(self, request: ResolveRequest, products: Sequence[str]) -> DiffResult:
        from .._diff import diff

        return diff(request, products, policy=self._policy)

    def products(self) -> list[dict[str, Any]]:
        from .._describe import product_json

        return [product_json(p) for p in PRODUCTS]

    def policy(self) -> dict[str, Any]:
        policy = self._policy
        return {
            "policy_version": policy.version if policy else "",
            "canonical_text": policy.canonical_text if policy else "",
            "source": policy.source if policy else "",
            "profiles": list(policy.profile_names()) if policy else [],
            "last_reload_error": "",
            "refused_version": "",
            "reload_failures": 0,
        }


class Remote:
    """A running server, through the project's own client library."""

    def __init__(self, target: str, **credentials: Any) -> None:
        """`credentials`: the client's root_certificates, private_key, certificate_chain, token,
        max_message_bytes and timeout arguments (without timeout, the client's default)."""
        # gRPC's own log lines (each failed TLS handshake, at INFO) would come before the
        # CLI's one line saying what failed; the caller's own GRPC_VERBOSITY still wins.
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        try:
            from npu_resolver_client import ResolverClient
        except ImportError as exc:  # pragma: no cover - the client ships with the package
            raise UnreachableError(f"the gRPC client is not installed: {exc}") from exc
        self._client = ResolverClient(target, **credentials)

    def _call(self, method: str, *args: Any) -> Any:
        """The client's call; its failures as the CLI's exit statuses: 3 when the server cannot
        be reached, the report itself when the request has errors (exit 1 once printed), 2 for
        a refusal without a report, INVALID_ARGUMENT included: exit 1 promises a report."""
        from npu_resolver_client import ResolverClientError, ResolverUnavailable

        try:
            return getattr(self._client, method)(*args)
        except ResolverUnavailable as exc:
            from npu_resolver_client.wire import TLS_HINTS

            said = str(exc)
            for cause, command_words in _TLS_HINTS_AS_FLAGS.items():  # the flags, not arguments
                said = said.replace(TLS_HINTS[cause], command_words)
            raise UnreachableError(said) from exc
        except ResolverClientError as exc:
            if getattr(exc, "resolution", None) is not None:
                raise  # the request has errors, and this is the server's full report
            said = (  # the client's words for its argument, the command's for its flag
                str(exc)
                .replace("this client's max_message_bytes", "this command's --max-message-bytes")
                .replace("raise max_message_bytes", "raise --max-message-bytes")
                .replace(" (max_message_bytes)", " (--max-message-bytes)")
            )
            if not exc.sent:  # the client's own refusal: no server saw the request
                raise RefusedError(f"the request was not sent: {said}", 2) from exc
            if exc.reply_too_large:  # the server answered; the limit is this command's
                raise RefusedError(f"the reply was not taken: {said}", 2) from exc
            # said, not exc: a report too large for this command's limit says so (the client
            # asked for it again with validate_only, and the reply passed the limit)
            raise RefusedError(f"the server refused the call: {said}", 2) from exc

    def resolve(self, request: ResolveRequest) -> Resolution:
        from npu_resolver_client import ResolveError

        try:
            result: Resolution = self._call("resolve_request", request)
        except ResolveError as exc:
            assert exc.resolution is not None  # `_call` turned the others into RefusedError
            return exc.resolution
        return result

    def diff(self, request: ResolveRequest, products: Sequence[str]) -> DiffResult:
        return self._call("diff", request, list(products))  # type: ignore[no-any-return]

    def products(self) -> list[dict[str, Any]]:
        return [
            {
                "id": p.id,
                "name": p.name,
                "source_name": p.source_name,
                "family": str(p.family),
                "aliases": list(p.aliases),
            }
            for p in self._call("list_products")
        ]

    def policy(self) -> dict[str, Any]:
        return dict(self._call("get_policy").to_json())
