"""Parse one value per its option's type, range and grammar (resolution step 3).

A value of the right meaning in another JSON form is accepted with a NORMALIZED note; anything
else is an INVALID_VALUE or OUT_OF_RANGE error naming the option, the value and the rule.
"""

from __future__ import annotations

import datetime
import math
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ._model import (
    CONTAINER_TYPES,
    FLAT_TYPES,
    JSON,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_ITEMS,
    MAX_EXACT_INT,
    MAX_OBJECT_DEPTH,
    MAX_TEXT_VALUE,
    Code,
    closest,
    cut_text,
    is_text,
    plain_scalar,
)
from ._schema import Option, OptType, Range

if TYPE_CHECKING:
    from ._catalog import OptionView

CUT_DEPTH: Final = 4 * MAX_CONFIG_DEPTH
"""Past the depth the core reads and any reasonable server limit. A config deeper than Python's
json can read or write (about a thousand levels) travels cut there: every reader refuses it as
nested too deep all the same, so the answer is the one in process."""
MAX_SHOWN: Final = 60
_MAX_QUOTED_BITS: Final = 192
"""An int this long (58 digits) is still repeated whole in a message's fix."""
_INT_TEXT: Final = re.compile(r"([+-]?)0*([0-9]{1,19})")
"""An integer as text; leading zeros ("007") read as the number they pad, and only the sign
and digits after them are converted: int() refuses text of over 4,300 digits, which zeros
alone can make."""
_LONG_INT_TEXT: Final = re.compile(r"([+-]?)0*+[0-9]{20,}+")
"""An integer of 20 digits or more: beyond ±2^53, past every finite bound of the catalog."""
_TRUE: Final = frozenset({"true", "True", "TRUE", "1"})
_FALSE: Final = frozenset({"false", "False", "FALSE", "0"})
BOOL_TEXTS: Final = {**dict.fromkeys(_TRUE, True), **dict.fromkeys(_FALSE, False)}
"""The texts a bool option reads as true or false: the one table for configs, the job's
environment and the command line."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a value was refused or how it was read; the pipeline turns it into a diagnostic."""

    code: Code
    rule: str
    message: str
    suggestion: str = ""


@dataclass(frozen=True, slots=True)
class Parsed:
    value: JSON
    note: Problem | None = None
    """A NORMALIZED note when the value was accepted in another form."""


def show(value: JSON) -> str:
    """A value as the caller wrote it, cut short for messages. A str, int or float subclass (in
    process only) is shown by the base type's own method: its own may raise or lie."""
    text = str.__repr__(value) if isinstance(value, str) else _json_text(value)
    return cut_text(text, MAX_SHOWN)


_DATES: Final = frozenset({datetime.date, datetime.datetime, datetime.time})
"""TOML's dates and times (a policy's values), shown as str() writes them."""


def _json_text(value: JSON) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "{...}" if value else "{}"
    if isinstance(value, list):
        return "[...]" if value else "[]"
    if isinstance(value, int):
        try:
            return int.__repr__(value)
        except ValueError:  # past Python's digit limit for str() (4,300 by default)
            return f"<an integer of {int.bit_length(value)} bits>"
    if isinstance(value, float):
        return float.__repr__(value)
    if type(value) in _DATES:
        return str(value)
    return _brief(value)


_BRIEF: Final = reprlib.Repr()
_BRIEF.maxlevel = 2


def _brief(value: object) -> str:
    """bytes, a tuple, any object (in process only): shown briefly, never walked deep."""
    try:
        return _BRIEF.repr(value)
    except Exception:  # a __repr__ of the caller's own that fails
        return f"<{type(value).__name__}>"


def key_text(key: object) -> str:
    """A config key as messages name it: a key that is not text (possible in process only) is
    shown briefly, never walked deep."""
    return str.__str__(key) if isinstance(key, str) else _brief(key)


