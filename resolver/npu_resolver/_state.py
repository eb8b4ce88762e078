"""The working state of one resolution: effective values so far, and the diagnostics.

The pipeline stages and the cross-option rules act on it through a few verbs (emit, report,
drop, refuse, conflict, force) so that severity, `strict` and provenance are handled in one
place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeVar

from ._catalog import View
from ._model import (
    CODE_SEVERITY,
    DROP_CODES,
    JSON,
    Code,
    Diagnostic,
    Provenance,
    Severity,
    Source,
    diagnostic,
    unset,
)
from ._products import BY_ID, Family
from ._schema import Mode
from ._values import Parsed, parse, show

if TYPE_CHECKING:
    from ._values import Problem

_UNSET: Final = unset()

SET_SOURCES: Final = frozenset({Source.USER, Source.ENV, Source.POLICY, Source.POLICY_LOCKED})
"""Values a caller or the policy chose (warnings are about these, never about defaults)."""


DEFAULT_PROFILE: Final = "default"
"""The profile a request without one gets; its locks hold in every profile."""


MAX_ENTRY_MEMO: Final = 64
"""What one policy entry keeps: the catalog's 10 views (5 products, 2 modes) and a few more."""
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One policy value with where it was written (for provenance `detail`)."""

    value: JSON
    detail: str
    all_products: bool = False
    memo: dict[object, tuple[object, Any]] = field(default_factory=dict, compare=False, repr=False)
    """What the resolver worked out from `value` once (its reading per option view, its
    fingerprint text, its canonical JSON), see `kept`."""

    def kept(self, key: object, anchor: object, make: Callable[[], _T]) -> _T:
        """What `make` gives, worked out once and kept under `key` beside `anchor`, the object
        it was worked out from (a view, the value): a lock of the default profile reaches every
        job and every profile, and an object of ten thousand items would be walked again for
        each. An anchor is compared by identity, so no other object taking a gone one's id is
        given its result; a full memo (views of many catalogs in turn) is emptied."""
        found = self.memo.get(key)
        if found is not None and found[0] is anchor:
            result: _T = found[1]
            return result
        result = make()
        if len(self.memo) >= MAX_ENTRY_MEMO:
            self.memo.clear()
        self.memo[key] = (anchor, result)
        return result

    def __reduce__(self) -> tuple[type[PolicyEntry], tuple[JSON, str, bool]]:
        """Pickled without its memo, which holds the catalog's views (worked out anew)."""
        return (PolicyEntry, (self.value, self.detail, self.all_products))


@dataclass(frozen=True, slots=True)
class PolicyLayer:
    """The policy as it applies to one profile and one product."""

    locked: Mapping[str, PolicyEntry]
    defaults: Mapping[str, PolicyEntry]


class PolicyLike(Protocol):
    """What the resolver needs of a policy: its version and a layer per profile and product."""

    @property
    def version(self) -> str: ...

    def layer(self, profile: str, product: str) -> PolicyLayer | None: ...

    def profile_names(self) -> tuple[str, ...]: ...


class Slot(NamedTuple):
    """One option's effective value while the pipeline runs.

    Immutable (and cheap to build): default slots are shared between requests, so a rule
    replaces a slot, never edits it.
    """

    value: JSON
    source: Source
    rules: tuple[str, ...]
    requested: JSON = _UNSET
    env_var: str = ""
    detail: str = ""
    all_products: bool = False
    prov: Provenance | None = None
    """This slot's provenance when it is known in advance (shared defaults, plain values)."""
    fragment: str | None = None
    """Its fingerprint fragment when known in advance (shared defaults, plain values): the
    option's name and `value` as `fingerprint.fragment` writes them."""

    def changed(self, **fields: Any) -> Slot:
        """A copy with `fields` replaced; its provenance and fragment are derived again unless
        given."""
        fields.setdefault("prov", None)
        fields.setdefault("fragment", None)
        return self._replace(**fields)

    def with_rule(self, rule: str) -> Slot:
        return self if rule in self.rules else self.changed(rules=(*self.rules, rule))

    @property
    def is_set(self) -> bool:
        return self.source in SET_SOURCES

    def asked_unless(self, value: JSON) -> JSON:
        """What was asked for this option (the requested form when it differs, else the value),
        for a rule that replaces it with `value`; unset when that is what was asked."""
        asked = self.value if self.requested is _UNSET else self.requested
        return _UNSET if type(asked) is type(value) and asked == value else asked


