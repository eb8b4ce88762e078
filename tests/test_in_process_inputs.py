"""What an in-process caller can hand the core that no wire request can carry: subclasses of
str, int and float (an enum member, say), with their own methods, and keys and names of any
length. Each is answered as the plain value it holds, with a structured diagnostic, and none
changes the answer to anyone else's request."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest

from npu_resolver import (
    CATALOG,
    Code,
    PolicyError,
    ResolveRequest,
    Severity,
    Source,
    _products,
    describe_option,
    resolve,
)


class Big(int):
    """An int subclass, nothing more."""


class Loud(int):
    def __str__(self) -> str:
        raise RuntimeError("str")

    __repr__ = __str__


class Shy(str):
    def __repr__(self) -> str:
        raise RuntimeError("repr")


class Lying(str):
    def casefold(self) -> str:
        return "atlasa2"


def _errors(config: dict[str, Any]) -> list[tuple[str, Code]]:
    return [(d.option, d.code) for d in resolve(ResolveRequest("atlas-a2", config)).errors]


@pytest.mark.parametrize("option", ["stream_sync_timeout", "iterations_per_loop", "hccl_timeout"])
@pytest.mark.parametrize("value", [2**60, 10**5000], ids=["past 2^53", "past str()'s limit"])
def test_an_int_subclass_is_held_to_the_2_53_bound_as_an_int_is(option: str, value: int) -> None:
    """Refused on its option like the plain int (R-HCT-1 and the like), never taken past the
    bound a JSON number carries, never a ValueError from str()."""
    assert (
        _errors({option: Big(value)}) == _errors({option: value}) == [(option, Code.INVALID_VALUE)]
    )


def test_an_int_subclass_within_range_is_answered_as_a_plain_int() -> None:
    answer = resolve(ResolveRequest("atlas-a2", {"hccl_timeout": Big(900)}))
    assert answer.ok and type(answer.options["hccl_timeout"]) is int


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("precision_mode", Shy("zz")),
        ("op_debug_level", Loud(9)),
        ("debug_dir", Loud(9)),
        ("hccl_timeout", Shy("abc")),
    ],
    ids=["str choice", "int choice", "int for a path", "str for an int"],
)
def test_a_subclass_whose_own_repr_or_str_raises_gets_its_diagnostic(
    option: str, value: Any
) -> None:
    assert _errors({option: value}) == [(option, Code.INVALID_VALUE)]


def test_a_str_subclass_product_does_not_change_the_answer_for_the_plain_name() -> None:
    """Product names are kept by the text they hold: a subclass with its own casefold() is read
    as that text, and a plain caller of the same name gets the same answer after it."""
    first = resolve(ResolveRequest(Lying("bogus-product")))
    again = resolve(ResolveRequest("bogus-product"))
    assert first.errors == again.errors  # the suggestion too: not from the subclass's casefold
    assert [d.code for d in again.errors] == [Code.UNKNOWN_PRODUCT]
    assert resolve(ResolveRequest(Shy("atlas-a2"))).product == "atlas-a2"


def test_a_long_product_name_is_looked_up_but_not_kept() -> None:
    """Spaces do not distinguish product names (contract), however many; a long name is not
    kept, and an unknown one gets no fuzzy match over all its characters."""
    _products._SEEN.clear()
    name = "Atlas" + " " * 100_000 + "A2"
    assert resolve(ResolveRequest(name)).product == "atlas-a2"
    unknown = resolve(ResolveRequest("Atlas A9" + " " * 100_000))
    assert [(d.code, d.suggestion) for d in unknown.errors] == [(Code.UNKNOWN_PRODUCT, "")]
    assert all(len(kept) <= 256 for kept in _products._SEEN)
    assert resolve(ResolveRequest("Atlas A2")).product == "atlas-a2"
    assert "Atlas A2" in _products._SEEN


class Stripped(str):
    def strip(self, chars: str | None = None) -> str:
        return "1800"


def test_an_env_text_subclass_is_read_as_the_text_it_holds() -> None:
    env = {"HCCL_EXEC_TIMEOUT": Stripped("900")}
    assert resolve(ResolveRequest("atlas-a2", env=env)).options["hccl_timeout"] == 900
    plain = resolve(ResolveRequest("atlas-a2", env={"HCCL_EXEC_TIMEOUT": "1800"}))
    assert plain.options["hccl_timeout"] == 1800


def test_an_attachment_for_an_unknown_key_with_a_lone_surrogate_is_named_printably() -> None:
    answer = resolve(ResolveRequest("atlas-a2", attachments={"\ud800": "x"}))
    [error] = answer.errors
    assert error.code is Code.INVALID_VALUE
    assert error.option == "attachments.\\ud800"
    answer.to_json()  # every string of the answer can be sent
    str(error.option).encode()


@pytest.mark.parametrize("field", ["config", "env", "attachments"])
@pytest.mark.parametrize("value", [[], 0, ""])
def test_from_json_refuses_a_falsy_value_of_the_wrong_type(field: str, value: Any) -> None:
    """Only absent or null means empty: [] or 0 for an object is the caller's mistake."""
    with pytest.raises(ValueError, match=field):
        ResolveRequest.from_json({"product": "atlas-a2", field: value})
    assert ResolveRequest.from_json({"product": "atlas-a2", field: None}) == ResolveRequest(
        "atlas-a2"
    )


