"""The request and the result as plain, frozen data.

Results are data (value + source + rule), never exceptions: a caller, the server and the CLI all
read the same record. Dataclasses with slots keep the hot path cheap; JSON in and out is explicit
so that the CLI's JSON and the proto3 JSON mapping agree key for key.
"""

from __future__ import annotations

import difflib
import enum
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, TypeVar

JSON = Any
"""A JSON value: None, bool, int, float, str, list or dict of those."""

CATALOG_VERSION: Final = "900"
MAX_EXACT_INT: Final = 2**53
"""Integers beyond ±2^53 do not survive JSON or protobuf's Struct (numbers are doubles there):
an answer must read back as it was given, so larger ones are refused."""
MAX_OBJECT_DEPTH: Final = 16
"""Nesting of an object value. A server reads configs two levels deeper (the config, and one
level too deep), so the core judges every object the wire carries, as it does in process."""
MAX_CONFIG_DEPTH: Final = MAX_OBJECT_DEPTH + 2
"""JSON nesting levels in a whole config: the config, and one level beyond what an option's
value may have, so that an option one level too deep is reported on that option."""
MAX_CONFIG_ITEMS: Final = 10_000
"""Keys and list items in a whole config, all levels together."""
MAX_TEXT_VALUE: Final = 65_536
"""Characters in one string option's value. A path is at most 4,096 bytes on the job's host,
and a grammar's text (a shape range, a list of passes) far less: a longer value is refused
before any grammar reads it, so that no request holds a server for seconds."""
MAX_MEMO_TEXT: Final = 1024
"""Memo tables keep only strings this short (the paths memo, twice this in all): 4,096 entries
of a KiB or two stay a few MiB, where a caller's megabyte-long paths would pin gigabytes."""
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_K = TypeVar("_K")
_V = TypeVar("_V")


def keep(table: dict[_K, _V], key: _K, value: _V, bound: int) -> None:
    """Keep `value` in a memo table of at most `bound` entries. A full table is emptied first,
    so that what recurs now is kept however many one-off values (a job's own workdir, a value
    sent once) filled it before: a server that runs for weeks keeps its memos useful."""
    if len(table) >= bound:
        table.clear()
    table[key] = value


def is_text(value: str) -> bool:
    """False for a string holding a lone UTF-16 surrogate (a JSON "\\ud800" escape gives one):
    not Unicode text, so it can be neither encoded as UTF-8 nor sent back in an answer."""
    return value.isascii() or _SURROGATE.search(value) is None


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice."""


class NumberTooLongError(ValueError):
    """A JSON number of more digits than Python converts (4,300 by default): valid JSON, but
    far past any value an option takes, so it is refused without being read."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: a key written twice is refused. json keeps the last one
    silently, and nobody can tell which of the two values the writer meant."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"key {printable(key)!r} appears twice")
            seen.add(key)
    return data


_JSON_DECODER: Final = json.JSONDecoder(object_pairs_hook=unique_keys)


def loads_json(text: str) -> Any:
    """JSON text as Python, each object's keys written once (DuplicateKeyError), one decoder
    for every call. NaN and Infinity are read as floats, as Python's json writes them, for the
    resolver to refuse on their option. Nesting deeper than the decoder can follow raises
    RecursionError, which each caller turns into its own refusal."""
    if text.startswith("\ufeff"):
        return json.loads(text, object_pairs_hook=unique_keys)  # refused: json's own message
    try:
        return _JSON_DECODER.decode(text)
    except RecursionError:
        if not _brackets_close(text):  # cut short: not JSON, however deep it went
            raise ValueError("its brackets do not close (the text is cut short)") from None
        raise
    except ValueError as exc:
        if type(exc) is ValueError and "integer string conversion" in str(exc):
            raise NumberTooLongError(
                f"a number has more than {sys.get_int_max_str_digits():,} digits; no option "
                "takes such a number (integers are read within ±2^53)"
            ) from None
        raise


