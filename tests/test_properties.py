"""Properties: any request gets a structured, deterministic answer; valid ones are fixpoints."""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections import OrderedDict, defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_resolver import (
    CATALOG,
    PATH_KEYS,
    PRODUCTS,
    Code,
    Resolution,
    ResolveRequest,
    Severity,
    fingerprint,
    resolve,
)
from npu_resolver._options import NAMED_ENV_VARS
from tests.conftest import attached_again

OPTION_NAMES = list(CATALOG.by_name)
PRODUCT_NAMES = [p.id for p in PRODUCTS] + ["Ascend910B3", "atlas a2", "bogus", ""]

json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
option_values = (
    st.sampled_from(
        [
            0,
            1,
            2,
            4,
            68,
            600,
            17340,
            17341,
            -1,
            True,
            False,
            "1",
            "2",
            "auto",
            "true",
            "false",
            "origin",
            "mixed_float16",
            "Host",
            "force_fp32",
            "/tmp/x.cfg",
            "cv",
            "2|4",
            {},
        ]
    )
    | json_values
)
names = st.sampled_from(OPTION_NAMES) | st.text(min_size=1, max_size=20)
env_values = st.sampled_from(["", "0", "1", "600", "abc", "/w", "-1", "101"]) | st.text(max_size=8)
requests = st.builds(
    ResolveRequest,
    product=st.sampled_from(PRODUCT_NAMES) | st.text(max_size=12),
    config=st.dictionaries(names, option_values, max_size=12),
    env=st.dictionaries(
        st.sampled_from(NAMED_ENV_VARS) | st.text(max_size=8), env_values, max_size=5
    ),
    workdir=st.sampled_from(["", "/job"]),
    strict=st.booleans(),
)
valid_requests = st.builds(
    ResolveRequest,
    product=st.sampled_from([p.id for p in PRODUCTS]),
    config=st.dictionaries(st.sampled_from(OPTION_NAMES), option_values, max_size=20),
    env=st.dictionaries(st.sampled_from(NAMED_ENV_VARS), env_values, max_size=4),
)

FAST = settings(max_examples=300)


def _structured(result: Resolution) -> None:
    assert isinstance(result, Resolution)
    assert result.ok == (not any(d.severity is Severity.ERROR for d in result.diagnostics))
    assert set(result.provenance) == set(result.options)
    for d in result.diagnostics:
        assert d.message and d.option
    data: dict[str, Any] = result.to_json()
    assert Resolution.from_json(data).to_json() == data


@FAST
@given(requests)
def test_any_request_gives_a_structured_deterministic_answer(request: ResolveRequest) -> None:
    first = resolve(request)
    _structured(first)
    assert resolve(request).to_json() == first.to_json()


@FAST
@given(st.dictionaries(st.sampled_from(OPTION_NAMES), option_values, max_size=8))
def test_key_order_does_not_change_the_answer(config: dict[str, Any]) -> None:
    forward = resolve(ResolveRequest(product="atlas-a2", config=config))
    backward = resolve(ResolveRequest(product="atlas-a2", config=dict(reversed(config.items()))))
    assert forward.to_json() == backward.to_json()


def test_deeply_nested_object_is_refused_not_crashing() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    result = resolve(ResolveRequest(product="atlas-a2", config={"dump_config": deep}))
    assert not result.ok
    assert [(d.code, d.option) for d in result.diagnostics] == [("INVALID_VALUE", "config")]
    assert result.diagnostics[0].message.startswith("config: nested deeper than 18 levels")


def test_huge_config_is_one_clear_error() -> None:
    config = {f"k{i}": i for i in range(100_000)}
    result = resolve(ResolveRequest(product="atlas-a2", config=config))
    assert [d.code for d in result.diagnostics] == ["INVALID_VALUE"]
    assert "more than 10,000 keys" in result.diagnostics[0].message
    assert result.diagnostics[0].option == "config"


