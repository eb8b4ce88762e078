"""The resolution pipeline: (request, catalog, policy) -> Resolution, pure and deterministic.

Stages follow the contract's resolution order: product, names, values, mode, precedence, gates,
derived values, rounding, cross-option rules, effective paths. No I/O happens here.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from ._catalog import CATALOG, Catalog, OptionView
from ._content import apply_content_rules
from ._cross import CROSS_RULES, CrossRule, Stage
from ._model import (
    JSON,
    MAX_MEMO_TEXT,
    Code,
    Diagnostic,
    Provenance,
    Resolution,
    ResolveRequest,
    Severity,
    Source,
    printable,
    unset,
)
from ._options import CACHE_ENV_VARS
from ._paths import effective_paths
from ._products import PRODUCT_IDS, PRODUCTS, alias_key, product_id
from ._schema import Mode, Option, ValueGate
from ._state import DEFAULT_PROFILE, PolicyEntry, PolicyLayer, PolicyLike, Slot, State, via_env
from ._values import Parsed, Problem, config_refusal, config_shape, parse, show

MAX_CONFIG_KEYS: Final = 512
_ENV_INT: Final = re.compile(r"-?[0-9]{1,18}")
_UNSET: Final = unset()
_EMPTY_LAYER: Final = PolicyLayer(locked={}, defaults={})
_DEFAULT_RULES: Final = tuple(r for r in CROSS_RULES if r.stage is Stage.DEFAULTS)
_DERIVED_RULES: Final = tuple(r for r in CROSS_RULES if r.stage is Stage.DERIVED)
_LATE_RULES: Final = tuple(r for r in CROSS_RULES if r.stage in (Stage.ROUNDING, Stage.CROSS))
_ALIAS_WORDS: Final = {alias_key(a): p.id for p in PRODUCTS for a in (p.id, *p.aliases)}


_FRAGMENTS: dict[tuple[str, type, JSON], str] = {}
_MAX_FRAGMENTS: Final = 4096


def _fragment(name: str, value: JSON) -> str:
    """'"name":value' in canonical JSON, memoized for the scalar values that keep recurring."""
    kind = type(value)
    if kind is dict or kind is list:
        return f"{json.dumps(name, ensure_ascii=False)}:{_canonical(value)}"
    key = (name, kind, value)
    text = _FRAGMENTS.get(key)
    if text is None:
        text = f"{json.dumps(name, ensure_ascii=False)}:{_canonical(value)}"
        if len(_FRAGMENTS) < _MAX_FRAGMENTS and len(text) <= MAX_MEMO_TEXT:
            _FRAGMENTS[key] = text
    return text


def _canonical(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@lru_cache(maxsize=64)
def _product_tail(product: str) -> str:
    """The text after the options: the same few products on every request."""
    return f'}},"product":{_canonical(product)}}}'


def _digest(product: str, fragments: list[str]) -> str:
    canonical = f'{{"options":{{{",".join(fragments)}{_product_tail(product)}'
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def fingerprint(product: str, options: Mapping[str, JSON]) -> str:
    """A stable hash of product + options: equal configs, equal fingerprints.

    The hashed text is the canonical JSON of {"options": ..., "product": ...} (sorted keys).
    """
    return _digest(product, [_fragment(name, options[name]) for name in sorted(options)])


def unresolved(
    product: str,
    diagnostic: Diagnostic,
    *,
    policy_version: str = "",
    catalog: Catalog = CATALOG,
) -> Resolution:
    """The answer to a request that could not be resolved at all: the error that stopped it."""
    return Resolution(
        ok=False,
        product=product_id(product) or "",
        options={},
        provenance={},
        diagnostics=(diagnostic,),
        paths={},
        catalog_version=catalog.version,
        policy_version=policy_version,
        fingerprint="",
    )


def _unknown_product(text: str) -> Diagnostic:
    close = difflib.get_close_matches(alias_key(text), _ALIAS_WORDS, n=1, cutoff=0.6)
    return Diagnostic(
        Severity.ERROR,
        Code.UNKNOWN_PRODUCT,
        "product",
        "",
        f"product {show(text)} is not recognized; use one of {', '.join(PRODUCT_IDS)}.",
        _ALIAS_WORDS[close[0]] if close else "",
    )


def _unknown_profile(profile: str, known: tuple[str, ...]) -> Diagnostic:
    listed = ", ".join(known) if known else "none (no policy is loaded)"
    close = difflib.get_close_matches(profile, known, n=1)
    return Diagnostic(
        Severity.ERROR,
        Code.UNKNOWN_PROFILE,
        "profile",
        "",
        f"profile {profile!r} is not in the policy; known profiles: {listed}.",
        close[0] if close else "",
    )


def _emit_problem(state: State, option: str, problem: Problem) -> None:
    state.emit(problem.code, option, problem.rule, problem.message, problem.suggestion)


def _read_config(
    request: ResolveRequest, state: State, catalog: Catalog
) -> dict[str, tuple[JSON, JSON]]:
    """Steps 2-3: names and values. Returns option -> (value, as requested)."""
    explicit: dict[str, tuple[JSON, JSON]] = {}
    if len(request.config) > MAX_CONFIG_KEYS:
        state.emit(
            Code.INVALID_VALUE,
            "config",
            "",
            f"the config has {len(request.config)} keys; the catalog has {len(catalog)} options "
            f"and at most {MAX_CONFIG_KEYS} keys are read. Send only NPURunConfig options.",
        )
        return explicit
    views = state.view
    try:
        names = sorted(request.config)
    except TypeError:  # keys that are not all strings: still a structured answer
        names = sorted(request.config, key=str)
    for name in names:
        raw = request.config[name]
        view = views.get(name)
        if view is not None and view.accepts_as_is(raw):
            explicit[name] = (raw, raw)
            continue
        if view is None:
            shown = printable(str(name)[:100])
            suggestion = catalog.suggest(shown)
            hint = (
                f"; did you mean {suggestion!r}?" if suggestion else "; see `npu-resolve explain`."
            )
            state.emit(
                Code.UNKNOWN_OPTION,
                shown,
                "",
                f"option {shown!r} is not an NPURunConfig option{hint}",
                suggestion,
            )
            continue
        if raw is None or (raw == "" and view.option.empty_is_unset):
            state.emit(
                Code.NORMALIZED,
                name,
                view.option.rule,
                f"{name} {show(raw)} means not set"
                f"{'; it takes its default' if view.default is not None else ''}. "
                "Leave it out instead.",
            )
            continue
        parsed = parse(view, raw, product=state.pid)
        if isinstance(parsed, Problem):
            _emit_problem(state, name, parsed)
            state.refused.add(name)
            continue
        if parsed.note is not None:
            _emit_problem(state, name, parsed.note)
        explicit[name] = (parsed.value, raw)
    return explicit


def _read_env(
    state: State, catalog: Catalog
) -> tuple[dict[str, JSON], dict[str, tuple[str, Problem]]]:
    """The environment variables that give option values (HCCL_EXEC_TIMEOUT, ...), and those
    whose text is not a valid value (judged by `_env_problems`, once precedence is known)."""
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


def _cache_env(state: State) -> None:
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


def _env_problems(
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
        gate = _gate(state, view)
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


def _mode(state: State, explicit: Mapping[str, tuple[JSON, JSON]], layer: PolicyLayer) -> Mode:
    """Step 4: lock, else explicit, else policy default, else 1 (training). A policy value is
    read as the option reads it ("0" is 0), so the mode and the option never disagree."""
    for entry in (
        layer.locked.get("graph_run_mode"),
        explicit.get("graph_run_mode"),
        layer.defaults.get("graph_run_mode"),
    ):
        if entry is None:
            continue
        if isinstance(entry, PolicyEntry):
            parsed = parse(state.view["graph_run_mode"], entry.value, product=state.pid)
            value = parsed.value if isinstance(parsed, Parsed) else None
        else:
            value = entry[0]
        if value in (0, 1) and type(value) is int:
            return Mode.from_graph_run_mode(value)
    return Mode.TRAINING


def _policy_value(state: State, view: OptionView, entry: PolicyEntry) -> JSON | None:
    parsed = parse(view, entry.value, product=state.pid)
    if isinstance(parsed, Problem):
        _emit_problem(state, view.option.name, parsed)
        return None
    return parsed.value if isinstance(parsed, Parsed) else None


@dataclass(frozen=True, slots=True)
class _Base:
    """The documented defaults of one product and mode, before any caller or policy acts."""

    slots: Mapping[str, Slot]
    provenance: Mapping[str, Provenance]
    undocumented: Mapping[str, str]
    order: Mapping[str, int]
    sorted_names: tuple[str, ...]
    """The default slots' names in code-point order, as the fingerprint hashes them."""
    fragments: Mapping[str, str]
    final: Mapping[str, Slot]
    final_provenance: Mapping[str, Provenance]
    options: Mapping[str, JSON]
    fingerprint: str
    """`final`: the slots every rule leaves of untouched defaults; with its options and
    fingerprint, the answer when a request moved nothing."""


