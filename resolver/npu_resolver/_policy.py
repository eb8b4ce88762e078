"""Platform policy: per-profile defaults and locks, for all products or one, checked at load.

The file is TOML:

    [profiles.default.defaults]                         # every product
    hccl_timeout = 3600
    [profiles.default.locked]                           # callers cannot change these
    enable_exception_dump = 1
    [profiles.default.products.atlas-training.defaults] # one product (aliases accepted)
    hccl_timeout = 1224

A product table beats the all-products table of the same profile. An all-products entry is
skipped on products that lack the option (at resolve time, quietly); a product table naming
such an option is refused. Every value is checked as a caller's value would be, on every
product it reaches: not on one whose own table replaces it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import stat
import tomllib
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._catalog import CATALOG, Catalog
from ._fingerprint import alike_numbers, canonical_json
from ._model import JSON, Code, Resolution, ResolveRequest, Severity, cut_text
from ._options import ENV_VAR_RULES, MENTIONED_ONLY
from ._precedence import ASK_THE_PLATFORM
from ._products import PRODUCT_IDS, alias_key, chips, listed, product_id
from ._schema import MODE_OPTION, Mode
from ._state import DEFAULT_PROFILE, PolicyEntry, PolicyLayer, PolicyLike, product_table, table_of
from ._values import Problem, config_shape, parse, show

KINDS: Final = ("defaults", "locked")
MAX_POLICY_BYTES: Final = 1024 * 1024
DEEP_NESTING: Final = 100
"""Levels of arrays or inline tables from which a value is named as the culprit when the
parser runs out of recursion depth."""
_ANY_DEPTH: Final = 1 << 30
"""No bound: config_shape() then judges a value's width alone."""
_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    """One part of a table path as TOML writes it: bare when it can be, else quoted, so that
    a profile named "team.a" reads [profiles."team.a".locked], not a table three levels down."""
    if _BARE_KEY.fullmatch(key):
        return key
    return json.dumps(key, ensure_ascii=False).replace("\x7f", "\\u007F")  # TOML escapes DEL


