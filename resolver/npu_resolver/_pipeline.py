"""The resolution pipeline: (request, catalog, policy) -> Resolution, pure and deterministic.

Stages follow the contract's resolution order: product, names, values, mode, precedence, gates,
derived values, rounding, cross-option rules, effective paths. No I/O happens here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from ._catalog import CATALOG, Catalog
from ._content import apply_content_rules
from ._cross import CROSS_RULES, CrossRule, Stage
from ._environment import env_problems, read_env, readable, report_unreadable
from ._fingerprint import digest, fragment
from ._gates import apply_gates
from ._model import (
    CONTAINER_TYPES,
    FLAT_TYPES,
    JSON,
    MAX_MEMO_TEXT,
    TEXT_TYPES,
    Code,
    Diagnostic,
    Provenance,
    Resolution,
    ResolveRequest,
    Severity,
    closest,
    keep,
    printable,
    resolution,
)
from ._options import MENTIONED_ONLY
from ._paths import effective_paths
from ._precedence import apply_precedence, effective_mode
from ._products import product_id, unknown_product
from ._schema import Mode
from ._state import DEFAULT_PROFILE, PolicyLayer, PolicyLike, Slot, State
from ._values import Problem, config_refusal, config_shape, key_text, parse, show

MAX_CONFIG_KEYS: Final = 512
_EMPTY_LAYER: Final = PolicyLayer(locked={}, defaults={})
_DEFAULT_RULES: Final = tuple(r for r in CROSS_RULES if r.stage is Stage.DEFAULTS)
_DERIVED_RULES: Final = tuple(r for r in CROSS_RULES if r.stage is Stage.DERIVED)
_LATE_RULES: Final = tuple(r for r in CROSS_RULES if r.stage in (Stage.ROUNDING, Stage.CROSS))
_FINAL_RULES: Final = tuple(r for r in CROSS_RULES if r.stage is Stage.FINAL)


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


def config_refused(
    product: str,
    message: str,
    *,
    policy_version: str = "",
    catalog: Catalog = CATALOG,
) -> Resolution:
    """The answer to a request whose config cannot be taken at all (too deep, too wide, not a
    JSON object): one INVALID_VALUE on `config`, in process and from a server alike."""
    diagnostic = Diagnostic(Severity.ERROR, Code.INVALID_VALUE, "config", "", message)
    return unresolved(product, diagnostic, policy_version=policy_version, catalog=catalog)


MAX_PROFILES_NAMED: Final = 20
MAX_PROFILES_MATCHED: Final = 256
"""A policy may define thousands of profiles: the message names the first 20, and a close
name is looked for among at most 256 (difflib's work grows with each)."""


def _unknown_profile(profile: str, known: tuple[str, ...]) -> Diagnostic:
    listed = ", ".join(known[:MAX_PROFILES_NAMED]) if known else "none (no policy is loaded)"
    if len(known) > MAX_PROFILES_NAMED:
        listed += f" and {len(known) - MAX_PROFILES_NAMED} more"
    close = closest(profile, known) if len(known) <= MAX_PROFILES_MATCHED else ""
    return Diagnostic(
        Severity.ERROR,
        Code.UNKNOWN_PROFILE,
        "profile",
        "",
        f"profile {show(printable(profile))} is not in the policy; known profiles: {listed}.",
        close,
    )


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
            f"the config has {len(request.config):,} keys; the catalog has {len(catalog)} options "
            f"and at most {MAX_CONFIG_KEYS} keys are read. Send only NPURunConfig options.",
        )
        return explicit
    views, config = state.view, request.config
    if TEXT_TYPES.issuperset(map(type, config)):
        names = sorted(config)
    else:  # keys that are not text (in process only): unknown options, ordered by their text
        # alone and never looked up, so that no key's own __eq__, __lt__ or __hash__ runs
        for shown in sorted(key_text(name) for name in config if type(name) is not str):
            _unknown_option(state, catalog, shown, None)
        names = sorted(name for name in config if type(name) is str)
    sought = _SOUGHT.get() or _Suggestions()
    for name in names:
        raw = config[name]
        view = views.get(name)
        if view is not None and view.accepts(raw):
            explicit[name] = (raw, raw)
            continue
        if view is None:
            _unknown_option(state, catalog, name, sought)
            continue
        if raw is None or (type(raw) is str and not raw and view.option.empty_is_unset):
            state.emit(
                Code.NORMALIZED,
                name,
                view.option.rule,
                f"{name} {show(raw)} means not set: it is resolved as if it were left out. "
                "Leave it out instead.",
            )
            continue
        parsed = parse(view, raw, product=state.pid)
        if isinstance(parsed, Problem):
            state.report(name, parsed)
            state.refused.add(name)
            continue
        if parsed.note is not None:
            state.report(name, parsed.note)
        explicit[name] = (parsed.value, raw)
    return explicit


