"""Rules that need the content of a file an option names (attachments).

The resolver never opens a path: a caller attaches the file's text. Without it these rules are
not guessed; a NOT_CHECKED note names what was skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

from ._cross import dynamic_shape
from ._model import Code, Source, printable, unset
from ._products import LEGACY_FAMILY, NEW_FAMILY, UB_FUSION, listed
from ._state import Slot, State
from ._values import show

if TYPE_CHECKING:  # the parsers load only when a request carries an attachment
    from .attachments import (
        AoeConfig,
        CustomDtypes,
        FusionSwitches,
        OpDebugConfig,
        OpPrecisionModes,
        ParseIssue,
    )

MAX_ISSUES_SHOWN: Final = 20

CONTENT_RULES: Final[Mapping[str, tuple[str, ...]]] = {
    "op_debug_config": ("R-ODC-2", "R-ODC-3", "R-OCC-3", "R-DEP-3"),
    "aoe_config_file": ("R-AOE-6", "R-AOE-7"),
    "modify_mixlist": ("R-MML-1",),
    "op_precision_mode": ("R-OPM-2", "R-OPM-3"),
    "fusion_switch_file": ("R-FSF-1", "R-FSF-2"),
    "customize_dtypes": ("R-CDT-2", "R-PREC-2"),
}
"""Per option that names a file: the rules that read the file's content."""

_CAN_ACT: Final[Mapping[str, Callable[[State], bool]]] = {
    "R-ODC-3": lambda state: bool(state.env_path("NPU_COLLECT_PATH")),
    "R-DEP-3": lambda state: state.value("op_debug_level") == 2,
    "R-OCC-3": lambda state: state.value("op_compiler_cache_mode") != "disable",
    "R-FSF-1": lambda state: state.pid not in UB_FUSION,  # its UBFusion advice
    "R-PREC-2": lambda state: state.pid in LEGACY_FAMILY,
}
"""Content rules that can only find something under a condition of the request (a product, a
variable, another option): a NOT_CHECKED note names them only where they could have acted."""


_CONDITIONS: Final = {
    option: tuple((rule, _CAN_ACT.get(rule)) for rule in rules)
    if any(rule in _CAN_ACT for rule in rules)
    else None
    for option, rules in CONTENT_RULES.items()
}
"""Per option, its content rules with the condition each acts under (None: always); None for
an option whose rules all act always."""


def _unchecked(state: State, option: str) -> tuple[str, ...]:
    """The content rules of `option` that the file's text would have let act here."""
    conditions = _CONDITIONS[option]
    if conditions is None:
        return CONTENT_RULES[option]
    return tuple([rule for rule, can_act in conditions if can_act is None or can_act(state)])


_NOT_ATTACHED: dict[tuple[str, tuple[str, ...]], str] = {}
"""NOT_CHECKED's words for an option and the rules left unchecked, written once each (a few
dozen in all): most requests name a file whose content they do not attach."""


def _not_attached(option: str, rules: tuple[str, ...]) -> str:
    message = _NOT_ATTACHED.get((option, rules))
    if message is None:
        message = _NOT_ATTACHED[(option, rules)] = _unchecked_message(
            f"{option} names a file whose content was not attached", rules, "attach it"
        )
    return message


def _unchecked_message(why: str, rules: tuple[str, ...], fix: str) -> str:
    which = (
        f"{rules[0]} was not checked; {fix} to check that rule."
        if len(rules) == 1
        else f"{', '.join(rules)} were not checked; {fix} to check them."
    )
    return f"{why}, so {which}"


FORMAT_RULES: Final[Mapping[str, str]] = {
    "op_debug_config": "R-ODC-1",
    "aoe_config_file": "R-AOE-7",
    "modify_mixlist": "R-MML-1",
    "op_precision_mode": "R-OPM-3",
    "fusion_switch_file": "R-FSF-2",
    "customize_dtypes": "R-CDT-2",
}
"""Per option that names a file: the rule that describes the file's format."""


def _issue_code(issue: ParseIssue) -> Code:
    if issue.is_error:
        return Code.INVALID_VALUE
    return Code.ADVICE if issue.advice else Code.NORMALIZED