_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class PolicyError(ValueError):
    """A policy file that may not be used; the message names the file, table and key.

    `digest` is a short hash of the refused bytes when they were read, so that a server can
    tell which file it refused without reading it again."""

    def __init__(self, source: str, problems: list[str], *, digest: str = "") -> None:
        self.source = source
        self.problems = [
            cut_text(problem, MAX_PROBLEM_CHARS) for problem in problems[:MAX_PROBLEMS]
        ]
        if len(problems) > MAX_PROBLEMS:
            more = len(problems) - MAX_PROBLEMS
            self.problems.append(f"and {more} more problem{'s' if more > 1 else ''} not listed")
        self.digest = digest
        super().__init__(f"{source}: " + "; ".join(self.problems))

    @property
    def listed(self) -> str:
        """The problems as a person reads them, each on its line ("\n  - ...")."""
        return "".join(f"\n  - {problem}" for problem in self.problems)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole (a process pool's worker raises it to its parent), as listed: not
        cut again, which would count a listed "and N more" as a problem of its own."""
        return (
            _restored_error,
            (type(self), self.source, self.problems, self.digest),
            self.__dict__,  # a subclass's own attributes, and notes added to it
        )


def _restored_error(
    kind: type[PolicyError], source: str, problems: list[str], digest: str
) -> PolicyError:
    error = kind.__new__(kind)
    error.source, error.problems, error.digest = source, list(problems), digest
    ValueError.__init__(error, f"{source}: " + "; ".join(error.problems))
    return error


MAX_PROBLEMS: Final = 50
"""Problems a refusal lists: a file of a megabyte of bad keys would otherwise give a message of
megabytes, which GetPolicy could not return and a log line should not carry."""
MAX_PROBLEM_CHARS: Final = 500
"""A problem's text is cut to this: a key or value of 500 kB is named, not echoed whole."""


class PolicyReadError(PolicyError):
    """The policy file cannot be read at all (missing, unreadable, not a regular file, too
    large): not a verdict on its content."""


@dataclass(frozen=True, slots=True)
class _Table:
    path: str
    values: Mapping[str, JSON]
    chip: str = ""
    """The SoC version the table was named by ('Ascend910B4'), when its product has others."""


@dataclass(frozen=True, slots=True)
class _Profile:
    tables: Mapping[tuple[str | None, str], _Table]
    """(product id or None for all, kind) -> table."""


class Policy:
    """A validated policy; `version` is a short hash of its canonical content and of its
    tables' paths as written."""

    def __init__(self, profiles: Mapping[str, _Profile], source: str, catalog: Catalog) -> None:
        self.source = source
        self.file_digest = ""
        """The full hash of the file's bytes it was loaded from (load_policy), else empty."""
        self._catalog = catalog
        self._profiles = profiles
        self._profile_names = tuple(sorted(profiles))
        content = {
            name: {
                f"{pid or '*'}.{kind}": dict(sorted(table.values.items()))
                for (pid, kind), table in sorted(
                    profile.tables.items(), key=lambda item: (item[0][0] or "", item[0][1])
                )
            }
            for name, profile in sorted(profiles.items())
        }
        self.canonical_text = json.dumps(content, sort_keys=True, indent=2, ensure_ascii=False)
        self._content = content
        # Answers quote a table by its path as written ("Atlas A2" or atlas-a2): two files of
        # the same content under other names answer differently, so their versions differ too
        # (an answer cached under one must not be served under the other).
        paths = sorted(t.path for profile in profiles.values() for t in profile.tables.values())
        hashed = json.dumps([self.canonical_text, paths], ensure_ascii=False)
        self.version = hashlib.sha256(hashed.encode()).hexdigest()[:12]
        self._layers = {
            (name, pid): self._layer(profile, pid, catalog)
            for name, profile in profiles.items()
            for pid in PRODUCT_IDS
        }
        base = profiles.get(DEFAULT_PROFILE)
        if base is not None:
            # A lock is a lock whichever profile a caller names: every profile holds the default
            # profile's locks (its own lock of the same option wins). Defaults stay per profile.
            for (name, pid), own in list(self._layers.items()):
                inherited = self._layers[(DEFAULT_PROFILE, pid)].locked
                if name != DEFAULT_PROFILE and inherited:
                    locked = {**inherited, **own.locked}
                    self._layers[(name, pid)] = PolicyLayer(locked=locked, defaults=own.defaults)

    @staticmethod
    def _layer(profile: _Profile, pid: str, catalog: Catalog) -> PolicyLayer:
        merged: dict[str, dict[str, PolicyEntry]] = {kind: {} for kind in KINDS}
        for scope in (None, pid):
            for kind in KINDS:
                table = profile.tables.get((scope, kind))
                if table is None:
                    continue
                for key, value in table.values.items():
                    if scope is None and not catalog.view(pid, Mode.TRAINING)[key].product_ok:
                        continue
                    detail = f"{'locked' if kind == 'locked' else 'default'} from [{table.path}]"
                    merged[kind][key] = PolicyEntry(value, detail, all_products=scope is None)
        return PolicyLayer(locked=merged["locked"], defaults=merged["defaults"])

    def layer(self, profile: str, product: str) -> PolicyLayer | None:
        return self._layers.get((profile, product))

    def profile_names(self) -> tuple[str, ...]:
        return self._profile_names

    @functools.cached_property
    def compact_text(self) -> str:
        """`canonical_text` without whitespace, keys still sorted: a policy of long lists,
        indented, is about six times its file, this about the file's size."""
        return canonical_json(self._content)

    def summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            "version": self.version,
            "source": self.source,
            "profiles": {
                name: {
                    f"{pid or 'all products'} {kind}": sorted(t.values)
                    for (pid, kind), t in profile.tables.items()
                }
                for name, profile in sorted(self._profiles.items())
            },
        }
        if DEFAULT_PROFILE not in self._profiles:
            summary["no_default_profile"] = [self._no_default_profile()]
        by_chip = self.chip_named_tables()
        if by_chip:
            summary["tables_named_by_a_chip"] = by_chip
        shadowed = self.shadowed_defaults()
        if shadowed:
            summary["defaults_that_never_act"] = shadowed
        unsupported = self.unsupported_values()
        if unsupported:
            summary["values_that_never_act"] = unsupported
        return summary

    def chip_named_tables(self) -> list[str]:
        """Product tables named by one chip of a product that has several: a table for
        Ascend910B4 reaches every atlas-a2 job (a job names its product, or a chip the
        resolver reads as its product), which its writer most likely did not mean."""
        notes = []
        for _, profile in sorted(self._profiles.items()):
            for (pid, _), table in sorted(profile.tables.items(), key=lambda i: i[1].path):
                if table.chip and pid is not None:
                    others = ", ".join(c for c in chips(pid) if c != table.chip)
                    notes.append(
                        f"[{table.path}] names the chip {table.chip}, but applies to every "
                        f"{pid} job, whichever its chip ({others}): the resolver tells "
                        "products apart, not chips; name the table by the product"
                    )
        return notes

    def _no_default_profile(self) -> str:
        """A policy without a `default` profile reaches only the jobs that name a profile:
        said, since a profile written 'Default' looks like one and is not."""
        said = (
            f"no profile is named {DEFAULT_PROFILE!r}: a job that names no profile gets none of "
            "this policy's values, its locks included"
        )
        alike = [n for n in self._profile_names if n.casefold() == DEFAULT_PROFILE]
        if alike:
            said += (
                f"; {alike[0]!r} differs from {DEFAULT_PROFILE!r} only in case (profile names "
                "are case-sensitive)"
            )
        return said

    def unsupported_values(self) -> list[str]:
        """Values for an option no product has in this version (R-ERP-1, R-DEP-9): taken, as
        a job's own is (with a warning), but a default for one never acts and a lock of one
        locks nothing, which the file's writer most likely does not know."""
        notes = []
        for _, profile in sorted(self._profiles.items()):
            for (_, kind), table in sorted(profile.tables.items(), key=lambda i: i[1].path):
                for key in sorted(table.values):
                    option = self._catalog.by_name[key]
                    if option.unsupported_version:
                        what = "locks nothing" if kind == "locked" else "never acts"
                        notes.append(
                            f"{key} in [{table.path}] {what}: the option is not supported in "
                            f"this version ({option.rule})"
                        )
        return notes

    def shadowed_defaults(self) -> list[str]:
        """Defaults that can never act, which is most likely a mistake: a lock wins over them
        on every product they reach (the profile's own locks, or the default profile's, which
        every profile holds, each product by its own table or the table for all), or the
        profile locks graph_run_mode to the mode the option does not act in (R-AOE-1: a job
        drops such a default for every product without a word). A default for every product
        that one product's lock overrides still acts on the others, as meant."""
        acting: set[tuple[str, str]] = set()
        never: dict[tuple[str, str], dict[str, list[str]]] = {}
        for (_, pid), layer in self._layers.items():
            for key, entry in layer.defaults.items():
                why = self._why_never(layer, pid, key)
                if why is None:
                    acting.add((entry.detail, key))
                else:
                    never.setdefault((entry.detail, key), {}).setdefault(why, []).append(pid)
        notes = []
        for (default, key), by_reason in sorted(never.items()):
            if (default, key) in acting:
                continue
            reached = [pid for pids in by_reason.values() for pid in pids]
            said = f"{key} {default} never acts on {_on_products(reached, 'any product')}: "
            if len(by_reason) == 1:
                notes.append(said + next(iter(by_reason)))
            else:
                notes.append(
                    said + "; ".join(f"{why} on {listed(p)}" for why, p in by_reason.items())
                )
        return notes

    def _why_never(self, layer: PolicyLayer, pid: str, key: str) -> str | None:
        """Why the layer's default for `key` never acts on `pid`, or None when it can."""
        lock = layer.locked.get(key)
        if lock is not None:
            return f"it is {lock.detail}"
        mode_lock = layer.locked.get(MODE_OPTION)
        if mode_lock is None or not isinstance(mode_lock.value, int) or key == MODE_OPTION:
            return None
        mode = Mode.from_graph_run_mode(mode_lock.value)
        option = self._catalog.view(pid, mode)[key].option
        if option.mode is None or option.mode is mode:
            return None
        return (
            f"it acts in {option.mode.prose} only ({option.mode_rule}), and graph_run_mode "
            f"{mode_lock.value} ({mode.prose}) is {mode_lock.detail}"
        )


