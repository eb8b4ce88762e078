"""Call log lines written in bursts by a serving loop: none lost, none late by more than the
flush delay, none out of order with the server's other records."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import select
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npu_resolver_server import _logging


class _Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("disk full")


@contextmanager
def _configured(calls: str = "all") -> Iterator[io.StringIO]:
    """The server's logging, writing to a string; set up within the test's own body, where the
    test runner's capture handlers, which turn the direct way off, are not yet in place."""
    root = logging.getLogger("npu_resolver_server")
    saved = root.handlers[:], root.level, root.propagate, _logging._Sink.handler
    out = io.StringIO()
    try:
        _logging.configure("INFO", calls)
        assert _logging._Sink.handler is not None
        _logging._Sink.handler.setStream(out)
        yield out
    finally:
        _logging.flush_calls()
        root.handlers[:], root.level, root.propagate, _logging._Sink.handler = saved
        _logging._ONLY_FAILED[0] = False  # every call's line again, as configure's default
        logging.getLogger(_logging.CALL_LOGGER).setLevel(logging.NOTSET)


def _call(method: str) -> None:
    _logging.log_call(method, code="OK", latency_s=0.001, product="atlas-a2", ok=True)


def _events(out: io.StringIO) -> list[str]:
    return [str(json.loads(line).get("method", json.loads(line)["msg"])) for line in _lines(out)]


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().split("\n") if line]


def test_outside_an_event_loop_a_call_line_is_written_at_once() -> None:
    with _configured() as stream:
        _call("Resolve")
        assert _events(stream) == ["Resolve"]


@pytest.mark.parametrize(("calls", "written"), [("failed", ["GetPolicy"]), ("none", [])])
def test_call_lines_can_be_kept_to_failed_calls_or_none(calls: str, written: list[str]) -> None:
    """--call-log: a line a call is 0.5 MB/s a worker at full load; an operator may keep only
    the calls that failed, or none, and still get every other line (a warning here)."""
    with _configured(calls) as stream:
        _call("Resolve")
        _logging.log_call("GetPolicy", code="UNAVAILABLE", latency_s=0.001)
        logging.getLogger("npu_resolver_server").warning(
            "w", extra={"fields": {"event": "policy_reload_failed"}}
        )
        assert _events(stream) == [*written, "w"]


def test_in_a_loop_lines_wait_at_most_the_flush_delay() -> None:
    with _configured() as stream:

        async def calls() -> tuple[list[str], list[str]]:
            _call("Resolve")
            _call("Diff")
            held = _events(stream)
            await asyncio.sleep(_logging.FLUSH_DELAY_S * 3)
            return held, _events(stream)

        held, written = asyncio.run(calls())
        assert held == []
        assert written == ["Resolve", "Diff"]


def test_another_record_writes_the_held_lines_first() -> None:
    with _configured() as stream:

        async def calls() -> None:
            _call("Resolve")
            _call("ResolveBatch")
            logging.getLogger("npu_resolver_server.app").info("draining")
            _call("Diff")

        asyncio.run(calls())
        assert _events(stream)[:3] == ["Resolve", "ResolveBatch", "draining"]
        _logging.flush_calls()  # the loop closed before its timer ran: the worker's end writes it
        assert _events(stream) == ["Resolve", "ResolveBatch", "draining", "Diff"]


def test_a_full_buffer_is_written_without_waiting() -> None:
    with _configured() as stream:

        async def calls() -> int:
            count = 0
            while not stream.getvalue():
                _call("Resolve")
                count += 1
                assert count < 10_000
            return count

        count = asyncio.run(calls())
        sizes = [len(line) + 1 for line in _lines(stream)]  # a stamp's text varies: .1, .123
        assert len(sizes) == count
        assert sum(sizes) >= _logging.FLUSH_CHARS > sum(sizes[:-1])
        assert _events(stream) == ["Resolve"] * count


def test_a_failing_stream_is_reported_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
    with _configured():
        assert _logging._Sink.handler is not None
        _logging._Sink.handler.setStream(_Broken())

        async def calls() -> None:
            _call("Resolve")
            _call("Resolve")
            await asyncio.sleep(_logging.FLUSH_DELAY_S * 3)

        asyncio.run(calls())
        assert "2 call log lines could not be written" in capsys.readouterr().err