@lru_cache(maxsize=64)
def _base(catalog: Catalog, pid: str, mode: Mode) -> _Base:
    slots: dict[str, Slot] = {}
    undocumented: dict[str, str] = {}
    for name, view in catalog.view(pid, mode).items():
        default = view.default
        if not view.acts:
            continue
        if default is None:
            if view.undocumented:
                undocumented[name] = view.option.defaults[0].rule
            continue
        if view.blocked(default.value) is not None:
            continue
        rules: tuple[str, ...] = (default.rule,)
        if view.range is not None and view.range.rule != default.rule:
            rules += (view.range.rule,)
        slot = Slot(default.value, view.default_source, rules)
        slots[name] = slot.changed(prov=_provenance(slot))
    # The default-stage rules (R-PREC-1: one precision default) act on untouched defaults the
    # same way every time; applying them here keeps a plain request equal to its base.
    untouched = State(pid, mode, catalog.view(pid, mode), {}, False, "", slots=slots)
    untouched.undocumented = undocumented
    _run(_DEFAULT_RULES, untouched)
    fragments = {name: _fragment(name, slot.value) for name, slot in slots.items()}
    # What every rule leaves of the untouched defaults: the answer to a request that sets
    # nothing, precomputed whole.
    untouched.slots = dict(slots)
    _run(_DERIVED_RULES + _LATE_RULES, untouched)
    final = untouched.slots
    return _Base(
        slots=slots,
        provenance={name: _provenance(slot) for name, slot in slots.items()},
        undocumented=undocumented,
        order={name: i for i, name in enumerate(catalog.by_name)},
        sorted_names=tuple(sorted(slots)),
        fragments=fragments,
        final=final,
        final_provenance={name: _provenance(slot) for name, slot in final.items()},
        options={name: slot.value for name, slot in final.items()},
        fingerprint=_digest(pid, [fragments[name] for name in sorted(final)]),
    )


