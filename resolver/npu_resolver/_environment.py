"""The job's environment: the variables that give option values, those that are not valid
values, and the operator compile cache's size variables."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from ._catalog import Catalog
from ._gates import option_gate
from ._model import JSON, Code, Source
from ._options import CACHE_ENV_VARS
from ._state import PolicyLayer, State, via_env
from ._values import Problem, parse, show

_ENV_INT: Final = re.compile(r"-?[0-9]{1,18}")


def read_env(
    state: State, catalog: Catalog
) -> tuple[dict[str, JSON], dict[str, tuple[str, Problem]]]:
    """The environment variables that give option values (HCCL_EXEC_TIMEOUT, ...), and those
    whose text is not a valid value (judged by `env_problems`, once precedence is known)."""
    values: dict[str, JSON] = {}
    invalid: dict[str, tuple[str, Problem]] = {}
    for var, option in catalog.env_options.items():
        text = state.env.get(var)
        if text is None:
            continue
        parsed = parse(state.view[option.name], text.strip(), product=state.pid, from_text=True)
        if isinstance(parsed, Problem):
            invalid[option.name] = (var, parsed)
            continue
        values[option.name] = parsed.value
    return values, invalid


def env_problems(
    state: State,
    invalid: Mapping[str, tuple[str, Problem]],
    explicit: Mapping[str, tuple[JSON, JSON]],
    layer: PolicyLayer,
) -> None:
    """An invalid variable is an error only where it would give the value. The source: when
    the option and its variable are both set, the option wins; and an option the product or
    mode lacks is ignored whatever its variable says."""
    for name, (var, problem) in invalid.items():
        view = state.view[name]
        rule = view.option.env_rule
        gate = option_gate(state, view)
        if gate is not None:  # the option does not act here: nothing "wins" over the variable,
            code, option, rule, message = gate  # which is named (an explicit value is too)
            lead = f"{var} is set (and not valid either)"
            state.emit(code, option, rule, via_env(var, lead, message))
            continue
        if name in layer.locked or name in explicit:
            winner = "the policy's lock" if name in layer.locked else f"the explicit {name}"
            state.emit(
                Code.ENV_OVERRIDDEN,
                name,
                rule,
                f"{var} is set but {winner} wins, so it has no effect; it is not valid either "
                f"({problem.message.rstrip('.')}): fix or unset it.",
            )
            continue
        message = f"environment variable {var}: {problem.message}"
        state.emit(problem.code, f"env.{var}", rule, message, problem.suggestion)
        state.refused.add(name)


def cache_env(state: State) -> None:
    """R-OCC-4: the cache size variables, read by the runtime, checked here; only while the
    operator compile cache is on (they mean nothing once it is off). R-OCD-1: with the cache off
    its folder has no effect ("启动算子编译缓存功能时，可通过op_compiler_cache_dir配置…"). Run last,
    once every rule that can turn the cache off (R-OCC-2, R-OCC-3 in a file) has acted."""
    mode = state.value("op_compiler_cache_mode")
    if mode == "disable":
        slot = state.slots["op_compiler_cache_mode"]
        why = f" (turned off by {slot.detail})" if slot.source is Source.DERIVED else ""
        state.drop(
            "op_compiler_cache_dir",
            Code.DROPPED_NO_EFFECT,
            "R-OCD-1",
            f"op_compiler_cache_dir has no effect while op_compiler_cache_mode is 'disable'"
            f"{why}: there is no cache to keep; remove it or turn the cache on.",
        )
    if mode is None or mode == "disable":
        return
    for var in CACHE_ENV_VARS:
        text = state.env.get(var)
        if text is None:
            continue
        stripped = text.strip()
        number = int(stripped) if _ENV_INT.fullmatch(stripped) else None
        ratio = var == "ASCEND_REMAIN_CACHE_SIZE_RATIO"
        if number is None or (ratio and not 1 <= number <= 100) or (not ratio and number < -1):
            expected = (
                "an integer percentage in [1, 100]"
                if ratio
                else "MB as an integer, -1 for no aging"
            )
            state.emit(
                Code.INVALID_VALUE,
                f"env.{var}",
                "R-OCC-4",
                f"environment variable {var}={show(text)} is not {expected}; fix or unset it.",
            )