def _on_products(pids: Collection[str], all_of_them: str) -> str:
    """Products in the catalog's order, or `all_of_them` when none is missing."""
    return all_of_them if all(pid in pids for pid in PRODUCT_IDS) else listed(pids)


def _check_value(
    catalog: Catalog, table: str, key: str, value: JSON, *, pids: list[str], scoped: bool
) -> list[str]:
    """Problems of one value on the products it reaches (`scoped`: a product's own table)."""
    # Depth is the option's own check (with its rule); width is the config's alone.
    shape = config_shape({key: value}, max_depth=_ANY_DEPTH)
    if shape is not None:  # a job's config could not hold it: the answer would not read back
        return [f"[{table}] {key}: the value is too big for a job's config ({shape})"]
    having = [pid for pid in PRODUCT_IDS if _exists(catalog, pid, key)]
    if not scoped and not (having and pids):
        # The value acts on no product: the option is in none in this version (R-ERP-1, say),
        # or a lock wins over this default wherever it reaches. `check` notes it (values_ or
        # defaults_that_never_act); a value no config could hold (NaN) is still refused, in
        # the words a job would get, on a product that has the option if one does.
        pid = (having or PRODUCT_IDS)[0]
        parsed = parse(catalog.view(pid, Mode.TRAINING)[key], value, product=pid)
        if isinstance(parsed, Problem):
            return [f"[{table}] {key}: {parsed.message} ({parsed.rule})"]
        return []
    refusals: dict[str, str] = {}  # product -> why it refuses the value
    for pid in pids:
        if not _exists(catalog, pid, key):
            if scoped:
                option = catalog.by_name[key]
                if option.unsupported_version:
                    why = f"is not supported in this version ({option.rule})"
                else:  # the products it has, by the rule that lists them, as a job hears
                    only = listed(option.products or ())
                    why = (
                        f"does not exist on {pid} (only {only}: {option.products_rule}); "
                        "remove it from this table"
                    )
                return [f"[{table}] {key}: the option {why}"]
            continue
        refusal = _refusal(catalog, pid, key, value)
        if refusal is not None:
            refusals[pid] = refusal
            if scoped:
                break
    if not refusals:
        return []
    pid, refusal = next(iter(refusals.items()))
    problem = f"[{table}] {key}: {refusal}"
    takers = [p for p in pids if p not in refusals and _exists(catalog, p, key)]
    if not scoped and takers:  # a product's own value is the remedy only when others take it
        problem += _own_table(table, pid, list(refusals), takers)
    return [problem]


def _refusal(catalog: Catalog, pid: str, key: str, value: JSON) -> str | None:
    """Why `pid` refuses the value (its parse, or a gate of its product or version), or None."""
    view = catalog.view(pid, Mode.TRAINING)[key]
    parsed = parse(view, value, product=pid)
    if isinstance(parsed, Problem):
        return f"{parsed.message} ({parsed.rule})"
    gate = view.blocked(parsed.value)
    gate = gate or catalog.view(pid, Mode.INFERENCE)[key].blocked(parsed.value)
    if gate is not None and (gate.unsupported_version or gate.products is not None):
        return f"value {value!r} is not supported on {pid} ({gate.rule})"
    return None


def _exists(catalog: Catalog, pid: str, key: str) -> bool:
    view = catalog.view(pid, Mode.TRAINING)[key]
    return view.product_ok and not view.option.unsupported_version


