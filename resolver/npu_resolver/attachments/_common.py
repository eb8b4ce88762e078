"""What every attachment parser shares: the issue record, decoding, word matching and lines.

Parsers report problems as data (ParseIssue), never as exceptions, so one bad file becomes a
diagnostic instead of a failed request. Nothing here opens a file or evaluates its content.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeVar

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")

MAX_ATTACHMENT_BYTES: Final = 1024 * 1024
"""Largest attachment accepted, in UTF-8 bytes: bounds the work one request can cause."""

MAX_ISSUES: Final = 100
"""Errors (and, apart, notes) kept per file; garbage must not produce a million diagnostics."""

_LONGEST_WORD_TO_MATCH: Final = 64
_SHOWN_CHARS: Final = 40
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class ParseIssue:
    """One problem in an attachment; with normalized=True one accepted oddity (INFO), and with
    advice=True as well something accepted that may fail at compile time (a warning)."""

    line: int
    column: int
    message: str
    suggestion: str = ""
    rule: str = ""
    normalized: bool = False
    advice: bool = False
    summary: bool = False
    """The closing line that says reading stopped or notes were left out (not a finding)."""

    @property
    def is_error(self) -> bool:
        """True when the file breaks its format, False for an accepted-but-nonstandard note."""
        return not self.normalized


FULL_WIDTH: Final = {"，": ",", "：": ":", "＝": "=", "［": "[", "］": "]", "｛": "{", "｝": "}"}
"""Punctuation a Chinese input method writes where these files want their ASCII separators (the
source asks for 英文逗号, English commas): named in an error on a line that holds it, which
otherwise reads as a word unknown or a line of the wrong form."""


def full_width(text: str) -> str:
    """The full-width separators `text` holds, each once, in order of first appearance: a
    search per mark (at C speed), not a walk over a line of a megabyte in Python."""
    found = sorted((at, mark) for mark in FULL_WIDTH if (at := text.find(mark)) >= 0)
    return "".join(mark for _, mark in found)


def full_width_hint(marks: str) -> str:
    """What an error on a line holding `marks` adds: which they are, and what to write."""
    ascii_marks = " ".join(repr(FULL_WIDTH[mark]) for mark in marks)
    return f" (the line holds full-width {' '.join(map(repr, marks))}; write {ascii_marks})"


_LIST_MARKS: Final = re.compile(r"[,，;；、\s]+")
"""What separates the names of a list, in any of the ways a hand may write one."""
_MARKS_SHOWN: Final = 3


def run_together(name: str, *, what: str = "op", commas_separate: bool = False) -> str | None:
    """Why an op, node or pass name names nothing: it holds a list separator, a space or a
    full-width mark (no op type, TensorFlow node name or pass name does), so it is two names run
    together or one with a stray mark, and would match no op, silently. None for a plain name.
    With `commas_separate` (a comma-separated list) an ASCII comma is the list's own."""
    if name != name.strip():
        return f"begins or ends with a space, which no {what}'s name does"
    found = [mark.strip() or " " for mark in _LIST_MARKS.findall(name)]
    if commas_separate:
        found = [mark for mark in found if mark != ","]
    marks = list(dict.fromkeys(found))
    if marks:
        shown = ", ".join(map(repr, marks[:_MARKS_SHOWN])) + (
            ", ..." if len(marks) > _MARKS_SHOWN else ""
        )
        parts = sum(1 for part in _LIST_MARKS.split(name) if part)
        if parts > 1:
            return f"is {parts:,} names run together (by {shown}), and names no {what}"
        return f"holds {shown}, which no {what}'s name holds"
    stray = full_width(name)
    if stray:
        return f"holds full-width {', '.join(map(repr, stray))}, which no {what}'s name holds"
    return None


def where(line: int, column: int) -> str:
    """The 'line 3, column 7: ' prefix of a message; empty parts are left out."""
    if line and column:
        return f"line {line}, column {column}: "
    if line:
        return f"line {line}: "
    if column:
        return f"column {column}: "
    return ""


def show(word: str) -> str:
    """Quote a word from the file for a message, escaped and cut short if it is long."""
    if len(word) > _SHOWN_CHARS:
        return repr(word[:_SHOWN_CHARS]) + "..."
    return repr(word)


def closest(word: str, choices: Sequence[str]) -> str:
    """The valid word the user most likely meant, or "" when none is close."""
    if not word or len(word) > _LONGEST_WORD_TO_MATCH:
        return ""
    folded = {choice.casefold(): choice for choice in choices}
    key = word.casefold()
    if key in folded:
        return folded[key]
    matches = difflib.get_close_matches(key, list(folded), n=1)
    return folded[matches[0]] if matches else ""


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset, counting lines by '\\n' as JSON does."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _IssueLimitError(Exception):
    """Raised inside a parser once MAX_ISSUES errors are kept: the rest is not worth reading."""


