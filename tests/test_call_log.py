"""Call log lines written in bursts by a serving loop: none lost, none late by more than the
flush delay, none out of order with the server's other records."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from npu_resolver_server import _logging


class _Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("disk full")


@contextmanager
def _configured() -> Iterator[io.StringIO]:
    """The server's logging, writing to a string; set up within the test's own body, where the
    test runner's capture handlers, which turn the direct way off, are not yet in place."""
    root = logging.getLogger("npu_resolver_server")
    saved = root.handlers[:], root.level, root.propagate, _logging._Sink.handler
    out = io.StringIO()
    try:
        _logging.configure("INFO")
        assert _logging._Sink.handler is not None
        _logging._Sink.handler.setStream(out)
        yield out
    finally:
        _logging.flush_calls()
        root.handlers[:], root.level, root.propagate, _logging._Sink.handler = saved


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
        line = len(_lines(stream)[0]) + 1
        assert count * line >= _logging.FLUSH_CHARS > (count - 1) * line
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