def test_describe_option_says_what_it_takes() -> None:
    with pytest.raises(TypeError, match="takes an Option"):
        describe_option("hccl_timeout")  # type: ignore[arg-type]
    assert describe_option(CATALOG.by_name["hccl_timeout"])["name"] == "hccl_timeout"


class Touchy(str):
    """Compares and orders only by raising: a dict lookup on an equal hash would call it."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __lt__(self, other: object) -> bool:
        raise RuntimeError("lt")

    __hash__ = str.__hash__


class Unhashable(int):
    def __hash__(self) -> int:
        raise RuntimeError("hash")


class Sealed(dict[str, Any]):
    """A dict whose own views raise: only its storage is read."""

    def items(self) -> Any:
        raise RuntimeError("items")

    def __iter__(self) -> Any:
        raise RuntimeError("iter")


def _plain_answer(config: dict[str, Any], **fields: Any) -> Any:
    return resolve(ResolveRequest("atlas-a2", config, **fields)).to_json()


@pytest.mark.parametrize(
    ("config", "plain"),
    [
        ({"precision_mode_v2": Touchy("mixed_float16")}, {"precision_mode_v2": "mixed_float16"}),
        ({Touchy("hccl_timeout"): 900}, {"hccl_timeout": 900}),
        ({"hccl_timeout": Unhashable(900)}, {"hccl_timeout": 900}),
        ({"graph_run_mode": Unhashable(0)}, {"graph_run_mode": 0}),
        (
            {"dump_config": {Touchy("enable_dump"): [Touchy("x"), Unhashable(1)]}},
            {"dump_config": {"enable_dump": ["x", 1]}},
        ),
        ({"experimental_config": Sealed(a=1)}, {"experimental_config": {"a": 1}}),
    ],
    ids=["value", "key", "int value", "mode", "nested", "dict subclass"],
)
def test_a_subclass_whose_hash_eq_or_views_raise_is_answered_as_its_plain_value(
    config: dict[str, Any], plain: dict[str, Any]
) -> None:
    """resolve() never raises on caller input: a value's own __hash__, __eq__, __lt__ or
    items() never runs inside the resolver, which reads the plain value it holds."""
    assert _plain_answer(config) == _plain_answer(plain)


def test_env_attachments_and_workdir_subclasses_are_read_as_plain_text() -> None:
    env = {Touchy("HCCL_EXEC_TIMEOUT"): Touchy("900")}
    attachments = {Touchy("modify_mixlist"): Touchy("{}")}
    config = {"modify_mixlist": "/job/mixlist.json", "precision_mode_v2": "mixed_float16"}
    odd = _plain_answer(config, env=env, attachments=attachments, workdir=Touchy("/job"))
    plain = _plain_answer(
        config,
        env={"HCCL_EXEC_TIMEOUT": "900"},
        attachments={"modify_mixlist": "{}"},
        workdir="/job",
    )
    assert odd == plain
    assert odd["options"]["hccl_timeout"] == 900


def test_a_self_referencing_value_is_refused_as_too_deep_not_walked_forever() -> None:
    looped: dict[str, Any] = {}
    looped["again"] = looped
    answer = resolve(ResolveRequest("atlas-a2", {"dump_config": Sealed(loop=looped)}))
    assert [(d.option, d.code) for d in answer.errors] == [("config", Code.INVALID_VALUE)]


class Incomparable:
    """A key whose comparisons raise, hashed as an option name is."""

    def __hash__(self) -> int:
        return hash("hccl_timeout")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __lt__(self, other: object) -> bool:
        raise RuntimeError("lt")

    def __repr__(self) -> str:
        return "Incomparable()"


class Falsy:
    """A value whose == answers with something that cannot be a bool (as an array does)."""

    def __eq__(self, other: object) -> Any:
        return self

    def __bool__(self) -> bool:
        raise RuntimeError("bool")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    "config",
    [
        {Decimal("NaN"): 1, 2: 1},
        {Incomparable(): 1},
        {(Incomparable(), 1): 1, (Incomparable(), 2): 1},
    ],
    ids=["stdlib keys that do not order", "a key equal by hash", "tuple keys"],
)
def test_keys_that_are_not_text_are_unknown_options_whatever_their_comparisons_do(
    config: dict[Any, Any],
) -> None:
    answer = resolve(ResolveRequest("atlas-a2", config))
    unknown = [d for d in answer.errors if d.code is Code.UNKNOWN_OPTION]
    assert len(unknown) == len(answer.errors) == len(config)
    assert answer.options == resolve(ResolveRequest("atlas-a2")).options


def test_a_value_whose_equality_cannot_be_a_bool_gets_its_diagnostic() -> None:
    assert _errors({"hccl_timeout": Falsy(), "op_debug_config": Falsy()}) == [
        ("hccl_timeout", Code.INVALID_VALUE),
        ("op_debug_config", Code.INVALID_VALUE),
    ]


class Walled(dict[str, Any]):
    def values(self) -> Any:
        raise RuntimeError("values")

    def __len__(self) -> int:
        raise RuntimeError("len")


def test_a_config_too_wide_to_convert_is_refused_without_its_values_own_methods() -> None:
    """Past the width bound, values are left as given; the refusal reads only their storage."""
    config = {"distribute": {"a": list(range(10_001))}, "experimental_config": Walled(a=1)}
    answer = resolve(ResolveRequest("atlas-a2", config))
    assert [(d.option, d.code) for d in answer.errors] == [("config", Code.INVALID_VALUE)]


class Overridden(dict[str, Any]):
    """A whole config, env or attachments mapping whose own views raise."""

    def keys(self) -> Any:
        raise RuntimeError("keys")

    def items(self) -> Any:
        raise RuntimeError("items")

    def __iter__(self) -> Any:
        raise RuntimeError("iter")

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem")


def test_a_dict_subclass_as_config_env_or_attachments_is_read_from_its_storage() -> None:
    odd = ResolveRequest(
        "atlas-a2",
        Overridden(hccl_timeout=900),
        env=Overridden(ASCEND_DEVICE_ID="3"),
        attachments=Overridden(modify_mixlist="{}"),
        strict=Unhashable(1),  # type: ignore[arg-type]
    )
    plain = ResolveRequest(
        "atlas-a2",
        {"hccl_timeout": 900},
        env={"ASCEND_DEVICE_ID": "3"},
        attachments={"modify_mixlist": "{}"},
        strict=True,
    )
    assert odd == plain
    assert resolve(odd).to_json() == resolve(plain).to_json()


def test_a_policy_without_a_version_is_a_type_error_naming_the_parameter() -> None:
    class HalfPolicy:
        def layer(self, profile: str, product: str) -> None:
            return None

    with pytest.raises(TypeError, match=r"policy must be an npu_resolver\.Policy"):
        resolve(ResolveRequest("atlas-a2"), policy=HalfPolicy())  # type: ignore[arg-type]


def test_plain_nested_values_are_shared_and_subclassed_ones_converted() -> None:
    """The request copies its mappings, not the values nested in them (a large object costs
    nothing to pass); only where a subclass sits is a plain copy made."""
    plain = {"a": [1, 2, {"b": "c"}]}
    odd = {"a": [1, Big(2)]}
    request = ResolveRequest("atlas-a2", {"dump_config": plain, "distribute": odd})
    assert request.config["dump_config"] is plain
    assert request.config["distribute"] == {"a": [1, 2]}
    assert type(request.config["distribute"]["a"][1]) is int
    assert odd["a"][1].__class__ is Big  # the caller's own value is left as it was


def test_an_answers_object_values_are_its_own() -> None:
    """R-DMP-1 dump_config is an object: an answer holds a copy of it. A caller that edits its
    answer must not edit the policy that gave the value (every later answer, in every thread,
    under the same policy_version), nor the request's config; a caller that reuses its config
    dict must not edit an answer already returned (and its fingerprint)."""
    from npu_resolver import fingerprint, parse_policy

    policy = parse_policy(
        '[profiles.default.defaults]\ndump_config = {dump_path = "/d", steps = [1]}\n'
    )
    first = resolve(ResolveRequest("atlas-a2"), policy=policy)
    dump = first.options["dump_config"]
    assert isinstance(dump, dict) and isinstance(dump["steps"], list)
    dump["dump_path"] = "/elsewhere"
    dump["steps"].append(99)
    again = resolve(ResolveRequest("atlas-a2"), policy=policy)
    assert again.options["dump_config"] == {"dump_path": "/d", "steps": [1]}
    assert again.fingerprint == first.fingerprint

    config: dict[str, Any] = {"dump_config": {"dump_path": "/a"}}
    request = ResolveRequest("atlas-a2", config)
    answer = resolve(request)
    config["dump_config"]["dump_path"] = "/b"  # the config dict filled again for the next job
    assert answer.options["dump_config"] == {"dump_path": "/a"}
    assert answer.fingerprint == fingerprint(answer.product, answer.options)
    answered = answer.options["dump_config"]
    assert isinstance(answered, dict)
    answered["dump_path"] = "/c"
    assert resolve(ResolveRequest("atlas-a2", {"dump_config": {"dump_path": "/a"}})).options[
        "dump_config"
    ] == {"dump_path": "/a"}


def test_a_policy_and_its_refusals_cross_a_process_pool() -> None:
    """A launcher loads the policy once and hands it to its workers; a worker's PolicyError
    reaches the parent whole (a refusal that did not unpickle broke multiprocessing.Pool)."""
    import pickle

    from npu_resolver import CATALOG, PolicyError, PolicyReadError, load_policy, parse_policy

    policy = parse_policy("[profiles.default.defaults]\nhccl_timeout = 3600\n")
    copied = pickle.loads(pickle.dumps(policy))
    assert copied.version == policy.version
    assert resolve(ResolveRequest("atlas-a2"), policy=copied).options["hccl_timeout"] == 3600
    assert pickle.loads(pickle.dumps(CATALOG)) is CATALOG
    bad = "[profiles.default.defaults]\n" + "".join(f"no_such_{i} = 1\n" for i in range(60))
    with pytest.raises(PolicyError) as refused:
        parse_policy(bad)
    with pytest.raises(PolicyReadError) as unreadable:
        load_policy("/nonexistent/policy.toml")
    for error in (refused.value, unreadable.value):
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert (back.source, back.problems, back.digest) == (
            error.source,
            error.problems,
            error.digest,
        )
    assert refused.value.problems[-1] == "and 10 more problems not listed"


@pytest.mark.parametrize("products", [{"atlas-a2", "atlas-a3"}, None, iter(["atlas-a2", "x"])])
def test_a_diffs_products_must_come_in_an_order(products: Any) -> None:
    """A set's order, and so the columns', would be chance (it moves with PYTHONHASHSEED)."""
    from npu_resolver import diff

    with pytest.raises(TypeError, match="products is a list of product names, not"):
        diff(ResolveRequest("atlas-a2"), products)


def test_a_diffs_product_names_may_be_enum_members_as_a_requests_product_may() -> None:
    """A str subclass is the text it holds, in a diff's names as in ResolveRequest.product."""
    import enum

    from npu_resolver import diff

    class Card(enum.StrEnum):
        A2 = "atlas-a2"
        TRAINING = "Atlas 训练系列产品"

    result = diff(ResolveRequest("atlas-a2", {"hccl_timeout": 600}), [Card.A2, Card.TRAINING])
    assert result.products == ("atlas-a2", "atlas-training")
    assert type(result.products[0]) is str
    assert result.results["atlas-training"].options["hccl_timeout"] == 544