def _brackets_close(text: str) -> bool:
    """Whether every [ and { outside strings is closed, in order: the decoder could not follow
    the nesting, so this is how a deep text that is whole is told from a truncated one."""
    stack: list[str] = []
    closing = {"]": "[", "}": "{"}
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append(char)
        elif char in closing and (not stack or stack.pop() != closing[char]):
            return False
    return not stack and not in_string


MAX_SUGGESTED_TEXT: Final = 256
"""Longer than any name or value a suggestion could be for: such a text gets none (difflib's
work grows with its length, seconds for megabytes)."""


def closest(text: str, words: Iterable[str], cutoff: float = 0.6) -> str:
    """The word `text` most likely misspells, or "": difflib.get_close_matches(n=1)'s answer
    (the highest ratio, ties to the greater word), found with fewer ratio() calls, the costly
    step: candidates are tried by their quick_ratio(), an upper bound of ratio(), best first,
    until none can reach the best ratio found."""
    if len(text) > MAX_SUGGESTED_TEXT:
        return ""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(text)
    ranked: list[tuple[float, str]] = []
    for word in words:
        matcher.set_seq1(word)
        if matcher.real_quick_ratio() >= cutoff and (bound := matcher.quick_ratio()) >= cutoff:
            ranked.append((bound, word))
    ranked.sort(reverse=True)
    best: tuple[float, str] = (cutoff, "")
    for bound, word in ranked:
        if best[1] and bound < best[0]:
            break
        matcher.set_seq1(word)
        score = matcher.ratio()
        if score >= cutoff and (score, word) > best:
            best = (score, word)
    return best[1]


def plain_text(text: str) -> str:
    """The text a str subclass holds (in process only), as a plain str: read by str's own
    methods, never by the subclass's strip(), casefold() or __eq__."""
    return text if type(text) is str else str.__str__(text)


FLAT_TYPES: Final = frozenset({str, int, float, bool, type(None)})
"""Types whose values hold no others (exactly these: a subclass may be anything). Asked
before isinstance(), which is several times slower on a value that is neither."""


def plain_json(value: JSON) -> JSON:
    """`value` in plain types (in process only): a str, int or float subclass (an enum member,
    say) as the value it holds, a dict or list subclass as a plain dict or list, keys too, so
    that no method of a caller's own type (a __hash__ or __eq__ that raises) runs inside the
    resolver. Nothing is copied where nothing changes. Past the depth and width a config may
    have, a value is left as it is: the resolver refuses it without reading it."""
    budget = [MAX_CONFIG_ITEMS + 1]
    return _plain_json(value, MAX_CONFIG_DEPTH + 1, budget)


def plain_scalar(value: JSON) -> JSON:
    """A str, int or float subclass (in process only: an enum member, say) as the plain value
    it holds, read by the base type's own methods; any other value as it is."""
    kind = type(value)  # never isinstance(): it asks the value's own __class__
    if kind in FLAT_TYPES:
        return value
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, int):  # bool cannot be subclassed
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    return value


def _plain_json(value: JSON, depth: int, budget: list[int]) -> JSON:
    kind = type(value)
    if kind in FLAT_TYPES:
        return value
    is_list = issubclass(kind, list)
    if not (is_list or issubclass(kind, dict)):
        return plain_scalar(value)  # a scalar's plain value; what is not JSON, for the resolver
    if depth <= 0:
        return value  # too deep to be read: the resolver refuses it
    budget[0] -= list.__len__(value) if is_list else dict.__len__(value)
    if budget[0] < 0:
        return value  # too wide to be read: refused as a whole
    if is_list:
        items = list(list.__iter__(value))
        plain = [_plain_json(item, depth - 1, budget) for item in items]
        changed = kind is not list or any(p is not i for p, i in zip(plain, items, strict=True))
        return plain if changed else value
    pairs = list(dict.items(value))
    plain_pairs = [(_plain_json(k, 0, budget), _plain_json(v, depth - 1, budget)) for k, v in pairs]
    changed = kind is not dict or any(
        pk is not k or pv is not v for (pk, pv), (k, v) in zip(plain_pairs, pairs, strict=True)
    )
    return dict(plain_pairs) if changed else value


