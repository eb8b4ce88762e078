"""Step 6, the gates: what the product, mode or version lacks is dropped, an unsupported value
refused; and the words that say why, shared with the policy values that meet a gate."""

from __future__ import annotations

from typing import Final

from ._catalog import OptionView
from ._model import CATALOG_VERSION, Code, Source
from ._products import listed
from ._schema import MODE_OPTION, Mode, ValueGate
from ._state import State
from ._values import show


def option_gate(state: State, view: OptionView) -> tuple[Code, str, str, str] | None:
    """Why the product, mode or version drops this option: (code, option, rule, message)."""
    option = view.option
    name = option.name
    if option.unsupported_version:
        return (
            Code.DROPPED_UNSUPPORTED_VERSION,
            name,
            option.unsupported_rule,
            f"{name} is not supported in this version (source {CATALOG_VERSION}) and has no "
            "effect; remove it.",
        )
    if not view.product_ok:
        return (
            Code.DROPPED_UNSUPPORTED_PRODUCT,
            name,
            option.products_rule,
            f"{name} does not exist on {state.pid} "
            f"(only {listed(option.products or ())}); remove it for this product.",
        )
    if not view.mode_ok:
        mode = (
            "online inference (graph_run_mode 0)"
            if option.mode is Mode.INFERENCE
            else "training (graph_run_mode 1)"
        )
        return (
            Code.DROPPED_UNSUPPORTED_MODE,
            name,
            option.mode_rule,
            f"{name} only acts in {mode}; remove it for this mode.",
        )
    return None


def apply_gates(state: State) -> None:
    """Step 6: drop what the product, mode or version lacks; refuse unsupported values. When
    the caller's graph_run_mode was refused, the mode they meant is not known: the mode's
    gates judge nothing (the answer is not ok anyway), as no rule judges from a refused value."""
    # (A lock or a policy default that decided the mode all the same leaves it known.)
    mode_unknown = MODE_OPTION in state.refused and MODE_OPTION not in state.slots
    views, slots = state.view, state.slots  # a drop pops from this same dict
    for name in state.touched:
        view = views[name]
        if view.plain_gate or name not in slots:
            continue  # acts here and every value is supported: nothing to check
        gate = option_gate(state, view)
        if gate is not None:
            code, _, rule, message = gate
            if not (mode_unknown and code is Code.DROPPED_UNSUPPORTED_MODE):
                state.drop(name, code, rule, message, gate=True)
        elif view.blocked_values:
            _value_gate(state, name, view, mode_unknown=mode_unknown)


GATE_CODES: Final = {
    "version": Code.DROPPED_UNSUPPORTED_VERSION,
    "mode": Code.DROPPED_UNSUPPORTED_MODE,
    "product": Code.DROPPED_UNSUPPORTED_PRODUCT,
}


def gate_kind(state: State, gate: ValueGate) -> str:
    if gate.unsupported_version:
        return "version"
    return "mode" if gate.mode is not None and gate.mode is not state.mode else "product"


def why_refused(state: State, gate: ValueGate) -> str:
    """Why a value is refused here, as the end of a sentence about it."""
    kind = gate_kind(state, gate)
    if kind == "version":
        if gate.products is not None and state.pid not in gate.products:
            only = listed(gate.products)
            return (
                f"is not supported in this version (source {CATALOG_VERSION}), "
                f"and only on {only} at all"
            )
        return f"is not supported in this version (source {CATALOG_VERSION})"
    if kind == "mode":
        return f"is only for {(gate.mode or Mode.TRAINING).prose}"
    return f"is not supported on {state.pid}"


def _value_gate(state: State, name: str, view: OptionView, *, mode_unknown: bool) -> None:
    slot = state.slots[name]
    gate = view.blocked(slot.value)
    if gate is None or (mode_unknown and gate_kind(state, gate) == "mode"):
        return
    if not slot.is_set:
        del state.slots[name]
        return
    why = why_refused(state, gate)
    accepted = _accepted(state, view, mode_unknown=mode_unknown)
    if slot.source is Source.ENV:  # refused as an invalid variable is: no rule judges from it
        state.slots.pop(name, None)
        state.refused.add(name)
        state.emit(
            Code.UNSUPPORTED_VALUE,
            f"env.{slot.env_var}",
            gate.rule,
            f"environment variable {slot.env_var}={show(slot.value)} sets {name} to a value "
            f"that {why}; unset it or choose another value{accepted}.",
        )
        return
    state.refuse(
        name,
        Code.UNSUPPORTED_VALUE,
        gate.rule,
        f"{name} {show(slot.value)} {why}; choose another value{accepted}.",
    )


MAX_NAMED_VALUES: Final = 12


def _accepted(state: State, view: OptionView, *, mode_unknown: bool) -> str:
    """The values the option takes here (this product and mode), for a message that refuses
    one: ': one of '2', '4'', or "" for an option without a list of values. With the mode not
    known (the caller's graph_run_mode refused), a value refused in one mode only counts as
    taken, as the gates then judge it."""
    accepted = []
    for choice in view.option.choices:
        gate = view.blocked(choice)
        if gate is None or (mode_unknown and gate_kind(state, gate) == "mode"):
            accepted.append(show(choice))
    if not accepted or len(accepted) > MAX_NAMED_VALUES:
        return ""
    return f": {accepted[0]}" if len(accepted) == 1 else f": one of {', '.join(accepted)}"