def test_a_diff_of_too_many_names_is_refused_reading_no_more_than_it_needs() -> None:
    from npu_resolver import DiffError, diff

    names = [f"product-{i}" for i in range(100_000)]
    with pytest.raises(DiffError, match="at most 16 products and this one names more than 16"):
        diff(ResolveRequest("atlas-a2"), names)
    with pytest.raises(DiffError, match="at most 16 products and this one names 17 "):
        diff(ResolveRequest("atlas-a2"), names[:17])


def test_a_catalog_of_the_wrong_type_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="resolve's catalog must be an npu_resolver Catalog"):
        resolve(ResolveRequest("atlas-a2"), catalog=None)  # type: ignore[arg-type]


def test_a_catalog_of_ones_own_does_not_pickle_and_says_why() -> None:
    """Only the built-in catalog pickles (as itself); one built by a caller is built again in
    each process: a clear TypeError, not a failure deep in pickle."""
    import pickle

    from npu_resolver import Catalog

    mine = Catalog(CATALOG.options, version="mine")
    with pytest.raises(TypeError, match="only the built-in catalog"):
        pickle.dumps(mine)


class LocatedError(PolicyError):
    """A launcher's own refusal, with a field of its own (pickled by reference: module level)."""

    where = ""


def test_a_policy_error_subclass_keeps_its_own_state_across_pickling() -> None:
    import pickle

    error = LocatedError("p.toml", ["bad"], digest="abc")
    error.where = "line 3"
    error.add_note("pushed by the platform team")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is LocatedError and back.where == "line 3"
    assert back.__notes__ == ["pushed by the platform team"]
    assert (back.source, back.problems, back.digest) == ("p.toml", ["bad"], "abc")