TEXT_TYPES: Final = frozenset({str})
_JSON_TYPES: Final = FLAT_TYPES | {dict, list}
CONTAINER_TYPES: Final = (dict, list)
"""The types whose values hold others (a tuple: `dict | list` would build a union at each
call)."""


def _all_plain(config: dict[Any, Any]) -> bool:
    """Whether a config holds exact JSON types only, keys included, as far as the resolver
    reads it: nothing for plain_json to convert. Level by level, a level's types in one pass
    in C; past the depth or width the resolver reads, a config is refused unread anyway."""
    if FLAT_TYPES.issuperset(map(type, config.values())):  # no value holds others: the common case
        return FLAT_TYPES.issuperset(map(type, config))
    level: list[Any] = [config]
    items = 0
    for _ in range(MAX_CONFIG_DEPTH + 1):
        keys: list[Any] = []
        values: list[Any] = []
        for container in level:  # each an exact dict or list: its own methods are the builtins
            if type(container) is dict:
                keys.extend(container)
                values.extend(container.values())
            else:
                values.extend(container)
        items += len(values)
        if items > MAX_CONFIG_ITEMS:
            return True
        types = set(map(type, values))
        if not (FLAT_TYPES.issuperset(map(type, keys)) and _JSON_TYPES.issuperset(types)):
            return False
        if types.isdisjoint(CONTAINER_TYPES):
            return True
        level = [value for value in values if type(value) in CONTAINER_TYPES]
    return True


