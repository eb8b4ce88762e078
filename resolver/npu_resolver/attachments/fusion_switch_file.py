"""The JSON named by fusion_switch_file (R-FSF-2), and the path character rule (R-FSF-1).

Built-in passes are on by default; `"ALL"` switches (part of) them at once and a named pass
beats it. That UBFusion has no effect on a product without UB fusion (atlas-350) is the core's
to say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from .._grammars import path_char_ok
from ._common import Issues, ParseIssue, frozen_map, run_parser, run_together, show
from ._json import JsonDoc, describe, kind, load_object
from ._json_layout import Path

RULE: Final = "R-FSF-2"
PATH_RULE: Final = "R-FSF-1"
TOP: Final = "Switch"
SECTIONS: Final = ("GraphFusion", "UBFusion")
STATES: Final = ("on", "off")
ALL: Final = "ALL"
_LAYOUT: Final = '{"Switch": {"GraphFusion": {...}, "UBFusion": {...}}}'


@dataclass(frozen=True, slots=True)
class FusionSwitches:
    """Pass name (or "ALL") to "on"/"off", per kind of fusion."""

    graph_fusion: Mapping[str, str] = field(default_factory=lambda: frozen_map({}))
    ub_fusion: Mapping[str, str] = field(default_factory=lambda: frozen_map({}))
    issues: tuple[ParseIssue, ...] = ()


def parse_fusion_switch(text: str) -> FusionSwitches:
    """Parse a fusion_switch_file; a section that is absent comes back empty."""
    return run_parser(text, _parse, FusionSwitches, RULE)


def _parse(text: str, issues: Issues) -> FusionSwitches:
    doc = load_object(text, issues)
    if doc is None:
        return FusionSwitches(issues=issues.freeze())
    doc.check_keys((), doc.value, (TOP,))
    if TOP not in doc.value:
        doc.error((), f"the file has no {TOP!r} object; the layout is {_LAYOUT}")
        return FusionSwitches(issues=issues.freeze())
    switch = doc.mapping((TOP,), doc.value[TOP])
    doc.check_keys((TOP,), switch, SECTIONS)
    graph, ub = (
        _states(doc, (TOP, name), switch[name]) if name in switch else frozen_map({})
        for name in SECTIONS
    )
    return FusionSwitches(graph, ub, issues.freeze())


def _states(doc: JsonDoc, path: Path, value: object) -> Mapping[str, str]:
    states: dict[str, str] = {}
    for name, state in doc.mapping(path, value).items():
        at = (*path, name)
        if not name.strip():
            doc.error(at, f"{describe(path)} has an empty pass name")
        elif (joined := run_together(name, what="pass")) is not None:
            doc.error(at, f"pass name {show(name)} {joined}; give each pass its own key")
        elif name != ALL and name.casefold() == ALL.casefold():
            doc.error(
                at, f"{show(name)} must be written {ALL!r} to switch passes at once", suggestion=ALL
            )
        elif not isinstance(state, str):
            doc.error(at, f'{describe(at)} must be "on" or "off", not {kind(state)}')
        elif state not in STATES:
            doc.unknown(at, "state", state, STATES, within=f" for {show(name)}")
        else:
            states[name] = state
    return frozen_map(states)


def check_path_chars(path: str, rule: str = PATH_RULE) -> ParseIssue | None:
    """The first character the source does not allow in a path, as an issue; None if clean.

    Allowed: ASCII letters and digits, '_', '-', '.', Chinese characters, and '/' between
    folders. R-OCD-1 applies the same rule to op_compiler_cache_dir, hence `rule`.
    """
    if not path:
        return ParseIssue(0, 0, "the path is empty", rule=rule)
    for index, char in enumerate(path):
        if not path_char_ok(char):
            text = (
                f"column {index + 1}: character {char!r} (U+{ord(char):04X}) is not allowed in "
                "the path; use letters, digits, '_', '-', '.', Chinese characters and '/'"
            )
            return ParseIssue(0, index + 1, text, rule=rule)
    return None
