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
        return json.dumps(data, ensure_ascii=False, default=str)


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("npu_resolver_server")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


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
    logger = logging.getLogger(CALL_LOGGER)
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
    fields.update(extra)
    logger.info("rpc", extra={"fields": fields})


def now() -> float:
    return time.perf_counter()