def unfit(value: JSON) -> str | None:
    """Why a pass-through value cannot be taken (nested without bound, holding a number JSON
    cannot carry exactly, or text that is not Unicode), or None. Level by level, so any depth
    is safe to look at and each element costs a few checks, no call."""
    level: list[JSON] = [value]
    depth = 1
    while level:
        if depth > MAX_OBJECT_DEPTH:
            return f"nested at most {MAX_OBJECT_DEPTH} deep"
        following: list[JSON] = []
        for item in level:
            if isinstance(item, dict):
                try:
                    keys = "".join(item)
                except TypeError:  # keys that are not all strings (possible in process only)
                    return "with text keys only (JSON object keys are strings)"
                if not keys.isascii() and not is_text(keys):
                    return _NOT_TEXT
                following.extend(item.values())
            elif isinstance(item, list):
                following.extend(item)
            elif isinstance(item, str):
                if not item.isascii() and not is_text(item):
                    return _NOT_TEXT
            elif item is None or isinstance(item, bool):
                pass
            elif isinstance(item, int):
                if not -MAX_EXACT_INT <= item <= MAX_EXACT_INT:
                    return "free of integers beyond ±2^53 (JSON numbers cannot carry them exactly)"
            elif isinstance(item, float):
                if not math.isfinite(item):
                    return "free of NaN and infinities (JSON has no such numbers)"
            else:  # bytes, a tuple, a set, a date, any other object: in process only
                return f"{_NOT_JSON}; this one holds a {type(item).__name__}"
        level = following
        depth += 1
    return None


_NOT_TEXT: Final = "free of lone UTF-16 surrogates"
_NOT_JSON: Final = "made of JSON values only (objects, lists, strings, numbers, true, false, null)"


def cut_deep(value: JSON, depth: int = CUT_DEPTH) -> JSON:
    """`value` with every object or list below `depth` levels left empty."""
    if isinstance(value, dict):
        return {k: cut_deep(v, depth - 1) for k, v in value.items()} if depth > 1 else {}
    if isinstance(value, list | tuple):
        return [cut_deep(v, depth - 1) for v in value] if depth > 1 else []
    return value


def too_deep_value() -> JSON:
    """A stand-in for JSON too deep to be read at all (a config or one option's value): it makes
    the config refused as nested too deep, in process and by a server alike, as the JSON itself
    would."""
    chain: JSON = {}
    for _ in range(CUT_DEPTH):
        chain = {"": chain}
    return chain


_SCALARS: Final = (str, int, float)


def not_json(value: JSON) -> str | None:
    """What in `value` JSON cannot hold as it is (a tuple, a set, bytes, any other object, an
    object key that is not text), or None: what a client cannot send as the resolver in process
    would read it. Level by level and bounded (a cycle is cut there, and refused as too deep)."""
    level: list[JSON] = [value]
    for _ in range(CUT_DEPTH):
        following: list[JSON] = []
        for item in level:
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        return f"an object key {key_text(key)} that is not text"
                following.extend(item.values())
            elif isinstance(item, list):
                following.extend(item)
            elif not (item is None or isinstance(item, _SCALARS)):
                return f"a {type(item).__name__}"
        if not following:
            return None
        level = following
    return None


def config_refusal(shape: str) -> str:
    """The message for a config too deep or too wide to read, in process and on the server."""
    return f"config: {shape}; send only NPURunConfig options, with objects of a reasonable size."


def too_wide(max_items: int) -> str:
    """Why a config of more than `max_items` keys and items is refused, in every reader's
    words (the core, the client's and the server's walks over a Struct)."""
    return f"more than {max_items:,} keys and items in all"


def too_deep(max_depth: int) -> str:
    """Why a config nested deeper than `max_depth` levels is refused (see too_wide)."""
    return f"nested deeper than {max_depth} levels"


def config_shape(
    config: Mapping[str, JSON],
    *,
    max_depth: int = MAX_CONFIG_DEPTH,
    max_items: int = MAX_CONFIG_ITEMS,
) -> str | None:
    """Why a config is too deep or too wide to be read at all, or None. The server judges the
    configs it reads as JSON with this same walk (with its own limits, the same by default), so
    both answer alike. Level by level, so any depth is safe to look at; a flat config costs one
    pass over its values."""
    items = len(config)
    if items > max_items:
        return too_wide(max_items)
    if FLAT_TYPES.issuperset(map(type, config.values())):
        return None  # no value holds others: one pass in C
    level = [
        v
        for v in config.values()
        if type(v) not in FLAT_TYPES and issubclass(type(v), CONTAINER_TYPES)
    ]
    depth = 2
    while level:
        if depth > max_depth:
            return too_deep(max_depth)
        following: list[JSON] = []
        for item in level:
            # By the storage of a dict or list, never by a subclass's own methods (a value
            # ResolveRequest left as given, being past the bounds, is read here).
            if issubclass(type(item), dict):
                items += dict.__len__(item)
                following.extend(dict.values(item))
            else:
                items += list.__len__(item)
                following.extend(list.__iter__(item))
        if items > max_items:
            return too_wide(max_items)
        level = [
            c
            for c in following
            if type(c) not in FLAT_TYPES and issubclass(type(c), CONTAINER_TYPES)
        ]
        depth += 1
    return None


