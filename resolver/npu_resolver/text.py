"""How the resolver reads a caller's text and JSON, for code that reads it on the way in.

The client and the server check configs with these same functions before they reach the core,
so that a config refused in process (too deep, too wide, not JSON, a key written twice, text
that is not Unicode) is refused in the same words when it travels. `read_request` is for a
request a decoder has just read (every field of its type, each dict its own): it skips the
constructor's checks and copies, so anything else must go through ResolveRequest(...).
`detached` is the copy an answer makes of a caller's object or list, for code that builds one;
`plain_text` the text a str subclass holds.
"""

from __future__ import annotations

from ._model import (
    DuplicateKeyError,
    NumberTooLongError,
    cut_text,
    is_text,
    loads_json,
    plain_text,
    printable,
    read_request,
)
from ._pipeline import detached
from ._values import (
    CUT_DEPTH,
    config_refusal,
    config_shape,
    cut_deep,
    key_text,
    not_json,
    too_deep,
    too_wide,
)

__all__ = [
    "CUT_DEPTH",
    "DuplicateKeyError",
    "NumberTooLongError",
    "config_refusal",
    "config_shape",
    "cut_deep",
    "cut_text",
    "detached",
    "is_text",
    "key_text",
    "loads_json",
    "not_json",
    "plain_text",
    "printable",
    "read_request",
    "too_deep",
    "too_wide",
]
