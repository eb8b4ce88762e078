"""Structured logs: one JSON object per line on stderr.

Call records carry method, product, ok, diagnostic codes, status, latency and the worker pid;
never the job's environment values nor config values.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

CALL_LOGGER = "npu_resolver_server.calls"
_CALLS = logging.getLogger(CALL_LOGGER)
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
"""One encoder for every line (json.dumps with options builds a new one per call)."""
_quote = json.encoder.encode_basestring  # a str as JSON text, as _ENCODER writes it
_JSON_CONSTANTS: dict[bool | None, str] = {True: "true", False: "false", None: "null"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return _ENCODER.encode(data)


class _Sink:
    """The handler `configure` installed. While the call logger's records can reach only it
    (no other handler, filter or level in the way), a call's line is written to it directly:
    the same text, without building a LogRecord and passing it through the logging machinery,
    which cost more than the rest of a cached answer."""

    handler: logging.StreamHandler[Any] | None = None

    @classmethod
    def direct(cls) -> logging.StreamHandler[Any] | None:
        handler = cls.handler
        parent = _CALLS.parent
        if (
            handler is None
            or parent is None
            or _CALLS.handlers
            or _CALLS.filters
            or not _CALLS.propagate
            or parent.handlers != [handler]
            or parent.filters
            or parent.propagate
            or handler.filters
            or handler.level > logging.INFO
        ):
            return None
        return handler


def _call_line(fields: dict[str, Any]) -> str:
    """A call's line as JsonFormatter writes it, put together without the general encoder."""
    quote = _quote
    codes = ", ".join([quote(code) for code in fields["codes"]])
    return (
        f'{{"ts": {round(time.time(), 3)!r}, "level": "INFO", "logger": "{CALL_LOGGER}", '
        f'"msg": "rpc", "pid": {fields["worker_pid"]}, "event": "rpc", '
        f'"method": {quote(fields["method"])}, "code": {quote(fields["code"])}, '
        f'"product": {quote(fields["product"])}, "ok": {_JSON_CONSTANTS[fields["ok"]]}, '
        f'"codes": [{codes}], "latency_ms": {fields["latency_ms"]!r}, '
        f'"worker_pid": {fields["worker_pid"]}}}'
    )


def _write(handler: logging.StreamHandler[Any], text: str) -> bool:
    """False when the stream fails: the record then goes the usual way, which reports it."""
    handler.acquire()
    try:
        handler.stream.write(text)
        handler.stream.flush()
    except Exception:
        return False
    finally:
        handler.release()
    return True


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("npu_resolver_server")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    _Sink.handler = handler


def log_call(
    method: str,
    *,
    code: str,
    latency_s: float,
    product: str = "",
    ok: bool | None = None,
    codes: tuple[str, ...] | list[str] = (),
    **extra: Any,
) -> None:
    logger = _CALLS
    if not logger.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "event": "rpc",
        "method": method,
        "code": code,
        "product": product,
        "ok": ok,
        "codes": list(codes),
        "latency_ms": round(latency_s * 1000, 3),
        "worker_pid": os.getpid(),
    }
    handler = None if extra else _Sink.direct()
    if handler is not None and _write(handler, _call_line(fields) + handler.terminator):
        return
    fields.update(extra)
    # The caller is known: makeRecord skips the stack walk of logger.info.
    record = logger.makeRecord(
        CALL_LOGGER, logging.INFO, __file__, 0, "rpc", (), None, "log_call", {"fields": fields}
    )
    logger.handle(record)


def now() -> float:
    return time.perf_counter()
