"""Python client for the resolver service.

    from npu_resolver_client import ResolverClient, ResolveError

    with ResolverClient("127.0.0.1:50051") as client:
        result = client.resolve("atlas-a2", {"precision_mode": "allow_fp32_to_fp16"})
        print(result.options, result.fingerprint)

Answers are the core's `npu_resolver.Resolution`, identical to `npu_resolver.resolve()` in
process (`Resolution` and `ResolveRequest`, which resolve_batch and diff take, are the core's
own, importable from here). A request with errors raises `ResolveError` (its `.resolution` is
the full report); an unreachable server raises `ResolverUnavailable`; other failures
`ResolverCallError`.
"""

from typing import TYPE_CHECKING

_LAZY = {
    **dict.fromkeys(
        (
            "DEFAULT_TARGET",
            "DEFAULT_TIMEOUT",
            "MAX_TIMEOUT",
            "SERVICE_CONFIG",
            "AsyncResolverClient",
            "PolicyInfo",
            "ReloadResult",
            "Resolution",
            "ResolveFailure",
            "ResolveRequest",
            "ResolverClient",
            "channel_options",
            "remote_resolve",
        ),
        "_client",
    ),
    # The core's types the answers hold, for a caller's own annotations.
    **dict.fromkeys(
        ("Diagnostic", "DiffResult", "Product", "Provenance", "__version__"), "npu_resolver"
    ),
    **dict.fromkeys(
        (
            "FieldViolation",
            "ResolveError",
            "ResolverCallError",
            "ResolverClientError",
            "ResolverUnavailable",
        ),
        "_errors",
    ),
}
"""Loaded on first use: `npu_resolver_client.credentials` serves code that must not load
gRPC yet (a server's settings, read before its workers are forked)."""


if not TYPE_CHECKING:  # a type checker sees the imports below: a misspelt name is an error

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'npu_resolver_client' has no attribute {name!r}")
        import importlib

        where = module if module == "npu_resolver" else f"npu_resolver_client.{module}"
        value = getattr(importlib.import_module(where), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:
    from npu_resolver import (
        Diagnostic,
        DiffResult,
        Product,
        Provenance,
        Resolution,
        ResolveRequest,
        __version__,
    )

    from ._client import (
        DEFAULT_TARGET,
        DEFAULT_TIMEOUT,
        MAX_TIMEOUT,
        SERVICE_CONFIG,
        AsyncResolverClient,
        PolicyInfo,
        ReloadResult,
        ResolveFailure,
        ResolverClient,
        channel_options,
        remote_resolve,
    )
    from ._errors import (
        FieldViolation,
        ResolveError,
        ResolverCallError,
        ResolverClientError,
        ResolverUnavailable,
    )

__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "SERVICE_CONFIG",
    "AsyncResolverClient",
    "Diagnostic",
    "DiffResult",
    "FieldViolation",
    "PolicyInfo",
    "Product",
    "Provenance",
    "ReloadResult",
    "Resolution",
    "ResolveError",
    "ResolveFailure",
    "ResolveRequest",
    "ResolverCallError",
    "ResolverClient",
    "ResolverClientError",
    "ResolverUnavailable",
    "__version__",
    "channel_options",
    "remote_resolve",
]