@given(st.integers(min_value=0, max_value=10**15))
def test_thousandths_are_written_as_json_writes_the_float(count: int) -> None:
    """Time stamps and latencies are written from integer thousandths; the record path writes
    the float, so both ways must spell the same number (1700000000.1, 0.0, 12.345)."""
    assert _logging._thousandths(count) == repr(count / 1000) == json.dumps(count / 1000)


def test_a_forked_worker_writes_its_own_pid() -> None:
    """Workers are forked from the supervisor: a line memoized before the fork must not carry
    the supervisor's pid in the worker."""
    key = ("Resolve", "OK", "atlas-a2", True, ("FROM_ENV",))
    before = json.loads(_logging._call_line(key, 1))
    assert before["pid"] == before["worker_pid"] == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(write, _logging._call_line(key, 1).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        line = json.loads(pipe.read())
    os.waitpid(child, 0)
    assert line["pid"] == line["worker_pid"] == child


def test_a_stopped_server_has_written_its_call_lines() -> None:
    """An in-process server's loop may end within the flush delay of its last call."""
    from npu_resolver_server import ServerSettings, create_server

    with _configured() as stream:

        async def serve_one_call() -> None:
            built = create_server(ServerSettings(host="127.0.0.1", port=0))
            await built.start()
            _call("Resolve")
            await built.stop(0, delay=0)

        asyncio.run(serve_one_call())
        assert "Resolve" in _events(stream)


def test_a_forked_worker_leaves_the_parents_held_lines_to_the_parent() -> None:
    with _configured() as stream:

        async def fork_while_held() -> tuple[int, str]:
            _call("Resolve")
            read, write = os.pipe()
            child = os.fork()
            if child == 0:  # pragma: no cover - the child reports through the pipe
                try:
                    os.write(write, str(len(_logging._Sink.pending)).encode())
                finally:
                    os._exit(0)
            os.close(write)
            with os.fdopen(read, "rb") as pipe:
                held_in_child = pipe.read().decode()
            os.waitpid(child, 0)
            return len(_logging._Sink.pending), held_in_child

        held_in_parent, held_in_child = asyncio.run(fork_while_held())
        _logging.flush_calls()
        assert (held_in_parent, held_in_child) == (1, "0")
        assert _events(stream) == ["Resolve"]


class _Writes(io.StringIO):
    """A stream that keeps what each flush sent: one write(2) on a real pipe."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []
        self._mark = 0

    def flush(self) -> None:
        text = self.getvalue()
        if len(text) > self._mark:
            self.sent.append(text[self._mark :])
            self._mark = len(text)


def test_call_lines_are_written_in_whole_lines_a_pipe_keeps_whole() -> None:
    """The workers share one stderr pipe, which keeps a write whole only up to PIPE_BUF bytes:
    a full buffer (32 KiB) written at once interleaved with another worker's write when the
    reader lagged, and a log shipper got lines cut in two. Each write now holds whole lines,
    at most PIPE_BUF bytes (non-ASCII text counted in bytes)."""
    with _configured() as plain:
        assert _logging._Sink.handler is not None
        stream = _Writes()
        _logging._Sink.handler.setStream(stream)

        async def calls() -> None:  # held for one write, as a worker's event loop holds them
            for i in range(400):
                _logging.log_call(
                    "Resolve", code="OK", latency_s=0.001, product=f"atlas-é{i}", ok=True
                )

        asyncio.run(calls())
        _logging.flush_calls()
    assert plain.getvalue() == ""
    assert len(stream.sent) > 1
    for sent in stream.sent:
        assert len(sent.encode()) <= select.PIPE_BUF and sent.endswith("\n")
    lines = "".join(stream.sent).splitlines()
    assert [json.loads(line)["product"] for line in lines] == [f"atlas-é{i}" for i in range(400)]


def test_a_record_holding_line_breaks_json_leaves_raw_is_one_line_for_every_reader() -> None:
    """NEL and the line and paragraph separators are valid raw in JSON, but readers that split
    as Python's splitlines() does (and some log shippers) would cut the record: a caller's
    text in a field (a method path) is written with them escaped, and reads back the same."""
    record = logging.LogRecord("x", logging.INFO, __file__, 0, "m", (), None)
    path = '/a\u2028b\u2029c\x85d\u00e9{"event": "forged"}'
    record.fields = {"path": path}
    line = _logging.JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["path"] == path
    assert "\u00e9" in line  # other text stays as written, not escaped
