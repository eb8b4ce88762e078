"""The shape of one catalog entry: what the source says about one NPURunConfig option.

Every field is data; the pipeline reads it and holds no option-specific rule of its own except
the cross-option rules, which live in one ordered table in `_cross.py`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

JSON = Any

EMPTY_MAP: Final[Mapping[str, str]] = MappingProxyType({})


class OptType(enum.StrEnum):
    INT = "int"
    BOOL = "bool"
    STR = "str"
    PATH = "path"
    OBJECT = "object"
    ANY = "any"
    """The source gives no type (options this version does not support)."""


MODE_OPTION: Final = "graph_run_mode"
"""The option whose value is the mode (R-GRM-1): in each mode it has that mode's value."""


class Mode(enum.StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"

    @classmethod
    def from_graph_run_mode(cls, value: int) -> Mode:
        return cls.INFERENCE if value == 0 else cls.TRAINING

    @property
    def graph_run_mode(self) -> int:
        """The value of graph_run_mode (MODE_OPTION) that selects this mode."""
        return 0 if self is Mode.INFERENCE else 1

    @property
    def prose(self) -> str:
        """The mode as messages name it."""
        return "online inference" if self is Mode.INFERENCE else "training"


class Section(enum.StrEnum):
    BASIC = "basic"
    MEMORY = "memory"
    DYNAMIC_SHAPE = "dynamic shape"
    MIXED_COMPUTING = "mixed computing"
    DEBUGGING = "debugging"
    PRECISION = "precision"
    PRECISION_COMPARISON = "precision comparison"
    PERFORMANCE = "performance"
    PROFILING = "profiling"
    AOE = "AOE"
    OP_COMPILATION = "operator compilation"
    DATA_AUGMENTATION = "data augmentation"
    EXCEPTION_RECOVERY = "exception recovery"
    EXPERIMENTAL = "experimental"
    DEPRECATED = "to be removed"


@dataclass(frozen=True, slots=True)
class Range:
    """A numeric range; `rule` is the id that documents it."""

    rule: str
    minimum: int | None = None
    maximum: int | None = None
    min_exclusive: bool = False
    products: frozenset[str] | None = None
    """None: every product."""

    def contains(self, value: int) -> bool:
        if self.minimum is not None and (
            value <= self.minimum if self.min_exclusive else value < self.minimum
        ):
            return False
        return self.maximum is None or value <= self.maximum

    def text(self) -> str:
        """Interval notation: an open end has a round bracket, so no bound reads as a value
        the range holds ([0, +inf) and not [0, +inf])."""
        low = "-inf" if self.minimum is None else str(self.minimum)
        high = "+inf" if self.maximum is None else str(self.maximum)
        left = "(" if self.min_exclusive or self.minimum is None else "["
        return f"{left}{low}, {high}{')' if self.maximum is None else ']'}"


@dataclass(frozen=True, slots=True)
class Default:
    """A documented default for some products and modes (None: all)."""

    value: JSON
    rule: str
    products: frozenset[str] | None = None
    mode: Mode | None = None


@dataclass(frozen=True, slots=True)
class ValueGate:
    """An allowed value that only some products or one mode support, or no product today."""

    value: JSON
    rule: str
    products: frozenset[str] | None = None
    mode: Mode | None = None
    unsupported_version: bool = False


Validator = Callable[[str], str | None]
"""Checks a string value's format; returns a reason when it is malformed."""
Canonical = Callable[[str], str]
"""The canonical spelling of a string value its validator passed."""


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    section: Section
    type: OptType
    rule: str
    """The rule that defines the option (its type, values, default)."""
    summary: str
    rules: tuple[str, ...] = ()
    """Every other rule that governs the option."""
    choices: tuple[JSON, ...] = ()
    ranges: tuple[Range, ...] = ()
    defaults: tuple[Default, ...] = ()
    no_default_products: frozenset[str] = frozenset()
    """Products where the source says the option has no default of its own."""
    products: frozenset[str] | None = None
    products_rule: str = ""
    mode: Mode | None = None
    mode_rule: str = ""
    env: str = ""
    env_rule: str = ""
    aliases: Mapping[str, str] = field(default_factory=lambda: EMPTY_MAP)
    aliases_rule: str = ""
    value_gates: tuple[ValueGate, ...] = ()
    validator: Validator | None = None
    validator_rule: str = ""
    canonical: Canonical | None = None
    """How the validator's grammar writes a value (no spaces around separators, no leading
    zeros): a value written otherwise is read as it, with a NORMALIZED note."""
    deprecated: bool = False
    experimental: bool = False
    unsupported_version: bool = False
    """The source says this version does not support it: always dropped."""
    unsupported_rule: str = ""
    attachment: bool = False
    """The option names a file whose content the content rules read."""
    empty_is_unset: bool = False
    """The source treats "" as the option left off (op_debug_config: "若…配置非空"), so "" is
    read as not set, like null, rather than refused as an empty path."""

    @property
    def all_rules(self) -> tuple[str, ...]:
        return (self.rule, *self.rules)