def _own_table(table: str, pid: str, refusing: list[str], takers: list[str]) -> str:
    """The remedies for a value for every product that some products refuse: their own
    tables, whose values replace the shared one there, or (when they should have no value of
    the policy's: another option stands for it there) the value in the tables of the products
    that take it instead."""
    kind = table.rsplit(".", 1)[1]
    who = pid if len(refusing) == 1 else f"each of {', '.join(refusing)}"
    return (
        f"; give {who} a value of its own, as in [{product_table(table, pid)}], or write "
        f"this one in the {kind} tables of {listed(takers)} instead of [{table}]"
    )


def _reached(
    scopes: list[tuple[str | None, str, Any]],
    kind: str,
    key: str,
    inherited: Mapping[str, set[str]],
) -> list[str]:
    """The products a value for every product reaches: not those whose own table of the same
    kind sets the option (its value replaces the shared one there), nor, for a default, those
    that lock it, in the profile or in the default profile whose locks every profile holds
    (`inherited`: product -> the options it locks there); the lock wins there."""
    own = {kind, "locked"}
    replaced = {
        pid
        for pid, _, body in scopes
        if pid is not None and any(isinstance(body.get(k), dict) and key in body[k] for k in own)
    }
    if kind == "defaults":
        replaced.update(pid for pid, keys in inherited.items() if key in keys)
        shared: Mapping[str, Any] = next((body for pid, _, body in scopes if pid is None), {})
        if isinstance(shared.get("locked"), dict) and key in shared["locked"]:
            return []  # the profile's own lock for every product wins everywhere
    return [pid for pid in PRODUCT_IDS if pid not in replaced]


def _default_locks(profiles: Mapping[str, Any]) -> dict[str, set[str]]:
    """Per product, the options the default profile locks there (for every product, or in the
    product's own table), as every other profile holds them."""
    base = profiles.get(DEFAULT_PROFILE)
    locks: dict[str, set[str]] = {pid: set() for pid in PRODUCT_IDS}
    if not isinstance(base, dict):
        return locks
    shared = base.get("locked")
    if isinstance(shared, dict):
        for keys in locks.values():
            keys.update(shared)
    products = base.get("products")
    for alias, body in products.items() if isinstance(products, dict) else ():
        pid = product_id(alias)
        if pid is not None and isinstance(body, dict) and isinstance(body.get("locked"), dict):
            locks[pid].update(body["locked"])
    return locks


def _read_tables(
    data: Mapping[str, Any], catalog: Catalog
) -> tuple[dict[str, _Profile], list[str]]:
    problems: list[str] = []
    extra = set(data) - {"profiles"}
    if extra:
        problems.append(f"unknown top-level key(s) {', '.join(sorted(extra))}; only [profiles.*]")
    profiles_raw = data.get("profiles", {})
    if not isinstance(profiles_raw, dict):
        return {}, [*problems, "'profiles' must be a table"]
    profiles: dict[str, _Profile] = {}
    default_locks = _default_locks(profiles_raw)
    no_locks: dict[str, set[str]] = {}
    for name, body in profiles_raw.items():
        inherited = default_locks if name != DEFAULT_PROFILE else no_locks
        at = f"profiles.{toml_key(name)}"
        if not name:  # no request can name it: an empty profile means "default"
            problems.append(
                f"[{at}] a profile needs a name; a request without one gets "
                f'"{DEFAULT_PROFILE}", so put these values under [profiles.{DEFAULT_PROFILE}]'
            )
            continue
        if not isinstance(body, dict):
            problems.append(f"[{at}] must be a table")
            continue
        tables: dict[tuple[str | None, str], _Table] = {}
        scopes: list[tuple[str | None, str, Any]] = [(None, at, body)]
        chip_of: dict[str, str] = {}  # a product scope's path -> the chip it was named by
        for key in sorted(set(body) - {*KINDS, "products"}):
            problems.append(f"[{at}] {toml_key(key)}: unknown key; use defaults, locked, products")
        products = body.get("products", {})
        if not isinstance(products, dict):
            problems.append(f"[{at}.products] must be a table")
            products = {}
        for alias, pbody in products.items():
            pid = product_id(alias)
            if pid is None:
                problems.append(
                    f"[{at}.products] {toml_key(alias)}: unknown product; use one of "
                    f"{', '.join(PRODUCT_IDS)}"
                )
                continue
            scope = f"{at}.products.{toml_key(alias)}"
            if not isinstance(pbody, dict):
                problems.append(f"[{scope}] must be a table")
                continue
            for key in sorted(set(pbody) - set(KINDS)):
                problems.append(f"[{scope}] {toml_key(key)}: unknown key; use defaults, locked")
            scopes.append((pid, scope, pbody))
            chip_of[scope] = _chip(alias, pid)
        for pid, path, scope_body in scopes:
            for kind in KINDS:
                values = scope_body.get(kind)
                if values is None:
                    continue
                table = f"{path}.{kind}"
                if not isinstance(values, dict):
                    problems.append(f"[{table}] must be a table of option = value")
                    continue
                if (pid, kind) in tables:
                    problems.append(
                        f"[{table}] repeats [{tables[(pid, kind)].path}]: both name {pid}, "
                        "whose table is written once, under one of its names"
                    )
                    continue
                for key, value in values.items():
                    if key not in catalog:
                        # A close name is sought for the problems listed, not for a file of
                        # thousands of bad keys (each search costs up to a millisecond).
                        sought = len(problems) < MAX_PROBLEMS
                        problems.append(f"[{table}] {_unknown_option(catalog, key, sought)}")
                        continue
                    pids = [pid] if pid else _reached(scopes, kind, key, inherited)
                    problems += _check_value(
                        catalog, table, key, value, pids=pids, scoped=pid is not None
                    )
                carried = {k: as_carried(v) for k, v in values.items()}
                tables[(pid, kind)] = _Table(table, carried, chip_of.get(path, ""))
        profiles[name] = _Profile(tables)
    return profiles, problems