def _own(entries: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of a mapping. A dict, or a subclass, is read from its storage: a subclass's own
    keys(), items() or __getitem__ never run."""
    if type(entries) is dict:
        return entries.copy()
    if isinstance(entries, dict) and issubclass(type(entries), dict):  # (for the type checker)
        return dict(dict.items(entries))
    return dict(entries)


def cut_text(text: str, limit: int) -> str:
    """`text` within `limit` characters, "..." ending one that was longer: a caller's value
    or a file's line is named in a message, never echoed whole."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(value: str) -> str:
    """A caller's string fit to be echoed: lone surrogates written as backslash escapes."""
    return value if is_text(value) else value.encode("utf-8", "backslashreplace").decode()


class Severity(enum.StrEnum):
    ERROR = "ERROR"
    WARNING = "WARNING"
    INFO = "INFO"


class Source(enum.StrEnum):
    """Where an effective value came from, highest precedence first."""

    POLICY_LOCKED = "POLICY_LOCKED"
    USER = "USER"
    ENV = "ENV"
    POLICY = "POLICY"
    PRODUCT_DEFAULT = "PRODUCT_DEFAULT"
    DEFAULT = "DEFAULT"
    DERIVED = "DERIVED"


class Code(enum.StrEnum):
    """Stable diagnostic codes; their default severity is in CODE_SEVERITY."""

    UNKNOWN_PRODUCT = "UNKNOWN_PRODUCT"
    UNKNOWN_PROFILE = "UNKNOWN_PROFILE"
    UNKNOWN_OPTION = "UNKNOWN_OPTION"
    INVALID_VALUE = "INVALID_VALUE"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNSUPPORTED_VALUE = "UNSUPPORTED_VALUE"
    CONFLICT = "CONFLICT"
    DROPPED_UNSUPPORTED_PRODUCT = "DROPPED_UNSUPPORTED_PRODUCT"
    DROPPED_UNSUPPORTED_MODE = "DROPPED_UNSUPPORTED_MODE"
    DROPPED_UNSUPPORTED_VERSION = "DROPPED_UNSUPPORTED_VERSION"
    DROPPED_NO_EFFECT = "DROPPED_NO_EFFECT"
    DROPPED_SUPERSEDED = "DROPPED_SUPERSEDED"
    FORCED = "FORCED"
    POLICY_LOCKED = "POLICY_LOCKED"
    DEPRECATED = "DEPRECATED"
    EXPERIMENTAL = "EXPERIMENTAL"
    ADVICE = "ADVICE"
    NORMALIZED = "NORMALIZED"
    ROUNDED = "ROUNDED"
    FROM_ENV = "FROM_ENV"
    ENV_OVERRIDDEN = "ENV_OVERRIDDEN"
    UNDOCUMENTED = "UNDOCUMENTED"
    NOT_CHECKED = "NOT_CHECKED"


CODE_SEVERITY: Final[Mapping[Code, Severity]] = {
    Code.UNKNOWN_PRODUCT: Severity.ERROR,
    Code.UNKNOWN_PROFILE: Severity.ERROR,
    Code.UNKNOWN_OPTION: Severity.ERROR,
    Code.INVALID_VALUE: Severity.ERROR,
    Code.OUT_OF_RANGE: Severity.ERROR,
    Code.UNSUPPORTED_VALUE: Severity.ERROR,
    Code.CONFLICT: Severity.ERROR,
    Code.DROPPED_UNSUPPORTED_PRODUCT: Severity.WARNING,
    Code.DROPPED_UNSUPPORTED_MODE: Severity.WARNING,
    Code.DROPPED_UNSUPPORTED_VERSION: Severity.WARNING,
    Code.DROPPED_NO_EFFECT: Severity.WARNING,
    Code.DROPPED_SUPERSEDED: Severity.WARNING,
    Code.FORCED: Severity.WARNING,
    Code.POLICY_LOCKED: Severity.WARNING,
    Code.DEPRECATED: Severity.WARNING,
    Code.EXPERIMENTAL: Severity.WARNING,
    Code.ADVICE: Severity.WARNING,
    Code.NORMALIZED: Severity.INFO,
    Code.ROUNDED: Severity.INFO,
    Code.FROM_ENV: Severity.INFO,
    Code.ENV_OVERRIDDEN: Severity.INFO,
    Code.UNDOCUMENTED: Severity.INFO,
    Code.NOT_CHECKED: Severity.INFO,
}

DROP_CODES: Final = frozenset(
    {
        Code.DROPPED_UNSUPPORTED_PRODUCT,
        Code.DROPPED_UNSUPPORTED_MODE,
        Code.DROPPED_UNSUPPORTED_VERSION,
        Code.DROPPED_NO_EFFECT,
        Code.DROPPED_SUPERSEDED,
    }
)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about the request: its `severity` (ERROR makes the answer not ok), `code`
    (a Code), the `option` it is about (an option name, `env.NAME` for an environment variable,
    or `product`), the `rule` id that decided it, a `message` for people, and a close name as
    `suggestion` (empty when there is none)."""

    severity: Severity
    code: Code
    option: str
    rule: str
    message: str
    suggestion: str = ""

    def to_json(self) -> dict[str, JSON]:
        return {
            "severity": self.severity.value,
            "code": self.code.value,
            "option": self.option,
            "rule": self.rule,
            "message": self.message,
            "suggestion": self.suggestion,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Diagnostic:
        return cls(
            severity=Severity(data["severity"]),
            code=Code(data["code"]),
            option=str(data.get("option", "")),
            rule=str(data.get("rule", "")),
            message=str(data.get("message", "")),
            suggestion=str(data.get("suggestion", "")),
        )


def _or_empty(value: JSON) -> JSON:
    return {} if value is None else value


def _setters(cls: type, *names: str) -> tuple[Callable[[object, Any], None], ...]:
    """The slot setters of a frozen slotted dataclass's fields, for a builder that skips its
    generated __init__ (one object.__setattr__ call per field). `names` must be its fields in
    order, checked at import: a field added later cannot be left unset."""
    if tuple(f.name for f in fields(cls)) != names:
        raise TypeError(f"{cls.__name__} has fields other than {names}")
    return tuple(cls.__dict__[name].__set__ for name in names)


_new: Final = object.__new__
_SEVERITY, _CODE, _OPTION, _RULE, _MESSAGE, _SUGGESTION = _setters(
    Diagnostic, "severity", "code", "option", "rule", "message", "suggestion"
)


def diagnostic(  # noqa: PLR0917 - the fields of Diagnostic, in order
    severity: Severity, code: Code, option: str, rule: str, message: str, suggestion: str = ""
) -> Diagnostic:
    """Diagnostic(...), the same object built in half the time: a request with many warnings
    makes dozens of them."""
    made: Diagnostic = _new(Diagnostic)
    _SEVERITY(made, severity)
    _CODE(made, code)
    _OPTION(made, option)
    _RULE(made, rule)
    _MESSAGE(made, message)
    _SUGGESTION(made, suggestion)
    return made


class _Unset:
    """No requested value (distinct from a requested null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unset>"

    def __reduce__(self) -> str:
        return "_UNSET"  # unpickles as the one marker, so `is` checks still hold


_UNSET: Final = _Unset()


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where one effective option's value came from: its `source`, the `rules` applied, the
    environment variable read (`env_var`, for ENV) and `detail` (for POLICY*: profile and
    table path; for DERIVED: what it was derived from).

    `requested` is what the caller asked for when that differs from the value, and is
    meaningful only when `has_requested` is true: otherwise it holds a private marker (truthy,
    not None and not JSON), so test `p.has_requested`, not `p.requested is not None` (a
    requested null is None). to_json() leaves `requested` out when there is none."""

    source: Source
    rules: tuple[str, ...] = ()
    requested: JSON = _UNSET
    env_var: str = ""
    detail: str = ""

    @property
    def has_requested(self) -> bool:
        """True when the caller asked for a value other than the one in force (then in
        `requested`, which may be None for a requested null)."""
        return self.requested is not _UNSET

    def to_json(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"source": self.source.value, "rules": list(self.rules)}
        if self.requested is not _UNSET:
            out["requested"] = self.requested
        out["env_var"] = self.env_var
        out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Provenance:
        return cls(
            source=Source(data["source"]),
            rules=tuple(data.get("rules", ())),
            requested=data.get("requested", _UNSET),
            env_var=str(data.get("env_var", "")),
            detail=str(data.get("detail", "")),
        )


def _kind(request: ResolveRequest, name: str) -> str:
    return type(getattr(request, name)).__name__


def unset() -> Any:
    """The marker for 'no requested value' in Provenance."""
    return _UNSET


@dataclass(frozen=True, slots=True)
class ResolveRequest:
    """What a caller sends: a partial config for one product, with the job's environment.

    The request holds its own copy of the config, env and attachments mappings (not of values
    nested in them): a caller who fills one dict and reuses it for the next request does not
    change the requests already made."""

    product: str
    config: Mapping[str, JSON] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = ""
    profile: str = ""
    strict: bool = False
    validate_only: bool = False
    attachments: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every field but the config has one type, checked here (a TypeError naming the
        field); the config may hold anything, and the resolver reports what it cannot take."""
        for name in ("product", "workdir", "profile"):
            text = getattr(self, name)
            if type(text) is not str:
                if not issubclass(type(text), str):
                    raise TypeError(f"ResolveRequest.{name} must be a str, not {_kind(self, name)}")
                object.__setattr__(self, name, plain_text(text))
        for name in ("strict", "validate_only"):
            flag = getattr(self, name)
            if type(flag) is not bool:
                if not (issubclass(type(flag), int) and int.__int__(flag) in (0, 1)):
                    raise TypeError(f"ResolveRequest.{name} must be a bool, not {flag!r}")
                object.__setattr__(self, name, bool(int.__int__(flag)))
        if not isinstance(self.config, Mapping):
            raise TypeError(f"ResolveRequest.config must be a mapping, not {_kind(self, 'config')}")
        config = _own(self.config)
        if not _all_plain(config):
            config = plain_json(config)  # a subclass's own methods never run in the resolver
        object.__setattr__(self, "config", config)
        for name in ("env", "attachments"):
            entries = getattr(self, name)
            if not isinstance(entries, Mapping):
                raise TypeError(f"ResolveRequest.{name} must be a mapping, not {_kind(self, name)}")
            copied = _own(entries)
            if not (
                TEXT_TYPES.issuperset(map(type, copied))
                and TEXT_TYPES.issuperset(map(type, copied.values()))
            ):
                for key, value in copied.items():
                    if not (issubclass(type(key), str) and issubclass(type(value), str)):
                        raise TypeError(
                            f"ResolveRequest.{name} maps str to str; it holds a "
                            f"{type(key).__name__} key with a {type(value).__name__} value"
                        )
                copied = {plain_text(k): plain_text(v) for k, v in copied.items()}
            object.__setattr__(self, name, copied)

    def to_json(self) -> dict[str, JSON]:
        return {
            "product": self.product,
            "config": dict(self.config),
            "env": dict(self.env),
            "workdir": self.workdir,
            "profile": self.profile,
            "strict": self.strict,
            "validate_only": self.validate_only,
            "attachments": dict(self.attachments),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON] | str | bytes) -> ResolveRequest:
        """Build a request from JSON: a dict of its fields, or the JSON text of one (str, or
        bytes in UTF-8) as a request file or an HTTP body holds it. Text is read as the resolver
        reads every JSON text (loads_json): a key written twice is refused, since which of the
        two was meant cannot be told, and NaN is read for the resolver to refuse on its option.
        A text that is not JSON, or a shape that is not the contract's, is a ValueError."""
        if isinstance(data, str | bytes | bytearray):
            data = _request_text(data)
        if not isinstance(data, Mapping):
            raise ValueError(
                "a request must be a JSON object (a dict of its fields, or its JSON text), "
                f"not {_json_kind(data)}"
            )
        unknown = set(data) - _REQUEST_KEYS
        if unknown:
            raise ValueError(f"unknown request field(s): {', '.join(sorted(unknown))}")
        # Absent or null is empty; any other value must be an object ([] or 0 is a mistake).
        config = _or_empty(data.get("config"))
        env = _or_empty(data.get("env"))
        attachments = _or_empty(data.get("attachments"))
        if not isinstance(config, Mapping):
            raise ValueError("'config' must be an object of option name to value")
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("'env' must be an object of variable name to string")
        if not isinstance(attachments, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attachments.items()
        ):
            raise ValueError("'attachments' must be an object of option name to file text")
        for key in ("product", "workdir", "profile"):
            if not isinstance(data.get(key, ""), str):
                raise ValueError(f"'{key}' must be a string")
        for key in ("strict", "validate_only"):
            if not isinstance(data.get(key, False), bool):
                raise ValueError(f"'{key}' must be true or false")
        return cls(
            product=data.get("product", ""),
            config=dict(config),
            env=dict(env),
            workdir=data.get("workdir", ""),
            profile=data.get("profile", ""),
            strict=data.get("strict", False),
            validate_only=data.get("validate_only", False),
            attachments=dict(attachments),
        )


def _request_text(text: str | bytes | bytearray) -> JSON:
    """A request's JSON text as Python, every problem a ValueError that says it is the text's."""
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"a request's JSON text is not UTF-8: {exc}") from None
    try:  # a byte-order mark some editors write is not part of the JSON, as in a config file
        return loads_json(text.removeprefix("\ufeff"))
    except RecursionError:
        raise ValueError("a request's JSON text is nested too deeply to read") from None
    except ValueError as exc:
        raise ValueError(f"a request's JSON text cannot be read: {exc}") from None


