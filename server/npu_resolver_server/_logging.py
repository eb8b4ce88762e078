"""Structured logs: one JSON object per line on stderr.

Call records carry method, product, ok, diagnostic codes, status, latency and the worker pid;
never the job's environment values nor config values.

Within a serving event loop, call lines are written in bursts, at most FLUSH_DELAY_S after the
call (an access log's `buffer=`/`flush=`, as in nginx): a write per call releases the GIL for a
system call, and a busy server's event loop then waited for gRPC's threads to give it back, at
a cost larger than a cached answer's. Any other record, the worker's end and a full buffer write
them at once, so lines keep their order; a worker killed with SIGKILL loses at most that last
tenth of a second of call lines, never a reply.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import select
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Final

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
        return _one_line(_ENCODER.encode(data))


_LINE_BREAKS: Final = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})
"""Characters JSON may hold raw that break a line for readers that split as Python's
splitlines() does (NEL, the line and paragraph separators); a caller's text, a method path
say, is written with them escaped, so that one record stays one line for every reader."""


def _one_line(text: str) -> str:
    return text.translate(_LINE_BREAKS) if not text.isascii() else text


FLUSH_DELAY_S: Final = 0.1
FLUSH_CHARS: Final = 32 * 1024
WRITE_BYTES: Final = select.PIPE_BUF
"""The most one write holds: a pipe shared by the workers (their stderr) keeps a write whole
only up to PIPE_BUF bytes (4 KiB on Linux); a 32 KiB write interleaved with another worker's
when the reader lagged, cutting lines in two."""


class _Sink:
    """The handler `configure` installed. While the call logger's records can reach only it
    (no other handler, filter or level in the way), a call's line is written to it directly:
    the same text, without building a LogRecord and passing it through the logging machinery,
    which cost more than the rest of a cached answer."""

    handler: logging.StreamHandler[Any] | None = None
    target: logging.StreamHandler[Any] | None = None
    """The handler the pending lines are for."""
    pending: ClassVar[deque[str]] = deque()
    """Call lines not yet written (appended and taken from either end: safe across threads)."""
    pending_chars = 0
    timer_loop: asyncio.AbstractEventLoop | None = None
    """The loop whose timer will write the pending lines, if one is set."""

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


_CallKey = tuple[str, str, str, "bool | None", tuple[str, ...]]
"""What a call line says besides its time stamp and latency: method, code, product, ok, codes."""
_MIDDLES: dict[_CallKey, str] = {}
_MAX_MIDDLES: Final = 1024
_MAX_KEY_CODES: Final = 32
"""An answer's codes as given are a memo key only when this few; more are made unique first."""


class _Process:
    """This process's pid and the text of the last millisecond stamped (calls within one
    millisecond share it). A forked worker starts over: its lines carry its own pid."""

    pid = os.getpid()
    tail = f', "worker_pid": {pid}}}'
    stamp: tuple[int, str] = (-1, "")

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()
        cls.tail = f', "worker_pid": {cls.pid}}}'
        cls.stamp = (-1, "")
        _MIDDLES.clear()
        _Sink.pending.clear()  # the parent's lines are the parent's to write
        _Sink.pending_chars = 0
        _Sink.timer_loop = None


os.register_at_fork(after_in_child=_Process.forked)


_FRACTIONS: Final = tuple(f".{n:03d}".rstrip("0") if n else ".0" for n in range(1000))


def _thousandths(count: int) -> str:
    """`count` thousandths as float repr writes round(x, 3): 1700000000.1, 0.0, 12.345."""
    whole, part = divmod(count, 1000)
    return f"{whole}{_FRACTIONS[part]}"


def _call_line(key: _CallKey, latency_us: int) -> str:
    """A call's line as JsonFormatter writes it, put together without the general encoder.

    Between the time stamp and the latency, a server's lines repeat a few texts (the same
    methods, products and sets of codes): each is built once. Numbers are written from integer
    thousandths: rounding a float to 3 places cost more than the rest of the line."""
    middle = _MIDDLES.get(key)
    if middle is None:
        method, code, product, ok, codes = key
        quote = _quote
        codes_text = ", ".join([quote(c) for c in dict.fromkeys(codes)])
        middle = (
            f'"level": "INFO", "logger": "{CALL_LOGGER}", "msg": "rpc", "pid": {_Process.pid}, '
            f'"event": "rpc", "method": {quote(method)}, "code": {quote(code)}, '
            f'"product": {quote(product)}, "ok": {_JSON_CONSTANTS[ok]}, "codes": [{codes_text}], '
            '"latency_ms": '
        )
        middle = _one_line(middle)  # as the formatter writes it
        if len(_MIDDLES) < _MAX_MIDDLES and len(product) <= 256:
            _MIDDLES[key] = middle
    now_ms = (time.time_ns() + 500_000) // 1_000_000
    stamp_ms, stamp = _Process.stamp  # one tuple: another thread's half-made update is never read
    if now_ms != stamp_ms:
        stamp = f'{{"ts": {_thousandths(now_ms)}, '
        _Process.stamp = (now_ms, stamp)
    return f"{stamp}{middle}{_thousandths(latency_us)}{_Process.tail}"