def _chip(alias: str, pid: str) -> str:
    """The SoC version a product table's name (`alias`, as written) is, when the product has
    several (its table applies to them all: the resolver tells products apart, not chips)."""
    named = alias_key(alias)
    found = [chip for chip in chips(pid) if alias_key(chip) == named]
    return found[0] if found and len(chips(pid)) > 1 else ""


def _unknown_option(catalog: Catalog, key: str, sought: bool) -> str:
    """An unknown key of a defaults or locked table, said as a job's config would hear it: an
    environment variable rules.md names (which a policy cannot set: it is the job's own), a
    name the source mentions without documenting it, else the closest option when `sought`."""
    said = f"{toml_key(key)}: unknown option"
    variable_rule = ENV_VAR_RULES.get(key)
    if variable_rule is not None:
        option = next((o.name for o in catalog.options if o.env == key), "")
        said += (
            f"; {key} is an environment variable ({variable_rule}), which a policy cannot set: "
            "a job's environment is its own"
        )
        return said + (f"; set the option {option} instead" if option else "")
    mentioned = MENTIONED_ONLY.get(key)
    if mentioned is not None:
        return f"{said}: {mentioned}, so the resolver cannot check it; remove it"
    hint = catalog.suggest(key) if sought else ""
    return said + (f"; did you mean {hint!r}?" if hint else "")


def as_carried(value: Any) -> Any:
    """A policy's object or list as a server's answer carries it (a Struct: a map keeps no key
    order, and a number is a double): keys sorted, and a whole number within ±2^53 an int
    (2.0 as 2), so that `resolve --policy` in process and a server running the policy answer
    alike. Equal as JSON to what the file says; scalars are left to their option's parse."""
    if not isinstance(value, dict | list):
        return value
    return _keys_sorted(alike_numbers(value))  # numbers as the fingerprint writes them


def _keys_sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _keys_sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_keys_sorted(item) for item in value]
    return value


class _LocksOnly:
    """The policy's locks without its defaults: whether two locks contradict each other does
    not hang on a default (a default that meets a lock gives way), so profiles that hold the
    same locks are checked once. A policy of thousands of profiles that inherit the default
    profile's locks loads in a fraction of the time."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.version = policy.version

    def layer(self, profile: str, product: str) -> PolicyLayer | None:
        layer = self._policy.layer(profile, product)
        return None if layer is None else PolicyLayer(locked=layer.locked, defaults={})

    def profile_names(self) -> tuple[str, ...]:
        return self._policy.profile_names()


_PROFILES_NAMED: Final = 8
"""Profiles named in one problem or one line of diagnostics_from_policy; the rest counted."""


_LockSet = tuple[tuple[str, str, bool], ...]
"""A layer's locks as a key: (option, its value as canonical JSON, written for all products)."""


_CANONICAL: Final = object()
"""The key of an entry's canonical JSON text in its memo."""


def _canonical(entry: PolicyEntry) -> str:
    """An entry's value as canonical JSON, written once: the default profile's locks are in
    every profile's lock set."""
    return entry.kept(_CANONICAL, entry.value, lambda: canonical_json(entry.value))


def _lock_conflicts(policy: Policy, catalog: Catalog) -> list[str]:
    """Locked values that contradict each other are refused at load, not at request time: in
    each mode a job can run in (both, unless the policy locks the mode; two locks that clash
    only in online inference would fail every inference job under the profile). A lock whose
    value the locked mode refuses clashes with that lock. Profiles holding the same locks on a
    product are checked once and named together."""
    locks_only = _LocksOnly(policy)
    holders: dict[tuple[str, _LockSet], tuple[PolicyLayer, list[str]]] = {}
    # The default profile first: the locks every other profile inherits are said as its own.
    for name in sorted(policy.profile_names(), key=lambda n: n != DEFAULT_PROFILE):
        for pid in PRODUCT_IDS:
            layer = locks_only.layer(name, pid)
            if layer is None or len(layer.locked) < 2:  # one lock has none to contradict
                continue
            locks = tuple(
                (k, _canonical(e), e.all_products) for k, e in sorted(layer.locked.items())
            )
            holders.setdefault((pid, locks), (layer, []))[1].append(name)
    # A clash said alike on several products (the same words, its product's name aside) is
    # one problem naming them, not one a product: a lock for every product clashes on each.
    said: dict[tuple[str, str, str, str], tuple[str, list[str]]] = {}
    for (pid, _), (layer, names) in holders.items():
        found: dict[tuple[str, str], set[str]] = {}
        for _config, result in _each_mode(locks_only, names[0], pid, layer, catalog):
            for clash in _clashing_locks(result, layer):
                found.setdefault(clash, set()).add(_mode_name(result))
        for (option, what), modes in found.items():
            only = f" in {next(iter(modes))}" if len(modes) == 1 else ""  # else: in every mode
            where = _profiles(names) + (" (the same locks)" if len(names) > 1 else "")
            key = (option, where, only, _alike_on_products(what, pid, _lock_tables(layer)))
            said.setdefault(key, (what, []))[1].append(pid)
    problems = []
    for (option, where, only, _), (what, pids) in said.items():
        on = _on_products(pids, "every product")
        as_said = _as_said_on(pids[0], len(pids), what)
        problems.append(f"locked {option} in {where} on {on}{only}{as_said}: {what}")
    return sorted(problems)


