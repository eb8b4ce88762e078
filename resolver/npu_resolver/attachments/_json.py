"""JSON loading and shape checks shared by the aoe, mixlist and fusion-switch parsers.

json.loads gives values without positions; an issue found later is placed by _json_layout,
which scans the text only when an issue needs a position or a key repeats.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Final

from ._common import Issues, line_and_column, run_together, show
from ._json_layout import Layout, Path, skip_space

_STRING_OR_COMMENT: Final = re.compile(r'"(?:[^"\\\n]++|\\.)*+"?|//[^\n]*+')
"""Possessive (`++`, `*+`): a string of a megabyte is matched without a backtracking point for
each character, which cost 150 MiB (the alternatives never overlap, so no match changes)."""


def describe(path: Path) -> str:
    """A path for a message: 'Switch' > 'GraphFusion' > item 2."""
    if not path:
        return "the top level"
    return " > ".join(show(part) if isinstance(part, str) else f"item {part + 1}" for part in path)


def kind(value: object) -> str:
    """The JSON type of a value, for messages such as 'must be a list, not a number'."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    return "a number"


class JsonDoc:
    """A parsed JSON object plus the means to report issues at a value's line and column."""

    __slots__ = ("_layout", "issues", "text", "value")

    def __init__(self, text: str, value: dict[str, object], issues: Issues) -> None:
        self.text = text
        self.value = value
        self.issues = issues
        self._layout: Layout | None = None

    def layout(self) -> Layout:
        if self._layout is None:
            self._layout = Layout(self.text)
        return self._layout

    def position(self, path: Path) -> tuple[int, int, str]:
        """Line and column of the value at `path`. Where only a parent's are known (the value
        lies too deep, or too far into a long file, to be placed exactly), the parent's, with
        a note for the message saying whose they are."""
        for end in range(len(path), -1, -1):
            offset = self.layout().find(path[:end])
            if offset is not None:
                line, column = line_and_column(self.text, offset)
                if end == len(path):
                    return line, column, ""
                held = f" (the line and column are those of {describe(path[:end])}, which holds it)"
                return line, column, held
        return 0, 0, ""

    def error(
        self, path: Path, text: str, *, suggestion: str = "", rule: str | None = None
    ) -> None:
        if self.issues.room(error=True):
            line, column, held = self.position(path)
            self.issues.error(line, column, text + held, suggestion=suggestion, rule=rule)

    def note(self, path: Path, text: str, *, rule: str | None = None) -> None:
        if self.issues.room(error=False):
            line, column, held = self.position(path)
            self.issues.note(line, column, text + held, rule=rule)

    def unknown(
        self,
        path: Path,
        what: str,
        word: str,
        choices: Sequence[str],
        *,
        within: str = "",
        rule: str | None = None,
    ) -> None:
        if self.issues.room(error=True):
            line, column, held = self.position(path)
            self.issues.unknown(line, column, what, word, choices, within=within + held, rule=rule)

    def check_keys(
        self, path: Path, obj: dict[str, object], allowed: Sequence[str], *, rule: str | None = None
    ) -> None:
        """Report each key of `obj` that is not in `allowed`, with the closest allowed one."""
        within = f" in {describe(path)}" if path else ""
        for key in obj:
            if key not in allowed:
                self.unknown((*path, key), "key", key, allowed, within=within, rule=rule)

    def mapping(self, path: Path, value: object, *, rule: str | None = None) -> dict[str, object]:
        """`value` if it is an object, else {} after an issue naming the path."""
        if isinstance(value, dict):
            return value
        self.error(path, f"{describe(path)} must be an object, not {kind(value)}", rule=rule)
        return {}

    def names(
        self, path: Path, value: object, *, what: str = "op", rule: str | None = None
    ) -> tuple[str, ...]:
        """The non-empty strings of a list of names (ops, passes); everything else is an issue,
        and so is a name that is several run together or holds a stray mark, since it would
        match nothing, silently."""
        kept: list[str] = []
        for index, item in self._indexed_strings(path, value, rule):
            reason = run_together(item, what=what)
            if reason is None:
                kept.append(item)
            else:
                fix = "remove it" if item != item.strip() else f"give each {what} its own list item"
                self.error((*path, index), f"{what} name {show(item)} {reason}; {fix}", rule=rule)
        return tuple(kept)

    def words(
        self,
        path: Path,
        value: object,
        allowed: Sequence[str],
        *,
        what: str,
        rule: str | None = None,
    ) -> frozenset[str]:
        """The members of a list of strings that are in `allowed`; the others are issues."""
        kept: set[str] = set()
        for index, item in self._indexed_strings(path, value, rule):
            if item in allowed:
                kept.add(item)
            else:
                self.unknown((*path, index), what, item, allowed, rule=rule)
        return frozenset(kept)

    def _indexed_strings(
        self, path: Path, value: object, rule: str | None
    ) -> list[tuple[int, str]]:
        if not isinstance(value, list):
            self.error(
                path, f"{describe(path)} must be a list of strings, not {kind(value)}", rule=rule
            )
            return []
        kept: list[tuple[int, str]] = []
        item: object
        for index, item in enumerate(value):  # a list may hold a million: the common case first
            if type(item) is str and item and not item.isspace():
                kept.append((index, item))
                continue
            at = (*path, index)
            if not isinstance(item, str):
                self.error(at, f"{describe(at)} must be a string, not {kind(item)}", rule=rule)
            elif not item.strip():
                self.error(at, f"{describe(at)} is empty", rule=rule)
            else:
                kept.append((index, item))
        return kept