def as_ints(value: Any) -> Any:
    """The documented text's numbers: an integral float up to 2**53 as the int it equals."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: as_ints(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_ints(v) for v in value]
    return value


@FAST
@given(requests)
def test_fingerprint_is_the_hash_of_the_canonical_json(request: ResolveRequest) -> None:
    """The fast path that reuses precomputed fragments hashes exactly the documented text."""
    result = resolve(request)
    if result.fingerprint == "":  # refused before resolving: unknown product or profile
        assert not result.ok and not result.options
        return
    text = json.dumps(
        {"options": as_ints(result.options), "product": result.product},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert result.fingerprint == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert fingerprint(result.product, result.options) == result.fingerprint


def test_fingerprint_of_any_mapping_json_can_write() -> None:
    """fingerprint() is public: a mapping whose keys json writes (an int key, say) hashes as
    its canonical JSON (json writes such a key as a string), memoized or not."""
    # 1, True and 1.0 are one dict key but three JSON keys: none may take another's text.
    cases: tuple[dict[Any, Any], ...] = (
        {1: 5},
        {True: 5},
        {1.0: 5},
        {2: [1]},
        {1.5: None},
        {"a": 1, "b": [1, {"c": None}]},
        {"x": "é" * 2000},
    )
    for options in (*cases, {"f": -0.0}, {"f": 2.5}, {"f": 1e300}):
        for _ in range(2):  # the second time from the memo
            text = json.dumps(
                {"options": as_ints(options), "product": "atlas-a2"},
                sort_keys=True,
                separators=(",", ":"),
                ensure_ascii=False,
            )
            expected = hashlib.sha256(text.encode()).hexdigest()[:16]
            assert fingerprint("atlas-a2", options) == expected


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"b": [1, 2.0]}, {"b": [1, 2]}),
        ({"x": -0.0}, {"x": 0}),
        ({"x": {"y": [0.0, {"z": 3.0}]}}, {"x": {"y": [0, {"z": 3}]}}),
        ({"x": 9007199254740991.0}, {"x": 9007199254740991}),
        (OrderedDict(x=OrderedDict(y=4.0)), {"x": {"y": 4}}),  # fingerprint() is public
        ({"x": 2.0**53, "y": -(2.0**53)}, {"x": 2**53, "y": -(2**53)}),  # the wire's bound too
    ],
)
def test_options_that_compare_equal_have_equal_fingerprints(
    one: dict[str, Any], other: dict[str, Any]
) -> None:
    """A number travels as JSON writes it (2.0) or as a Struct's double: equal values, one hash.
    In process and through a server the same config gets the same fingerprint."""
    assert one == other
    options = {"experimental_config": one}
    assert fingerprint("atlas-a2", options) == fingerprint(
        "atlas-a2", {"experimental_config": other}
    )
    a = resolve(ResolveRequest(product="atlas-a2", config=options))
    b = resolve(ResolveRequest(product="atlas-a2", config={"experimental_config": other}))
    assert a.fingerprint == b.fingerprint
    assert fingerprint("atlas-a2", {"x": 0.5}) != fingerprint("atlas-a2", {"x": 0})


@pytest.mark.parametrize(
    "option",
    ["hccl_timeout", "enable_small_channel", "precision_mode", "op_debug_level", "unknown_x"],
)
@pytest.mark.parametrize("sign", [1, -1])
def test_an_integer_past_pythons_digit_limit_is_an_answer_not_an_exception(
    option: str, sign: int
) -> None:
    """str() refuses ints of over 4,300 digits (ValueError): an in-process caller's int that
    long is refused on its option like any other out of range (R-HCT-1 and the like), its
    message showing its size, not its digits."""
    result = resolve(ResolveRequest(product="atlas-a2", config={option: sign * 10**5000}))
    assert not result.ok
    [error] = result.errors
    assert (error.option, error.code) == (
        (option, Code.INVALID_VALUE) if option != "unknown_x" else (option, Code.UNKNOWN_OPTION)
    )
    assert len(error.message) < 300


@FAST
@given(requests)
def test_paths_are_named_and_ordered_as_path_keys_says(request: ResolveRequest) -> None:
    """Clients order the paths of an answer by PATH_KEYS: every path the core gives is in it,
    in that order."""
    paths = list(resolve(request).paths)
    assert paths == [key for key in PATH_KEYS if key in paths]


def _deep_tuple(levels: int) -> tuple[Any, ...]:
    value: tuple[Any, ...] = ()
    for _ in range(levels):
        value = (value,)
    return value


class _UnprintableError(Exception):
    pass


class _Unprintable:
    def __repr__(self) -> str:
        raise _UnprintableError

    __str__ = __repr__


NOT_JSON = [b"x", {1, 2}, (1, 2), _deep_tuple(100_000), _Unprintable(), complex(1, 2)]


@pytest.mark.parametrize("value", NOT_JSON, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("option", ["hccl_timeout", "precision_mode", "debug_dir", "dump_config"])
def test_python_values_json_cannot_hold_are_an_invalid_value_on_their_option(
    option: str, value: Any
) -> None:
    """In process a config may hold any Python object, as a value or inside an object value;
    the answer is an INVALID_VALUE on the option, never an exception (nor one that only
    shows when the answer is hashed or turned into JSON)."""
    for config in ({option: value}, {option: {"k": value}}, {option: {"k": [1, {"j": value}]}}):
        result = resolve(ResolveRequest(product="atlas-a2", config=config))
        assert [(d.code, d.option) for d in result.errors] == [("INVALID_VALUE", option)], config
        json.dumps(result.to_json())


def test_config_keys_that_are_not_text_are_unknown_options_named_briefly() -> None:
    config: dict[Any, Any] = {_deep_tuple(100_000): 1, _Unprintable(): 2, b"hccl_timeout": 3}
    result = resolve(ResolveRequest(product="atlas-a2", config=config))
    assert [d.code for d in result.errors] == ["UNKNOWN_OPTION"] * 3
    assert all(len(d.option) <= 100 for d in result.errors)
    # Said for what they are, not as past a bound of close names sought (none is sought).
    assert all("named by a str" in d.message for d in result.errors)
    assert not any("close names are sought" in d.message for d in result.errors)


_LETTERS = st.sampled_from("abcdefghijklmnopqrstuvwxyz_0123456789")


@st.composite
def _misspelt(draw: st.DrawFn) -> str:
    """An option name with a few letters changed, added or left out, or any short text."""
    if draw(st.booleans()):
        return draw(st.text(_LETTERS, max_size=40))
    letters = list(draw(st.sampled_from(sorted(CATALOG.by_name))))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(letters)))
        kind = draw(st.sampled_from(["change", "add", "drop"]))
        if kind == "add" or not letters:
            letters.insert(at, draw(_LETTERS))
        elif kind == "change":
            letters[min(at, len(letters) - 1)] = draw(_LETTERS)
        else:
            del letters[min(at, len(letters) - 1)]
    return "".join(letters)


@pytest.mark.parametrize(
    ("text", "tied"),
    [  # two names at the same ratio: difflib takes the greater one
        ("hccl_r_optimize", "hccl_timeout"),
        ("export_nfig", "memory_config"),
        ("variable_formsize", "variable_memory_max_size"),
        ("dynamicute_timeout", "op_wait_timeout"),
    ],
)
def test_a_tie_between_close_names_goes_as_difflib_breaks_it(text: str, tied: str) -> None:
    import difflib

    from npu_resolver._model import closest

    assert difflib.get_close_matches(text, CATALOG.by_name, n=1)[0] == tied
    assert closest(text, CATALOG.by_name) == tied


@settings(max_examples=500)
@given(_misspelt())
def test_the_closest_name_is_difflibs_answer(text: str) -> None:
    """closest() skips ratio() where it cannot win, for speed: its answer must stay the one
    difflib.get_close_matches gives, ties included (UNKNOWN_OPTION suggestions are pinned)."""
    import difflib

    from npu_resolver._model import closest

    found = difflib.get_close_matches(text, CATALOG.by_name, n=1, cutoff=0.6)
    assert closest(text, CATALOG.by_name) == (found[0] if found else "")


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"product": b"atlas-a2"}, "ResolveRequest.product must be a str, not bytes"),
        ({"workdir": None}, "ResolveRequest.workdir must be a str, not NoneType"),
        ({"strict": 2}, "ResolveRequest.strict must be a bool, not 2"),
        ({"config": [("hccl_timeout", 1)]}, "ResolveRequest.config must be a mapping, not list"),
        ({"env": {"HCCL_EXEC_TIMEOUT": 600}}, "ResolveRequest.env maps str to str; it holds a str"),
        ({"attachments": {"op_debug_config": b"x"}}, "ResolveRequest.attachments maps str to str"),
    ],
)
def test_a_request_field_of_the_wrong_type_is_a_type_error_naming_it(
    fields: dict[str, Any], said: str
) -> None:
    """Every field but the config has one type: a mistake in the caller's code, said where it
    is made rather than as an AttributeError deep in the resolver."""
    with pytest.raises(TypeError, match=re.escape(said)):
        ResolveRequest(**{"product": "atlas-a2", **fields})


def test_a_request_keeps_its_own_mappings_when_the_caller_reuses_a_dict() -> None:
    """Filling one dict and reusing it for the next request is common in job tooling: the
    requests already made keep what they were given (R-HCT-1: each its own hccl_timeout)."""
    config: dict[str, Any] = {}
    env = {"HCCL_EXEC_TIMEOUT": "68"}
    requests = []
    for timeout in (600, 1200):
        config["hccl_timeout"] = timeout
        requests.append(ResolveRequest(product="atlas-a2", config=config, env=env))
    env.clear()
    assert [resolve(r).options["hccl_timeout"] for r in requests] == [600, 1200]
    assert all(r.env == {"HCCL_EXEC_TIMEOUT": "68"} for r in requests)


def test_str_and_bool_like_fields_and_mapping_values_of_other_classes_are_taken() -> None:
    """A StrEnum product, 0/1 for a flag, an OrderedDict or defaultdict as an object value (as
    json.loads with object_pairs_hook gives): taken as their plain forms, never an exception."""

    class Product(enum.StrEnum):
        A2 = "atlas-a2"

    config = json.loads(
        '{"dump_config": {"k": 1}, "hccl_timeout": 600}', object_pairs_hook=OrderedDict
    )
    config["distribute"] = defaultdict(list)
    request = ResolveRequest(Product.A2, config, workdir=Product.A2, strict=1)  # type: ignore[arg-type]
    assert request.strict is True
    result = resolve(request)
    assert result.ok and result.product == "atlas-a2"
    assert result.options["dump_config"] == {"k": 1} and result.options["distribute"] == {}
    plain = resolve(ResolveRequest("atlas-a2", json.loads(json.dumps(config)), workdir="atlas-a2"))
    assert result.fingerprint == plain.fingerprint


GRAMMARS = [o.validator for o in CATALOG.options if o.validator is not None]
grammar_texts = st.one_of(
    st.text(alphabet="0123456789|,:;~[]- getnextdaAIcoreEngineDNN_VM_AICPUPooling", max_size=30),
    st.text(max_size=1100),  # past the memo's text bound too
)


@given(st.lists(grammar_texts, min_size=1, max_size=8))
@settings(max_examples=200)
def test_a_grammar_gives_the_same_verdict_whatever_was_asked_before(texts: list[str]) -> None:
    """Grammar verdicts are kept from request to request; a kept one must be the one a fresh
    check gives, for a text asked once or again, short or past the bound."""
    for check in GRAMMARS:
        fresh = getattr(check, "__wrapped__", check)
        for text in [*texts, *texts]:
            assert check(text) == fresh(text), (check.__name__, text)


SPELT = [o for o in CATALOG.options if o.canonical is not None]
SEPARATORS = {  # the separators of each grammar, and whether its parts hold numbers
    "aicore_num": ("|", True),
    "stream_max_parallel_num": (",:", True),
    "local_device_list": (",", True),
    "enable_scope_fusion_passes": (",", False),
    "optypelist_for_implmode": (",", False),
}
_padded_number = st.tuples(
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["", "0", "00"]),
    st.integers(0, 99),
    st.sampled_from(["", " "]),
).map(lambda parts: "".join(map(str, parts)))
_names = st.lists(st.sampled_from([" Pooling", "LRN ", "SoftmaxV2", " ROIAlign ", "0Pass"]))
SPELLINGS = {  # well-formed values, spelt with spaces and leading zeros, or not
    "aicore_num": st.tuples(_padded_number, _padded_number).map("|".join),
    "stream_max_parallel_num": st.lists(
        st.tuples(st.sampled_from([" DNN_VM_AICPU", "AIcoreEngine "]), _padded_number),
        min_size=1,
        max_size=2,
        unique_by=lambda item: item[0],
    ).map(lambda items: ",".join(f"{engine}:{count}" for engine, count in items)),
    "local_device_list": st.lists(_padded_number, min_size=1, max_size=4).map(",".join),
    "enable_scope_fusion_passes": _names.filter(bool).map(",".join),
    "optypelist_for_implmode": _names.filter(bool).map(",".join),
}


@given(st.data())
@settings(max_examples=300)
def test_a_value_spelt_another_way_resolves_as_its_canonical_spelling_r_acn_1_r_smp_1(
    data: st.DataObject,
) -> None:
    """R-ACN-1, R-SMP-1, R-LRI-1, R-ESF-1, R-DEP-5: a well-formed value with spaces or leading
    zeros means what its canonical spelling means: same options, same fingerprint; the
    spelling is well formed and its own canonical form, and only a different one is noted."""
    option = data.draw(st.sampled_from(SPELT))
    text = data.draw(st.one_of(SPELLINGS[option.name], st.text(max_size=20)))
    assert option.validator is not None and option.canonical is not None
    if option.validator(text) is not None:
        return
    canonical = option.canonical(text)
    assert option.validator(canonical) is None
    assert option.canonical(canonical) == canonical
    seps, numbers = SEPARATORS[option.name]
    assert re.search(rf"\s[{seps}]|[{seps}]\s|^\s|\s$", canonical) is None, canonical
    assert not numbers or re.search(rf"(?:^|[{seps}])0[0-9]", canonical) is None, canonical
    config: dict[str, Any] = {option.name: text}
    if option.name == "optypelist_for_implmode":
        config["op_select_implmode"] = "high_precision"
    spelt = resolve(ResolveRequest("atlas-a2", config))
    plain = resolve(ResolveRequest("atlas-a2", {**config, option.name: canonical}))
    assert spelt.options == plain.options and spelt.fingerprint == plain.fingerprint
    noted = [d for d in spelt.diagnostics if d.code is Code.NORMALIZED and d.option == option.name]
    assert len(noted) == (text != canonical)


_SPELT = {
    "enable_scope_fusion_passes": "ScopeLayerNormPass",
    "stream_max_parallel_num": "DNN_VM_AICPU:10",
    "aicore_num": "2|4",
    "local_device_list": "0,1",
    "optypelist_for_implmode": "Pooling",
    "dynamic_inputs_shape_range": "data:[1,2]",
}
"""A value of each string option with a grammar, as the source's examples write them."""