@pytest.mark.parametrize(
    ("config", "code", "said"),
    [  # R-HCT-2: a bounded range; R-IPL-1: iterations_per_loop's is open above
        ({"hccl_timeout": "9999999999999999999"}, "OUT_OF_RANGE", "is outside [0, 2147483647]"),
        ({"hccl_timeout": "-99999999999999999999"}, "OUT_OF_RANGE", "is outside [0, 2147483647]"),
        ({"iterations_per_loop": "99999999999999999999"}, "INVALID_VALUE", "within ±2^53;"),
        ({"hccl_timeout": "00000000000000000005"}, "NORMALIZED", "was read as 5"),
    ],
)
def test_an_integer_as_long_text_is_said_as_the_number_it_is(
    config: dict[str, str], code: str, said: str
) -> None:
    """Not "not an integer": out of a bounded range it is OUT_OF_RANGE; in an open one, beyond
    what is read exactly (no word about JSON, which text is not); zeros only pad."""
    (diagnostic,) = resolve(ResolveRequest("atlas-a2", config)).diagnostics
    assert diagnostic.code.value == code and said in diagnostic.message


def test_a_diff_refused_for_too_many_names_reads_no_more_than_it_needs() -> None:
    from collections.abc import Sequence

    from npu_resolver import DiffError, diff

    class Counted(Sequence[str]):
        def __init__(self, size: int) -> None:
            self.size, self.read = size, 0

        def __len__(self) -> int:
            return self.size

        def __getitem__(self, index: Any) -> Any:
            if not 0 <= index < self.size:
                raise IndexError(index)
            self.read = max(self.read, index + 1)
            return f"product-{index}"

    names = Counted(100_000)
    with pytest.raises(DiffError, match="names more than 16"):
        diff(ResolveRequest("atlas-a2"), names)
    assert names.read == 17


