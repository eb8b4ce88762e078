"""The .ini named by op_precision_mode: a precision mode per op type or node (R-OPM-3).

Which modes a product accepts (R-OPM-2) is the core's to decide, from `modes_used`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ._common import (
    Issues,
    ParseIssue,
    content_lines,
    frozen_map,
    note_name_over_type,
    remember,
    run_parser,
    run_together,
    show,
    split_pair,
)

RULE: Final = "R-OPM-3"
BY_OP_TYPE: Final = "ByOpType"
BY_NODE_NAME: Final = "ByNodeName"
SECTIONS: Final = (BY_OP_TYPE, BY_NODE_NAME)
MODES: Final = (
    "high_precision",
    "high_performance",
    "enable_float_32_execution",
    "enable_hi_float_32_execution",
    "support_out_of_bound_index",
    "keep_fp16",
    "super_performance",
)
_COMMENT_STARTS: Final = ("#", ";")
_BAD_SECTION: Final = ""


@dataclass(frozen=True, slots=True)
class OpPrecisionModes:
    """Mode per op type and per node name; a node's own entry beats its type's."""

    by_op_type: Mapping[str, str] = field(default_factory=lambda: frozen_map({}))
    by_node_name: Mapping[str, str] = field(default_factory=lambda: frozen_map({}))
    issues: tuple[ParseIssue, ...] = ()
    lines: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: frozen_map({}))
    """The lines that ask for each mode, so that a product's refusal names them."""

    @property
    def modes_used(self) -> frozenset[str]:
        """Every mode the file asks for, for the core's product checks (R-OPM-2)."""
        return frozenset(self.by_op_type.values()) | frozenset(self.by_node_name.values())


def parse_op_precision_mode(text: str) -> OpPrecisionModes:
    """Parse an op_precision_mode .ini; '#' and ';' lines are comments."""
    return run_parser(text, _parse, OpPrecisionModes, RULE)


def _parse(text: str, issues: Issues) -> OpPrecisionModes:
    tables: dict[str, dict[str, tuple[str, int]]] = {name: {} for name in SECTIONS}
    headers: dict[str, int] = {}
    section: str | None = None
    for line, body, column in content_lines(text):
        if not body or body.startswith(_COMMENT_STARTS):
            continue
        if body.startswith("["):
            section = _header(body, line, column, headers, issues)
            continue
        pair = split_pair(body, column)
        if pair is None:
            issues.error(line, column, "expected 'name=mode'")
        elif section is None:
            issues.error(
                line, column, "an entry before any section; put it under [ByOpType] or [ByNodeName]"
            )
        elif section != _BAD_SECTION:
            _entry(pair, line, column, tables[section], issues)
    note_name_over_type(issues, tables[BY_NODE_NAME], tables[BY_OP_TYPE])
    if not any(tables.values()) and issues.none:
        issues.note(0, 0, "the file gives no op a mode: it changes nothing")
    by_type, by_node = ({key: mode for key, (mode, _) in tables[n].items()} for n in SECTIONS)
    lines: dict[str, list[int]] = {}
    for table in tables.values():
        for mode, line in table.values():
            lines.setdefault(mode, []).append(line)
    return OpPrecisionModes(
        frozen_map(by_type),
        frozen_map(by_node),
        issues.freeze(),
        frozen_map({mode: tuple(sorted(at)) for mode, at in lines.items()}),
    )


def _header(body: str, line: int, column: int, headers: dict[str, int], issues: Issues) -> str:
    """The section a '[...]' line opens; _BAD_SECTION (entries skipped) after an issue."""
    if not body.endswith("]"):
        issues.error(line, column, "a section header must end with ']'")
        return _BAD_SECTION
    name = body[1:-1].strip()
    if name not in SECTIONS:
        issues.unknown(line, column + 1, "section", name, SECTIONS)
        return _BAD_SECTION
    if name in headers:
        issues.note(line, column, f"[{name}] appears again (first on line {headers[name]})")
    headers.setdefault(name, line)
    return name


def _entry(
    pair: tuple[str, str, int],
    line: int,
    column: int,
    table: dict[str, tuple[str, int]],
    issues: Issues,
) -> None:
    key, mode, mode_column = pair
    if not key:
        issues.error(line, column, "no name before '='")
    elif (joined := run_together(key)) is not None:
        issues.error(line, column, f"name {show(key)} {joined}; give each its own line")
    elif not mode:
        issues.error(line, mode_column, f"no mode after '{key}='")
    elif mode not in MODES:
        issues.unknown(line, mode_column, "mode", mode, MODES)
    else:
        remember(issues, table, key, mode, at=(line, column), what="name")
