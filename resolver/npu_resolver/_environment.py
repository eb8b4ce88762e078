"""The job's environment: the variables that give option values, and those whose text is not
a valid value (an error only where the variable would give the value)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ._catalog import Catalog
from ._gates import option_gate
from ._model import JSON, MAX_MEMO_TEXT, Code, ResolveRequest, is_text, keep, plain_text
from ._options import ENV_VAR_RULES, PATH_ENV_VARS
from ._state import PolicyLayer, State, via_env
from ._values import Problem, parse, show

_MAX_ENV_TEXTS: Final = 32
"""Per option view (of the few with a variable); texts beyond these are parsed each time."""


_NOT_UTF8: Final = (
    "not valid UTF-8 text (bytes that are not UTF-8, or a lone surrogate such as \\ud800)"
)
_BLANK: Final = "blank"
"""A workdir of spaces only: it names no folder, as a blank variable names none."""
_HOLDS_NUL: Final = "a path holding a NUL character (the runtime would read it only up to the NUL)"


def _fault(text: str, is_path: bool) -> str | None:
    """Why a variable's text or the workdir can be read as nothing, if it cannot."""
    if not is_text(text):
        return _NOT_UTF8
    if is_path and "\x00" in text:
        return _HOLDS_NUL
    return None


def readable(
    request: ResolveRequest,
) -> tuple[Mapping[str, str], str, tuple[tuple[str, str], ...]]:
    """The request's env and workdir without text that is not Unicode (a lone surrogate, as
    os.environ gives for bytes that are not UTF-8) or a folder holding a NUL, and what was left
    out, with why: the named variables, then "workdir". Such text can name no path in an
    answer (nor be sent to a server, if not Unicode); it is an error (see `report_unreadable`)
    and counts as unset."""
    env, workdir = request.env, request.workdir
    left_out = tuple(
        (var, fault)
        for var in ENV_VAR_RULES
        if (text := env.get(var)) is not None
        and (fault := _fault(plain_text(text), var in PATH_ENV_VARS)) is not None
    )
    if left_out:
        names = {var for var, _ in left_out}
        env = {var: text for var, text in env.items() if var not in names}
    fault = _BLANK if workdir and not workdir.strip() else _fault(workdir, True)
    if fault is not None:
        workdir, left_out = "", (*left_out, ("workdir", fault))
    return env, workdir, left_out


def report_unreadable(
    state: State, request: ResolveRequest, left_out: tuple[tuple[str, str], ...]
) -> None:
    """INVALID_VALUE on `env.NAME` or `workdir` for each name `readable` left out."""
    for name, fault in left_out:
        if name == "workdir" and fault == _BLANK:  # as a blank variable: names no folder
            message = f"workdir {show(request.workdir)} names no folder; the paths keep <workdir>."
            state.emit(Code.NORMALIZED, name, "", message)
            continue
        if name == "workdir":
            message = f"workdir {show(request.workdir)} is {fault}; the paths keep <workdir>."
            state.emit(Code.INVALID_VALUE, name, "", message)
            continue
        message = (
            f"environment variable {name} is {show(request.env[name])}, which is {fault}; "
            "it is read as unset: fix or unset it."
        )
        state.emit(Code.INVALID_VALUE, f"env.{name}", ENV_VAR_RULES[name], message)


def blank_variable(state: State, var: str, rule: str, instead: str) -> None:
    """NORMALIZED for `export VAR=`: a blank variable names nothing, whichever it is; `instead`
    says what applies then."""
    state.emit(
        Code.NORMALIZED,
        f"env.{var}",
        rule,
        f"environment variable {var} is blank, which sets nothing: {instead}. "
        "Unset the variable instead.",
    )


def read_env(
    state: State, catalog: Catalog
) -> tuple[dict[str, JSON], dict[str, tuple[str, Problem]]]:
    """The environment variables that give option values (HCCL_EXEC_TIMEOUT, ...), and those
    whose text is not a valid value (judged by `env_problems`, once precedence is known)."""
    values: dict[str, JSON] = {}
    invalid: dict[str, tuple[str, Problem]] = {}
    for var, (rule, instead) in PATH_ENV_VARS.items():
        text = state.env.get(var)
        if text is not None and not text.strip():  # `export VAR=`: names no folder
            blank_variable(state, var, rule, instead)
    for var, option in catalog.env_options.items():
        text = state.env.get(var)
        if text is None:
            continue
        view = state.view[option.name]
        text = plain_text(text)
        if not text.strip():  # `export VAR=`: names no value, as a blank folder variable
            blank_variable(
                state, var, option.env_rule, f"{option.name} is resolved as if it were unset"
            )
            continue
        parsed = view.env_texts.get(text)
        if parsed is None:
            parsed = parse(view, text.strip(), product=state.pid, from_text=True)
            if len(text) <= MAX_MEMO_TEXT:
                keep(view.env_texts, text, parsed, _MAX_ENV_TEXTS)
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