MAX_SOUGHT_SUGGESTIONS: Final = 8
"""Unknown option names of one request (the first, in name order) for which a close name is
sought: each costs about 0.15 ms (a few misspellings are what a job makes; more is most often
a config meant for something else), and a batch of 1,000 requests of distinct ones would hold
its worker 0.15 ms x this bound x 1,000 (32 took 5 s). The catalog keeps the answers, but a
name past the bound gets none even if another request sought it: an answer depends on its
request alone (in process and through a server alike)."""


@dataclass(slots=True)
class _Suggestions:
    """The close names one call gave: how many unknown names it sought one for, and what it
    said for each (so that a diff's columns say the same, whatever the catalog's memo keeps)."""

    spent: int = 0
    given: dict[str, str] = field(default_factory=dict)
    past_bound: set[str] = field(default_factory=set)

    def close_name(self, catalog: Catalog, name: str) -> str:
        """The close name this call gives `name` ("" for none), sought within the bound."""
        suggestion = self.given.get(name)
        if suggestion is None:
            suggestion = ""
            if self.spent < MAX_SOUGHT_SUGGESTIONS:
                self.spent += 1
                suggestion = catalog.suggest(name)
            else:
                self.past_bound.add(name)
            self.given[name] = suggestion
        return suggestion


_SOUGHT: ContextVar[_Suggestions | None] = ContextVar("_SOUGHT", default=None)


@contextmanager
def shared_suggestions() -> Iterator[None]:
    """Within it, the close names are sought once for all the resolves: a diff's columns
    share one budget and one answer for each unknown name, so every column says the same."""
    token = _SOUGHT.set(_Suggestions())
    try:
        yield
    finally:
        _SOUGHT.reset(token)


_LISTED: Final = "the catalog lists the options (`npu-resolve explain`, DescribeCatalog over gRPC)."
"""Where a caller finds the option names: the CLI's and the service's way, since the message
reaches both."""


def _unknown_option(state: State, catalog: Catalog, key: str, sought: _Suggestions | None) -> None:
    """UNKNOWN_OPTION for `key`; `sought`: the suggestions this call gave, and how many (None
    for a key that is not text, whose shown text no option name is near)."""
    shown = printable(key[:100])
    suggestion = ""
    mentioned = MENTIONED_ONLY.get(key)
    if mentioned is not None:
        said = (
            f"is not in the catalog: {mentioned}, so the resolver cannot check it; remove it, "
            "or check it against the runtime's own documentation."
        )
    elif sought is None:
        said = f"is not an NPURunConfig option (an option is named by a str); {_LISTED}"
    else:
        suggestion = sought.close_name(catalog, shown)
        if suggestion:
            hint = f"did you mean {suggestion!r}?"
        elif shown in sought.past_bound:
            hint = (
                f"close names are sought for the first {MAX_SOUGHT_SUGGESTIONS} unknown names "
                f"of a request only; {_LISTED}"
            )
        else:
            hint = _LISTED
        said = f"is not an NPURunConfig option; {hint}"
    state.emit(Code.UNKNOWN_OPTION, shown, "", f"option {shown!r} {said}", suggestion)