def _policy_level(level: Slot) -> str:
    """The job set oom, not the level: a policy default's level is the job's to replace."""
    if level.source is Source.POLICY:
        return (
            f" (op_debug_level 2 is the policy's default, {level.detail}: the job's own "
            "op_debug_level takes its place)"
        )
    return ""


def _op_debug(state: State, parsed: OpDebugConfig) -> None:
    options = parsed.options
    name = "op_debug_config"
    if {"ccec_O0", "oom"} <= options:  # R-ODC-2
        state.conflict(
            name,
            "R-ODC-2",
            "op_debug_config enables ccec_O0 together with oom, which ends in an AI Core Error; "
            "remove one of them from the file.",
        )
    collect = state.env_path("NPU_COLLECT_PATH")
    if "oom" in options and collect:  # R-ODC-3
        state.conflict(
            name,
            "R-ODC-3",
            f"op_debug_config enables oom while NPU_COLLECT_PATH={collect} is set; the compiled "
            "model would fail: remove oom or unset NPU_COLLECT_PATH.",
        )
    ccec = sorted(options & {"ccec_O0", "ccec_g"})
    dynamic = dynamic_shape(state)
    if ccec and dynamic is not None:  # the source's advice under op_debug_config
        state.emit(
            Code.ADVICE,
            name,
            "R-ODC-1",
            f"op_debug_config enables {' and '.join(ccec)}, which "
            f"{'enlarges' if len(ccec) == 1 else 'enlarge'} operator kernels; with "
            f"{dynamic} true (dynamic shape) a kernel may grow too large to compile, and the "
            "source advises against ccec options there: remove them unless you need them.",
        )

    # A policy default op_debug_level 2 does not give way here, as it does in the cross
    # rules: by now R-OCC-2 has turned the compile cache off for it, and the caller can set
    # op_debug_level to settle it.
    if "oom" in options and state.value("op_debug_level") == 2:  # R-DEP-3
        level = state.slots["op_debug_level"]
        fix = f"use op_debug_level 0, 1, 3 or 4, or remove oom{_policy_level(level)}"
        if level.source is Source.POLICY_LOCKED:  # the job cannot change the level
            fix = f"remove oom: the policy locks op_debug_level 2 ({level.detail})"
        state.conflict(
            "op_debug_level",
            "R-DEP-3",
            f"op_debug_level 2 cannot be used with oom in op_debug_config (AI Core Error); {fix}.",
        )
    if options and parsed.op_debug_list is None and name in state.slots:  # R-OCC-3
        state.force(
            "op_compiler_cache_mode",
            "disable",
            "R-OCC-3",
            "op_debug_config without op_debug_list",
            "op_compiler_cache_mode is disable because op_debug_config has no op_debug_list, "
            "so every operator is recompiled; add op_debug_list to keep the cache for others.",
        )


def _aoe(state: State, parsed: AoeConfig) -> None:
    mode = state.value("aoe_mode")
    if mode is None:
        return
    if {"deeper_opat", "nonhomo_split"} <= parsed.features:
        state.conflict(
            "aoe_config_file",
            "R-AOE-6",
            "aoe_config_file lists both features deeper_opat (needs aoe_mode '2') and "
            "nonhomo_split (needs aoe_mode '1'); no aoe_mode serves both: keep one of them.",
        )
        return
    for feature, needed in (("deeper_opat", "2"), ("nonhomo_split", "1")):
        if feature in parsed.features and mode != needed:
            # Only suggest an aoe_mode this product accepts (R-AOE-3: no '1' on a2 and a3).
            possible = state.view["aoe_mode"].blocked(needed) is None
            remedy = (
                f"set aoe_mode {needed!r} or remove the feature"
                if possible
                else f"remove the feature (aoe_mode {needed!r} is not supported on {state.pid})"
            )
            state.conflict(
                "aoe_config_file",
                "R-AOE-6",
                f"aoe_config_file feature {feature} needs aoe_mode {needed!r} but aoe_mode is "
                f"{mode!r}; {remedy}.",
            )
            return


def _lines(numbers: tuple[int, ...]) -> str:
    """'line 3' or 'lines 3, 7' (at most MAX_ISSUES_SHOWN of them)."""
    shown = ", ".join(str(n) for n in numbers[:MAX_ISSUES_SHOWN])
    more = ", ..." if len(numbers) > MAX_ISSUES_SHOWN else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"