def _profiles(names: list[str]) -> str:
    if len(names) == 1:
        return f"profile {names[0]!r}"
    shown = ", ".join(repr(n) for n in names[:_PROFILES_NAMED])
    more = len(names) - _PROFILES_NAMED
    return f"profiles {shown}" + (f" and {more} more" if more > 0 else "")


def _each_mode(
    policy: PolicyLike, name: str, pid: str, layer: PolicyLayer, catalog: Catalog
) -> Iterator[tuple[dict[str, JSON], Resolution]]:
    """A job that sets nothing but the mode, under profile `name` on `pid`, resolved in each
    mode it can run in (the locked one, else both): the config and its answer."""
    from ._pipeline import resolve_for_checks

    locked = MODE_OPTION in layer.locked
    modes = [{}] if locked else [{MODE_OPTION: m.graph_run_mode} for m in Mode]
    for config in modes:
        request = ResolveRequest(product=pid, profile=name, config=config)
        yield config, resolve_for_checks(request, catalog=catalog, policy=policy)


def _mode_name(result: Resolution) -> str:
    mode = result.options.get(MODE_OPTION)
    return Mode.from_graph_run_mode(mode if isinstance(mode, int) else 1).prose


_TABLE_PATH: Final = re.compile(r'\[profiles\.(?:"(?:[^"\\]++|\\.)*+"|[^\]"]++)*+\]')
"""Where a policy value was written, as messages quote it: a profile's name is no option.
Possessive: a megabyte-long table path holds no backtracking point per character."""


def _lock_tables(layer: PolicyLayer) -> frozenset[str]:
    """The tables the layer's locks were written in ('profiles.x.products.atlas-a2.locked')."""
    return frozenset(table_of(entry.detail) for entry in layer.locked.values())


def _alike_on_products(message: str, pid: str, tables: Collection[str]) -> str:
    """A message with its product's name left out, so that the same words said on several
    products are one line naming them; kept whole when the name is in one of the `tables` it
    quotes (a clash's own lock tables): those products' tables differ, and each must be named
    to be fixed."""
    if any(pid in path and path[1:-1] in tables for path in _TABLE_PATH.findall(message)):
        return message
    return message.replace(pid, "\0")


def _as_said_on(first: str, products: int, message: str) -> str:
    """Whose words a line said alike on several `products` quotes, when they name the
    `first` product they were said on."""
    return f" (as said on {first})" if products > 1 and first in message else ""


def _for_the_platform(message: str) -> str:
    """A job's message as `policy check` tells it the platform team, who write the lock: not
    sent to themselves."""
    return message.replace(ASK_THE_PLATFORM, "change the lock")


def _names(option: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(option)}(?!\w)", text) is not None


def _clashing_locks(result: Resolution, layer: PolicyLayer) -> list[tuple[str, str]]:
    """(option, what) for each error between two of the layer's locks, the locked mode
    among them."""
    clashes = []
    mode_lock = layer.locked.get(MODE_OPTION)
    for d in result.diagnostics:
        if d.severity is not Severity.ERROR or d.option not in layer.locked:
            continue
        text = _TABLE_PATH.sub("", d.message)
        table = table_of(layer.locked[d.option].detail)
        what = f"{_for_the_platform(d.message)} ({d.rule}) [{table}]"
        others = [o for o in layer.locked if o != d.option and _names(o, text)]
        if others:  # each side's table: the other lock may be the default profile's
            tables = "; ".join(
                f"{o} locked in [{table_of(layer.locked[o].detail)}]" for o in others
            )
            clashes.append((d.option, f"{what}; {tables}"))
        elif mode_lock is not None and d.code is Code.UNSUPPORTED_VALUE:
            # A value for the other mode: every job fails, as none can change the mode.
            mode = f"graph_run_mode {show(mode_lock.value)}"
            clashes.append((d.option, f"{what}; the policy locks {mode}"))
    return clashes


@dataclass
class _Heard:
    """One thing the policy makes the resolver say, and where: its text as said first, and
    each (product, mode) a job heard it in."""

    message: str
    first: str
    reached: set[tuple[str, str]]
    profiles: set[str]


@dataclass(frozen=True, slots=True)
class PolicySays:
    """One line of diagnostics_from_policy, with the severity the jobs it reaches hear it at:
    an ERROR fails every such job that leaves the policy's values be."""

    severity: Severity
    text: str


