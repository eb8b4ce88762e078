"""Value grammars: checks for string options whose value has a grammar of its own, and the
canonical spelling of a well-formed value.

Each check returns None when the value is well formed, else a short reason for the diagnostic.
A canonical form (for a value its check passed) writes it as the source's examples do: no
spaces around the separators, numbers without leading zeros. Every check is a single linear
pass: a caller's string is never evaluated.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import wraps
from typing import Final, TypeVar

from ._model import MAX_MEMO_TEXT, keep

Grammar = Callable[[str], str | None]
_T = TypeVar("_T")
MAX_MEMO_ENTRIES: Final = 2048
"""Bound of each grammar's memo: the values a cluster's jobs keep sending are few."""


MAX_RECENT_LONG: Final = 4
"""Long texts whose verdicts are kept a moment: one request asks of its value up to three
times (the quick check, the full parse, each column of a diff), and a 64 K-character path
takes tens of milliseconds to judge."""


def memoized(check: Callable[[str], _T]) -> Callable[[str], _T]:
    """The same text recurs from job to job and its verdict never changes: keep the verdicts
    of short texts (bounded), so that a grammar costs one look-up on the common path; and of
    the last few long ones, so that one request judges its long value once."""
    known: dict[str, _T] = {}
    recent: dict[str, _T] = {}

    @wraps(check)
    def verdict(value: str) -> _T:
        if value in known:
            return known[value]
        short = len(value) <= MAX_MEMO_TEXT
        if not short and value in recent:
            return recent[value]
        reason = check(value)
        if short:
            keep(known, value, reason, MAX_MEMO_ENTRIES)
        else:
            keep(recent, value, reason, MAX_RECENT_LONG)
        return reason

    return verdict


_INT: Final = re.compile(r"[0-9]+")
_SIGNED_INT: Final = re.compile(r"[+-]?[0-9]+")
SMP_ENGINES: Final = ("DNN_VM_AICPU", "AIcoreEngine")
IMPLMODE_OPTYPES: Final = ("Pooling", "SoftmaxV2", "LRN", "ROIAlign")


def _magnitude(digits: str) -> tuple[int, str]:
    """A run of decimal digits as a key that orders as its number does, without int(): a
    caller's run of thousands of digits is past what int() converts (4,300 by default)."""
    significant = digits.lstrip("0")
    return len(significant), significant


_ONE: Final = _magnitude("1")


def _split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")]


@memoized
def stream_max_parallel_num(value: str) -> str | None:
    """R-SMP-1: 'ENGINE:N,ENGINE:N' with ENGINE DNN_VM_AICPU or AIcoreEngine and N >= 1."""
    seen: set[str] = set()
    for item in _split_list(value):
        engine, sep, count = item.partition(":")
        engine, count = engine.strip(), count.strip()
        if not sep or engine not in SMP_ENGINES:
            return f"'{item}' is not ENGINE:N with ENGINE one of {', '.join(SMP_ENGINES)}"
        if not _INT.fullmatch(count) or _magnitude(count) < _ONE:
            return f"the parallelism of {engine} must be an integer >= 1, got '{count}'"
        if engine in seen:
            return f"{engine} is given twice"
        seen.add(engine)
    return None


@memoized
def aicore_num(value: str) -> str | None:
    """R-ACN-1: 'CUBE|VECTOR', both integers greater than 0."""
    cube, sep, vector = value.partition("|")
    counts = (cube.strip(), vector.strip())
    if not sep or not all(_SIGNED_INT.fullmatch(count) for count in counts):
        return "expected 'CUBE|VECTOR' with two integers, e.g. '2|4'"
    if any(count[0] in "+-" or _magnitude(count) < _ONE for count in counts):
        # A sign is written by no count the source shows ('2|4'); -1 is told the rule it breaks.
        return "both core counts must be integers greater than 0, written without a sign"
    return None


@memoized
def device_list(value: str) -> str | None:
    """R-LRI-1: comma-separated device ids."""
    for item in _split_list(value):
        if not _INT.fullmatch(item):
            return f"'{item}' is not a device id (a non-negative integer)"
    return None


@memoized
def implmode_optypes(value: str) -> str | None:
    """R-DEP-5: comma-separated op types from the four the source supports."""
    for item in _split_list(value):
        if item not in IMPLMODE_OPTYPES:
            return f"'{item}' is not one of {', '.join(IMPLMODE_OPTYPES)}"
    return None


@memoized
def name_list(value: str) -> str | None:
    """R-ESF-1: comma-separated pass names, none empty."""
    if any(not item for item in _split_list(value)):
        return "a pass name is empty (check the commas)"
    return None