def _json_kind(value: object) -> str:
    """A value as JSON names it (a list, a string), or its Python type when JSON has none."""
    kinds = {list: "a list", str: "a string", bool: "a bool", int: "a number", float: "a number"}
    if value is None:
        return "null"
    return kinds.get(type(value), type(value).__name__)


_REQUEST_KEYS: Final = frozenset(
    {"product", "config", "env", "workdir", "profile", "strict", "validate_only", "attachments"}
)


@dataclass(frozen=True, slots=True)
class Resolution:
    """The fully resolved effective config for one request."""

    ok: bool
    product: str
    options: Mapping[str, JSON]
    provenance: Mapping[str, Provenance]
    diagnostics: tuple[Diagnostic, ...]
    paths: Mapping[str, str]
    catalog_version: str
    policy_version: str
    fingerprint: str

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.WARNING)

    @property
    def notes(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is Severity.INFO)

    def codes(self) -> list[str]:
        return [d.code.value for d in self.diagnostics]

    def to_json(self) -> dict[str, JSON]:
        return {
            "ok": self.ok,
            "product": self.product,
            "options": dict(self.options),
            "provenance": {k: v.to_json() for k, v in self.provenance.items()},
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "paths": dict(self.paths),
            "catalog_version": self.catalog_version,
            "policy_version": self.policy_version,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> Resolution:
        return cls(
            ok=bool(data["ok"]),
            product=str(data.get("product", "")),
            options=dict(data.get("options", {})),
            provenance={
                k: Provenance.from_json(v) for k, v in dict(data.get("provenance", {})).items()
            },
            diagnostics=tuple(Diagnostic.from_json(d) for d in data.get("diagnostics", ())),
            paths={str(k): str(v) for k, v in dict(data.get("paths", {})).items()},
            catalog_version=str(data.get("catalog_version", "")),
            policy_version=str(data.get("policy_version", "")),
            fingerprint=str(data.get("fingerprint", "")),
        )


(
    _OK,
    _PRODUCT,
    _OPTIONS,
    _PROVENANCE,
    _DIAGNOSTICS,
    _PATHS,
    _CATALOG_VERSION,
    _POLICY_VERSION,
    _FINGERPRINT,
) = _setters(
    Resolution,
    "ok",
    "product",
    "options",
    "provenance",
    "diagnostics",
    "paths",
    "catalog_version",
    "policy_version",
    "fingerprint",
)


def resolution(
    *,
    ok: bool,
    product: str,
    options: Mapping[str, JSON],
    provenance: Mapping[str, Provenance],
    diagnostics: tuple[Diagnostic, ...],
    paths: Mapping[str, str],
    catalog_version: str,
    policy_version: str,
    fingerprint: str,
) -> Resolution:
    """Resolution(...), the same object built without the frozen dataclass's __init__ (see
    `diagnostic`): one per request."""
    made: Resolution = _new(Resolution)
    _OK(made, ok)
    _PRODUCT(made, product)
    _OPTIONS(made, options)
    _PROVENANCE(made, provenance)
    _DIAGNOSTICS(made, diagnostics)
    _PATHS(made, paths)
    _CATALOG_VERSION(made, catalog_version)
    _POLICY_VERSION(made, policy_version)
    _FINGERPRINT(made, fingerprint)
    return made


(
    _REQ_PRODUCT,
    _REQ_CONFIG,
    _REQ_ENV,
    _REQ_WORKDIR,
    _REQ_PROFILE,
    _REQ_STRICT,
    _REQ_VALIDATE_ONLY,
    _REQ_ATTACHMENTS,
) = _setters(
    ResolveRequest,
    "product",
    "config",
    "env",
    "workdir",
    "profile",
    "strict",
    "validate_only",
    "attachments",
)


def read_request(  # noqa: PLR0917 - the fields of ResolveRequest, in order
    product: str,
    config: dict[str, JSON],
    env: dict[str, str],
    workdir: str,
    profile: str,
    strict: bool,
    validate_only: bool,
    attachments: dict[str, str],
) -> ResolveRequest:
    """ResolveRequest(...) for fields a decoder has just read, each already of its type and in
    a dict of its own (a wire request): the same object without __post_init__'s checks and
    copies, which cost as much as reading the request."""
    made: ResolveRequest = _new(ResolveRequest)
    _REQ_PRODUCT(made, product)
    _REQ_CONFIG(made, config)
    _REQ_ENV(made, env)
    _REQ_WORKDIR(made, workdir)
    _REQ_PROFILE(made, profile)
    _REQ_STRICT(made, strict)
    _REQ_VALIDATE_ONLY(made, validate_only)
    _REQ_ATTACHMENTS(made, attachments)
    return made
