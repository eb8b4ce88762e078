"""Rules that need the content of a file an option names (attachments).

The resolver never opens a path: a caller attaches the text. Without it these rules are not
guessed; a NOT_CHECKED note names what was skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ._model import Code
from ._state import State

CONTENT_RULES: Final[Mapping[str, tuple[str, ...]]] = {
    "op_debug_config": ("R-ODC-2", "R-ODC-3", "R-OCC-3", "R-DEP-3"),
    "aoe_config_file": ("R-AOE-6", "R-AOE-7"),
    "modify_mixlist": ("R-MML-1",),
    "op_precision_mode": ("R-OPM-2", "R-OPM-3"),
    "fusion_switch_file": ("R-FSF-1", "R-FSF-2"),
    "customize_dtypes": ("R-CDT-2",),
}
"""Per option that names a file: the rules that read the file's content."""


def apply_content_rules(state: State, attachments: Mapping[str, str]) -> None:
    for option, rules in CONTENT_RULES.items():
        if option not in state.slots:
            continue
        if option not in attachments:
            state.emit(
                Code.NOT_CHECKED,
                option,
                rules[0],
                f"{option} names a file whose content was not attached, so "
                f"{', '.join(rules)} were not checked; attach it to check them.",
            )
