"""Output formats of `npu-resolve resolve`: json, table, python and env."""

from __future__ import annotations

import json
import shlex
import unicodedata
from collections.abc import Mapping
from typing import Final

from .._catalog import CATALOG
from .._model import JSON, Code, Diagnostic, Resolution, Severity, Source
from .._options import CACHE_ENV_VARS, ENV_VAR_RULES, NAMED_ENV_VARS, OUTRANKED_FOLDER_VARS
from .._paths import FOLDER_OPTIONS

_COLOURS: Final = {
    Severity.ERROR: "\033[31m",
    Severity.WARNING: "\033[33m",
    Severity.INFO: "\033[36m",
}
_DIM, _BOLD, _RESET = "\033[2m", "\033[1m", "\033[0m"
_DEFAULT_SOURCES: Final = frozenset({Source.DEFAULT, Source.PRODUCT_DEFAULT})


def render_json(result: Resolution) -> str:
    return json.dumps(result.to_json(), indent=2, ensure_ascii=False)


def shown(text: str) -> str:
    """A caller's string as a terminal may show it: characters that are not printable (escape
    sequences, a newline that would split a row) written as repr writes them, e.g. \\x1b."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def columns(text: str) -> int:
    """How many terminal columns `text` takes: two for a wide (CJK) character, none for a mark
    that joins the one before (a combining accent, a Thai or Devanagari vowel sign, a variation
    selector), so that a table stays aligned whatever script its values are in."""
    if text.isascii():
        return len(text)
    return sum(_char_columns(char) for char in text)


def _char_columns(char: str) -> int:
    if unicodedata.category(char) in _ZERO_WIDTH or _is_joining_jamo(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


_ZERO_WIDTH: Final = frozenset({"Mn", "Me"})


def _is_joining_jamo(char: str) -> bool:
    """A Hangul medial vowel or final consonant (U+1160 to U+11FF, U+D7B0 to U+D7FF): it joins
    the wide initial consonant before it into one syllable, two columns in all."""
    return "\u1160" <= char <= "\u11ff" or "\ud7b0" <= char <= "\ud7ff"


def cut_to(text: str, width: int) -> str:
    """`text` within `width` terminal columns, "..." ending one that was wider."""
    if columns(text) <= width:
        return text
    kept, used = [], 0
    for char in text:
        used += _char_columns(char)
        if used > width - 3:
            break
        kept.append(char)
    return "".join(kept) + "..."


def padded(text: str, width: int) -> str:
    """`text` filled with spaces to `width` columns (as f"{text:<{width}}" for ASCII)."""
    return text + " " * (width - columns(text))


def _value_text(value: JSON) -> str:
    return shown(json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value)


def _asked_text(asked: JSON, value: JSON) -> str:
    """What was asked, with its JSON type when the value differs by type alone (2 for "2")."""
    text = _value_text(asked)
    if type(asked) is not type(value) and text == _value_text(value):
        return f"{text} (as {_JSON_KINDS.get(type(asked), 'a ' + type(asked).__name__)})"
    return text


_JSON_KINDS: Final = {
    int: "a number",
    float: "a number",
    str: "a string",
    bool: "true or false",
    dict: "an object",
    list: "a list",
}


def _diagnostic_line(d: Diagnostic, colour: bool) -> str:
    tag = f"{d.severity.value:<7} {d.code.value}"
    if colour:
        tag = f"{_COLOURS[d.severity]}{tag}{_RESET}"
    rule = f" [{shown(d.rule)}]" if d.rule else ""
    hint = f" (suggestion: {shown(d.suggestion)})" if d.suggestion else ""
    return f"  {tag}{rule} {shown(d.option)}: {shown(d.message)}{hint}"


def render_diagnostics(result: Resolution) -> str:
    """The diagnostics alone, one a line: what the python and env formats, whose output is
    meant to be pasted or sourced, write to stderr."""
    return "\n".join(["diagnostics", *(_diagnostic_line(d, False) for d in result.diagnostics)])


def render_table(result: Resolution, colour: bool = False) -> str:
    """Readable in a terminal: value and source per option, the diagnostics under them."""
    lines = [
        f"product {shown(result.product) or '?'}  catalog {shown(result.catalog_version)}"
        + (f"  policy {shown(result.policy_version)}" if result.policy_version else "")
        + (f"  fingerprint {shown(result.fingerprint)}" if result.fingerprint else "")
        + f"  {'ok' if result.ok else 'ERRORS'}"
    ]
    rows = [
        (shown(name), _value_text(value), result.provenance[name])
        for name, value in result.options.items()
    ]
    width_name = max((len(r[0]) for r in rows), default=6)
    width_value = min(max((columns(r[1]) for r in rows), default=5), 40)
    header = f"{'option':<{width_name}}  {'value':<{width_value}}  source"
    lines.append(f"{_BOLD}{header}{_RESET}" if colour else header)
    for name, text, prov in rows:
        extra = []
        if prov.has_requested:
            extra.append(f"requested {_asked_text(prov.requested, result.options[name])}")
        if prov.env_var:
            extra.append(f"from {shown(prov.env_var)}")
        if prov.detail:
            extra.append(shown(prov.detail))
        extra.append(shown(", ".join(prov.rules)))
        note = "  " + "; ".join(extra)
        if colour:
            note = f"{_DIM}{note}{_RESET}"
        line = f"{name:<{width_name}}  {padded(text, width_value)}  {prov.source.value:<15}{note}"
        lines.append(line)
    if result.paths:
        lines.append("")
        lines.append("paths")
        width_key = max(columns(shown(key)) for key in result.paths)
        lines += [
            f"  {padded(shown(key), width_key)}  {shown(value)}"
            for key, value in result.paths.items()
        ]
    if result.diagnostics:
        lines.append("")
        lines.append("diagnostics")
        lines += [_diagnostic_line(d, colour) for d in result.diagnostics]
    return "\n".join(lines)


def _python_literal(value: JSON) -> str:
    return repr(value)


def _chosen(result: Resolution) -> list[str]:
    """The options the python format writes: what was chosen, not what defaults give."""
    return [
        name for name in result.options if result.provenance[name].source not in _DEFAULT_SOURCES
    ]


def object_options(result: Resolution) -> list[str]:
    """The chosen options whose value is an object: NPURunConfig takes an instance the script
    builds (DumpConfig, ...), so the python format leaves them out of the call."""
    return [name for name in _chosen(result) if isinstance(result.options[name], dict)]


def render_python(result: Resolution) -> str:
    """An NPURunConfig(...) call ready to paste: what was chosen, not what defaults give. An
    object-valued option stays a comment holding its value, for the script to construct. A
    DERIVED value stays a comment too, with what it was derived from: the runtime derives it
    again from what the call sets (the job's variables and the policy alike), and setting it
    could only meet a lock the rule overrode (R-ESC-1 over a locked 0) or an option the mode
    leaves to the runtime (enable_small_channel in online inference)."""
    lines = ["config = NPURunConfig("]
    for name in _chosen(result):
        value, prov = result.options[name], result.provenance[name]
        if isinstance(value, dict):
            literal = shown(_python_literal(value))  # repr escapes; one line, whatever it holds
            lines.append(f"    # {name}={literal},  # a config object: construct it in the script")
            continue
        why = f"  # {prov.source.value}" + (f" ({prov.env_var})" if prov.env_var else "")
        if prov.source is Source.DERIVED:  # what the rule made of the rest
            why += f" from {shown(prov.detail)}" if prov.detail else ""
            lines.append(f"    # {name}={_python_literal(value)},{why}; the runtime derives it")
            continue
        lines.append(f"    {name}={_python_literal(value)},{why}")
    lines.append(")")
    if not result.ok:
        lines.insert(0, "# the request has errors: fix them before using this config")
    return "\n".join(lines)


_WINNERS: Final = {Source.USER: "the explicit", Source.POLICY_LOCKED: "the policy's lock of"}
_DROPS: Final = frozenset(code for code in Code if code.value.startswith("DROPPED_"))
_CACHE_FOLDER: Final = FOLDER_OPTIONS["op_compiler_cache_dir"]


def _env_mark(result: Resolution, variable: str) -> str:
    """What becomes of a variable: refused (an error names it), or, for one that gives an
    option, overridden (the option's value came from the explicit option or a lock), dropped
    with its option (AOE_MODE where AOE does not act) or taking effect as another value
    (HCCL_EXEC_TIMEOUT rounded); else nothing."""
    for diagnostic in result.diagnostics:
        if diagnostic.option == f"env.{variable}" and diagnostic.severity is Severity.ERROR:
            return f"  # not valid here: {diagnostic.code.value} [{diagnostic.rule}]"
    if variable in CACHE_ENV_VARS and _none_placed(result, _CACHE_FOLDER):  # the cache is off
        rule = ENV_VAR_RULES[variable]
        return f"  # no effect here: it sizes {_CACHE_FOLDER}, and there is none here [{rule}]"
    outranked = OUTRANKED_FOLDER_VARS.get(variable)
    if outranked is not None:
        return _outranked_mark(result, variable, *outranked)
    option = CATALOG.env_options.get(variable)
    if option is None:
        return ""
    given = result.provenance.get(option.name)
    if given is not None and given.source in _WINNERS:
        return f"  # no effect here: {_WINNERS[given.source]} {option.name} wins"
    for diagnostic in result.diagnostics:
        if diagnostic.option != option.name:
            continue
        if diagnostic.code in _DROPS:
            code, rule = diagnostic.code.value, diagnostic.rule
            return f"  # no effect here: {option.name} is dropped ({code} [{rule}])"
        if (
            diagnostic.code is Code.ROUNDED
            and given is not None
            and given.source is Source.ENV
            and option.name in result.options
        ):
            value = _python_literal(result.options[option.name])
            return f"  # takes effect as {value} here [{diagnostic.rule}]"
    return ""


def _none_placed(result: Resolution, folder: str) -> bool:
    """A resolved answer (one that resolved nothing has no paths at all) without `folder`."""
    return bool(result.paths) and folder not in result.paths


def _outranked_mark(result: Resolution, variable: str, option: str, rule: str, whole: bool) -> str:
    """A folder variable beside the option that outranks it (the report's ENV_OVERRIDDEN), or
    one whose folder the answer holds none of (the cache off: R-OCD-1, R-OCC-2)."""
    folder = FOLDER_OPTIONS.get(option)
    if whole and folder is not None and _none_placed(result, folder):
        return f"  # no effect here: it places {folder}, and there is none here [{rule}]"
    said = any(
        d.code is Code.ENV_OVERRIDDEN and d.option == option and d.rule == rule
        for d in result.diagnostics
    )
    if not said:
        return ""
    if whole:
        return f"  # no effect here: {option} wins [{rule}]"
    return f"  # {option} wins for its files; the variable places the others [{rule}]"


def render_env(result: Resolution, env: Mapping[str, str]) -> str:
    """The export lines of the job's environment variables that rules.md names; one whose
    option's value came from elsewhere, was dropped or was rounded says so (the report says it
    on stderr, which whoever evals this may not read)."""
    lines = []
    for name in NAMED_ENV_VARS:
        if name not in env:
            continue
        lines.append(f"export {name}={shlex.quote(env[name])}{_env_mark(result, name)}")
    if not lines:
        lines.append("# no environment variable named by the source is set")
    if not result.ok:  # as the python format says it, for whoever evals this without $?
        lines.insert(0, "# the request has errors: fix them before using this environment")
    return "\n".join(lines)


FORMATS: Final = ("json", "table", "python", "env")