def _op_precision(state: State, parsed: OpPrecisionModes) -> None:
    """R-OPM-2: each mode the file uses that this product or version lacks, each said (a
    caller fixing the file learns of both at once)."""
    used = parsed.modes_used
    if "enable_hi_float_32_execution" in used:
        at = _lines(parsed.lines["enable_hi_float_32_execution"])
        state.refuse(
            "op_precision_mode",
            Code.UNSUPPORTED_VALUE,
            "R-OPM-2",
            f"op_precision_mode uses enable_hi_float_32_execution ({at}), which this version "
            "does not support; use another mode for those operators.",
        )
    if "enable_float_32_execution" in used and state.pid not in NEW_FAMILY:
        at = _lines(parsed.lines["enable_float_32_execution"])
        state.refuse(
            "op_precision_mode",
            Code.UNSUPPORTED_VALUE,
            "R-OPM-2",
            f"op_precision_mode uses enable_float_32_execution ({at}), which {state.pid} does "
            f"not support (only {listed(NEW_FAMILY)}); use another mode there.",
        )


def _fusion(state: State, parsed: FusionSwitches) -> None:
    if state.pid not in UB_FUSION and parsed.ub_fusion:
        names = ", ".join(sorted(parsed.ub_fusion))
        state.emit(
            Code.ADVICE,
            "fusion_switch_file",
            "R-FSF-1",
            f"fusion_switch_file sets UBFusion switches ({names}) that have no effect on "
            f"{state.pid}, which has no UB fusion; remove them.",
        )


def _dtypes(state: State, parsed: CustomDtypes) -> None:
    """R-PREC-2: no bfloat16 on the legacy products; an unsupported dtype fails compilation."""
    if state.pid not in LEGACY_FAMILY:
        return
    asking = sorted(
        {
            spec.line
            for specs in (parsed.by_name, parsed.by_type)
            for spec in specs.values()
            if "bfloat16" in spec.inputs or "bfloat16" in spec.outputs
        }
    )
    if asking:
        state.refuse(
            "customize_dtypes",
            Code.UNSUPPORTED_VALUE,
            "R-PREC-2",
            f"customize_dtypes asks for bfloat16 ({_lines(tuple(asking))}), which {state.pid} "
            "does not support, so compilation would fail; use float16 or float32 there.",
        )


_RULES: Final[Mapping[str, Callable[[State, Any], None]]] = {
    "op_debug_config": _op_debug,
    "aoe_config_file": _aoe,
    "op_precision_mode": _op_precision,
    "fusion_switch_file": _fusion,
    "customize_dtypes": _dtypes,
}


_Read = tuple[Any, Any]
"""An attachment's text as read: (the parsed file or None, the problem that refused it)."""
_SHARED: ContextVar[dict[tuple[str, str], _Read] | None] = ContextVar("_SHARED", default=None)


