"""The JSON named by modify_mixlist: ops moved on or off the mixed-precision lists (R-MML-1).

The source's own example carries '//' comments, so they are accepted (with a note). Whether
the list has any effect depends on the precision mode, which the core decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ._common import Issues, ParseIssue, frozen_map, run_parser
from ._json import JsonDoc, load_object

RULE: Final = "R-MML-1"
LISTS: Final = ("black-list", "white-list", "gray-list")
ACTIONS: Final = ("to-remove", "to-add")
_UNSHOWN_LIST: Final = "gray-list"


@dataclass(frozen=True, slots=True)
class MixList:
    """List name ('black-list', ...) to action ('to-remove'/'to-add') to op types."""

    lists: Mapping[str, Mapping[str, tuple[str, ...]]] = field(
        default_factory=lambda: frozen_map({})
    )
    issues: tuple[ParseIssue, ...] = ()


def parse_modify_mixlist(text: str) -> MixList:
    """Parse a modify_mixlist file; only the lists and actions present appear in the result."""
    return run_parser(text, _parse, MixList, RULE)


def _parse(text: str, issues: Issues) -> MixList:
    doc = load_object(text, issues, allow_comments=True)
    if doc is None:
        return MixList(issues=issues.freeze())
    doc.check_keys((), doc.value, LISTS)
    lists: dict[str, Mapping[str, tuple[str, ...]]] = {}
    for name in LISTS:
        if name not in doc.value:
            continue
        if name == _UNSHOWN_LIST:
            doc.note(
                (name,),
                "the source names a gray list but its example shows only 'black-list' and "
                "'white-list'; 'gray-list' was read the same way",
            )
        actions = doc.mapping((name,), doc.value[name])
        doc.check_keys((name,), actions, ACTIONS)
        lists[name] = frozen_map(
            {act: doc.names((name, act), actions[act]) for act in ACTIONS if act in actions}
        )
    _contradictions(doc, lists)
    if not any(ops for actions in lists.values() for ops in actions.values()) and issues.none:
        doc.note((), "the file moves no op onto or off a list: it changes nothing")
    return MixList(frozen_map(lists), issues.freeze())


def _contradictions(doc: JsonDoc, lists: Mapping[str, Mapping[str, tuple[str, ...]]]) -> None:
    """An op moved two ways (added to two lists, or added to and removed from one): the
    source does not say which move wins, so the file is refused, as repeated keys are."""
    added: dict[str, str] = {}
    for name, actions in lists.items():
        adds, removes = set(actions.get("to-add", ())), set(actions.get("to-remove", ()))
        for op in sorted(adds & removes):
            doc.error(
                (name, "to-add"),
                f"op {op!r} is both added to and removed from {name!r}; "
                "the source does not say which wins, keep one",
            )
        for op in sorted(adds):
            if op in added and added[op] != name:
                doc.error(
                    (name, "to-add"),
                    f"op {op!r} is added to both {added[op]!r} and {name!r}; "
                    "the source does not say which wins, keep one",
                )
            added.setdefault(op, name)
