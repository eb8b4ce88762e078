"""The catalog: the option table, checked when loaded, with per-product views precomputed.

A request only ever reads a `View`: the options as they are for one product and one mode, so
the per-request work is dictionary look-ups rather than re-deriving gates and defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ._model import (
    CATALOG_VERSION,
    CONTAINER_TYPES,
    JSON,
    MAX_EXACT_INT,
    MAX_MEMO_TEXT,
    MAX_TEXT_VALUE,
    Provenance,
    Source,
    closest,
    is_text,
    keep,
)
from ._options import OPTIONS
from ._products import PRODUCT_IDS, PRODUCTS
from ._rules import RULES
from ._schema import Canonical, Default, Mode, Option, OptType, Range, Validator, ValueGate
from ._values import unfit

if TYPE_CHECKING:
    from ._model import Diagnostic
    from ._state import Slot
    from ._values import Parsed, Problem


class CatalogError(ValueError):
    """The option table contradicts itself; raised at import so it can never ship broken."""


@dataclass(frozen=True, slots=True)
class OptionView:
    """One option as it stands for one product and mode."""

    option: Option
    product_ok: bool
    mode_ok: bool
    range: Range | None
    default: Default | None
    default_source: Source
    undocumented: bool
    """The source gives a default elsewhere but none here (and does not say 'none')."""
    blocked_values: Mapping[JSON, ValueGate]
    """Allowed values that this product, mode or version does not support."""
    pytype: type | None
    """The Python type a value arrives in when no conversion is needed."""
    user_rules: tuple[str, ...]
    """Provenance rules of a value the caller set (the defining rule)."""
    user_provenance: Provenance
    plain_gate: bool
    """The option acts here and no value of it is blocked: the gates have nothing to do."""
    flagged: bool
    """Experimental or deprecated: a caller who sets it is warned."""

    accepts: Callable[[JSON], bool]
    """True when a value is valid exactly as given: the common case, checked cheaply, with only
    the checks this view needs (built by `_acceptor`)."""
    user_slots: dict[JSON, Slot]
    """The slots of plain values callers set, by value, built once each (by precedence): the
    same few values recur. Values of `pytype` only, so 1 and True never share one; bounded
    (see _precedence._MAX_USER_SLOTS)."""
    env_slots: dict[JSON, tuple[Slot, Diagnostic | None]]
    """The slots of values the option's environment variable gave, with their FROM_ENV note
    (None where the option does not act), by value, built once each (by precedence), bounded
    as user_slots are."""
    env_texts: dict[str, Parsed | Problem]
    """What the text of the option's environment variable parses to, by text (by read_env):
    a job's environment is much the same from one request to the next. Plain `str` texts
    only: a subclass's strip() or == may differ from str's."""

    def blocked(self, value: JSON) -> ValueGate | None:
        """The gate that refuses this value here, if any (objects and lists are never gated)."""
        if not self.blocked_values or isinstance(value, CONTAINER_TYPES):
            return None
        return self.blocked_values.get(value)

    @property
    def acts(self) -> bool:
        return self.product_ok and self.mode_ok and not self.option.unsupported_version


View = Mapping[str, OptionView]


_PYTYPES: Final[Mapping[OptType, type]] = {
    OptType.INT: int,
    OptType.BOOL: bool,
    OptType.STR: str,
    OptType.PATH: str,
}


def _matches(products: frozenset[str] | None, mode_gate: Mode | None, pid: str, mode: Mode) -> bool:
    return (products is None or pid in products) and (mode_gate is None or mode_gate is mode)


def _never(raw: JSON) -> bool:
    return False


def _passes_through(raw: JSON) -> bool:
    """Any value JSON can carry, but null and "", which take the general path: a config may
    mean "not set" by them."""
    if raw is None or (isinstance(raw, str) and not raw):
        return False
    return unfit(raw) is None


def _as_written(check: Validator, canonical: Canonical) -> Validator:
    """`check`, declining also a well-formed value spelt otherwise than its grammar writes it:
    parse() reads that one as the canonical spelling, with its note. (Both are memoized.)"""

    def check_spelling(raw: str) -> str | None:
        reason = check(raw)
        if reason is None and canonical(raw) != raw:
            return "spelt otherwise than the grammar writes it"
        return reason

    return check_spelling


def _acceptor(option: Option, rng: Range | None) -> Callable[[JSON], bool]:
    """Whether a value is valid exactly as given, the check every value of the request meets
    first, specialised once per view to the checks its option's type, choices, range and
    grammar need. A value it declines takes the general path (`parse`), which gives the same
    verdict on any value it accepts: declining more is safe, accepting more is not."""
    pytype = _PYTYPES.get(option.type)
    check = option.validator
    if check is not None and option.canonical is not None:
        check = _as_written(check, option.canonical)
    choices = frozenset(option.choices) if option.choices else None
    if option.aliases or (rng is not None and pytype is not int):
        return _never
    if pytype is None:  # an object or any JSON value, passed through once it fits JSON
        if choices is not None or rng is not None or check is not None:
            return _never
        if option.type is OptType.OBJECT:
            return lambda raw: isinstance(raw, dict) and unfit(raw) is None
        return _passes_through
    if pytype is int:
        if check is not None:
            return _never
        low, high = -MAX_EXACT_INT, MAX_EXACT_INT  # parse() says why beyond these
        if rng is not None:
            if rng.minimum is not None:
                low = max(low, rng.minimum + 1 if rng.min_exclusive else rng.minimum)
            if rng.maximum is not None:
                high = min(high, rng.maximum)
        if choices is not None:
            return lambda raw: type(raw) is int and low <= raw <= high and raw in choices
        return lambda raw: type(raw) is int and low <= raw <= high
    if pytype is bool:
        if check is not None:
            return _never
        if choices is not None:
            return lambda raw: type(raw) is bool and raw in choices
        return lambda raw: type(raw) is bool
    if choices is not None:  # text from a list: the list holds only whole, short text
        if check is not None:
            return lambda raw: type(raw) is str and raw in choices and check(raw) is None
        return lambda raw: type(raw) is str and raw in choices
    # Free text: a lone surrogate passes every other check, so only here is it looked for;
    # and only here can it be too long for a grammar to read. A path holds no NUL.
    path = option.type is OptType.PATH
    if check is not None:
        return lambda raw: (
            type(raw) is str
            and len(raw) <= MAX_TEXT_VALUE
            and (raw.isascii() or is_text(raw))
            and not (path and "\x00" in raw)
            and check(raw) is None
        )
    return lambda raw: (
        type(raw) is str
        and len(raw) <= MAX_TEXT_VALUE
        and (raw.isascii() or is_text(raw))
        and not (path and "\x00" in raw)
    )


def _view(option: Option, pid: str, mode: Mode) -> OptionView:
    rng = next(
        (r for r in option.ranges if r.products is None or pid in r.products),
        None,
    )
    default = next((d for d in option.defaults if _matches(d.products, d.mode, pid, mode)), None)
    acts = (
        (option.products is None or pid in option.products)
        and (option.mode is None or option.mode is mode)
        and not option.unsupported_version
    )
    blocked = {
        gate.value: gate
        for gate in option.value_gates
        if gate.unsupported_version or not _matches(gate.products, gate.mode, pid, mode)
    }
    return OptionView(
        option=option,
        product_ok=option.products is None or pid in option.products,
        mode_ok=option.mode is None or option.mode is mode,
        range=rng,
        default=default,
        # PRODUCT_DEFAULT only for a default the source gives per product: precision_mode_v2's
        # online-inference fp16 is every product's, its training default is not.
        default_source=(
            Source.PRODUCT_DEFAULT
            if default is not None and default.products is not None
            else Source.DEFAULT
        ),
        undocumented=default is None
        and bool(option.defaults)
        and pid not in option.no_default_products,
        blocked_values=blocked,
        pytype=_PYTYPES.get(option.type),
        user_rules=(option.rule,),
        user_provenance=Provenance(Source.USER, (option.rule,)),
        plain_gate=acts and not blocked,
        flagged=option.experimental or option.deprecated,
        accepts=_acceptor(option, rng),
        user_slots={},
        env_slots={},
        env_texts={},
    )


MAX_KEPT_SUGGESTIONS: Final = 4096


class Catalog:
    """The option table of one source version, validated, with precomputed views."""

    def __reduce__(self) -> tuple[Any, ...]:
        """The built-in catalog pickles as itself (a Policy that refers to it goes to a process
        pool's workers whole, and finds their own). Another one is code of its caller's, which
        each worker builds for itself: pickling it is a TypeError saying so."""
        if self is CATALOG:
            return (_builtin_catalog, ())
        raise TypeError(
            "only the built-in catalog (npu_resolver.CATALOG) pickles; build this one in each "
            "process, and load its policies there"
        )

    def __init__(self, options: tuple[Option, ...], version: str = CATALOG_VERSION) -> None:
        self.version = version
        self.options = options
        self.by_name: Mapping[str, Option] = {o.name: o for o in options}
        self.holding_objects: tuple[str, ...] = tuple(
            o.name for o in options if o.type in (OptType.OBJECT, OptType.ANY)
        )
        """The options whose values may be objects or lists (the others refuse them)."""
        problems = check_catalog(options)
        if problems:
            raise CatalogError("; ".join(problems))
        self._views: dict[tuple[str, Mode], View] = {}
        self._suggested: dict[str, str] = {}
        self.env_options: Mapping[str, Option] = {o.env: o for o in options if o.env}

    def view(self, pid: str, mode: Mode) -> View:
        """The options as they stand for one product and mode (built once, on first use)."""
        view = self._views.get((pid, mode))
        if view is None:
            if pid not in PRODUCT_IDS:
                raise KeyError(pid)
            view = self._views[(pid, mode)] = {o.name: _view(o, pid, mode) for o in self.options}
        return view

    def suggest(self, name: str) -> str:
        """The closest option name, for UNKNOWN_OPTION. The same misspellings recur from job
        to job, and difflib takes up to a millisecond on each: their answers are kept."""
        found = self._suggested.get(name)
        if found is None:
            found = closest(name.lower(), self.by_name)
            if len(name) <= MAX_MEMO_TEXT:
                keep(self._suggested, name, found, MAX_KEPT_SUGGESTIONS)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __len__(self) -> int:
        return len(self.options)


def _value_ok(option: Option, value: JSON) -> bool:
    kinds: dict[OptType, tuple[type, ...]] = {
        OptType.INT: (int,),
        OptType.BOOL: (bool,),
        OptType.STR: (str,),
        OptType.PATH: (str,),
        OptType.OBJECT: (dict,),
    }
    expected = kinds.get(option.type)
    if expected is not None:
        if not isinstance(value, expected):
            return False
        if option.type is OptType.INT and isinstance(value, bool):
            return False
    return not option.choices or value in option.choices


def check_catalog(options: tuple[Option, ...]) -> list[str]:
    """Every way the table could contradict itself or the rules; empty when sound."""
    problems: list[str] = []
    names = [o.name for o in options]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"duplicate option names: {', '.join(dupes)}")
    known_products = set(PRODUCT_IDS)
    used_rules: set[str] = set()
    for o in options:
        rule_ids = [o.rule, *o.rules, o.products_rule, o.mode_rule, o.env_rule]
        rule_ids += [o.aliases_rule, o.validator_rule, o.unsupported_rule]
        rule_ids += [r.rule for r in o.ranges] + [d.rule for d in o.defaults]
        rule_ids += [g.rule for g in o.value_gates]
        for rid in filter(None, rule_ids):
            if rid not in RULES:
                problems.append(f"{o.name}: unknown rule id {rid}")
            used_rules.add(rid)
        gates = [o.products, o.no_default_products]
        gates += [d.products for d in o.defaults] + [r.products for r in o.ranges]
        gates += [g.products for g in o.value_gates]
        for gate in gates:
            for pid in gate or ():
                if pid not in known_products:
                    problems.append(f"{o.name}: gate names unknown product {pid!r}")
        for d in o.defaults:
            if not _value_ok(o, d.value):
                problems.append(f"{o.name}: default {d.value!r} is not an allowed value")
            for r in o.ranges:
                overlap = d.products is None or r.products is None or d.products & r.products
                if overlap and isinstance(d.value, int) and not r.contains(d.value):
                    problems.append(f"{o.name}: default {d.value!r} outside range {r.text()}")
        for g in o.value_gates:
            if o.choices and g.value not in o.choices:
                problems.append(f"{o.name}: value gate for unknown value {g.value!r}")
        for old, new in o.aliases.items():
            if new not in o.choices or old in o.choices:
                problems.append(f"{o.name}: alias {old!r} -> {new!r} is not old -> allowed")
        if o.products is not None and not o.products_rule:
            problems.append(f"{o.name}: product gate without a rule id")
        if o.mode is not None and not o.mode_rule:
            problems.append(f"{o.name}: mode gate without a rule id")
    from ._cross import CROSS_RULE_IDS

    used_rules |= set(CROSS_RULE_IDS)
    unused = sorted(set(RULES) - used_rules)
    if unused:
        problems.append(f"rule ids no catalog entry or cross-option rule uses: {', '.join(unused)}")
    if sorted(known_products) != sorted(p.id for p in PRODUCTS):
        problems.append("product table and ids disagree")
    return problems


CATALOG: Final = Catalog(OPTIONS)


def _builtin_catalog() -> Catalog:
    return CATALOG