@contextmanager
def shared_reads() -> Iterator[None]:
    """Within it, each attachment's text is read once, however many products a diff resolves
    it for: reading a file of a megabyte takes about half a second."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def _read(option: str, text: str) -> _Read:
    from .attachments import FORMATS, decode_attachment

    shared = _SHARED.get()
    found = shared.get((option, text)) if shared is not None else None
    if found is None:
        decoded, problem = decode_attachment(text)
        found = (None if decoded is None else FORMATS[option].parse(decoded), problem)
        if shared is not None:
            shared[(option, text)] = found
    return found


def _on_product(state: State, issue: ParseIssue) -> tuple[str, str]:
    """An issue's message and suggestion on this product: a file is parsed once for every
    product (a diff's columns share it), so a close name the product refuses (bfloat16 where
    R-PREC-2 rules it out) is taken back here rather than suggested."""
    if issue.suggestion != "bfloat16" or state.pid not in LEGACY_FAMILY:
        return issue.message, issue.suggestion
    message = issue.message.replace(" (did you mean 'bfloat16'?)", "")
    return (
        f"{message} (bfloat16, which it may stand for, is not supported on {state.pid}: R-PREC-2)",
        "",
    )


def _parse(state: State, option: str, text: str) -> Any | None:
    """The parsed file (what could be read of it, after reporting its errors), or None."""
    from .attachments import MAX_ATTACHMENT_BYTES

    parsed, problem = _read(option, text)
    rule = FORMAT_RULES[option]
    if parsed is None:
        reason = problem.message if problem else f"it is over {MAX_ATTACHMENT_BYTES:,} bytes"
        state.refuse(option, Code.INVALID_VALUE, rule, f"{option} attachment refused: {reason}")
        return None
    errors = [i for i in parsed.issues if not i.normalized]
    # Errors first, then warnings, then notes, each in file order: of a file with many
    # accepted oddities, the shown part must not hide what refuses it.
    findings = sorted(
        (i for i in parsed.issues if not i.summary),
        key=lambda i: 0 if i.is_error else 1 if i.advice else 2,
    )
    closing = [i for i in parsed.issues if i.summary]
    for issue in findings[:MAX_ISSUES_SHOWN]:
        message, suggestion = _on_product(state, issue)
        state.emit(
            _issue_code(issue), option, issue.rule or rule, f"{option} file: {message}", suggestion
        )
    hidden = len(findings) - MAX_ISSUES_SHOWN
    if hidden > 0 or closing:
        parts = [f"{hidden} more problems not shown"] if hidden > 0 else []
        parts += [issue.message for issue in closing]
        state.emit(
            Code.INVALID_VALUE if errors else Code.NORMALIZED,
            option,
            rule,
            f"{option} file: {'; '.join(parts)}.",
        )
    if errors:
        state.slots.pop(option, None)
    return parsed


_NOTHING_ASKED: Final = unset()
"""A slot's `requested` when the caller asked for nothing else than its value."""

MAX_ATTACHMENTS: Final = 64
"""Attachments read from one request: six options name files, and each key that names none
costs a diagnostic; past this many, none is read and one error says why."""


def apply_content_rules(
    state: State, attachments: Mapping[str, str], given: Collection[str]
) -> None:
    """Parse each attachment and apply its rules; `given` are the options the caller set."""
    if len(attachments) > MAX_ATTACHMENTS:
        state.emit(
            Code.INVALID_VALUE,
            "attachments",
            "",
            f"the request has {len(attachments)} attachments and at most {MAX_ATTACHMENTS} are "
            f"read; attach only the files {', '.join(CONTENT_RULES)} name.",
        )
        attachments = {}
    for option in sorted(attachments):  # a map on the wire keeps no order
        if option not in CONTENT_RULES:
            state.emit(
                Code.INVALID_VALUE,
                printable(f"attachments.{option[:120]}")[:120],  # the key may hold a surrogate
                "",
                f"an attachment came for {option[:100]!r}, which names no file; attach only for "
                f"{', '.join(CONTENT_RULES)}.",
            )
        elif option not in state.slots and option not in given and option not in state.refused:
            # (A value refused already has its error; the attachment adds nothing to it.)
            state.emit(
                Code.DROPPED_NO_EFFECT,
                option,
                FORMAT_RULES[option],  # the rule of the option that names the file
                f"the attachment for {option} is ignored because {option} is not in effect; "
                "set the option or leave the attachment out.",
            )
    for option in CONTENT_RULES:
        slot = state.slots.get(option)
        if slot is None:
            continue
        text = attachments.get(option)
        replaced = (  # the caller's file was attached, and a lock names another
            text is not None
            and slot.source is Source.POLICY_LOCKED
            and slot.requested is not _NOTHING_ASKED
        )
        if text is None:
            rules = _unchecked(state, option)
            state.emit(Code.NOT_CHECKED, option, rules[0], _not_attached(option, rules))
            continue
        if replaced:
            rules = _unchecked(state, option)
            why = (
                f"{option} is locked by the policy to {show(slot.value)}, but the attachment "
                f"is the content of {show(slot.requested)}, the file the request named"
            )
            message = _unchecked_message(why, rules, "attach the locked file")
            state.emit(Code.NOT_CHECKED, option, rules[0], message)
            continue
        parsed = _parse(state, option, text)
        apply = _RULES.get(option)
        if parsed is not None and apply is not None:
            apply(state, parsed)