def _blank_comments(text: str) -> tuple[str, int | None]:
    """Replace '//' comments outside strings by spaces; positions are kept for later issues."""
    if "//" not in text:
        return text, None
    parts: list[str] = []
    first: int | None = None
    done = 0
    for match in _STRING_OR_COMMENT.finditer(text):
        if match.group().startswith("//"):
            first = match.start() if first is None else first
            parts.append(text[done : match.start()])
            parts.append(" " * (match.end() - match.start()))
            done = match.end()
    if first is None:
        return text, None
    parts.append(text[done:])
    return "".join(parts), first


def _outside_strings(text: str) -> str:
    """`text` with its strings and '//' comments blanked: what lies between JSON's tokens."""
    return _STRING_OR_COMMENT.sub(lambda match: " " * len(match.group()), text)


def load_object(
    text: str, issues: Issues, *, allow_comments: bool = False, rule: str | None = None
) -> JsonDoc | None:
    """Parse `text` as one JSON object, or return None after an issue saying why not.

    Repeated keys are errors (JSON would keep only the last); with `allow_comments`, '//'
    comments are accepted with a note because the source's own example carries them. `rule`
    is the rule the file's being JSON comes from, when not the parser's own.
    """
    comment_at = None
    issues.outside = _outside_strings  # full-width marks count between tokens only
    if allow_comments:
        text, comment_at = _blank_comments(text)
    repeated: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        value = dict(items)
        if len(value) != len(items):  # each key once for every time it is written again
            counts = Counter(key for key, _ in items)
            repeated.extend(key for key, count in counts.items() for _ in range(count - 1))
        return value

    try:
        # Numbers are never valid values in these files; float() avoids int's digit-limit error.
        value: object = json.loads(text, object_pairs_hook=pairs, parse_int=float, strict=True)
    except json.JSONDecodeError as exc:
        hint = " ('//' comments are not allowed here)" if text.startswith("//", exc.pos) else ""
        issues.error(exc.lineno, exc.colno, f"invalid JSON: {exc.msg}{hint}", rule=rule)
        return None
    except (RecursionError, ValueError) as exc:
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        issues.error(0, 0, f"invalid JSON: {reason}", rule=rule)
        return None
    if comment_at is not None:
        line, column = line_and_column(text, comment_at)
        issues.note(
            line,
            column,
            "'//' comments are not standard JSON; they were ignored, as in the source's example",
        )
    if not isinstance(value, dict):
        line, column = line_and_column(text, skip_space(text, 0))
        message = f"the file must hold a JSON object {{...}}, not {kind(value)}"
        issues.error(line, column, message, rule=rule)
        return None
    doc = JsonDoc(text, value, issues)
    if repeated:
        unplaced = Counter(repeated)
        for key, offset in doc.layout().repeats():
            unplaced[key] -= 1
            if issues.room(error=True):
                line, column = line_and_column(text, offset)
                issues.error(line, column, f"key {show(key)} appears twice in the same object")
        for key in dict.fromkeys(repeated):  # past the tokens a position is sought over
            if unplaced[key] > 0 and issues.room(error=True):
                far = "(too far into the file to say where)"
                issues.error(0, 0, f"key {show(key)} appears twice in the same object {far}")
    return doc