def _meant(option: Any) -> list[Any]:
    """Values an option takes somewhere: its defaults, choices and range bounds, a path for a
    string without choices. Random JSON would make nearly every policy one the loader refuses."""
    values: list[Any] = [d.value for d in option.defaults] + list(option.choices)
    for bound in option.ranges:
        values += [v for v in (bound.minimum, bound.maximum) if isinstance(v, int)]
    if option.type.value == "bool":
        values += [True, False]
    if not values and option.type.value in ("str", "path"):
        values.append(_SPELT.get(option.name, "/p/x.cfg"))
    if option.type.value in ("any", "object"):
        values.append({})
    unique = {json.dumps(v, sort_keys=True): v for v in values}
    return list(unique.values()) or [1]


_MEANT: dict[str, list[Any]] = {o.name: _meant(o) for o in CATALOG.options}
_POLICY_TABLES = ["defaults", "locked"]


@st.composite
def meant_config(draw: st.DrawFn, max_size: int) -> dict[str, Any]:
    """Options of the example's shared pool, so that a config and a policy meet on the same
    options (drawn from all 62, they would rarely touch): locks over the caller's values,
    defaults beside them, the cross rules between them."""
    pool = draw(_POOL)
    names = draw(st.lists(st.sampled_from(pool), max_size=max_size, unique=True))
    return {name: draw(st.sampled_from(_MEANT[name])) for name in names}