@dataclass(frozen=True, slots=True)
class _Base:
    """The documented defaults of one product and mode, before any caller or policy acts."""

    slots: Mapping[str, Slot]
    provenance: Mapping[str, Provenance]
    undocumented: Mapping[str, str]
    order: Mapping[str, int]
    sorted_names: tuple[str, ...]
    """The default slots' names in code-point order, as the fingerprint hashes them."""
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
        slots[name] = slot.changed(prov=_provenance(slot), fragment=fragment(name, slot.value))
    # The default-stage rules (R-PREC-1: one precision default) act on untouched defaults the
    # same way every time; applying them here keeps a plain request equal to its base.
    untouched = State(pid, mode, catalog.view(pid, mode), {}, False, "", slots=slots)
    untouched.undocumented = undocumented
    _run(_DEFAULT_RULES, untouched)
    fragments = {name: fragment(name, slot.value) for name, slot in slots.items()}
    # What every rule leaves of the untouched defaults: the answer to a request that sets
    # nothing, precomputed whole.
    untouched.slots = dict(slots)
    _run(_DERIVED_RULES + _LATE_RULES + _FINAL_RULES, untouched)
    final = untouched.slots
    return _Base(
        slots=slots,
        provenance={name: _provenance(slot) for name, slot in slots.items()},
        undocumented=undocumented,
        order={name: i for i, name in enumerate(catalog.by_name)},
        sorted_names=tuple(sorted(slots)),
        final=final,
        final_provenance={name: _provenance(slot) for name, slot in final.items()},
        options={name: slot.value for name, slot in final.items()},
        fingerprint=digest(pid, [fragments[name] for name in sorted(final)]),
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
        requested = slot.requested
        if type(requested) in CONTAINER_TYPES:  # the caller's own object: a copy, as the value
            requested = detached(requested)
        cached = Provenance(slot.source, slot.rules, requested, slot.env_var, slot.detail)
        requested = slot.requested
        # Text within bounds; no float, as 0.0 == -0.0 would share one record.
        short = not isinstance(requested, str) or len(requested) <= MAX_MEMO_TEXT
        if key and short and type(requested) is not float:
            keep(_PROVENANCE, key, cached, _MAX_PROVENANCE)
    return cached


def detached(value: JSON) -> JSON:
    """A copy of an object or list value, all the way down: an answer is data of its own. A
    caller that edits its answer must not edit the policy that gave the value (every later
    answer), nor a request's config the answer read it from; nor the other way round."""
    if type(value) is dict:
        if FLAT_TYPES.issuperset(map(type, value.values())):  # nothing inside to copy: in C
            return value.copy()
        return {key: detached(item) for key, item in value.items()}
    if type(value) is list:
        if FLAT_TYPES.issuperset(map(type, value)):
            return value.copy()
        return [detached(item) for item in value]
    return value


def check_arguments(request: object, policy: object, caller: str = "resolve") -> None:
    """A TypeError naming the parameter for a request or policy of the wrong type: a mistake
    in the calling code, said where it is made rather than as an AttributeError from inside."""
    if not isinstance(request, ResolveRequest):
        raise TypeError(
            f"{caller}'s request must be an npu_resolver.ResolveRequest, not "
            f"{type(request).__name__}; build one with ResolveRequest(product=..., config=...) "
            "(or ResolveRequest.from_json(data) for a dict of its fields or their JSON text)"
        )
    if policy is not None and not (
        callable(getattr(policy, "layer", None))
        and callable(getattr(policy, "profile_names", None))
        and isinstance(getattr(policy, "version", None), str)
    ):
        raise TypeError(
            f"{caller}'s policy must be an npu_resolver.Policy, not {type(policy).__name__}; "
            "read the file with load_policy(path) (or parse_policy(text)) and pass that, "
            "or None for no policy"
        )


def resolve(
    request: ResolveRequest,
    *,
    catalog: Catalog = CATALOG,
    policy: PolicyLike | None = None,
) -> Resolution:
    """Resolve one request. Never raises on caller input: problems are diagnostics. A request
    that is not a ResolveRequest, or a policy that is not a Policy, is a TypeError."""
    return _resolve(request, catalog, policy, own_values=True)


def resolve_for_checks(
    request: ResolveRequest, *, catalog: Catalog, policy: PolicyLike | None
) -> Resolution:
    """resolve() for the policy's own checks, whose answers are read and dropped: an object
    the policy gave stays the policy's own in the answer, not a copy (copying a policy's
    object of thousands of items for each profile, product and mode took minutes)."""
    return _resolve(request, catalog, policy, own_values=False)


def _resolve(
    request: ResolveRequest, catalog: Catalog, policy: PolicyLike | None, own_values: bool
) -> Resolution:
    """`own_values`: objects in the answer are copies of the caller's and the policy's."""
    check_arguments(request, policy)
    if not isinstance(catalog, Catalog):
        raise TypeError(
            f"resolve's catalog must be an npu_resolver Catalog, not {type(catalog).__name__}"
        )
    policy_version = policy.version if policy is not None else ""
    shape = config_shape(request.config)
    if shape is not None:
        return config_refused(
            request.product,
            config_refusal(shape),
            policy_version=policy_version,
            catalog=catalog,
        )
    pid = product_id(request.product)
    if pid is None:
        return unresolved(
            "",
            unknown_product(request.product),
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

    env, workdir, unreadable = readable(request)
    probe = State(
        pid, Mode.TRAINING, catalog.view(pid, Mode.TRAINING), env, request.strict, workdir
    )
    report_unreadable(probe, request, unreadable)
    explicit = _read_config(request, probe, catalog)
    mode = effective_mode(probe, explicit, layer)
    state = probe
    if mode is not Mode.TRAINING:
        state = State(
            pid,
            mode,
            catalog.view(pid, mode),
            env,
            request.strict,
            workdir,
            diagnostics=probe.diagnostics,
            refused=probe.refused,
        )
    base = _base(catalog, pid, mode)
    state.slots = dict(base.slots)
    state.defaults = base.slots
    state.undocumented = dict(base.undocumented)
    state.given = explicit  # with state.refused: every known name the config held
    env_values, invalid_env = read_env(state, catalog)
    if invalid_env:
        env_problems(state, invalid_env, explicit, layer)
    apply_precedence(state, explicit, env_values, layer, base.order)
    _run(_DEFAULT_RULES, state)
    _undocumented(state)
    apply_gates(state)
    _run(_DERIVED_RULES, state)
    _run(_LATE_RULES, state)
    apply_content_rules(state, request.attachments, explicit)
    _run(_FINAL_RULES, state)
    return _result(state, base, catalog, policy_version, own_values)


def _run(rules: tuple[CrossRule, ...], state: State) -> None:
    for rule in rules:
        rule.apply(state)


def _result(
    state: State, base: _Base, catalog: Catalog, policy_version: str, own_values: bool
) -> Resolution:
    slots = state.slots
    ok = Severity.ERROR not in [d.severity for d in state.diagnostics]
    if slots == base.final:  # nothing moved a default: every part is precomputed
        return resolution(
            ok=ok,
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
    for name in catalog.holding_objects if own_values else ():
        value = options.get(name)
        if type(value) in CONTAINER_TYPES:  # an object the caller or the policy still holds
            options[name] = detached(value)
    provenance = {name: slot.prov or _provenance(slot) for name, slot in slots.items()}
    return resolution(
        ok=ok,
        product=state.pid,
        options=options,
        provenance=provenance,
        diagnostics=tuple(state.diagnostics),
        paths=effective_paths(state),
        catalog_version=catalog.version,
        policy_version=policy_version,
        fingerprint=_fast_fingerprint(state, base),
    )


def _fast_fingerprint(state: State, base: _Base) -> str:
    """fingerprint() of the options, reusing the fragments slots carry (defaults and plain
    values) and the defaults' order where it can."""
    slots = state.slots
    names = base.sorted_names if slots.keys() == base.slots.keys() else sorted(slots)
    return digest(
        state.pid,
        [(slot := slots[name]).fragment or fragment(name, slot.value) for name in names],
    )