def _reach(reached: Collection[tuple[str, str]]) -> str:
    """Where a line was heard: "on P, in M" when every mode heard it on the same products,
    else one such part per mode (training first), so no line claims a product or mode
    where its jobs heard something else."""
    by_mode: dict[str, set[str]] = {}
    for pid, mode in reached:
        by_mode.setdefault(mode, set()).add(pid)
    groups: dict[frozenset[str], list[str]] = {}
    for mode in sorted(by_mode, reverse=True):  # training first
        groups.setdefault(frozenset(by_mode[mode]), []).append(mode)
    return "; ".join(
        f"on {_on_products(pids, 'every product')}, in {' and '.join(modes)}"
        for pids, modes in groups.items()
    )


def diagnostics_from_policy(policy: Policy, catalog: Catalog = CATALOG) -> list[PolicySays]:
    """What the policy's own values make the resolver say to every job that leaves them be:
    a lock a rule overrides (R-ESC-1 in online inference), a timeout rounded on one product
    (R-HCT-3), a deprecated option, a lock the mode a job runs in refuses. Each is said per
    job; here the platform team sees it before the file goes live, once per table entry and
    message (the product it was said on left out), with the products and modes it reaches.
    Sorted by text."""
    heard: dict[tuple[str, str, Severity, str, str], _Heard] = {}
    for name in policy.profile_names():
        for pid in PRODUCT_IDS:
            layer = policy.layer(name, pid)
            if layer is None:
                continue
            entries = {**layer.defaults, **layer.locked}
            for config, result in _each_mode(policy, name, pid, layer, catalog):
                for d in result.diagnostics:
                    entry = entries.get(d.option)
                    if entry is None or d.option in config or d.code is Code.UNDOCUMENTED:
                        continue  # UNDOCUMENTED: no value at all, never one the policy gave
                    what = f"{d.code} ({d.rule})"
                    key = (
                        entry.detail,
                        d.option,
                        d.severity,
                        what,
                        # A product table's own path is in the entry's detail, already a key.
                        _alike_on_products(d.message, pid, ()),
                    )
                    said = heard.setdefault(key, _Heard(d.message, pid, set(), set()))
                    said.reached.add((pid, _mode_name(result)))
                    said.profiles.add(name)
    lines = []
    everyone = policy.profile_names()
    for (detail, option, severity, what, _), said in heard.items():
        line = f"{option} {detail}: {severity} {what} {_reach(said.reached)}"
        profiles = sorted(said.profiles)
        if len(profiles) == len(everyone) > 1:
            line += ", for every profile"
        elif not (len(profiles) == 1 and f"[profiles.{toml_key(profiles[0])}." in detail):
            line += f", for {_profiles(profiles)}"
        line += _as_said_on(said.first, len({pid for pid, _ in said.reached}), said.message)
        lines.append(PolicySays(severity, f"{line}: {_for_the_platform(said.message)}"))
    return sorted(lines, key=lambda says: says.text)


def parse_policy(text: str, source: str = "<policy>", catalog: Catalog = CATALOG) -> Policy:
    """A Policy from TOML text; PolicyError lists every problem with table and key."""
    if not isinstance(text, str):
        raise TypeError(
            f"parse_policy() takes the policy's text (str), not {type(text).__name__}; "
            "load_policy() reads a file"
        )
    try:
        return _parse_policy(text, source, catalog)
    except RecursionError:
        # The TOML parser (and the checks after it) recurse once per level of arrays and
        # inline tables: a deep enough value exhausts the stack. The file was read; its
        # content is refused (as text that is not UTF-8 is), not a defect to log with a
        # traceback.
        raise PolicyError(source, [_too_deep(text)]) from None


def _parse_policy(text: str, source: str, catalog: Catalog) -> Policy:
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # a TOMLDecodeError, or an int past str()'s digit limit
        raise PolicyError(source, [_toml_problem(text, exc)]) from None
    profiles, problems = _read_tables(data, catalog)
    if not profiles and not problems:
        problems.append("the policy defines no profile (an empty or truncated file?)")
    if problems:
        raise PolicyError(source, problems)
    policy = Policy(profiles, source, catalog)
    problems = _lock_conflicts(policy, catalog)
    if problems:
        raise PolicyError(source, problems)
    return policy


def _toml_problem(text: str, exc: ValueError) -> str:
    """tomllib's refusal, in the words of someone writing a policy rather than a parser."""
    said = str(exc)
    if not isinstance(exc, tomllib.TOMLDecodeError):  # an int of thousands of digits
        return "invalid TOML: a number has too many digits to be an option's value"
    if said.startswith("Cannot overwrite a value"):
        said += " (a key or table written twice?)"
    if said.endswith("(at end of document)"):  # tomllib names no line: the last one is
        lines = len(text.splitlines())
        said = said.removesuffix("(at end of document)") + (
            f"(at the end of the file, after line {lines}: perhaps a value left out, or an "
            "array, table or string not closed)"
        )
    if _LOOKS_LIKE_JSON_OR_YAML.match(text):
        said += "; a policy is TOML ([profiles.default.defaults] ...), not JSON or YAML"
    return f"invalid TOML: {said}"


_LOOKS_LIKE_JSON_OR_YAML: Final = re.compile(
    r"\ufeff?(?:\s*#[^\n]*\n)*\s*(?:\{|\[\s*\{|---|[A-Za-z_][\w.-]*:(?:\s|$))"
)
"""A file that opens as a JSON object or array of objects, a YAML document marker or a YAML
`key:` line, dotted or not (TOML writes `key =`, and `[[` opens an array of tables)."""


