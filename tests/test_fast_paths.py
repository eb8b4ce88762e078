"""The resolver's shortcuts give the answers of the general paths they stand in for."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_resolver import (
    CATALOG,
    PRODUCTS,
    ResolveRequest,
    _fingerprint,
    _pipeline,
    fingerprint,
    resolve,
)
from npu_resolver._catalog import OptionView
from npu_resolver._environment import _MAX_ENV_TEXTS, read_env
from npu_resolver._fingerprint import canonical_json, fragment
from npu_resolver._model import (
    MAX_EXACT_INT,
    Code,
    Diagnostic,
    Resolution,
    Severity,
    diagnostic,
    is_text,
    resolution,
)
from npu_resolver._precedence import _MAX_USER_SLOTS, _plain_slot
from npu_resolver._schema import Mode, OptType
from npu_resolver._state import State
from npu_resolver._values import Parsed, Problem, config_shape, parse, parse_in_full
from tests.test_properties import as_ints, json_values, valid_requests
from tests.test_properties import requests as resolve_requests

VIEWS = [
    view
    for product, mode in itertools.product(PRODUCTS, Mode)
    for view in CATALOG.view(product.id, mode).values()
]
FAST = settings(max_examples=400)


def as_is_before(view: OptionView, raw: Any) -> bool:
    """The check for a value valid as given as it was written before it was specialised per
    view (it took no object or pass-through value)."""
    option = view.option
    if option.aliases or type(raw) is not view.pytype:  # only an option without aliases
        return False
    if option.choices and raw not in frozenset(option.choices):
        return False
    rng = view.range
    if rng is not None and not (type(raw) is int and rng.contains(raw)):
        return False
    if type(raw) is int and not -MAX_EXACT_INT <= raw <= MAX_EXACT_INT:
        return False
    # Only a string without a list of choices can hold text that is not Unicode (a lone
    # surrogate) and pass the other checks, so only there was it looked for.
    free_text = option.type in (OptType.STR, OptType.PATH) and not option.choices
    if free_text and type(raw) is str and not raw.isascii() and not is_text(raw):
        return False
    if option.type is OptType.PATH and type(raw) is str and "\x00" in raw:
        return False  # a path the runtime would read only up to the NUL is refused
    check, canonical = option.validator, option.canonical
    if check is None:
        return True
    # Well formed, and spelt as its grammar writes it (another spelling is read with a note).
    return type(raw) is str and check(raw) is None and (canonical is None or canonical(raw) == raw)


def candidates(view: OptionView) -> list[Any]:
    """Values at every edge the check looks at, for one option."""
    option = view.option
    values: list[Any] = [None, "", " ", "x", "\ud800", "é", 0, 1, -1, True, False, 1.0, 0.5]
    values += [{}, {"a": 1}, {"a": 2**60}, {"a": float("nan")}, [], [1, "\ud800"], (1,), b"x"]
    values += [MAX_EXACT_INT, MAX_EXACT_INT + 1, -MAX_EXACT_INT, -MAX_EXACT_INT - 1]
    values += [OrderedDict(a=1), float("inf")]
    values += ["2|4", " 2|4", "2 | 04", "0,1", "0, 01", "Pooling,LRN", "Pooling, LRN", "a ,b"]
    values += ["DNN_VM_AICPU:10", "DNN_VM_AICPU: 10", "DNN_VM_AICPU:010", "a ", "0\r"]
    values += ["\x00", "/job/a\x00b"]
    values += list(option.choices) + list(option.aliases) + [d.value for d in option.defaults]
    for rng in option.ranges:
        for bound in (rng.minimum, rng.maximum):
            if bound is not None:
                values += [bound - 1, bound, bound + 1, str(bound)]
    deep: Any = 1
    for _ in range(20):
        deep = {"k": deep}
    values.append(deep)
    return values


def check_view(view: OptionView, raw: Any) -> None:
    accepted = view.accepts(raw)
    before = as_is_before(view, raw)
    if before:
        assert accepted, (view.option.name, raw)
    if not accepted:
        return
    parsed = parse_in_full(view, raw, product="atlas-a2")
    assert isinstance(parsed, Parsed), (view.option.name, raw, parsed)
    assert parsed.value is raw and parsed.note is None, (view.option.name, raw)
    if not before:  # taken now, and only as a value passed through: never one meaning unset
        assert view.option.type in (OptType.OBJECT, OptType.ANY), view.option.name
        assert raw is not None and raw != "", view.option.name


def test_a_value_taken_as_given_is_what_the_full_parse_gives() -> None:
    for view in VIEWS:
        for raw in candidates(view):
            check_view(view, raw)


@FAST
@given(st.sampled_from(VIEWS), json_values)
def test_any_value_taken_as_given_is_what_the_full_parse_gives(view: OptionView, raw: Any) -> None:
    check_view(view, raw)


def test_the_quick_diagnostic_builder_makes_the_same_diagnostic() -> None:
    made = diagnostic(Severity.WARNING, Code.FORCED, "a", "R-1", "m", "s")
    assert made == Diagnostic(Severity.WARNING, Code.FORCED, "a", "R-1", "m", "s")
    assert diagnostic(Severity.INFO, Code.ROUNDED, "a", "R", "m") == Diagnostic(
        Severity.INFO, Code.ROUNDED, "a", "R", "m"
    )


def test_the_quick_resolution_builder_makes_the_same_resolution() -> None:
    fields: dict[str, Any] = {
        "ok": True,
        "product": "atlas-a2",
        "options": {"a": 1},
        "provenance": {},
        "diagnostics": (),
        "paths": {"debug_dir": "/x"},
        "catalog_version": "900",
        "policy_version": "p",
        "fingerprint": "f",
    }
    assert resolution(**fields) == Resolution(**fields)


def test_a_config_of_plain_values_is_read_in_one_pass_and_any_container_still_walked() -> None:
    assert config_shape({"a": 1, "b": "x", "c": None, "d": 1.5, "e": True}) is None
    deep: Any = []
    for _ in range(40):
        deep = [deep]
    assert config_shape({"a": 1, "b": deep}) is not None
    assert config_shape({"a": 1, "b": OrderedDict(c=deep)}) is not None


def check_fragments(request: ResolveRequest) -> None:
    """A slot's fragment, kept to spare the fingerprint the work, is its name and value as the
    fingerprint writes them; a slot whose value a rule changed carries none."""
    states: list[State] = []
    result = _pipeline._result

    def keep(state: State, *args: Any) -> Resolution:
        states.append(state)
        return result(state, *args)

    with patch.object(_pipeline, "_result", keep):
        answer = resolve(request)
    for state in states:
        for name, slot in state.slots.items():
            assert slot.fragment in (None, fragment(name, slot.value)), name
    if answer.product:
        assert answer.fingerprint == fingerprint(answer.product, answer.options)


REWRITTEN = [  # requests in which a rule changes a value the caller or a default gave
    ResolveRequest("atlas-training", {"hccl_timeout": 600}),
    ResolveRequest("atlas-300i-duo", {"hccl_timeout": 10}),
    ResolveRequest("atlas-training", env={"HCCL_EXEC_TIMEOUT": "700"}),
    ResolveRequest("atlas-a2", {"graph_run_mode": 0, "enable_small_channel": 0}),
    ResolveRequest("atlas-a2", {"op_debug_level": 1, "op_compiler_cache_mode": "enable"}),
    ResolveRequest("atlas-a2", {"enable_exception_dump": 0}, env={"NPU_COLLECT_PATH": "/c"}),
    ResolveRequest("atlas-a2", {"precision_mode": "force_fp32"}),
]


def test_every_fragment_a_slot_carries_is_its_own_where_rules_rewrite_values() -> None:
    for request in REWRITTEN:
        check_fragments(request)


@FAST
@given(resolve_requests | valid_requests)
def test_every_fragment_a_slot_carries_is_its_own(request: ResolveRequest) -> None:
    check_fragments(request)


def test_a_kept_plain_slot_is_never_one_of_another_type() -> None:
    views = CATALOG.view("atlas-a2", Mode.TRAINING)
    for name, value in (("hccl_timeout", 600), ("hcom_parallel", True), ("jit_compile", "auto")):
        first = _plain_slot(views[name], name, value)
        assert _plain_slot(views[name], name, value) is first
        assert type(first.value) is type(value) and first.fragment == fragment(name, value)
    anything = views["graph_memory_max_size"]
    one, true = _plain_slot(anything, "x", 1), _plain_slot(anything, "x", True)
    assert one.value is not True and true.value is True and one.fragment is None


class _Text(str):
    pass


@FAST
@given(json_values)
def test_a_fragment_is_the_canonical_json_of_its_value(value: Any) -> None:
    assert fragment("o", value) == f"{canonical_json('o')}:{canonical_json(as_ints(value))}"


def test_fragments_of_objects_lists_and_odd_values_are_canonical_json() -> None:
    values: list[Any] = [{}, [], {"b": [1, 2.5, None], "a": {"x": "é\u2028"}}, (1, 2)]
    values += [[float("nan"), float("inf"), -0.0, 10**20], OrderedDict(b=1, a=2), _Text("t")]
    for value in values:
        assert fragment("o", value) == f'"o":{canonical_json(as_ints(value))}', value
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        fragment("o", cycle)
    with pytest.raises(TypeError, match="not JSON serializable"):
        fragment("o", {"a": object()})


ENV_VARS = sorted(CATALOG.env_options)


@FAST
@given(
    st.sampled_from([p.id for p in PRODUCTS]),
    st.sampled_from(ENV_VARS),
    st.sampled_from(["", "0", "1", " 600 ", "abc", "-1", "/w", "68"]) | st.text(max_size=8),
)
def test_an_environment_text_read_again_is_read_as_the_first_time(
    product: str, var: str, text: str
) -> None:
    state = State(
        product, Mode.TRAINING, CATALOG.view(product, Mode.TRAINING), {var: text}, False, ""
    )
    option = CATALOG.env_options[var]
    fresh = parse(state.view[option.name], text.strip(), product=product, from_text=True)
    expected = (
        ({}, {})  # a blank variable sets nothing (a note says so)
        if not text.strip()
        else ({}, {option.name: (var, fresh)})
        if isinstance(fresh, Problem)
        else ({option.name: fresh.value}, {})
    )
    for _ in range(2):  # the second read finds the text kept
        assert read_env(state, CATALOG) == expected


def test_kept_slots_and_texts_stay_bounded_however_many_values_come() -> None:
    view = CATALOG.view("atlas-300i-duo", Mode.TRAINING)["hccl_timeout"]
    for value in range(1000, 1100):
        resolve(ResolveRequest("atlas-300i-duo", {"hccl_timeout": value}))
    long_path = "/" + "x" * 300
    resolve(ResolveRequest("atlas-300i-duo", {"debug_dir": long_path}))
    assert len(view.user_slots) <= _MAX_USER_SLOTS
    assert 1099 in view.user_slots  # a full table is emptied, not frozen on its first values
    debug_dir = CATALOG.view("atlas-300i-duo", Mode.TRAINING)["debug_dir"]
    assert long_path not in debug_dir.user_slots
    device = CATALOG.view("atlas-300i-duo", Mode.TRAINING)["session_device_id"]
    for number in range(100):
        resolve(ResolveRequest("atlas-300i-duo", env={"ASCEND_DEVICE_ID": str(number)}))
    assert len(device.env_texts) <= _MAX_ENV_TEXTS
    assert len(device.env_slots) <= _MAX_USER_SLOTS
    assert "99" in device.env_texts
    assert 99 in device.env_slots


def test_a_negative_zero_is_not_taken_for_the_zero_seen_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.0 == -0.0: in the fingerprint both hash as 0 (equal options, equal fingerprints),
    while provenance keeps each as it was asked, which a memo keyed by value would confuse.
    (Empty memos: full ones, after other tests, keep nothing new and would hide it.)"""
    monkeypatch.setattr(_fingerprint, "_FRAGMENTS", {})
    monkeypatch.setattr(_pipeline, "_PROVENANCE", {})
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):
        assert fragment("z", first) == fragment("z", second) == '"z":0'
    for first, second in ((0.0, -0.0), (-0.0, 0.0)):  # requested as given, in provenance
        for value in (first, second):
            answer = resolve(ResolveRequest("atlas-a2", {"hccl_timeout": value}))
            assert str(answer.provenance["hccl_timeout"].requested) == str(value)
            answer = resolve(ResolveRequest("atlas-a2", {"graph_memory_max_size": value}))
            assert answer.fingerprint == fingerprint("atlas-a2", answer.options)