def test_an_answers_errors_warnings_and_notes_each_hold_one_severity_and_all_of_it() -> None:
    answer = resolve(
        ResolveRequest(
            "atlas-a2",
            {"hccl_timeot": 1, "enable_reduce_precision": True, "hccl_timeout": "600"},
        )
    )
    kinds = {
        Severity.ERROR: answer.errors,
        Severity.WARNING: answer.warnings,
        Severity.INFO: answer.notes,
    }
    for severity, diagnostics in kinds.items():
        assert diagnostics, severity
        assert all(d.severity is severity for d in diagnostics), severity
    assert sum(map(len, kinds.values())) == len(answer.diagnostics)


def test_from_json_refuses_an_unknown_field_naming_it() -> None:
    """A misspelt field ("confg") would otherwise send the job's config nowhere, silently."""
    with pytest.raises(ValueError, match=r"unknown request field\(s\): confg"):
        ResolveRequest.from_json({"product": "atlas-a2", "confg": {"hccl_timeout": 600}})


def test_from_json_takes_a_requests_json_text_as_its_dict() -> None:
    """A request file or an HTTP body is JSON text: taken as the dict it holds (str, or UTF-8
    bytes), not refused as "not a JSON object"."""
    data = {"product": "atlas-a2", "config": {"hccl_timeout": 600}, "env": {"X": "é"}}
    text = json.dumps(data, ensure_ascii=False)
    expected = ResolveRequest.from_json(data)
    assert ResolveRequest.from_json(text) == expected
    assert ResolveRequest.from_json(text.encode("utf-8")) == expected
    nan = ResolveRequest.from_json('{"product": "atlas-a2", "config": {"hccl_timeout": NaN}}')
    assert [d.code for d in resolve(nan).errors] == [Code.INVALID_VALUE]  # the resolver's say
    # A byte-order mark some editors write is not part of the JSON, as in a config file.
    assert ResolveRequest.from_json(b"\xef\xbb\xbf" + text.encode("utf-8")) == expected
    assert ResolveRequest.from_json("\ufeff" + text) == expected


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"product": "atlas-a2", "product": "atlas-a3"}', "key 'product' appears twice"),
        ('{"product": "atlas-a2", "config": {"a": 1, "a": 2}}', "key 'a' appears twice"),
        ('{"product": "atlas-a2"', "JSON text cannot be read: Expecting"),
        (b"\xff{}", "JSON text is not UTF-8"),
        ('["atlas-a2"]', "must be a JSON object (a dict of its fields, or its JSON text), not a"),
    ],
)
def test_from_json_reads_text_as_strictly_as_the_resolver_reads_json(
    text: str | bytes, said: str
) -> None:
    """A key written twice is refused (which value was meant cannot be told), as in a config
    file; text that is not JSON, or not an object, says so."""
    with pytest.raises(ValueError, match=re.escape(said)):
        ResolveRequest.from_json(text)


