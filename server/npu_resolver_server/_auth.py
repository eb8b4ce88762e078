"""Bearer-token check for admin calls (and, by flag, for every resolver call).

Health and reflection stay open: probes and tooling must reach them without a secret.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import grpc

from ._replies import refuse
from ._servicer import ADMIN_METHODS, SERVICE
from ._tls import file_stamp
from .settings import PID_METADATA_KEY

AUTH_HEADER: Final = "authorization"
log = logging.getLogger("npu_resolver_server")


def read_token(path: Path) -> str:
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"admin token file {path} is empty")
    return token


RECHECK_S: Final = 1.0
"""How often, at most, the token file is looked at again (on a call that needs the token)."""


class TokenFile:
    """The admin token, read again when its file changes: a token rotated in its Secret (or
    revoked after a leak) takes effect without a restart. A file gone, empty or unreadable
    keeps the token in use, said once in the log for each state of the file; the token itself
    is never logged."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self.token = read_token(path).encode()
        self._stamp = file_stamp(path) if path.is_file() else None  # a pipe is read once
        self._refused: object = None
        self._next = clock() + RECHECK_S

    def current(self) -> bytes:
        """The token in force, after looking at the file if a second has passed."""
        if self._stamp is not None and self._clock() >= self._next:
            self._next = self._clock() + RECHECK_S
            self._check()
        return self.token

    def _check(self) -> None:
        try:
            stamp = file_stamp(self.path)
        except OSError as exc:
            self._refuse(str(exc), f"cannot read it: {exc.strerror or exc}")
            return
        if stamp in (self._stamp, self._refused):
            return
        try:
            token = read_token(self.path)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self._refuse(stamp, f"cannot take it: {reason}")
            return
        self._stamp, self._refused, self.token = stamp, None, token.encode()
        log.info(
            "admin token reloaded",
            extra={"fields": {"event": "admin_token_reloaded", "file": str(self.path)}},
        )

    def _refuse(self, state: object, error: str) -> None:
        if state != self._refused:
            self._refused = state
            log.warning(
                "admin token file not taken",
                extra={
                    "fields": {
                        "event": "admin_token_reload_failed",
                        "file": str(self.path),
                        "error": error,
                        "effect": "the token in use stays until the file holds one",
                    }
                },
            )


Refused = Callable[[str, str, str], None]
"""Called with the method name, the full path asked for and the peer of each refused call
(logged and counted like any call)."""


def _refusing_handler(
    message: str, method: str, path: str, on_refused: Refused | None
) -> grpc.RpcMethodHandler:
    async def unauthenticated(request: Any, context: grpc.aio.ServicerContext) -> bytes:
        if on_refused is not None:
            on_refused(method, path, context.peer())
        # Like every other answer, it names the worker that gave it.
        pid = ((PID_METADATA_KEY, str(os.getpid())),)
        return refuse(context, grpc.StatusCode.UNAUTHENTICATED, message, pid)

    return grpc.unary_unary_rpc_method_handler(unauthenticated)


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Requires `authorization: Bearer <token>` on admin methods (or all resolver methods)."""

    def __init__(
        self, token: TokenFile, *, protect_all: bool = False, on_refused: Refused | None = None
    ) -> None:
        self._token = token
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
                    handler_call_details.method,
                    self._on_refused,
                )
            scheme, _, credential = given.strip().partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credential.strip(), self._token.current()
            ):
                return _refusing_handler(
                    "the bearer token is not valid",
                    method,
                    handler_call_details.method,
                    self._on_refused,
                )
        return await continuation(handler_call_details)