class _WithUnit(str):
    """Text whose strip() also drops a trailing unit ("600s" reads as "600")."""

    def strip(self, chars: str | None = None) -> str:
        return str.strip(self, chars).removesuffix("s")


def test_r_hct_4_a_str_subclass_env_text_is_read_as_its_text_in_either_order() -> None:
    """An environment variable is text: a str subclass (in process only) is read as the text
    it holds, not by its own strip(), and is answered alike whether the plain text was kept
    before it or after it."""

    def timeout(text: str) -> object:
        answer = resolve(ResolveRequest("atlas-a2", env={"HCCL_EXEC_TIMEOUT": text}))
        return answer.options.get("hccl_timeout"), answer.ok

    kept = CATALOG.view("atlas-a2", Mode.TRAINING)["hccl_timeout"].env_texts
    before = dict(kept)
    kept.clear()  # room to keep texts: full (after other tests) it keeps none and hides it
    try:
        assert timeout("1292s") == (None, False)  # plain text first: kept as refused
        assert "1292s" in kept
        assert timeout(_WithUnit("1292s")) == (None, False)
        assert timeout(_WithUnit("1360s")) == (None, False)  # the subclass first
        assert timeout("1360s") == (None, False)
        assert timeout(_WithUnit("1360")) == (1360, True)
    finally:
        kept.clear()
        kept.update(before)