def _same(a: JSON, b: JSON) -> bool:
    """Equal as JSON: 1 and true, or 600 and 600.0, are different requests."""
    return type(a) is type(b) and a == b


def _rules(*rules: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(rules))


def _alias_rule(option: Option, raw: JSON) -> tuple[str, ...]:
    """The rule that reads an old name (R-PM-2: force_fp32), when the caller wrote one."""
    return (option.aliases_rule,) if isinstance(raw, str) and raw in option.aliases else ()


def _slot(
    state: State,
    view: OptionView,
    given: tuple[JSON, JSON] | None,
    from_env: JSON,
    layer: PolicyLayer,
) -> Slot | None:
    """Step 5 for one option: lock > explicit > env > policy default > documented default."""
    option = view.option
    name = option.name
    lock = layer.locked.get(name)
    env_rules = (option.env_rule,) if option.env else ()
    if lock is not None and not view.acts and (given is not None or from_env is not None):
        # A lock that cannot act here replaces nothing: the caller's own value meets the
        # gate and its warning (an error under strict), as it would with no policy.
        lock = None
    if lock is not None:
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
                f"{_why(state, gate)}; ask the platform team to change the lock.",
            )
            return None
        asked = given[0] if given is not None else from_env
        requested: JSON = unset()
        if given is not None and not _same(given[1], given[0]):
            requested = given[1]  # the form the caller wrote, as on every other path
        if asked is not None and asked != value:
            if requested is _UNSET:  # the caller's own words: the value, or the variable's text
                requested = given[0] if given is not None else state.env.get(option.env)
            via = f"{name} {show(asked)}" if given is not None else f"{option.env}={show(asked)}"
            state.emit(
                Code.POLICY_LOCKED,
                name,
                option.rule,
                f"{via} is replaced by the policy's locked value {show(value)} "
                f"({lock.detail}); ask the platform team to change the lock.",
            )
        return Slot(
            value,
            Source.POLICY_LOCKED,
            (option.rule,),
            requested=requested,
            detail=lock.detail,
            all_products=lock.all_products,
        )
    if name in state.refused:
        return None
    # Notes on where a value came from only matter where the option acts; elsewhere the gate's
    # warning (step 6) is all there is to say.
    if given is not None:
        if from_env is not None and view.acts:
            state.emit(
                Code.ENV_OVERRIDDEN,
                name,
                option.env_rule,
                f"{option.env} is set but the explicit {name} {show(given[0])} wins; "
                "remove one of them to avoid confusion.",
            )
        return Slot(
            given[0],
            Source.USER,
            _rules(
                option.rule,
                *_alias_rule(option, given[1]),
                *(env_rules if from_env is not None else ()),
            ),
            requested=unset() if _same(given[1], given[0]) else given[1],
        )
    if from_env is not None:
        if view.acts:
            state.emit(
                Code.FROM_ENV,
                name,
                option.env_rule,
                f"{name} is {show(from_env)} from {option.env}; set {name} to override it.",
            )
        return Slot(from_env, Source.ENV, _rules(option.rule, *env_rules), env_var=option.env)
    entry = layer.defaults.get(name)
    if entry is not None:
        value = _policy_value(state, view, entry)
        gate = view.blocked(value) if value is not None else None
        if gate is not None:
            # A policy default that cannot act here leaves the documented default in place,
            # as a policy option the product or mode lacks does (quietly when it was written
            # for every product).
            if not entry.all_products:
                state.emit(
                    _GATE_CODES[_gate_kind(state, gate)],
                    name,
                    gate.rule,
                    f"the policy's default {name} {show(value)} ({entry.detail}) "
                    f"{_why(state, gate)}, so the documented default applies here.",
                )
            return None
        if value is not None:
            return Slot(
                value,
                Source.POLICY,
                (option.rule,),
                detail=entry.detail,
                all_products=entry.all_products,
            )
    return None