def _too_deep(text: str) -> str:
    """The refusal of a file nested too deeply, naming the line and key of the first value
    that goes past DEEP_NESTING levels when a scan finds one."""
    site = _deep_value(text)
    if site is None:
        return "nested too deeply: arrays or inline tables within each other past what can be read"
    line, key = site
    what = f"the value of {key}" if key else "a value"
    return (
        f"nested too deeply: {what} at line {line} has over {DEEP_NESTING} levels of arrays "
        "or inline tables"
    )


def _key_before(prefix: str) -> str:
    """The key of `key = ` before a value on its line, else "". String methods, not a regular
    expression: one over a long run of blanks backtracked in cubic time (seconds for 2,000)."""
    body = prefix.strip()
    return body[:-1].rstrip() if body.endswith("=") and len(body) > 1 else ""


def _deep_value(text: str) -> tuple[int, str] | None:
    """(line, key) where the first value nested past DEEP_NESTING levels starts; strings and
    comments are skipped, and a table header opens and closes on its own line."""
    depth = start_line = 0
    key = ""
    line = 1
    quote = ""
    i, end = 0, len(text)
    while i < end:
        ch = text[i]
        if ch == "\n":
            line += 1
        if quote:
            if ch == "\\" and quote[0] == '"':
                if text.startswith("\n", i + 1):
                    line += 1
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = ""
                continue
        elif ch == "#":
            newline = text.find("\n", i)
            i = end if newline < 0 else newline
            continue
        elif ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            i += len(quote)
            continue
        elif ch in "[{":
            if depth == 0:
                start_line = line
                key = _key_before(text[text.rfind("\n", 0, i) + 1 : i])
            depth += 1
            if depth > DEEP_NESTING:
                return start_line, key
        elif ch in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return None


def _not_regular(path: str | Path, mode: int) -> str:
    """What a path that is not a regular file is, in words (through symlinks, as opened)."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((name for test, name in kinds if test(mode)), "a special file")
    target = os.path.realpath(path)
    via = f"a symlink to {target}, " if target != os.path.abspath(path) else ""
    return f"is {via}{kind}, not a regular file"


def read_policy_bytes(path: str | Path, limit: int = MAX_POLICY_BYTES) -> bytes:
    """The bytes of a policy file, read so that the caller can never hang or run out of memory.

    The open does not block (a FIFO would wait for a writer forever), anything but a regular
    file is refused before a byte is read (a FIFO, a device such as /dev/zero, a directory),
    and at most `limit` + 1 bytes are read, so a file that grows after the size check is
    still refused by size."""
    source = str(path)
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        with_kind = _kind_of(path)
        problem = with_kind or f"cannot read: {exc.strerror or exc}"
        raise PolicyReadError(source, [problem]) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyReadError(source, [_not_regular(path, info.st_mode)])
        if info.st_size > limit:
            raise PolicyReadError(
                source, [f"the file is {info.st_size:,} bytes, over the limit of {limit:,} bytes"]
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise PolicyReadError(source, [f"the file is over the limit of {limit:,} bytes"])
        return b"".join(chunks)
    except OSError as exc:
        raise PolicyReadError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    finally:
        os.close(fd)


def _kind_of(path: str | Path) -> str:
    """The refusal for a path that exists but cannot be opened for being no regular file (a
    Unix socket refuses open); empty when it is missing or a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    return "" if stat.S_ISREG(mode) else _not_regular(path, mode)


def content_digest(raw: bytes) -> str:
    """The short hash by which a refused file is reported."""
    return short_digest(hashlib.sha256(raw).hexdigest())


def short_digest(full: str) -> str:
    """A file's short hash, from its full SHA-256 in hex."""
    return full[:12]


def policy_file_digest(path: str | Path) -> str:
    """The short hash by which a refused policy file is reported, read within the same limits
    as a load (never a FIFO, a device or an oversized file); empty when it cannot be read. For
    a loader of its own that does not give the hash of the bytes it read."""
    try:
        return content_digest(read_policy_bytes(path))
    except (PolicyReadError, ValueError):  # ValueError: a path no file can have (a NUL)
        return ""


def load_policy(
    path: str | Path, catalog: Catalog = CATALOG, *, reuse: Policy | None = None
) -> Policy:
    """Read and check a policy file (the one place the resolver package opens a file).

    `reuse`: a policy loaded before; when the file holds the very bytes it was loaded from, from
    the same path and for the same catalog, it is returned as it is, without the check (which
    takes seconds for a large policy, for every reload asked of an unchanged file)."""
    source = str(path)
    raw = read_policy_bytes(path)
    full_digest = hashlib.sha256(raw).hexdigest()
    if (
        reuse is not None
        and reuse.file_digest == full_digest
        and reuse.source == source
        and reuse._catalog is catalog
    ):
        return reuse
    digest = short_digest(full_digest)
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")  # a byte order mark, as editors write
    except UnicodeDecodeError as exc:
        raise PolicyError(source, [f"not UTF-8 at byte {exc.start}"], digest=digest) from None
    try:
        policy = parse_policy(text, source, catalog)
    except PolicyError as exc:
        exc.digest = digest
        raise
    policy.file_digest = full_digest
    return policy
