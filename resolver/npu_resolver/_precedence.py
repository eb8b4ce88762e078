"""Steps 4 and 5: the mode, then each option's value from the ordered chain of sources: a
policy lock, the explicit option, the job's environment variable, the policy default, the
documented default."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from ._catalog import OptionView
from ._cross import taken_as
from ._fingerprint import fragment
from ._gates import GATE_CODES, gate_kind, why_refused
from ._model import (
    CODE_SEVERITY,
    CONTAINER_TYPES,
    JSON,
    Code,
    Diagnostic,
    Provenance,
    Source,
    diagnostic,
    keep,
    unset,
)
from ._schema import MODE_OPTION, Mode, Option
from ._state import PolicyEntry, PolicyLayer, Slot, State
from ._values import Parsed, Problem, parse, show

_UNSET: Final = unset()
_S = TypeVar("_S")


ASK_THE_PLATFORM: Final = "ask the platform team to change the lock"
"""A job's remedy for a lock, which `policy check` tells the platform team as its own."""


def effective_mode(
    state: State, explicit: Mapping[str, tuple[JSON, JSON]], layer: PolicyLayer
) -> Mode:
    """Step 4: lock, else explicit, else policy default, else 1 (training). A policy value is
    read as the option reads it ("0" is 0), so the mode and the option never disagree."""
    for entry in (
        layer.locked.get(MODE_OPTION),
        explicit.get(MODE_OPTION),
        layer.defaults.get(MODE_OPTION),
    ):
        if entry is None:
            continue
        if isinstance(entry, PolicyEntry):
            parsed = parse(state.view[MODE_OPTION], entry.value, product=state.pid)
            value = parsed.value if isinstance(parsed, Parsed) else None
        else:
            value = entry[0]
        if value in (0, 1) and type(value) is int:
            return Mode.from_graph_run_mode(value)
    return Mode.TRAINING


def _policy_value(state: State, view: OptionView, entry: PolicyEntry) -> JSON | None:
    parsed = _policy_reading(view, entry, state.pid)
    if isinstance(parsed, Problem):
        state.report(view.option.name, parsed)
        return None
    return parsed.value if isinstance(parsed, Parsed) else None


def _policy_fragment(entry: PolicyEntry, name: str, value: JSON) -> str | None:
    """The fingerprint fragment of a policy's object or list, written once and kept on its
    entry (None for a scalar: the slot's own look-up is as cheap)."""
    if type(value) not in CONTAINER_TYPES:
        return None
    return entry.kept(name, value, lambda: fragment(name, value))


def _policy_reading(view: OptionView, entry: PolicyEntry, product: str) -> Parsed | Problem:
    """The view's reading of a policy value: an object or list read once per view and kept
    on its entry, a scalar each time (it costs no more than the look-up)."""
    value = entry.value
    if type(value) not in CONTAINER_TYPES:
        return parse(view, value, product=product)
    return entry.kept(id(view), view, lambda: parse(view, value, product=product))


def _same(a: JSON, b: JSON) -> bool:
    """Equal as JSON: 1 and true, or 600 and 600.0, are different requests."""
    return type(a) is type(b) and a == b


def _rules(*rules: str) -> tuple[str, ...]:
    """The rule ids in order, each once (mostly they are all different already)."""
    return rules if len(set(rules)) == len(rules) else tuple(dict.fromkeys(rules))


def _alias_rule(option: Option, raw: JSON) -> tuple[str, ...]:
    """The rule that reads an old name (R-PM-2: force_fp32), when the caller wrote one."""
    return (option.aliases_rule,) if isinstance(raw, str) and raw in option.aliases else ()


class _Next(enum.Enum):
    """A source with nothing to say about an option: the next one in the chain is asked."""

    NEXT = 0


_NEXT: Final = _Next.NEXT
Decision = Slot | None | _Next
"""A source's answer: the option's slot; None, decided that no source sets it (the
documented default stays, or nothing does); or _NEXT."""


@dataclass(slots=True)
class _Asked:
    """What the sources know of one option while its value is chosen. (Not frozen: a frozen
    dataclass sets each field through object.__setattr__, and one is built per option.)"""

    state: State
    view: OptionView
    given: tuple[JSON, JSON] | None
    """The caller's value and the form they wrote it in."""
    from_env: JSON
    layer: PolicyLayer


