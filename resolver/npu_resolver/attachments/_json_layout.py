"""Where values sit in a JSON text, found by a resumable scan after json.loads succeeded.

json.loads keeps no positions. This scan reads the same (already valid) text token by token,
only as far as the position asked for, so an issue near the top costs little and the whole
scan stays linear. It never recurses, whatever the nesting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

Path = tuple[str | int, ...]
"""Where a value sits: object keys and list indexes from the root."""

MAX_TRACKED_DEPTH: Final = 4
"""Positions are kept this deep: enough for every format here, bounded for hostile input."""
MAX_SOUGHT_TOKENS: Final = 20_000
"""Tokens read in all to find where values sit (some 70 ms). A value further on in a long file
is placed at its nearest parent already found: its message still names its path."""

_WS: Final = re.compile(r"[ \t\n\r]*")
_TOKEN: Final = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[{}\[\],]', re.DOTALL)
"""Possessive, as _json's: a long string holds no backtracking point per character."""
_DECODER: Final = json.JSONDecoder()


def skip_space(text: str, pos: int) -> int:
    """The offset of the first character from `pos` that is not JSON whitespace."""
    match = _WS.match(text, pos)
    return match.end() if match else pos


@dataclass(slots=True)
class _Frame:
    path: Path | None
    keys: set[str] | None
    key: str = ""
    index: int = 0

    def child(self) -> Path | None:
        """The path of the value this container is at, or None when too deep to track."""
        if self.path is None or len(self.path) >= MAX_TRACKED_DEPTH:
            return None
        return (*self.path, self.key if self.keys is not None else self.index)


class Layout:
    """Offsets of object members (at their key) and list items, and the keys that repeat. A key
    written twice in one object is placed at its last writing, the one json.loads keeps: the
    keys that repeat are sought (scanning the whole file) before any position is. A second
    writing past MAX_SOUGHT_TOKENS is not seen: what lies under it keeps the first's places."""

    __slots__ = ("_budget", "_steps", "_text", "offsets", "repeated")

    def __init__(self, text: str) -> None:
        self._text = text
        self.offsets: dict[Path, int] = {(): skip_space(text, 0)}
        self.repeated: list[tuple[str, int]] = []
        self._steps = self._scan()
        self._budget = MAX_SOUGHT_TOKENS

    def find(self, path: Path) -> int | None:
        """The offset of `path`, scanning on only until it is known, while the file's
        MAX_SOUGHT_TOKENS last."""
        while path not in self.offsets and self._budget and next(self._steps, True) is None:
            self._budget -= 1
        return self.offsets.get(path)

    def repeats(self) -> Iterator[tuple[str, int]]:
        """Each key that repeats within one object, with its offset, as the scan finds it
        while the file's MAX_SOUGHT_TOKENS last."""
        done = 0
        while True:
            if done < len(self.repeated):
                yield self.repeated[done]
                done += 1
            elif not self._budget or next(self._steps, True) is not None:
                return
            else:
                self._budget -= 1

    def _scan(self) -> Iterator[None]:
        text = self._text
        stack: list[_Frame] = []
        for token in _TOKEN.finditer(text):
            char = text[token.start()]
            top = stack[-1] if stack else None
            if char == '"':
                if top is not None and top.keys is not None:
                    self._key(top, top.keys, token)
            elif char in "{[":
                frame = _Frame(top.child() if top else (), set() if char == "{" else None)
                stack.append(frame)
                if char == "[":
                    self._item(frame, token.end())
            elif char in "}]":
                if stack:
                    stack.pop()
            elif top is not None and top.keys is None:
                top.index += 1
                self._item(top, token.end())
            yield None

    def _key(self, frame: _Frame, keys: set[str], token: re.Match[str]) -> None:
        """Record a string that is followed by ':', i.e. a key of the object `frame`."""
        if not self._text.startswith(":", skip_space(self._text, token.end())):
            return
        frame.key = str(_DECODER.decode(token.group()))
        if frame.key in keys:
            self.repeated.append((frame.key, token.start()))
        keys.add(frame.key)
        path = frame.child()
        if path is not None:  # a key written twice: JSON keeps the last, and so its place
            self.offsets[path] = token.start()

    def _item(self, frame: _Frame, after: int) -> None:
        start = skip_space(self._text, after)
        path = frame.child()
        if path is not None and start < len(self._text) and self._text[start] != "]":
            self.offsets[path] = start  # in a list a repeated key holds, the last list's item