class Issues:
    """Collects one parser's issues: at most MAX_ISSUES errors and as many notes.

    One error past the cap stops the parse (run_parser turns that into a closing issue), so a
    file of garbage costs little and never yields a flood of diagnostics.
    """

    __slots__ = (
        "_errors",
        "_items",
        "_lines",
        "_marks",
        "_omitted_notes",
        "_stopped",
        "outside",
        "rule",
        "text",
    )

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self.text = ""
        """The file's text, for what an error says of its line (full-width punctuation)."""
        self.outside: Callable[[str], str] | None = None
        """What of the text a format's punctuation can stand in (JSON: not its strings nor
        comments), when not all of it."""
        self._lines: list[str] | None = None
        self._marks: dict[int, str] = {}
        self._items: list[ParseIssue] = []
        self._errors = 0
        self._omitted_notes = 0
        self._stopped = False

    def _marks_on(self, line: int) -> str:
        """The full-width separators on line `line` (counted from 1) of the file, found once
        per line: a hundred errors on one line of a megabyte search it once."""
        if self._lines is None:
            text = self.text if self.outside is None else self.outside(self.text)
            self._lines = text.split("\n")
        marks = self._marks.get(line)
        if marks is None:
            inside = 0 < line <= len(self._lines)
            marks = self._marks[line] = full_width(self._lines[line - 1]) if inside else ""
        return marks

    def room(self, *, error: bool) -> bool:
        """Whether one more issue of this kind is kept; check it before costly work.

        When the errors are full this stops the parse rather than answer False.
        """
        if error:
            if self._errors >= MAX_ISSUES:
                self._stopped = True
                raise _IssueLimitError
            return True
        if len(self._items) - self._errors >= MAX_ISSUES:
            self._omitted_notes += 1
            return False
        return True

    def error(
        self, line: int, column: int, text: str, *, suggestion: str = "", rule: str | None = None
    ) -> None:
        """Record a break of the format."""
        if self.room(error=True):
            self._errors += 1
            self._add(line, column, text, suggestion, rule, normalized=False)

    def note(
        self, line: int, column: int, text: str, *, suggestion: str = "", rule: str | None = None
    ) -> None:
        """Record input that is accepted but not as the source writes it (INFO)."""
        if self.room(error=False):
            self._add(line, column, text, suggestion, rule, normalized=True)

    def advise(
        self, line: int, column: int, text: str, *, suggestion: str = "", rule: str | None = None
    ) -> None:
        """Record input that is accepted but may make compilation fail (a warning)."""
        if self.room(error=False):
            self._add(line, column, text, suggestion, rule, normalized=True, advice=True)

    def _add(
        self,
        line: int,
        column: int,
        text: str,
        suggestion: str,
        rule: str | None,
        *,
        normalized: bool,
        advice: bool = False,
    ) -> None:
        message = where(line, column) + text
        # The line's marks between tokens; else those of the word the message quotes (a
        # string in a JSON file, whose marks the line's count leaves out).
        marks = (self._marks_on(line) or full_width(text)) if not normalized else ""
        if marks:
            message += full_width_hint(marks)
        self._items.append(
            ParseIssue(line, column, message, suggestion, rule or self.rule, normalized, advice)
        )

    def unknown(
        self,
        line: int,
        column: int,
        kind: str,
        word: str,
        choices: Sequence[str],
        *,
        within: str = "",
        rule: str | None = None,
    ) -> None:
        """Record a word that is not one of `choices`, naming the closest one.

        `within` (e.g. " in 'white-list'") follows the word, saying where it was found.
        """
        if self.room(error=True):
            # A word holding a full-width separator is two words run together: the closest
            # name of one of them would drop the other (see _add).
            suggestion = "" if full_width(word) else closest(word, choices)
            hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
            listed = ", ".join(choices)
            text = f"unknown {kind} {show(word)}{within}{hint}; expected one of {listed}"
            self.error(line, column, text, suggestion=suggestion, rule=rule)

    @property
    def none(self) -> bool:
        """Nothing was said of the file so far."""
        return not self._items

    def freeze(self) -> tuple[ParseIssue, ...]:
        """The issues kept, plus one closing issue when some were left out."""
        if self._stopped:
            text = f"reading stopped after {MAX_ISSUES} errors; fix these and check again"
            return (*self._items, ParseIssue(0, 0, text, rule=self.rule, summary=True))
        if self._omitted_notes:
            text = f"{self._omitted_notes} more note(s) were not listed"
            closing = ParseIssue(0, 0, text, rule=self.rule, normalized=True, summary=True)
            return (*self._items, closing)
        return tuple(self._items)


def frozen_map(items: Mapping[K, V]) -> Mapping[K, V]:
    """A read-only copy, so a parsed result can be shared without being changed."""
    return MappingProxyType(dict(items))