def _locked(asked: _Asked) -> Decision:
    """A policy lock wins over everything, if it can act here."""
    state, view, given, from_env = asked.state, asked.view, asked.given, asked.from_env
    option = view.option
    name = option.name
    lock = asked.layer.locked.get(name)
    if lock is None:
        return _NEXT
    if not view.acts and (given is not None or from_env is not None):
        # A lock that cannot act here replaces nothing: the caller's own value meets the
        # gate and its warning (an error under strict), as it would with no policy.
        return _NEXT
    value = _policy_value(state, view, lock)
    if value is None:
        return None
    gate = view.blocked(value)
    if gate is not None:
        state.emit(
            Code.UNSUPPORTED_VALUE,
            name,
            gate.rule,
            f"the policy locks {name} to {show(value)} ({lock.detail}), a value that "
            f"{why_refused(state, gate)}; {ASK_THE_PLATFORM}.",
        )
        return None
    wanted = given[0] if given is not None else from_env
    requested: JSON = unset()
    if given is not None and not _same(given[1], given[0]):
        requested = given[1]  # the form the caller wrote, as on every other path
    if wanted is not None and wanted != value:
        if requested is _UNSET:  # the caller's value, or the variable's as read (HCCL_EXEC_
            requested = wanted  # TIMEOUT=" 600" asks 600, as when it is rounded, R-HCT-3)
        if _same_once_taken(state, name, wanted, value):
            return _locked_slot(lock, option, value, requested)
        via = f"{name} {show(wanted)}" if given is not None else f"{option.env}={show(wanted)}"
        state.emit(
            Code.POLICY_LOCKED,
            name,
            option.rule,
            f"{via} is replaced by the policy's locked value {show(value)} "
            f"({lock.detail}); {ASK_THE_PLATFORM}.",
        )
    return _locked_slot(lock, option, value, requested)


def _locked_slot(lock: PolicyEntry, option: Option, value: JSON, requested: JSON) -> Slot:
    return Slot(
        value,
        Source.POLICY_LOCKED,
        (option.rule,),
        requested=requested,
        detail=lock.detail,
        all_products=lock.all_products,
        fragment=_policy_fragment(lock, option.name, value),
    )


def _same_once_taken(state: State, name: str, wanted: JSON, locked: JSON) -> bool:
    """The caller asked for the very value the lock takes effect as here, once the product
    rounds it (a config resolved under the lock and sent again): the lock replaces nothing
    worth a warning. A value that only rounds to it (550 beside 544) was replaced, and said."""
    return _same(wanted, taken_as(state, name, locked))


def _unless_refused(asked: _Asked) -> Decision:
    """A value refused with an error (the caller's or the variable's) leaves no value; the
    sources below it are not asked."""
    return None if asked.view.option.name in asked.state.refused else _NEXT


def _explicit(asked: _Asked) -> Decision:
    """The caller's value. Notes on where a value came from only matter where the option
    acts; elsewhere the gate's warning (step 6) is all there is to say. A variable that says
    what the option says, once the product takes each (R-HCT-3 rounds both), overrides
    nothing (the answer to a job's variable, sent back as the config beside it): not said; nor
    is a value the product refuses said to win (step 6 refuses it, and neither acts)."""
    given = asked.given
    if given is None:
        return _NEXT
    option = asked.view.option
    env_rules: tuple[str, ...] = ()
    if asked.from_env is not None:
        env_rules = (option.env_rule,)
        state = asked.state
        said = taken_as(state, option.name, asked.from_env)
        wins = asked.view.acts and asked.view.blocked(given[0]) is None  # else step 6 refuses it
        if wins and not _same(said, taken_as(state, option.name, given[0])):
            state.emit(
                Code.ENV_OVERRIDDEN,
                option.name,
                option.env_rule,
                f"{option.env} is set but the explicit {option.name} {show(given[0])} wins; "
                "remove one of them to avoid confusion.",
            )
    return Slot(
        given[0],
        Source.USER,
        _rules(option.rule, *_alias_rule(option, given[1]), *env_rules),
        requested=unset() if _same(given[1], given[0]) else given[1],
    )


def _environment(asked: _Asked) -> Decision:
    """The job's environment variable for the option (rules.md names which)."""
    from_env = asked.from_env
    if from_env is None:
        return _NEXT
    return _env_value(asked.view, from_env, asked.state.diagnostics)


def _env_value(view: OptionView, value: JSON, diagnostics: list[Diagnostic]) -> Slot:
    """The slot of a value the option's variable gave, its FROM_ENV note added."""
    slot, note = _env_slot(view, value)
    if note is not None:
        diagnostics.append(note)
    return slot


def _env_slot(view: OptionView, value: JSON) -> tuple[Slot, Diagnostic | None]:
    """The slot of a value the option's variable gave, with its provenance and fingerprint
    fragment, and its FROM_ENV note where the option acts; kept per view for the values that
    recur (a job's environment is much the same from one request to the next)."""
    kept = type(value) is view.pytype
    if kept:
        found = view.env_slots.get(value)
        if found is not None:
            return found
    option = view.option
    name = option.name
    rules = _rules(option.rule, option.env_rule)
    provenance = Provenance(Source.ENV, rules, _UNSET, option.env)
    fields = (value, Source.ENV, rules, _UNSET, option.env, "", False, provenance)
    slot = tuple.__new__(Slot, (*fields, fragment(name, value) if kept else None))
    note = None
    if view.acts and view.blocked(value) is None:  # a refused value gives the option nothing
        note = diagnostic(
            CODE_SEVERITY[Code.FROM_ENV],
            Code.FROM_ENV,
            name,
            option.env_rule,
            f"{name} is {show(value)} from {option.env}; set {name} to override it.",
        )
    if kept:
        _keep_slot(view.env_slots, value, (slot, note))
    return slot, note