@pytest.mark.parametrize("field", ["strict", "validate_only"])
@pytest.mark.parametrize("value", [1, 0, "true"])
def test_from_json_refuses_a_flag_that_is_not_true_or_false(field: str, value: Any) -> None:
    """JSON's 1 or "true" is not a bool: the request is refused, not read as one."""
    with pytest.raises(ValueError, match=f"'{field}' must be true or false"):
        ResolveRequest.from_json({"product": "atlas-a2", field: value})


def test_a_diffs_differing_names_exactly_the_options_whose_value_or_source_differs() -> None:
    from npu_resolver import Resolution, diff

    answer = diff(ResolveRequest("", {"hccl_timeout": 600}), ["atlas-a2", "atlas-training"])
    a2, training = answer.results["atlas-a2"], answer.results["atlas-training"]

    def cell(result: Resolution, name: str) -> tuple[Any, Source] | None:
        if name not in result.options:
            return None
        return result.options[name], result.provenance[name].source

    shown = [o.name for o in CATALOG.options if cell(a2, o.name) or cell(training, o.name)]
    expected = [name for name in shown if cell(a2, name) != cell(training, name)]
    data = answer.to_json()
    assert "hccl_timeout" in expected and "graph_run_mode" in shown
    assert data["differing"] == expected
    assert "graph_run_mode" not in data["differing"]


def test_a_diffs_product_name_of_the_longest_length_is_a_column_one_longer_is_refused() -> None:
    from npu_resolver import MAX_PRODUCT_NAME, DiffError, diff

    longest = "x" * MAX_PRODUCT_NAME
    answer = diff(ResolveRequest(""), ["atlas-a2", longest])
    assert answer.products == ("atlas-a2", longest)
    assert [d.code for d in answer.results[longest].errors] == [Code.UNKNOWN_PRODUCT]
    with pytest.raises(DiffError, match=f"product name 2 has {MAX_PRODUCT_NAME + 1} characters"):
        diff(ResolveRequest(""), ["atlas-a2", longest + "x"])


def test_a_diff_of_as_many_products_as_it_takes_is_made() -> None:
    from npu_resolver import MAX_DIFF_PRODUCTS, diff

    names = [f"x{i}" for i in range(MAX_DIFF_PRODUCTS)]
    assert diff(ResolveRequest(""), names).products == tuple(names)


def test_a_strict_diff_makes_each_columns_drop_an_error_as_a_strict_resolve_does() -> None:
    """The contract's `strict` holds for every column: R-ERP-1's drop is an ERROR in each."""
    from dataclasses import replace

    from npu_resolver import diff

    request = ResolveRequest("", {"enable_reduce_precision": True}, strict=True)
    answer = diff(request, ["atlas-a2", "atlas-training"])
    for pid, result in answer.results.items():
        assert not result.ok
        assert [(d.severity, d.code) for d in result.diagnostics] == [
            (Severity.ERROR, Code.DROPPED_UNSUPPORTED_VERSION)
        ]
        assert result == resolve(replace(request, product=pid))