def _precedence(
    state: State,
    explicit: Mapping[str, tuple[JSON, JSON]],
    env_values: Mapping[str, JSON],
    layer: PolicyLayer,
    base: _Base,
) -> None:
    """Step 5: only options someone set are looked at; the rest keep the shared defaults."""
    touched = {*explicit, *env_values, *layer.locked, *layer.defaults, *state.refused}
    state.touched = sorted(touched, key=base.order.__getitem__)
    views, slots, undocumented = state.view, state.slots, state.undocumented
    others = env_values.keys() | layer.locked.keys() | layer.defaults.keys()
    new_slot, user = tuple.__new__, Source.USER
    for name in state.touched:
        given = explicit.get(name)
        if given is not None and name not in others:
            # The common case: a caller's value and nothing else about this option. Built
            # with tuple.__new__, the same Slot without the named-tuple constructor's frame.
            value, raw = given
            view = views[name]
            fields: tuple[object, ...]
            if value is raw or _same(value, raw):
                fields = (value, user, view.user_rules, _UNSET, "", "", False, view.user_provenance)
            else:
                rules = _rules(*view.user_rules, *_alias_rule(view.option, raw))
                fields = (value, user, rules, raw, "", "", False, None)
            slots[name] = new_slot(Slot, fields)
            if undocumented:
                undocumented.pop(name, None)
            continue
        slot = _slot(state, views[name], given, env_values.get(name), layer)
        if slot is not None:
            state.slots[name] = slot
            state.undocumented.pop(name, None)
        elif name in state.refused or name in layer.locked:
            state.slots.pop(name, None)


