"""Bearer-token check for admin calls (and, by flag, for every resolver call).

Health and reflection stay open: probes and tooling must reach them without a secret.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import grpc

from ._replies import refuse
from ._servicer import ADMIN_METHODS, SERVICE
from .settings import PID_METADATA_KEY

AUTH_HEADER: Final = "authorization"


def read_token(path: Path) -> str:
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"admin token file {path} is empty")
    return token


Refused = Callable[[str], None]
"""Called with the method name of each refused call (logged and counted like any call)."""


def _refusing_handler(
    message: str, method: str, on_refused: Refused | None
) -> grpc.RpcMethodHandler:
    async def unauthenticated(request: Any, context: grpc.aio.ServicerContext) -> bytes:
        if on_refused is not None:
            on_refused(method)
        # Like every other answer, it names the worker that gave it.
        pid = ((PID_METADATA_KEY, str(os.getpid())),)
        return refuse(context, grpc.StatusCode.UNAUTHENTICATED, message, pid)

    return grpc.unary_unary_rpc_method_handler(unauthenticated)


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Requires `authorization: Bearer <token>` on admin methods (or all resolver methods)."""

    def __init__(
        self, token: str, *, protect_all: bool = False, on_refused: Refused | None = None
    ) -> None:
        self._expected = token.encode()
        self._protect_all = protect_all
        self._on_refused = on_refused
        self._prefix = f"/{SERVICE}/"

    def _needs_token(self, method: str) -> bool:
        if not method.startswith(self._prefix):
            return False
        return self._protect_all or method[len(self._prefix) :] in ADMIN_METHODS

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if self._needs_token(handler_call_details.method):
            given = b""
            for key, value in handler_call_details.invocation_metadata or ():
                if key == AUTH_HEADER:
                    given = value.encode() if isinstance(value, str) else value
                    break
            method = handler_call_details.method[len(self._prefix) :]
            if not given:
                which = "admin " if method in ADMIN_METHODS else ""
                return _refusing_handler(
                    f"this call needs the {which}bearer token (authorization metadata)",
                    method,
                    self._on_refused,
                )
            scheme, _, credential = given.strip().partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credential.strip(), self._expected
            ):
                return _refusing_handler("the bearer token is not valid", method, self._on_refused)
        return await continuation(handler_call_details)
