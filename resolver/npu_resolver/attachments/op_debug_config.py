"""The .cfg named by op_debug_config: debug options and the ops compiled with them (R-ODC-1).

The source's file is `op_debug_config = ccec_O0,ccec_g,oom` with an optional
`op_debug_list=GatherV2,opType::ReduceSum`; the core applies R-ODC-2/3, R-OCC-3 and R-DEP-3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._common import (
    Issues,
    ParseIssue,
    closest,
    content_lines,
    remember,
    run_parser,
    run_together,
    show,
    split_items,
    split_pair,
)

RULE: Final = "R-ODC-1"
OPTIONS: Final = ("oom", "dump_cce", "dump_loc", "ccec_O0", "ccec_g", "check_flag")
KEYS: Final = ("op_debug_config", "op_debug_list")
OP_TYPE_PREFIX: Final = "OpType"


@dataclass(frozen=True, slots=True)
class OpDebugConfig:
    """The options asked for, and the ops they are limited to (None: every op)."""

    options: frozenset[str] = frozenset()
    op_debug_list: tuple[str, ...] | None = None
    issues: tuple[ParseIssue, ...] = ()


def parse_op_debug_config(text: str) -> OpDebugConfig:
    """Parse an op_debug_config .cfg; `OpType::` entries come back with that exact prefix."""
    return run_parser(text, _parse, OpDebugConfig, RULE)


def _parse(text: str, issues: Issues) -> OpDebugConfig:
    options: frozenset[str] = frozenset()
    debug_list: tuple[str, ...] | None = None
    seen: dict[str, tuple[str, int]] = {}
    commented = False
    for line, body, column in content_lines(text):
        if not body:
            continue
        if body.startswith("#"):
            if not commented:
                issues.note(line, column, "lines starting with '#' were read as comments")
            commented = True
            continue
        pair = split_pair(body, column)
        if pair is None:
            # The source says the options are comma-separated in the file; a bare list is read
            # as them, but said so because its example always has the key.
            key, value, value_column = KEYS[0], body, column
            if KEYS[0] in seen:  # a second bare line: most likely a mistyped key line
                issues.error(
                    line,
                    column,
                    f"no '=' on this line, and op_debug_config is already set on line "
                    f"{seen[KEYS[0]][1]}; write 'op_debug_list = op1,op2' for the op list, "
                    "or 'key = value' for another setting",
                )
                continue
            issues.note(line, column, "no 'op_debug_config =' key; read as the option list")
        else:
            key, value, value_column = pair
        if key not in KEYS:
            issues.unknown(line, column, "key", key, KEYS)
            continue
        if key in seen:
            remember(issues, seen, key, value, at=(line, column), what="key")
            continue
        seen[key] = (value, line)
        if key == KEYS[0]:
            options = _options(value, line, value_column, issues)
        else:
            debug_list = _op_list(value, line, value_column, issues)
    if KEYS[0] not in seen:
        issues.error(0, 0, "the file has no 'op_debug_config = ...' line, so it sets no option")
    return OpDebugConfig(options, debug_list, issues.freeze())


def _options(value: str, line: int, column: int, issues: Issues) -> frozenset[str]:
    found: dict[str, tuple[bool, int]] = {}
    if not value:
        issues.error(line, column, "'op_debug_config' lists no option")
    for item, at in split_items(value, column) if value else ():
        if not item:
            issues.error(line, at, "empty option (two commas in a row, or one at the end)")
        elif item not in OPTIONS:
            issues.unknown(line, at, "option", item, OPTIONS)
        else:
            remember(issues, found, item, True, at=(line, at), what="option")
    return frozenset(found)


def _single_colon(item: str) -> str | None:
    """'OpType:ReduceSum' (one colon, or full-width ones) as it is meant, 'OpType::ReduceSum';
    else None. No op's name holds a ':' (TensorFlow's names do not): kept as a name, it would
    match nothing."""
    prefix, colon, op_type = item.replace("：", ":").partition(":")  # '：' from an input method
    op_type = op_type.lstrip(":").strip()
    if colon and prefix.strip().casefold() == OP_TYPE_PREFIX.casefold() and op_type:
        return f"{OP_TYPE_PREFIX}::{op_type}"
    return None


def _holds_colon(text: str) -> bool:
    """No op's name or type holds a colon, ASCII or full-width (see _single_colon)."""
    return ":" in text or "：" in text


def _op_list(value: str, line: int, column: int, issues: Issues) -> tuple[str, ...]:
    ops: list[str] = []
    if not value:
        issues.error(line, column, "'op_debug_list' names no op")
    for item, at in split_items(value, column) if value else ():
        prefix, found, op_type = item.partition("::")
        single = None if found else _single_colon(item)
        # Each side of '::' on its own: names may be run together on either.
        sides = (prefix.strip(), op_type.strip()) if found else (item,)
        said = (run_together(side, commas_separate=True) for side in sides)
        joined = next(filter(None, said), None) if item and single is None else None
        if not item:
            issues.error(line, at, "empty op name (two commas in a row, or one at the end)")
        elif single is not None:
            issues.error(
                line,
                at,
                f"op name {show(item)} is an op type written otherwise than "
                f"{OP_TYPE_PREFIX + '::'!r}; write {single!r}",
                suggestion=single,
            )
        elif joined is not None:  # no op is named so (a full-width mark: the hint says which)
            issues.error(line, at, f"op name {show(item)} {joined}; separate ops with ','")
        elif not found and _holds_colon(item):  # a tensor's name (GatherV2:0), say
            issues.error(
                line,
                at,
                f"op name {show(item)} holds ':', which no op's name does; an op type is "
                f"written '{OP_TYPE_PREFIX}::typeName'",
            )
        elif not found:
            ops.append(item)
        elif prefix.strip().casefold() != OP_TYPE_PREFIX.casefold():
            suggestion = closest(prefix, (OP_TYPE_PREFIX,))
            hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
            issues.error(
                line,
                at,
                f"unknown prefix {show(prefix)}{hint}; an op type is written 'OpType::typeName'",
                suggestion=suggestion,
            )
        elif not op_type.strip():
            issues.error(line, at, f"no op type after {show(prefix + '::')}")
        elif _holds_colon(op_type):  # OpType::ReduceSum:0, a tensor's name again
            issues.error(line, at, f"op type {show(op_type.strip())} holds ':', which no type does")
        else:
            ops.append(f"{OP_TYPE_PREFIX}::{op_type.strip()}")
    return tuple(ops)