_POOL = st.shared(
    st.lists(st.sampled_from(OPTION_NAMES), min_size=2, max_size=12, unique=True), key="pool"
)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


@st.composite
def policies(draw: st.DrawFn) -> str:
    """A policy's TOML text: a few options' defaults and locks, for every product or one."""
    lines: list[str] = []
    places = st.tuples(
        st.sampled_from([None, *(p.id for p in PRODUCTS)]), st.sampled_from(_POLICY_TABLES)
    )
    for product, table in draw(st.lists(places, min_size=1, max_size=3, unique=True)):
        where = f"products.{product}." if product else ""
        lines.append(f"[profiles.default.{where}{table}]")
        entries = draw(meant_config(4))
        lines += [f"{name} = {_toml(value)}" for name, value in entries.items()]
    return "\n".join(lines) + "\n"


_ATTACHMENTS = st.dictionaries(
    st.sampled_from(["aoe_config_file", "modify_mixlist"]),
    st.sampled_from(
        [
            '{"tune_ops_type": ["Add"], "feature": ["deeper_opat"]}',
            '{"tune_ops_type": ["Add"], "feature": ["nonhomo_split"]}',
            '{"ops": [{"op_type": "Add", "dtype": "float16"}]}',
        ]
    ),
    max_size=2,
)


