"""gRPC server for the resolver.

`npu-resolve serve` registers `add_serve_arguments(parser)` and calls `run_serve(namespace)`;
`python -m npu_resolver_server` does the same through `main(argv)`. Importing this package does
not import grpc (workers are forked before any grpc object exists); `create_server`, `serve`
and `ResolverServer` load it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import settings
from ._cli import add_serve_arguments, main, run_serve, settings_from_args
from ._policy_store import PolicyStatus, PolicyStore, ReloadOutcome
from .settings import HEALTH_SERVICE, PID_METADATA_KEY, ServerSettings, load_settings

if TYPE_CHECKING:
    from ._app import ResolverServer, create_server, serve

__all__ = [
    "HEALTH_SERVICE",
    "PID_METADATA_KEY",
    "PolicyStatus",
    "PolicyStore",
    "ReloadOutcome",
    "ResolverServer",
    "ServerSettings",
    "add_serve_arguments",
    "create_server",
    "load_settings",
    "main",
    "run_serve",
    "serve",
    "settings",
    "settings_from_args",
]

_LAZY = {"ResolverServer", "create_server", "serve"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _app

        return getattr(_app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
