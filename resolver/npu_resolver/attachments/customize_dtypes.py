"""The .cfg named by customize_dtypes: input and output dtypes forced per op (R-CDT-2).

One op a line, `Opname::InputDtype:d,..,OutputDtype:d,..` or
`OpType::Type:InputDtype:d,..,OutputDtype:d,..`; for the same op the name beats the type.
Whether the file has any effect under the precision mode (R-CDT-1) is the core's to say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ._common import (
    Issues,
    ParseIssue,
    closest,
    content_lines,
    frozen_map,
    note_name_over_type,
    remember,
    run_parser,
    run_together,
    show,
    split_items,
)

RULE: Final = "R-CDT-2"
OP_TYPE: Final = "OpType"
INPUT: Final = "InputDtype"
OUTPUT: Final = "OutputDtype"
KEYWORDS: Final = (INPUT, OUTPUT)
KNOWN_DTYPES: Final = (
    "float16",
    "float32",
    "float",
    "float64",
    "double",
    "bfloat16",
    "hifloat8",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e8m0",
    "int4",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint1",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex32",
    "complex64",
    "complex128",
    "qint8",
    "qint16",
    "qint32",
    "quint8",
    "quint16",
    "string",
)
"""Ascend IR dtype names; the source defers to each op's info library, so others are notes."""
_KNOWN: Final = frozenset(KNOWN_DTYPES)
_DTYPE_WORD: Final = re.compile(r"[A-Za-z0-9_]+")
_LAYOUT: Final = (
    "expected 'Opname::InputDtype:d,...,OutputDtype:d,...' or "
    "'OpType::TypeName:InputDtype:d,...,OutputDtype:d,...'"
)


@dataclass(frozen=True, slots=True)
class DtypeSpec:
    """The dtypes asked for one op's inputs and outputs, in order, and the line that asked."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class CustomDtypes:
    """Dtype specs by op name and by op type; for an op in both, the by-name one wins."""

    by_name: Mapping[str, DtypeSpec] = field(default_factory=lambda: frozen_map({}))
    by_type: Mapping[str, DtypeSpec] = field(default_factory=lambda: frozen_map({}))
    issues: tuple[ParseIssue, ...] = ()


def parse_customize_dtypes(text: str) -> CustomDtypes:
    """Parse a customize_dtypes .cfg; '#' lines are comments."""
    return run_parser(text, _parse, CustomDtypes, RULE)


def _parse(text: str, issues: Issues) -> CustomDtypes:
    by_name: dict[str, tuple[DtypeSpec, int]] = {}
    by_type: dict[str, tuple[DtypeSpec, int]] = {}
    for line, body, column in content_lines(text):
        if not body or body.startswith("#"):
            continue
        parsed = _line(body, line, column, issues)
        if parsed is not None:
            is_type, op, spec = parsed
            what = "op type" if is_type else "op name"
            remember(
                issues, by_type if is_type else by_name, op, spec, at=(line, column), what=what
            )
    note_name_over_type(issues, by_name, by_type)
    if not by_name and not by_type and issues.none:
        issues.note(0, 0, "the file names no op: it changes nothing")
    return CustomDtypes(
        frozen_map({op: spec for op, (spec, _) in by_name.items()}),
        frozen_map({op: spec for op, (spec, _) in by_type.items()}),
        issues.freeze(),
    )


def _line(body: str, line: int, column: int, issues: Issues) -> tuple[bool, str, DtypeSpec] | None:
    """(is by type, op name or type, spec) of one line, or None after an issue."""
    head, found, rest = body.partition("::")
    if not found:
        issues.error(line, column, _LAYOUT)
        return None
    rest_column = column + len(head) + 2
    head = head.rstrip()
    is_type = head == OP_TYPE
    if not is_type and not rest.lstrip().startswith(KEYWORDS):
        suggestion = closest(head, (OP_TYPE,))
        if suggestion:
            text = f"unknown prefix {show(head)} (did you mean {OP_TYPE!r}?); {_LAYOUT}"
            issues.error(line, column, text, suggestion=suggestion)
            return None
    op = head
    if is_type:
        op, colon, rest = rest.partition(":")
        if not colon:
            issues.error(line, rest_column, f"expected ':' after the op type; {_LAYOUT}")
            return None
        rest_column += len(op) + 1
        op = op.strip()
    if not op:
        issues.error(line, column, f"no op {'type' if is_type else 'name'} before the dtypes")
        return None
    joined = run_together(op)
    if joined is not None:
        what = "op type" if is_type else "op name"
        issues.error(line, column, f"{what} {show(op)} {joined}; give each op its own line")
        return None
    spec = _spec(rest, line, rest_column, issues)
    return None if spec is None else (is_type, op, spec)


def _spec(text: str, line: int, column: int, issues: Issues) -> DtypeSpec | None:
    """'InputDtype:d,..,OutputDtype:d,..' as a DtypeSpec, or None after an issue."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw, raw_at in split_items(text, column):
        if current is not None and raw in _KNOWN:  # most items: a known dtype, nothing to say
            current.append(raw)
            continue
        item, at = raw, raw_at
        keyword, colon, dtype = raw.partition(":")
        if colon:
            keyword = keyword.strip()
            if keyword not in KEYWORDS:
                issues.unknown(line, at, "keyword", keyword, KEYWORDS)
                return None
            if keyword in parts or (keyword == OUTPUT) != (INPUT in parts):
                issues.error(line, at, f"{INPUT!r} must come first and {OUTPUT!r} once after it")
                return None
            current = parts[keyword] = []
            at = raw_at + len(raw) - len(dtype.lstrip())
            item = dtype.strip()
        if current is None:
            issues.error(line, at, f"expected {INPUT + ':'!r} first; {_LAYOUT}")
            return None
        if not _dtype_ok(item, line, at, issues):
            return None
        current.append(item)
    if OUTPUT not in parts:
        issues.error(line, column, f"no {OUTPUT + ':'!r} part; {_LAYOUT}")
        return None
    return DtypeSpec(tuple(parts[INPUT]), tuple(parts[OUTPUT]), line)


def _dtype_ok(item: str, line: int, column: int, issues: Issues) -> bool:
    if not item:
        issues.error(line, column, "empty dtype (two commas in a row, or one at the end)")
        return False
    if not _DTYPE_WORD.fullmatch(item):
        issues.error(line, column, f"{show(item)} is not a dtype name")
        return False
    if item not in _KNOWN and issues.room(error=False):
        suggestion = closest(item, KNOWN_DTYPES)
        hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
        text = (
            f"dtype {show(item)} is not one the resolver knows{hint}; a dtype the op does not "
            "support makes compilation fail, so check the name"
        )
        issues.advise(line, column, text, suggestion=suggestion)
    return True