def via_env(var: str, lead: str, message: str) -> str:
    """A drop message for an option that an environment variable set: it names the variable
    and says to unset it, not to remove an option the caller never wrote."""
    return f"{lead}, but {message[:1].lower()}{message[1:]}".replace("remove it", f"unset {var}")


_POLICY_ADVICE: Final = (
    ("; remove it for this mode.", "; the policy's value does not act in this mode."),
    ("; remove it for this product.", "; the policy's value does not act on this product."),
    ("; remove it.", "; the policy's value does not act here."),
)


def table_of(detail: str) -> str:
    """The table a policy value's provenance `detail` names: "locked from [profiles.x.locked]"
    -> "profiles.x.locked"."""
    return detail.split("[", 1)[-1].removesuffix("]")


def product_table(table: str, pid: str) -> str:
    """The table for `pid` alone beside a table for every product, in the same profile and of
    the same kind: profiles.gold.locked -> profiles.gold.products.atlas-training.locked."""
    profile, kind = table.rsplit(".", 1)
    return f"{profile}.products.{pid}.{kind}"


_STRICT_UNDER_POLICY: Final = (
    " Under strict a drop is an error, and this value is not the job's: name a profile "
    "without it, or ask the platform team to move it to the profiles it suits."
)
_STRICT_UNDER_LOCK: Final = (
    " Under strict a drop is an error, and this value is the policy's lock, which no job "
    "changes: ask the platform team to move it to the profiles it suits."
)


def via_policy(detail: str, name: str, message: str) -> str:
    """A drop message for an option the policy set: it says so, and where (the caller never
    wrote it); a gate's advice to remove the option, which the caller cannot follow and a
    policy table written for every mode need not, becomes what happens to the value."""
    for advice, instead in _POLICY_ADVICE:
        if message.endswith(advice):
            message = message[: -len(advice)] + instead
            break
    if "from the policy" in message:
        return message
    return f"the policy sets {name} ({detail}), but {message[:1].lower()}{message[1:]}"


