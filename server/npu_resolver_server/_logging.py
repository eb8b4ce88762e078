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
from typing import Any, Final

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


_MIDDLES: dict[tuple[object, ...], str] = {}
_MAX_MIDDLES: Final = 1024


def _call_line(
    method: str,
    *,
    code: str,
    product: str,
    ok: bool | None,
    codes: tuple[str, ...] | list[str],
    latency_ms: float,
    pid: int,
) -> str:
    """A call's line as JsonFormatter writes it, put together without the general encoder.

    Between the time stamp and the latency, a server's lines repeat a few texts (the same
    methods, products and sets of codes): each is built once."""
    key = (pid, method, code, product, ok, tuple(codes))
    middle = _MIDDLES.get(key)
    if middle is None:
        quote = _quote
        codes_text = ", ".join([quote(c) for c in codes])
        middle = (
            f'"level": "INFO", "logger": "{CALL_LOGGER}", "msg": "rpc", "pid": {pid}, '
            f'"event": "rpc", "method": {quote(method)}, "code": {quote(code)}, '
            f'"product": {quote(product)}, "ok": {_JSON_CONSTANTS[ok]}, "codes": [{codes_text}], '
        )
        if len(_MIDDLES) < _MAX_MIDDLES and len(product) <= 256:
            _MIDDLES[key] = middle
    stamp = round(time.time(), 3)
    return f'{{"ts": {stamp!r}, {middle}"latency_ms": {latency_ms!r}, "worker_pid": {pid}}}'


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
    # Each code once, in the order the answer first gives it: a line (and the memo of its
    # recurring text) stays a few hundred bytes however many diagnostics an answer holds.
    codes = tuple(dict.fromkeys(codes))
    latency_ms = round(latency_s * 1000, 3)
    pid = os.getpid()
    handler = None if extra else _Sink.direct()
    if handler is not None:
        line = _call_line(
            method, code=code, product=product, ok=ok, codes=codes, latency_ms=latency_ms, pid=pid
        )
        if _write(handler, line + handler.terminator):
            return
    fields: dict[str, Any] = {
        "event": "rpc",
        "method": method,
        "code": code,
        "product": product,
        "ok": ok,
        "codes": list(codes),
        "latency_ms": latency_ms,
        "worker_pid": pid,
    }
    fields.update(extra)
    # The caller is known: makeRecord skips the stack walk of logger.info.
    record = logger.makeRecord(
        CALL_LOGGER, logging.INFO, __file__, 0, "rpc", (), None, "log_call", {"fields": fields}
    )
    logger.handle(record)


def now() -> float:
    return time.perf_counter()