_DIM: Final = r"(?:-1|[0-9]+(?:~[0-9]+)?)"
_SHAPE: Final = rf"\[(?:\s*{_DIM}\s*(?:,\s*{_DIM}\s*)*)?\]"
_SHAPES: Final = rf"{_SHAPE}(?:,{_SHAPE})*"
_SHAPE_RANGE: Final = re.compile(rf"(getnext|data):{_SHAPES}(?:;(getnext|data):{_SHAPES})*")
_RANGE_DIM: Final = re.compile(r"(?<![0-9])([0-9]++)~([0-9]++)")
"""A checked value's a~b dimensions. Each match starts where a number does: a search from
every digit of a run with no '~' after it read the rest of the run each time (65,000 digits,
a value under the length bound, took 10 s)."""


@memoized
def shape_range(value: str) -> str | None:
    """R-DEP-8: 'getnext:[d,..],[d];data:[d]'; d an integer, -1 or a~b; [] for a scalar."""
    text = value.strip()
    if not _SHAPE_RANGE.fullmatch(text):
        return (
            "expected 'getnext:[d,...],[...];data:[...]' where each d is an integer, -1 or a~b "
            "and [] is a scalar"
        )
    tags = [part.split(":", 1)[0] for part in text.split(";")]
    if len(set(tags)) != len(tags):
        return "each tag (getnext, data) may appear once"
    for low, high in _RANGE_DIM.findall(text):
        if _magnitude(low) > _magnitude(high):
            return f"the range {low}~{high} is empty"
    return None


_PATH_OK: Final = re.compile(r"[A-Za-z0-9_\-./\u4e00-\u9fff\u3400-\u4dbf]*")
"""The common characters, matched at once; the rare ideographs outside these blocks are
checked one by one (path_char_ok)."""
_PATH_PUNCTUATION: Final = frozenset("_-./")
_IDEOGRAPH_NAMES: Final = ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH")
_IDEOGRAPHIC_ZERO: Final = "\u3007"
"""〇, the Chinese numeral zero of dates such as 二〇二六: an ideograph by Unicode's own property,
though its block is punctuation's."""


def path_char_ok(char: str) -> bool:
    """R-FSF-1: ASCII letters and digits, '_', '-', '.', '/', and Chinese characters: every
    CJK ideograph, the extension blocks beyond U+FFFF and the compatibility ones included."""
    if char.isascii():
        return char.isalnum() or char in _PATH_PUNCTUATION
    return char == _IDEOGRAPHIC_ZERO or unicodedata.name(char, "").startswith(_IDEOGRAPH_NAMES)


@memoized
def path_chars(value: str) -> str | None:
    """R-FSF-1 / R-OCD-1: letters, digits, '_', '-', '.', Chinese characters; '/' separates."""
    if not value:
        return "the path is empty"
    match = _PATH_OK.match(value)
    start = match.end() if match else 0
    for end in range(start, len(value)):
        if not path_char_ok(value[end]):
            return (
                f"character {value[end]!r} at position {end + 1} is not allowed "
                "(letters, digits, '_', '-', '.', Chinese characters and '/' only)"
            )
    return None


def non_empty(value: str) -> str | None:
    """Paths: an empty string names nothing."""
    return None if value.strip() else "the path is empty"


def _number(digits: str) -> str:
    """A run of digits without its leading zeros (not through int(): see _magnitude)."""
    return digits.lstrip("0") or "0"


@memoized
def canonical_list(value: str) -> str:
    """'a, b' as 'a,b' (R-ESF-1, R-DEP-5)."""
    return ",".join(_split_list(value))


@memoized
def canonical_device_list(value: str) -> str:
    """' 0, 01' as '0,1' (R-LRI-1)."""
    return ",".join(_number(item) for item in _split_list(value))


@memoized
def canonical_stream_max_parallel_num(value: str) -> str:
    """'DNN_VM_AICPU: 10 , AIcoreEngine:01' as 'DNN_VM_AICPU:10,AIcoreEngine:1' (R-SMP-1)."""
    items = (item.partition(":") for item in _split_list(value))
    return ",".join(f"{engine.strip()}:{_number(count.strip())}" for engine, _, count in items)


@memoized
def canonical_aicore_num(value: str) -> str:
    """' 2 | 04' as '2|4' (R-ACN-1)."""
    cube, _, vector = value.partition("|")
    return f"{_number(cube.strip())}|{_number(vector.strip())}"
