"""Writing to the command's standard streams: UTF-8 whatever the locale, and notes that never
reach stdout nor decide the exit status."""

from __future__ import annotations

import contextlib
import sys
from typing import Any


def write_line(stream: Any, text: str) -> None:
    """`text` and a newline as UTF-8, whatever the locale or PYTHONIOENCODING say: the JSON
    and paths printed must not depend on them, nor fail on a character ASCII lacks."""
    data = (text + "\n").encode("utf-8", "backslashreplace")
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream put in its place
        stream.write(text + "\n")
        stream.flush()
        return
    stream.flush()
    buffer.write(data)
    buffer.flush()


def warn(text: str) -> None:
    """A line on stderr, when there is one to take it. With stderr closed (`2>&-`, where
    print() would write to stdout, among the answer a pipe parses), broken or full, the line is
    lost: a note never costs the answer or changes the exit status."""
    if sys.stderr is None:
        return
    with contextlib.suppress(OSError, ValueError):
        write_line(sys.stderr, text)