def _policy_default(asked: _Asked) -> Decision:
    """The policy profile's default for the product. One that cannot act here leaves the
    documented default in place, as a policy option the product or mode lacks does (quietly
    when it was written for every product)."""
    state, view = asked.state, asked.view
    name = view.option.name
    entry = asked.layer.defaults.get(name)
    if entry is None:
        return _NEXT
    value = _policy_value(state, view, entry)
    if value is None:
        return None
    gate = view.blocked(value)
    if gate is not None:
        if not entry.all_products:
            state.emit(
                GATE_CODES[gate_kind(state, gate)],
                name,
                gate.rule,
                f"the policy's default {name} {show(value)} ({entry.detail}) "
                f"{why_refused(state, gate)}, so the documented default applies here."
                + state.strict_remedy(),
            )
        return None
    return Slot(
        value,
        Source.POLICY,
        (view.option.rule,),
        detail=entry.detail,
        all_products=entry.all_products,
        fragment=_policy_fragment(entry, name, value),
    )


SOURCES: Final[tuple[Callable[[_Asked], Decision], ...]] = (
    _locked,
    _unless_refused,
    _explicit,
    _environment,
    _policy_default,
)
"""Step 5, the chain of sources, highest first (contract: a policy lock, the explicit option,
the job's environment variable, the policy profile's default); below them all, the documented
default the request started from."""


def _slot(
    state: State,
    view: OptionView,
    given: tuple[JSON, JSON] | None,
    from_env: JSON,
    layer: PolicyLayer,
) -> Slot | None:
    """Step 5 for one option: the first source in the chain that decides."""
    asked = _Asked(state, view, given, from_env, layer)
    for source in SOURCES:
        decided = source(asked)
        if decided is not _NEXT:
            return decided
    return None


_MAX_USER_SLOTS: Final = 32
_MAX_KEPT_TEXT: Final = 256
"""Per option view, at most 32 values are kept, text only up to 256 characters: with 620
views (5 products, 2 modes, 62 options) that bounds them at some 15 MiB however many
distinct values callers send; the values that recur are few and short."""


def _plain_slot(view: OptionView, name: str, value: JSON) -> Slot:
    """The slot of a caller's value taken as written, with its provenance and fingerprint
    fragment; kept per view for the values that recur (see OptionView.user_slots)."""
    kept = type(value) is view.pytype  # not an object or a pass-through value
    if kept:
        slot = view.user_slots.get(value)
        if slot is not None:
            return slot
    fields = (value, Source.USER, view.user_rules, _UNSET, "", "", False, view.user_provenance)
    slot = tuple.__new__(Slot, (*fields, fragment(name, value) if kept else None))
    if kept:
        _keep_slot(view.user_slots, value, slot)
    return slot


def _keep_slot(table: dict[JSON, _S], value: JSON, entry: _S) -> None:
    """Keep what a recurring value gave, per view: text only up to _MAX_KEPT_TEXT characters."""
    if not isinstance(value, str) or len(value) <= _MAX_KEPT_TEXT:
        keep(table, value, entry, _MAX_USER_SLOTS)


def apply_precedence(
    state: State,
    explicit: Mapping[str, tuple[JSON, JSON]],
    env_values: Mapping[str, JSON],
    layer: PolicyLayer,
    order: Mapping[str, int],
) -> None:
    """Step 5: only options someone set are looked at; the rest keep the shared defaults.
    `order`: each option's place in the catalog, the order the touched options are visited."""
    touched = {*explicit, *env_values, *layer.locked, *layer.defaults, *state.refused}
    state.touched = sorted(touched, key=order.__getitem__)
    views, slots, undocumented = state.view, state.slots, state.undocumented
    others = env_values.keys() | layer.locked.keys() | layer.defaults.keys()
    locked, refused, diagnostics = layer.locked, state.refused, state.diagnostics
    new_slot, user = tuple.__new__, Source.USER
    for name in state.touched:
        given = explicit.get(name)
        if given is None:
            from_env = env_values.get(name)
            if from_env is not None and name not in locked and name not in refused:
                # The job's variable and no lock: the chain's answer, found without walking it.
                slots[name] = _env_value(views[name], from_env, diagnostics)
                if undocumented:
                    undocumented.pop(name, None)
                continue
        elif name not in others:
            # The common case: a caller's value and nothing else about this option. Built
            # with tuple.__new__, the same Slot without the named-tuple constructor's frame
            # (fields by position: tests/test_precedence.py pins their order).
            value, raw = given
            view = views[name]
            if value is raw or _same(value, raw):
                kept = view.user_slots.get(value) if type(value) is view.pytype else None
                slots[name] = kept or _plain_slot(view, name, value)
            else:
                rules = _rules(*view.user_rules, *_alias_rule(view.option, raw))
                slots[name] = new_slot(Slot, (value, user, rules, raw, "", "", False, None, None))
            if undocumented:
                undocumented.pop(name, None)
            continue
        slot = _slot(state, views[name], given, env_values.get(name), layer)
        if slot is not None:
            state.slots[name] = slot
            state.undocumented.pop(name, None)
        elif name in state.refused or name in layer.locked:
            state.slots.pop(name, None)