def run_parser(
    text: object, body: Callable[[str, Issues], R], empty: Callable[..., R], rule: str
) -> R:
    """Run a parser body so that no input, however broken, makes it raise.

    A leading byte-order mark is dropped (an editor counts no column for it) and noted. Past
    MAX_ISSUES errors
    the result is empty, as it would be refused anyway; any other exception, which would be a
    bug, still comes back as an error issue on an empty result.
    """
    issues = Issues(rule)
    try:
        if not isinstance(text, str):
            issues.error(0, 0, f"the attachment must be text, not {type(text).__name__}")
            return empty(issues=issues.freeze())
        if text.startswith("\ufeff"):
            issues.note(1, 1, "the byte-order mark at the start of the file was ignored")
            text = text[1:]
        issues.text = text
        return body(text, issues)
    except _IssueLimitError:
        return empty(issues=issues.freeze())
    except Exception as exc:
        crash = ParseIssue(0, 0, f"the file could not be parsed ({type(exc).__name__})", rule=rule)
        return empty(issues=(*issues.freeze(), crash))


def decode_attachment(data: bytes | str) -> tuple[str | None, ParseIssue | None]:
    """Turn an attachment into text, refusing anything over 1 MiB or not valid UTF-8.

    The limit bounds the work per request; bad UTF-8 is refused rather than guessed at because
    a mis-decoded op name would be silently wrong.
    """
    if isinstance(data, str):
        return _check_text(data)
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if not isinstance(data, bytes):
        return None, ParseIssue(
            0, 0, f"an attachment must be bytes or text, not {type(data).__name__}"
        )
    if len(data) > MAX_ATTACHMENT_BYTES:
        return None, _too_large()
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[line_start : exc.start].decode("utf-8", "replace")) + 1
        text = (
            f"the attachment is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); save the file as UTF-8"
        )
        return None, ParseIssue(line, column, where(line, column) + text)


def _check_text(text: str) -> tuple[str | None, ParseIssue | None]:
    if len(text) > MAX_ATTACHMENT_BYTES:
        return None, _too_large()
    bad = _SURROGATE.search(text)
    if bad is not None:
        line, column = line_and_column(text, bad.start())
        message = (
            f"the text holds a lone surrogate (U+{ord(bad.group()):04X}), which is not valid "
            "Unicode and cannot be UTF-8"
        )
        return None, ParseIssue(line, column, where(line, column) + message)
    if len(text.encode("utf-8")) > MAX_ATTACHMENT_BYTES:
        return None, _too_large()
    return text, None


def _too_large() -> ParseIssue:
    return ParseIssue(
        0,
        0,
        f"the attachment is larger than the limit of {MAX_ATTACHMENT_BYTES:,} bytes (1 MiB) "
        "of UTF-8; only the options' own files belong here",
    )


# Line-based formats (.cfg, .ini) ------------------------------------------------------------


def content_lines(text: str) -> Iterator[tuple[int, str, int]]:
    """Yield (line number, stripped line, column of its first character) for each line.

    Lines split on '\\n' only (a trailing '\\r' is dropped) so numbers agree with editors and
    with the JSON decoder.
    """
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        body = line.lstrip()
        yield number, body.rstrip(), len(line) - len(body) + 1


def split_items(text: str, column: int, sep: str = ",") -> Iterator[tuple[str, int]]:
    """Split `text` (starting at `column`) on `sep`; each item is stripped, with its column.

    Split at once (in C: a line of a megabyte in a few milliseconds), stepped through lazily.
    """
    at = column
    step = len(sep)
    for part in text.split(sep):
        body = part.strip()
        # The column of the item's first character; a blank item's is past its blanks.
        yield body, at + (len(part) - len(part.lstrip()) if body else len(part))
        at += len(part) + step


def split_pair(body: str, column: int, sep: str = "=") -> tuple[str, str, int] | None:
    """Split 'key = value' into (key, value, value's column), or None when `sep` is missing."""
    key, found, rest = body.partition(sep)
    if not found:
        return None
    value = rest.lstrip()
    return key.rstrip(), value.rstrip(), column + len(key) + len(sep) + len(rest) - len(value)


def remember(
    issues: Issues,
    seen: dict[str, tuple[V, int]],
    key: str,
    value: V,
    *,
    at: tuple[int, int],
    what: str,
) -> None:
    """Keep the first setting of `key`; a repeat is a note if equal, else an error.

    The source never says which of two settings wins, so a conflicting repeat cannot be
    resolved and is refused; an identical one is harmless.
    """
    line, column = at
    earlier = seen.get(key)
    if earlier is None:
        seen[key] = (value, line)
    elif earlier[0] == value:
        if issues.room(error=False):
            issues.note(line, column, f"{what} {show(key)} repeats line {earlier[1]}; ignored")
    else:
        issues.error(
            line,
            column,
            f"{what} {show(key)} is set again with a different value (first on line "
            f"{earlier[1]}); the source does not say which one wins",
        )


def note_name_over_type(
    issues: Issues, by_name: Mapping[str, tuple[V, int]], by_type: Mapping[str, tuple[V, int]]
) -> None:
    """Note keys given both as a node name and as an op type: the name wins for that node."""
    for key, (_, line) in by_name.items():
        both = by_type.get(key)
        if both is not None:
            issues.note(
                line,
                0,
                f"{show(key)} is set both by node name and by op type (line {both[1]}); "
                "for the node of that name the by-name setting wins",
            )
