"""Where the CLI's answers come from: this process, or a running server.

Both give the same Resolution; the CLI does not know which it talks to. The remote transport
imports the gRPC client only when used, so the in-process path never loads grpc.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .._model import Resolution, ResolveRequest
from .._products import PRODUCTS

if TYPE_CHECKING:
    from .._diff import DiffResult
    from .._policy import Policy


class UnreachableError(Exception):
    """The server could not be reached (exit status 3)."""


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
        if self._policy is None:
            return {"policy_version": "", "content": "", "source": ""}
        return {
            "policy_version": self._policy.version,
            "content": self._policy.canonical_text,
            "source": self._policy.source,
        }


class Remote:
    """A running server, through the project's own client library."""

    def __init__(self, target: str, timeout: float = 10.0) -> None:
        try:
            from npu_resolver_client import ResolverClient, ResolverUnavailable
        except ImportError as exc:  # pragma: no cover - the client ships with the package
            raise UnreachableError(f"the gRPC client is not installed: {exc}") from exc
        self._unavailable = ResolverUnavailable
        self._client = ResolverClient(target, timeout=timeout)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._client, method)(*args)
        except self._unavailable as exc:
            raise UnreachableError(str(exc)) from exc

    def resolve(self, request: ResolveRequest) -> Resolution:
        from npu_resolver_client import ResolveError

        try:
            return self._call("resolve_request", request)  # type: ignore[no-any-return]
        except ResolveError as exc:
            return exc.resolution  # type: ignore[no-any-return]

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
        return dict(self._call("get_policy"))


def local_products() -> list[str]:
    return [p.id for p in PRODUCTS]
