"""Python client for the resolver service.

    from npu_resolver_client import ResolverClient, ResolveError

    with ResolverClient("127.0.0.1:50051") as client:
        result = client.resolve("atlas-a2", {"precision_mode": "allow_fp32_to_fp16"})
        print(result.options, result.fingerprint)

Answers are the core's `npu_resolver.Resolution`, identical to `npu_resolver.resolve()` in
process. A request with errors raises `ResolveError` (its `.resolution` is the full report);
an unreachable server raises `ResolverUnavailable`; other failures `ResolverCallError`.
"""

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
    "FieldViolation",
    "PolicyInfo",
    "ReloadResult",
    "ResolveError",
    "ResolveFailure",
    "ResolverCallError",
    "ResolverClient",
    "ResolverClientError",
    "ResolverUnavailable",
    "channel_options",
    "remote_resolve",
]