meant_requests = st.builds(
    ResolveRequest,
    product=st.sampled_from([p.id for p in PRODUCTS]),
    config=meant_config(12),
    env=st.dictionaries(st.sampled_from(NAMED_ENV_VARS), env_values, max_size=4),
)


@FAST
@given(st.one_of(valid_requests, meant_requests))
def test_valid_answers_are_fixpoints(request: ResolveRequest) -> None:
    """The contract's fixpoint: an answer's options, sent back as the config, give the same
    answer. Values meant for their option (meant_requests) make most examples valid ones;
    values of any kind find the edges."""
    first = resolve(request)
    if not first.ok:
        return
    again = resolve(
        ResolveRequest(product=first.product, config=dict(first.options), env=request.env)
    )
    assert again.ok, again.diagnostics
    assert again.options == first.options
    assert again.fingerprint == first.fingerprint


@FAST
@given(meant_requests, policies(), st.booleans(), _ATTACHMENTS)
def test_valid_answers_under_a_policy_are_fixpoints(
    request: ResolveRequest, policy_text: str, strict: bool, attachments: dict[str, str]
) -> None:
    """The contract's fixpoint holds with a policy too: its defaults and locks, the rules that
    give way to them or leave them quietly (R-AOE-5), under strict, with attached files."""
    from npu_resolver import PolicyError, parse_policy

    try:
        policy = parse_policy(policy_text)
    except PolicyError:
        return  # a policy the loader refuses never reaches a request
    asked = ResolveRequest(
        product=request.product,
        config=request.config,
        env=request.env,
        strict=strict,
        attachments=attachments,
    )
    first = resolve(asked, policy=policy)
    if not first.ok:
        return
    again = resolve(
        ResolveRequest(
            product=first.product,
            config=dict(first.options),
            env=request.env,
            strict=strict,
            attachments=attached_again(first, attachments),
        ),
        policy=policy,
    )
    assert again.ok, (policy_text, again.diagnostics)
    assert again.options == first.options
    assert again.fingerprint == first.fingerprint