def _gate(state: State, view: OptionView) -> tuple[Code, str, str, str] | None:
    """Why the product, mode or version drops this option: (code, option, rule, message)."""
    option = view.option
    name = option.name
    if option.unsupported_version:
        return (
            Code.DROPPED_UNSUPPORTED_VERSION,
            name,
            option.unsupported_rule,
            f"{name} is not supported in this version (source 900) and has no effect; remove it.",
        )
    if not view.product_ok:
        return (
            Code.DROPPED_UNSUPPORTED_PRODUCT,
            name,
            option.products_rule,
            f"{name} does not exist on {state.pid} "
            f"(only {', '.join(sorted(option.products or ()))}); remove it for this product.",
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


def _gates(state: State) -> None:
    """Step 6: drop what the product, mode or version lacks; refuse unsupported values."""
    for name in state.touched:
        view = state.view[name]
        if view.plain_gate or name not in state.slots:
            continue  # acts here and every value is supported: nothing to check
        gate = _gate(state, view)
        if gate is not None:
            code, _, rule, message = gate
            state.drop(name, code, rule, message)
        elif view.blocked_values:
            _value_gate(state, name, view)


_GATE_CODES: Final = {
    "version": Code.DROPPED_UNSUPPORTED_VERSION,
    "mode": Code.DROPPED_UNSUPPORTED_MODE,
    "product": Code.DROPPED_UNSUPPORTED_PRODUCT,
}


def _gate_kind(state: State, gate: ValueGate) -> str:
    if gate.unsupported_version:
        return "version"
    return "mode" if gate.mode is not None and gate.mode is not state.mode else "product"


def _why(state: State, gate: ValueGate) -> str:
    """Why a value is refused here, as the end of a sentence about it."""
    kind = _gate_kind(state, gate)
    if kind == "version":
        if gate.products is not None and state.pid not in gate.products:
            only = ", ".join(sorted(gate.products))
            return f"is not supported in this version (source 900), and only on {only} at all"
        return "is not supported in this version (source 900)"
    if kind == "mode":
        return f"is only for {'online inference' if gate.mode is Mode.INFERENCE else 'training'}"
    return f"is not supported on {state.pid}"


def _value_gate(state: State, name: str, view: OptionView) -> None:
    slot = state.slots[name]
    gate = view.blocked(slot.value)
    if gate is None:
        return
    if not slot.is_set:
        del state.slots[name]
        return
    why = _why(state, gate)
    if slot.source is Source.ENV:
        state.slots.pop(name, None)
        state.emit(
            Code.UNSUPPORTED_VALUE,
            f"env.{slot.env_var}",
            gate.rule,
            f"environment variable {slot.env_var}={show(slot.value)} sets {name} to a value "
            f"that {why}; unset it or choose another value.",
        )
        return
    state.refuse(
        name,
        Code.UNSUPPORTED_VALUE,
        gate.rule,
        f"{name} {show(slot.value)} {why}; choose another value.",
    )


def _undocumented(state: State) -> None:
    for name, rule in state.undocumented.items():
        if name in state.view:
            state.emit(
                Code.UNDOCUMENTED,
                name,
                rule,
                f"the source gives no default for {name} on {state.pid} in {state.mode.value}; "
                "it stays unset unless you set it.",
            )


_PROVENANCE: dict[tuple[object, ...], Provenance] = {}
_MAX_PROVENANCE: Final = 4096


def _provenance(slot: Slot) -> Provenance:
    """Provenance records recur (same source, rules, env var): build each once."""
    key: tuple[object, ...] = (
        slot.source,
        slot.rules,
        type(slot.requested),
        slot.requested,
        slot.env_var,
        slot.detail,
    )
    try:
        cached = _PROVENANCE.get(key)
    except TypeError:  # an unhashable requested value (a list or object)
        cached, key = None, ()
    if cached is None:
        cached = Provenance(slot.source, slot.rules, slot.requested, slot.env_var, slot.detail)
        short = not isinstance(slot.requested, str) or len(slot.requested) <= MAX_MEMO_TEXT
        if key and short and len(_PROVENANCE) < _MAX_PROVENANCE:
            _PROVENANCE[key] = cached
    return cached


def resolve(
    request: ResolveRequest,
    *,
    catalog: Catalog = CATALOG,
    policy: PolicyLike | None = None,
) -> Resolution:
    """Resolve one request. Never raises on caller input: problems are diagnostics."""
    policy_version = policy.version if policy is not None else ""
    shape = config_shape(request.config) if isinstance(request.config, dict) else None
    if shape is not None:
        return unresolved(
            request.product if isinstance(request.product, str) else "",
            Diagnostic(
                Severity.ERROR,
                Code.INVALID_VALUE,
                "config",
                "",
                config_refusal(shape),
            ),
            policy_version=policy_version,
            catalog=catalog,
        )
    pid = product_id(request.product) if isinstance(request.product, str) else None
    if pid is None:
        return unresolved(
            "",
            _unknown_product(str(request.product)),
            policy_version=policy_version,
            catalog=catalog,
        )
    profile = request.profile or DEFAULT_PROFILE
    layer: PolicyLayer | None = _EMPTY_LAYER
    if policy is not None:
        layer = policy.layer(profile, pid)
        if layer is None and profile == DEFAULT_PROFILE:
            layer = _EMPTY_LAYER  # a policy need not define the default profile
    elif profile != DEFAULT_PROFILE:
        layer = None
    if layer is None:
        known = policy.profile_names() if policy is not None else ()
        diagnostic = _unknown_profile(profile, known)
        return unresolved(
            request.product, diagnostic, policy_version=policy_version, catalog=catalog
        )

    probe = State(
        pid,
        Mode.TRAINING,
        catalog.view(pid, Mode.TRAINING),
        request.env,
        request.strict,
        request.workdir,
    )
    explicit = _read_config(request, probe, catalog)
    mode = _mode(probe, explicit, layer)
    state = probe
    if mode is not Mode.TRAINING:
        state = State(
            pid,
            mode,
            catalog.view(pid, mode),
            request.env,
            request.strict,
            request.workdir,
            diagnostics=probe.diagnostics,
            refused=probe.refused,
        )
    base = _base(catalog, pid, mode)
    state.slots = dict(base.slots)
    state.undocumented = dict(base.undocumented)
    state.given = explicit  # with state.refused: every known name the config held
    env_values, invalid_env = _read_env(state, catalog)
    if invalid_env:
        _env_problems(state, invalid_env, explicit, layer)
    _precedence(state, explicit, env_values, layer, base)
    _run(_DEFAULT_RULES, state)
    _undocumented(state)
    _gates(state)
    _run(_DERIVED_RULES, state)
    _run(_LATE_RULES, state)
    apply_content_rules(state, request.attachments, explicit)
    _cache_env(state)
    return _result(state, base, catalog, policy_version)


def _run(rules: tuple[CrossRule, ...], state: State) -> None:
    for rule in rules:
        rule.apply(state)


def _result(state: State, base: _Base, catalog: Catalog, policy_version: str) -> Resolution:
    slots = state.slots
    if slots == base.final:  # nothing moved a default: every part is precomputed
        return Resolution(
            ok=not any(d.severity is Severity.ERROR for d in state.diagnostics),
            product=state.pid,
            options=dict(base.options),
            provenance=dict(base.final_provenance),
            diagnostics=tuple(state.diagnostics),
            paths=effective_paths(state),
            catalog_version=catalog.version,
            policy_version=policy_version,
            fingerprint=base.fingerprint,
        )
    if not slots.keys() <= base.slots.keys():
        slots = {name: slots[name] for name in sorted(slots, key=base.order.__getitem__)}
    options = {name: slot.value for name, slot in slots.items()}
    provenance = {name: slot.prov or _provenance(slot) for name, slot in slots.items()}
    return Resolution(
        ok=not any(d.severity is Severity.ERROR for d in state.diagnostics),
        product=state.pid,
        options=options,
        provenance=provenance,
        diagnostics=tuple(state.diagnostics),
        paths=effective_paths(state),
        catalog_version=catalog.version,
        policy_version=policy_version,
        fingerprint=_fast_fingerprint(state, base, options),
    )


def _fast_fingerprint(state: State, base: _Base, options: Mapping[str, JSON]) -> str:
    """fingerprint(), reusing the defaults' precomputed fragments and order where it can."""
    shared, slots = base.slots, state.slots
    names = base.sorted_names if slots.keys() == shared.keys() else sorted(options)
    fragments = base.fragments
    return _digest(
        state.pid,
        [
            fragments[name] if shared.get(name) is slots[name] else _fragment(name, options[name])
            for name in names
        ],
    )