def _invalid(
    option: Option, value: JSON, expected: str, suggestion: str = "", *, fix: str = ""
) -> Problem:
    """`fix`: what to do, when it is more than "set" what is expected (said once, without the
    reason in parentheses)."""
    todo = fix or f"set {expected.partition(' (')[0]}"
    return Problem(
        Code.INVALID_VALUE,
        option.rule,
        f"{option.name} {show(value)} is not {expected}; {todo}.",
        suggestion,
    )


_NUMBERS: Final = (int, float)


def _coerce(option: Option, given: JSON) -> tuple[JSON, bool] | Problem:
    """The value in the option's own type, and whether it had to be converted."""
    raw = plain_scalar(given)  # a request mutated after it was built may hold a subclass
    kind = option.type
    if kind is OptType.INT:
        if isinstance(raw, bool):
            return _invalid(option, raw, "an integer")
        if isinstance(raw, int):
            return raw, False
        if isinstance(raw, float) and raw.is_integer() and abs(raw) <= MAX_EXACT_INT:
            return int(raw), True
        number = _INT_TEXT.fullmatch(raw.strip()) if isinstance(raw, str) else None
        if number is not None:
            return int(number[1] + number[2]), True
        return _invalid(option, raw, "an integer")
    if kind is OptType.BOOL:
        if isinstance(raw, bool):
            return raw, False
        if isinstance(raw, _NUMBERS) and raw in (0, 1):
            return bool(raw), True
        if isinstance(raw, str) and raw.strip() in _TRUE | _FALSE:
            return raw.strip() in _TRUE, True
        return _invalid(option, raw, "true or false")
    if kind in (OptType.STR, OptType.PATH):
        if isinstance(raw, str):
            if len(raw) > MAX_TEXT_VALUE and not option.choices:  # a choice: "not one of"
                return _invalid(
                    option,
                    raw,
                    f"a string of at most {MAX_TEXT_VALUE:,} characters",
                    fix=f"shorten it (it has {len(raw):,})",
                )
            if not is_text(raw):
                return _invalid(
                    option,
                    raw,
                    f"a string {_NOT_TEXT}",
                    fix="write each character whole (a lone surrogate such as \\ud800 is half "
                    "of one)",
                )
            if kind is OptType.PATH and "\x00" in raw:  # C would read the path up to it
                return _invalid(
                    option,
                    raw,
                    "a path without a NUL character",
                    fix="remove the NUL (\\x00): no file's path holds one, and the runtime "
                    "would read the path only up to it",
                )
            return raw, False
        if kind is OptType.STR and isinstance(raw, bool) and str(raw).lower() in option.choices:
            return str(raw).lower(), True
        whole = isinstance(raw, int) and not isinstance(raw, bool)
        if kind is OptType.STR and (whole or (isinstance(raw, float) and raw.is_integer())):
            if not -MAX_EXACT_INT <= raw <= MAX_EXACT_INT:
                # As text it would be taken, but the answer repeats what was asked, and no
                # JSON or Struct number carries this one exactly (past ±2^53 a double stands
                # for many integers): refused as on an int option.
                quoted = whole and raw.bit_length() <= _MAX_QUOTED_BITS
                return _invalid(
                    option,
                    raw,
                    "a number JSON can carry exactly (within ±2^53)",
                    fix=f"write {str(raw)!r}" if quoted else "write it in quotes, as a string",
                )
            return str(int(raw)), True
        return _invalid(option, raw, "a string")
    if kind is OptType.OBJECT:
        if not isinstance(raw, dict):
            return _invalid(option, raw, "a config object")
        reason = unfit(raw)
        if reason is not None:
            return _invalid(option, "{...}", f"an object {reason}")
        return raw, False
    reason = unfit(raw)
    if reason is not None:
        return _invalid(option, "...", f"a value {reason}")
    return raw, False


def _closest(value: JSON, choices: tuple[JSON, ...]) -> str:
    words = [str(c) for c in choices]
    text = str(value)  # a plain value (see _plain) within ±2^53
    for word in words:
        if word.lower() == text.lower():
            return word
    return closest(text, words, cutoff=0.5)