def _hold(handler: logging.StreamHandler[Any], line: str) -> None:
    """Keep a call line for the next write: at once when the buffer is full or no event loop
    runs in this thread (a timer of the running loop writes it otherwise)."""
    if _Sink.target is not handler:
        flush_calls()
        _Sink.target = handler
    _Sink.pending.append(line)
    _Sink.pending_chars += len(line)
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None or _Sink.pending_chars >= FLUSH_CHARS:
        flush_calls()
    elif _Sink.timer_loop is not loop:
        _Sink.timer_loop = loop
        loop.call_later(FLUSH_DELAY_S, flush_calls)


def flush_calls() -> None:
    """Write the pending call lines in one write. A failing stream is reported as a logging
    error is (on stderr, with its traceback), never raised into a call. The lines are taken
    under the handler's lock (which its emit holds too): a record of another thread cannot be
    written between their taking and their writing."""
    _Sink.timer_loop = None
    handler = _Sink.target
    if handler is None:
        return
    handler.acquire()
    try:
        pending = _Sink.pending
        lines = []
        while pending:
            lines.append(pending.popleft())
        _Sink.pending_chars = 0
        if not lines:
            return
        try:
            for chunk in _whole_lines(lines, WRITE_BYTES):
                handler.stream.write(chunk)
                handler.stream.flush()  # one write(2) a chunk
        except Exception:
            handler.handleError(
                logging.makeLogRecord({"msg": f"{len(lines)} call log lines could not be written"})
            )
    finally:
        handler.release()


def _whole_lines(lines: list[str], size: int) -> Iterator[str]:
    """The lines joined into chunks of at most `size` bytes, each of whole lines (a longer line
    is a chunk of its own)."""
    chunk: list[str] = []
    held = 0
    for line in lines:
        length = len(line) if line.isascii() else len(line.encode())
        if chunk and held + length > size:
            yield "".join(chunk)
            chunk, held = [], 0
        chunk.append(line)
        held += length
    if chunk:
        yield "".join(chunk)


atexit.register(flush_calls)


class _CallOrderHandler(logging.StreamHandler[Any]):
    """Writes the pending call lines before a record of its own, so the log keeps its order."""

    def emit(self, record: logging.LogRecord) -> None:
        if _Sink.pending and _Sink.target is self:
            flush_calls()
        super().emit(record)

    def flush(self) -> None:
        if _Sink.pending and _Sink.target is self:
            flush_calls()
        super().flush()


_ONLY_FAILED: list[bool] = [False]


def configure(level: str = "INFO", calls: str = "all") -> None:
    """The server's JSON log at `level`; `calls`: which calls get their line (all, failed,
    none), for a server whose call lines would be more than its log pipeline wants."""
    flush_calls()
    _ONLY_FAILED[0] = calls == "failed"
    _CALLS.setLevel(logging.WARNING if calls == "none" else logging.NOTSET)
    handler = _CallOrderHandler(sys.stderr)
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
    report_again: bool = False,
    caller: Mapping[str, str] | None = None,
) -> None:
    """One call's line. `report_again`: a client's second ask for a report its failed call's
    trailer cut (said as `"report_again": true`; rare, so written through the formatter).
    `caller`: for a call refused before any handler ran (no token, no such method), who asked
    and for what (`peer`, `path`), so that an audit can tell; rare, so written the same way."""
    logger = _CALLS
    if not logger.isEnabledFor(logging.INFO) or (_ONLY_FAILED[0] and code == "OK"):
        return
    codes = tuple(codes)
    if len(codes) > _MAX_KEY_CODES:
        # Each code once, in the order the answer first gives it: a line (and the memo of its
        # recurring text) stays a few hundred bytes however many diagnostics an answer holds.
        codes = tuple(dict.fromkeys(codes))
    latency_us = round(latency_s * 1_000_000)
    handler = None if report_again or caller else _Sink.direct()
    if handler is not None:
        line = _call_line((method, code, product, ok, codes), latency_us)
        _hold(handler, line + handler.terminator)
        return
    fields: dict[str, Any] = {
        "event": "rpc",
        "method": method,
        "code": code,
        "product": product,
        "ok": ok,
        "codes": list(dict.fromkeys(codes)),
        "latency_ms": latency_us / 1000,
        "worker_pid": os.getpid(),
    }
    if report_again:
        fields["report_again"] = True
    if caller:
        fields.update(caller)
    # The caller is known: makeRecord skips the stack walk of logger.info.
    record = logger.makeRecord(
        CALL_LOGGER, logging.INFO, __file__, 0, "rpc", (), None, "log_call", {"fields": fields}
    )
    logger.handle(record)


def now() -> float:
    return time.perf_counter()