@dataclass(slots=True)
class State:
    pid: str
    mode: Mode
    view: View
    env: Mapping[str, str]
    strict: bool
    workdir: str
    slots: dict[str, Slot] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    """Options a caller, the environment or the policy set, in catalog order."""
    refused: set[str] = field(default_factory=set)
    """Options whose given value was an error: they stay out of the answer."""
    undocumented: dict[str, str] = field(default_factory=dict)
    """Options the source gives no default for here, though it does elsewhere."""
    attachments: dict[str, Any] = field(default_factory=dict)
    """Parsed attachment content per option (set by the attachment stage)."""
    given: Collection[str] = ()
    """The known option names the caller's config holds with a readable value; those refused
    are in `refused`."""
    unrounded: dict[str, int] = field(default_factory=dict)
    """Values as configured before a rounding rule changed them (R-HCT-3)."""
    defaults: Mapping[str, Slot] = field(default_factory=dict)
    """The documented defaults of this product and mode: what a policy default that gives way
    falls back to."""
    gave_way: set[str] = field(default_factory=set)
    """Options whose policy default gave way to what the job set: their documented value is
    then the job's doing, and a later conflict over it is settled the same way."""

    @property
    def family(self) -> Family:
        return BY_ID[self.pid].family

    def value(self, name: str) -> JSON:
        slot = self.slots.get(name)
        return None if slot is None else slot.value

    def env_path(self, var: str) -> str:
        """A folder variable's value; blanks name no folder, so they count as unset for every
        rule that reads it (R-EXD-2, R-ODC-3 and the effective paths alike)."""
        return self.env.get(var, "").strip()

    def is_set(self, name: str) -> bool:
        slot = self.slots.get(name)
        return slot is not None and slot.is_set

    def emit(self, code: Code, option: str, rule: str, message: str, suggestion: str = "") -> None:
        severity = CODE_SEVERITY[code]
        if self.strict and code in DROP_CODES:
            severity = Severity.ERROR
        self.diagnostics.append(diagnostic(severity, code, option, rule, message, suggestion))

    def report(self, option: str, problem: Problem) -> None:
        """A value's problem, or a note on how it was read, as a diagnostic on `option`."""
        self.emit(problem.code, option, problem.rule, problem.message, problem.suggestion)

    def drop(self, name: str, code: Code, rule: str, message: str, *, gate: bool = False) -> None:
        """Remove an option; a caller's or the policy's value gets a warning, a default not.
        `gate`: dropped because the product or mode lacks the option, where a policy value
        written for every product steps back quietly (it was not written for this one); a
        rule's drop (superseded, no effect) is said whatever table the value came from."""
        slot = self.slots.pop(name, None)
        if slot is not None and slot.is_set and not (gate and slot.all_products):
            if slot.source is Source.ENV:  # the caller never wrote the option itself
                message = via_env(slot.env_var, f"{slot.env_var} sets {name}", message)
            elif slot.source in (Source.POLICY, Source.POLICY_LOCKED):
                message = via_policy(slot.detail, name, message)
                message += self.strict_remedy(locked=slot.source is Source.POLICY_LOCKED)
            self.emit(code, name, rule, message)

    def strict_remedy(self, *, locked: bool = False) -> str:
        """What a strict job does about a policy value it must not drop (its words, after the
        drop's): nothing when the job is not strict, and the drop only a warning."""
        if not self.strict:
            return ""
        return _STRICT_UNDER_LOCK if locked else _STRICT_UNDER_POLICY

    def refuse(self, name: str, code: Code, rule: str, message: str) -> None:
        """An error about the option's value: it leaves the effective config."""
        self.slots.pop(name, None)
        self.refused.add(name)
        self.emit(code, name, rule, message)

    def _asked_for(self, name: str, slot: Slot, value: JSON) -> bool:
        """Whether the value a lock replaced (`slot.requested`, as the caller wrote it: 1.0 or
        "1" for 1) reads as `value`."""
        if slot.requested is _UNSET:
            return False
        read = parse(self.view[name], slot.requested, product=self.pid)
        return isinstance(read, Parsed) and type(read.value) is type(value) and read.value == value

    def conflict(self, name: str, rule: str, message: str) -> None:
        self.refuse(name, Code.CONFLICT, rule, message)

    def force(self, name: str, value: JSON, rule: str, detail: str, message: str) -> None:
        """A rule overrides the value. A value someone set (the caller, the job's environment or
        the policy) goes to provenance `requested` and gets a FORCED warning; a documented
        default the rule replaces is not the caller's, so the answer says it only in provenance
        (DERIVED, with `detail` naming what it was derived from)."""
        slot = self.slots.get(name)
        if slot is None or slot.value == value:
            if slot is not None:
                self.slots[name] = slot.with_rule(rule)
            return
        if slot.source is Source.POLICY_LOCKED and self._asked_for(name, slot, value):
            # The job asked for what the rule makes it (R-EXD-2 over a locked dump mode): the
            # lock replaced nothing that takes effect, so its POLICY_LOCKED is taken back.
            self.diagnostics[:] = [
                d for d in self.diagnostics if d.code is not Code.POLICY_LOCKED or d.option != name
            ]
        self.slots[name] = Slot(
            value,
            Source.DERIVED,
            slot.rules if rule in slot.rules else (*slot.rules, rule),
            requested=slot.asked_unless(value) if slot.is_set else unset(),
            detail=detail,
        )
        if slot.is_set:
            if slot.source in (Source.POLICY, Source.POLICY_LOCKED) and "policy" not in message:
                # whose value gave way, unless the rule's words already say it
                message += f" The policy's {name} {show(slot.value)} ({slot.detail}) gives way."
            self.emit(Code.FORCED, name, rule, message)