def _usable(view: OptionView, suggestion: str) -> str:
    """The suggestion, unless this product or version refuses it ('mixed_hif8' for 'mixed_hif':
    no product supports it today): a suggestion is a value to write. A value only one mode
    refuses is still suggested, as the mode is read from the same config."""
    for choice in view.option.choices:
        if str(choice) == suggestion:
            gate = view.blocked(choice)
            return suggestion if gate is None or gate.mode is not None else ""
    return suggestion


def _read_as(option: Option, rule: str, raw: JSON, value: JSON) -> Problem:
    """The NORMALIZED note on a value given in another form than the one it is read as."""
    return Problem(
        Code.NORMALIZED,
        rule,
        f"{option.name} {show(raw)} was read as {show(value)}; write {show(value)}.",
    )


def parse(
    view: OptionView, raw: JSON, *, product: str, from_text: bool = False
) -> Parsed | Problem:
    """Parse a caller's (or an env var's, `from_text`) value for one product's view."""
    if view.accepts(raw):
        return Parsed(raw)
    return parse_in_full(view, raw, product=product, from_text=from_text)


def _beyond_exact(view: OptionView, raw: str, value: int, product: str) -> Problem:
    """An integer given as text beyond ±2^53 (`value`, or a number as far out on its side):
    OUT_OF_RANGE where the option's range ends before it, else beyond what is read exactly."""
    rng = view.range
    if rng is not None and not rng.contains(value):
        return _out_of_range(view.option, show(raw), rng, product)
    return _invalid(view.option, raw, "an integer within ±2^53")


def _out_of_range(option: Option, shown: str, rng: Range, product: str) -> Problem:
    return Problem(
        Code.OUT_OF_RANGE,
        rng.rule,
        f"{option.name} {shown} is outside {rng.text()} on {product}; use a value in that range.",
    )


def parse_in_full(
    view: OptionView, raw: JSON, *, product: str, from_text: bool = False
) -> Parsed | Problem:
    """`parse` without the check for a value valid as given, which this gives the same answer
    on (tests hold the two together)."""
    option = view.option
    coerced = _coerce(option, raw)
    if isinstance(coerced, Problem):
        long = _LONG_INT_TEXT.fullmatch(raw.strip()) if isinstance(raw, str) else None
        if long is None or option.type is not OptType.INT:
            return coerced
        # A whole number too long to read exactly (HCCL_EXEC_TIMEOUT=99999999999999999999):
        # an integer, so said as one. Out of a bounded range (its magnitude is at least 10^19,
        # past every finite bound) it is OUT_OF_RANGE; in an open one, beyond ±2^53.
        return _beyond_exact(view, raw, -(10**19) if long.group(1) == "-" else 10**19, product)
    value, converted = coerced
    if type(value) is int and not -MAX_EXACT_INT <= value <= MAX_EXACT_INT:
        if isinstance(raw, str):  # text (an environment variable's): said as the number it is
            return _beyond_exact(view, raw, value, product)
        # Before the range: whatever the range, such a number cannot travel as given.
        return _invalid(option, value, "an integer within ±2^53 (JSON cannot carry it exactly)")
    note: Problem | None = None
    if converted and not from_text:
        note = _read_as(option, option.rule, raw, value)
    if option.aliases and value in option.aliases:
        canonical = option.aliases[value]
        note = Problem(
            Code.NORMALIZED,
            option.aliases_rule,
            f"{option.name} {show(value)} is the old name of {show(canonical)}; "
            f"write {show(canonical)}.",
        )
        value = canonical
    if option.choices and value not in option.choices:
        listed = ", ".join(show(c) for c in option.choices)
        return Problem(
            Code.INVALID_VALUE,
            option.rule,
            # As the caller wrote it: 5, not the '5' it was read as.
            f"{option.name} {show(raw if converted else value)} is not one of {listed}; "
            "pick one of them.",
            _usable(view, _closest(value, option.choices)),
        )
    rng = view.range
    if rng is not None and isinstance(value, int) and not rng.contains(value):
        return _out_of_range(option, str(value), rng, product)
    if option.validator is not None and isinstance(value, str):
        reason = option.validator(value)
        if reason is not None:
            return Problem(
                Code.INVALID_VALUE,
                option.validator_rule,
                f"{option.name} {show(value)} is malformed: {reason}.",
            )
        canonical = option.canonical(value) if option.canonical is not None else value
        if canonical != value:
            value = canonical
            note = _read_as(option, option.validator_rule, raw, value)
    return Parsed(value, note)
