"""The JSON named by aoe_config_file: which ops AOE tunes, and how (R-AOE-6, R-AOE-7).

The core checks each feature against aoe_mode (R-AOE-6); this module checks the file itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._common import Issues, ParseIssue, run_parser
from ._json import kind, load_object

RULE: Final = "R-AOE-7"
FEATURE_RULE: Final = "R-AOE-6"
KEYS: Final = ("tune_ops_name", "tune_ops_type", "tune_optimization_level", "feature")
LEVELS: Final = ("O1", "O2")
DEFAULT_LEVEL: Final = "O2"
FEATURES: Final = ("deeper_opat", "nonhomo_split")


@dataclass(frozen=True, slots=True)
class AoeConfig:
    """The ops to tune (by name and by type, taken as a union), the level and the features."""

    tune_ops_name: tuple[str, ...] = ()
    tune_ops_type: tuple[str, ...] = ()
    tune_optimization_level: str = DEFAULT_LEVEL
    features: frozenset[str] = frozenset()
    issues: tuple[ParseIssue, ...] = ()


def parse_aoe_config(text: str) -> AoeConfig:
    """Parse an aoe_config_file; a missing tune_optimization_level gives the default O2."""
    return run_parser(text, _parse, AoeConfig, RULE)


def _parse(text: str, issues: Issues) -> AoeConfig:
    doc = load_object(text, issues, rule=FEATURE_RULE)
    if doc is None:
        return AoeConfig(issues=issues.freeze())
    top = doc.value
    doc.check_keys((), top, KEYS)
    names = doc.names((KEYS[0],), top[KEYS[0]]) if KEYS[0] in top else ()
    types = doc.names((KEYS[1],), top[KEYS[1]]) if KEYS[1] in top else ()
    given = [top[key] for key in KEYS[:2] if key in top]
    # Lists that are there and empty (a name that was refused has said so already).
    if not names and not types and all(isinstance(value, list) and not value for value in given):
        doc.error(
            (),
            "neither 'tune_ops_name' nor 'tune_ops_type' names an op; give at least one of them",
        )
    level = top.get(KEYS[2], DEFAULT_LEVEL)
    if not isinstance(level, str):
        doc.error(
            (KEYS[2],), f'\'tune_optimization_level\' must be "O1" or "O2", not {kind(level)}'
        )
        level = DEFAULT_LEVEL
    elif level not in LEVELS:
        doc.unknown((KEYS[2],), "tune_optimization_level", level, LEVELS)
        level = DEFAULT_LEVEL
    features = (
        doc.words((KEYS[3],), top[KEYS[3]], FEATURES, what="feature", rule=FEATURE_RULE)
        if KEYS[3] in top
        else frozenset()
    )
    return AoeConfig(names, types, level, features, issues.freeze())
