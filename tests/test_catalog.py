"""The catalog is data that checks itself: these tests prove the checks hold and bite."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from npu_resolver import CATALOG, PRODUCTS, CatalogError, Code, ResolveRequest, product_id, resolve
from npu_resolver._catalog import Catalog, check_catalog
from npu_resolver._options import OPTIONS
from npu_resolver._products import (
    LEGACY_FAMILY,
    NEW_FAMILY,
    TBE_MAPPING_FILES,
    UB_FUSION,
    check_capabilities,
)
from npu_resolver._rules import RULES
from npu_resolver._schema import Default, Option

SPEC = Path(__file__).resolve().parent / "spec"  # a verbatim copy of the project's rules.md
RULE_ID = re.compile(r"R-[A-Z0-9]+-[0-9]+")


def test_catalog_loads_clean_with_the_options_of_the_source() -> None:
    """The one pin of the option list: the catalog's options are those whose wording the
    package ships from the source (its data file), so an option missing from either fails."""
    from npu_resolver._cli._explain import source_wording

    assert check_catalog(OPTIONS) == []
    assert set(CATALOG.by_name) == set(source_wording())
    assert CATALOG.version == "900"


def test_rules_table_matches_rules_md() -> None:
    text = (SPEC / "rules.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^- (R-[A-Z0-9]+-[0-9]+)", text, flags=re.MULTILINE))
    assert listed == set(RULES)


def test_every_rule_id_is_cited_in_tests() -> None:
    cited: set[str] = set()
    for file in Path(__file__).parent.rglob("*"):
        if file.suffix in {".py", ".json"} and file.name != "test_catalog.py":
            cited |= set(RULE_ID.findall(file.read_text(encoding="utf-8")))
    assert set(RULES) - cited == set()


def test_duplicate_option_names_are_refused() -> None:
    with pytest.raises(CatalogError, match="duplicate option names: hccl_timeout"):
        Catalog((*OPTIONS, CATALOG.by_name["hccl_timeout"]))


def test_default_outside_allowed_values_is_refused() -> None:
    broken = dataclasses.replace(
        CATALOG.by_name["deterministic"], defaults=(Default(5, "R-DET-1"),)
    )
    others = tuple(o for o in OPTIONS if o.name != "deterministic")
    assert any("default 5 is not an allowed value" in p for p in check_catalog((*others, broken)))


def test_default_outside_range_is_refused() -> None:
    broken = dataclasses.replace(
        CATALOG.by_name["hccl_timeout"], defaults=(Default(20000, "R-HCT-1"),)
    )
    others = tuple(o for o in OPTIONS if o.name != "hccl_timeout")
    assert any("outside range" in p for p in check_catalog((*others, broken)))


def test_gate_naming_unknown_product_is_refused() -> None:
    broken = dataclasses.replace(
        CATALOG.by_name["input_batch_cpy"], products=frozenset({"atlas-9000"})
    )
    others = tuple(o for o in OPTIONS if o.name != "input_batch_cpy")
    assert any("unknown product 'atlas-9000'" in p for p in check_catalog((*others, broken)))


def test_unused_rule_id_is_refused() -> None:
    others = tuple(o for o in OPTIONS if o.name != "stream_max_parallel_num")
    assert any("R-SMP-1" in p for p in check_catalog(others))


_PRODUCT_IDS = sorted((p.id for p in PRODUCTS), key=len, reverse=True)
_NAMED = re.compile(rf"(?<![\w-])({'|'.join(map(re.escape, _PRODUCT_IDS))})(?![\w-])((?:/[\w-]+)*)")
"""A product id in prose, with the shorthand 'atlas-350/a3/a2' for several."""


def _products_named(summary: str) -> set[str]:
    named: set[str] = set()
    for match in _NAMED.finditer(summary):
        named.add(match[1])
        for short in filter(None, match[2].split("/")):
            meant = [pid for pid in _PRODUCT_IDS if pid.endswith(f"-{short}")]
            assert len(meant) == 1, f"{short!r} in {summary!r} names {meant}"
            named |= set(meant)
    return named


EVERY_PRODUCT = frozenset(p.id for p in PRODUCTS)
DECIDED_IN_CODE: Mapping[str, frozenset[str]] = {
    "R-PREC-2": LEGACY_FAMILY,
    "R-OPM-2": NEW_FAMILY,
    "R-FSF-1": EVERY_PRODUCT - UB_FUSION,
    # Its summary names the products without TBE mapping files and those without UB fusion.
    "R-DEP-3": (EVERY_PRODUCT - TBE_MAPPING_FILES) | (EVERY_PRODUCT - UB_FUSION),
}
"""Rules that no gate of the table holds but a check of the core decides by a set the product
table gives: the products each summary names."""


def _summaries_unlike_gates(options: tuple[Option, ...], rules: Mapping[str, str]) -> list[str]:
    """Each rule that gates an option, a default, a range or a value on products (or that a
    check decides by product, DECIDED_IN_CODE), where its summary names products: those it
    names against the gates' products. A default's rule names the products it gives the default
    for and those the source says have none; a rule that says 'not supported on' names the
    products of the option that the gate leaves out."""
    gated: dict[str, set[str]] = {}
    within: dict[str, frozenset[str]] = {}
    for o in options:
        acting = o.products if o.products is not None else EVERY_PRODUCT
        if o.products is not None:
            gated.setdefault(o.products_rule, set()).update(o.products)
            within[o.products_rule] = EVERY_PRODUCT
        for d in o.defaults:
            if d.products is not None:
                gated.setdefault(d.rule, set()).update(d.products | o.no_default_products)
                within[d.rule] = acting
        for r in o.ranges:
            if r.products is not None:
                gated.setdefault(r.rule, set()).update(r.products)
                within[r.rule] = acting
        for g in o.value_gates:
            if g.products is not None:
                gated.setdefault(g.rule, set()).update(g.products)
                within[g.rule] = acting
    expected = {
        rule: within[rule] - pids if "not supported on" in rules[rule] else pids
        for rule, pids in gated.items()
    }
    expected.update(DECIDED_IN_CODE)
    wrong: list[str] = []
    for rule, summary in rules.items():
        named = _products_named(summary)
        if named and rule not in expected:
            wrong.append(f"{rule} names {sorted(named)} but no gate or check of products")
        elif named and named != expected[rule]:
            wrong.append(f"{rule} names {sorted(named)}, its gates {sorted(expected[rule])}")
    return wrong


def test_rule_summaries_name_the_products_their_gates_hold() -> None:
    """A summary that lists products (R-IBC-1 'only atlas-350, atlas-a3, atlas-a2') says
    what its gates do: a product added to a gate must be added to the summary too."""
    assert _summaries_unlike_gates(OPTIONS, RULES) == []


def test_a_product_added_to_a_gate_and_not_to_its_summary_is_found() -> None:
    widened = {
        "input_batch_cpy": frozenset({"atlas-350", "atlas-a3", "atlas-a2", "atlas-training"}),
        "aicore_num": frozenset({"atlas-350", "atlas-a3", "atlas-a2"}),
    }
    options = tuple(
        dataclasses.replace(o, products=widened[o.name]) if o.name in widened else o
        for o in OPTIONS
    )
    assert _summaries_unlike_gates(options, RULES) == [
        "R-IBC-1 names ['atlas-350', 'atlas-a2', 'atlas-a3'], its gates "
        "['atlas-350', 'atlas-a2', 'atlas-a3', 'atlas-training']",
        "R-ACN-1 names ['atlas-a2', 'atlas-a3'], its gates ['atlas-350', 'atlas-a2', 'atlas-a3']",
    ]
    subgraph = next(o for o in OPTIONS if o.name == "aoe_mode")
    gate = dataclasses.replace(
        subgraph.value_gates[0], products=frozenset({"atlas-training", "atlas-a2"})
    )
    options = tuple(
        dataclasses.replace(o, value_gates=(gate,)) if o is subgraph else o for o in OPTIONS
    )
    assert _summaries_unlike_gates(options, RULES) == [
        "R-AOE-3 names ['atlas-a2', 'atlas-a3'], its gates ['atlas-a3']"
    ]


@pytest.mark.parametrize(
    ("alias", "pid"),
    [
        ("Ascend910B3", "atlas-a2"),
        ("ascend910b3", "atlas-a2"),
        ("Ascend910_9392", "atlas-a3"),
        ("Ascend910ProB", "atlas-training"),
        ("Ascend310P3", "atlas-300i-duo"),
        ("Atlas A2", "atlas-a2"),
        ("ATLAS_300I-duo", "atlas-300i-duo"),
        ("atlas 350", "atlas-350"),
        ("Atlas 训练系列产品", "atlas-training"),
        # Any space: a no-break or full-width one (names copied from the source's pages), a
        # line's end (a name read from a file); full-width forms as their ASCII ones.
        ("Atlas\u00a0A2", "atlas-a2"),
        ("Atlas\u3000A3", "atlas-a3"),
        ("atlas-350\n", "atlas-350"),
        ("Ａｔｌａｓ　Ａ２", "atlas-a2"),
        ("Ascend910Ｂ３", "atlas-a2"),
    ],
)
def test_product_aliases_ignore_case_spaces_dashes_underscores(alias: str, pid: str) -> None:
    assert product_id(alias) == pid


SOC_VERSIONS = {
    "Ascend910_9391": "atlas-a3",
    "Ascend910_9392": "atlas-a3",
    "Ascend910_9381": "atlas-a3",
    "Ascend910_9382": "atlas-a3",
    "Ascend910_9372": "atlas-a3",
    "Ascend910_9362": "atlas-a3",
    "Ascend910B1": "atlas-a2",
    "Ascend910B2": "atlas-a2",
    "Ascend910B2C": "atlas-a2",
    "Ascend910B3": "atlas-a2",
    "Ascend910B4": "atlas-a2",
    "Ascend910B4-1": "atlas-a2",
    "Ascend910A": "atlas-training",
    "Ascend910ProA": "atlas-training",
    "Ascend910ProB": "atlas-training",
    "Ascend910PremiumA": "atlas-training",
    "Ascend310P3": "atlas-300i-duo",
}


@pytest.mark.parametrize(("soc", "pid"), SOC_VERSIONS.items())
def test_every_soc_version_names_its_product(soc: str, pid: str) -> None:
    """A launcher may pass the card's SoC version as the product: the list is pinned here,
    apart from the product table, so that a name dropped from the table fails."""
    assert product_id(soc) == pid


def test_every_product_has_its_family_of_rules_md_and_its_id_is_its_own_alias() -> None:
    for product in PRODUCTS:
        assert product_id(product.id) == product.id
    text = (SPEC / "rules.md").read_text(encoding="utf-8")
    table = text.split("## Products", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| .* \| (\w+) \|$", table, flags=re.MULTILINE)
    assert [(product.id, product.family.value) for product in PRODUCTS] == rows


def test_every_name_npu_resolve_products_prints_is_taken_back_as_its_product() -> None:
    """A caller copies a name from `products` (the source's own, such as 'Atlas A2 训练系列产品 /
    Atlas A2 推理系列产品') into --product: it must name that product."""
    for product in PRODUCTS:
        for name in (product.name, product.source_name, *product.aliases):
            assert product_id(name) == product.id, name


def test_description_keeps_a_value_refused_in_one_mode_only_as_a_mode_restriction() -> None:
    """R-PM-3: force_fp16 is valid in online inference, so it stays an allowed value."""
    from npu_resolver import describe_catalog

    options = {o["name"]: o for o in describe_catalog("atlas-training")["options"]}
    support = options["precision_mode"]["products"]["atlas-training"]
    assert "force_fp16" in support["allowed_values"]
    assert support["mode_restrictions"] == [
        {"value": "force_fp16", "mode": "training", "rule": "R-PM-3"}
    ]
    # R-PM-4: refused in every mode on this product, so unsupported here.
    assert support["unsupported_values"] == {
        "allow_mix_precision_bf16": "R-PM-4",
        "allow_fp32_to_bf16": "R-PM-4",
    }


def _described(pid: str) -> dict[str, Any]:
    """explain's data for one product: each option's entry for it, by option name."""
    from npu_resolver import describe_catalog

    return {o["name"]: o["products"][pid] for o in describe_catalog(pid)["options"]}


def test_description_gives_the_default_that_takes_effect_beside_the_documented_one() -> None:
    """R-PREC-1 keeps one precision default, R-SGM-1 drops shape_generalization_mode without
    jit_compile 'true', and online inference is graph_run_mode 0."""
    options = _described("atlas-a2")
    assert options["precision_mode"]["defaults"]["training"] == "must_keep_origin_dtype"
    assert options["precision_mode"]["effective_defaults"] == {"training": None, "inference": None}
    assert options["precision_mode_v2"]["effective_defaults"] == {
        "training": "origin",
        "inference": "fp16",
    }
    assert options["shape_generalization_mode"]["defaults"]["training"] == "STRICT"
    assert options["shape_generalization_mode"]["effective_defaults"]["training"] is None
    assert options["graph_run_mode"]["effective_defaults"] == {"training": 1, "inference": 0}
    # R-GRM-1: the mode is the option's value, so each mode's column has its own (the
    # documented 1 is training's; an inference column of 1 contradicted the mode itself)
    assert options["graph_run_mode"]["defaults"] == {"training": 1, "inference": 0}
    assert options["hccl_timeout"]["effective_defaults"] == {"training": 1836, "inference": 1836}


def test_description_gives_every_product_its_documented_defaults_in_each_mode() -> None:
    """explain's defaults per product, not atlas-a2's alone: R-PM-5's precision default by
    family (none documented on atlas-300i-duo), and R-ESC-1's 0 in training, 1 in online
    inference on every product."""
    precision = {
        "atlas-350": "must_keep_origin_dtype",
        "atlas-a3": "must_keep_origin_dtype",
        "atlas-a2": "must_keep_origin_dtype",
        "atlas-training": "allow_fp32_to_fp16",
        "atlas-300i-duo": None,
    }
    for pid, default in precision.items():
        options = _described(pid)
        assert options["precision_mode"]["defaults"]["training"] == default, pid
        assert options["enable_small_channel"]["defaults"] == {"training": 0, "inference": 1}, pid


def test_the_variables_read_are_the_ones_rules_md_names() -> None:
    """ENV_VARS decides what --inherit-env passes on and which --env names are taken: a name
    misspelt in the table would silently drop the job's variable."""
    from npu_resolver import ENV_VARS

    text = (SPEC / "rules.md").read_text(encoding="utf-8")
    section = text.split("## Environment variables the source names", 1)[1].split("##", 1)[0]
    assert set(ENV_VARS) == set(re.findall(r"`([A-Z_]+)`", section))


def test_describe_takes_product_aliases_and_names_the_known_ones_for_an_unknown_product() -> None:
    """describe_option and describe_catalog read a product as resolve does: an alias is its
    product, an unknown name a ValueError in resolve's words, a name not a str a TypeError."""
    from npu_resolver import describe_catalog, describe_option

    option = CATALOG.by_name["hccl_timeout"]
    assert list(describe_option(option, "Atlas A2")["products"]) == ["atlas-a2"]
    assert describe_option(option, "Ascend910B3") == describe_option(option, "atlas-a2")
    assert [p["id"] for p in describe_catalog("atlas a2")["products"]] == ["atlas-a2"]
    for describe in (lambda p: describe_option(option, p), describe_catalog):
        with pytest.raises(ValueError, match=r"not recognized; use one of .* 'atlas-a3'\?"):
            describe("atlas-a4")
        with pytest.raises(TypeError, match="not bytes"):
            describe(b"atlas-a2")  # type: ignore[arg-type]


@pytest.mark.parametrize("series", ["Atlas 推理系列产品", "atlas inference series"])
def test_the_inference_series_name_points_at_its_one_documented_card_without_being_taken(
    series: str,
) -> None:
    """rules.md's product table: atlas-300i-duo is "one of the Atlas 推理系列产品". A job
    naming the series is refused (other cards of the series are not documented), pointed at
    the 300I Duo, not at the A3 whose alias is closest in spelling."""
    answer = resolve(ResolveRequest(series))
    (error,) = answer.errors
    assert (error.code, error.option, error.suggestion) == (
        Code.UNKNOWN_PRODUCT,
        "product",
        "atlas-300i-duo",
    )
    assert "names a series, of which the source documents only the Atlas 300I Duo" in (
        error.message
    )
    assert not answer.options


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("atlas-a2-training", "atlas-a2"),  # 'Atlas A2 training series', not the training series
        ("Atlas A3 trainig", "atlas-a3"),
        ("atlas-910b", "atlas-a2"),  # the A2's SoC, Ascend910B*, not the Atlas 350
        ("Ascend 310P", "atlas-300i-duo"),  # the 300I Duo's SoC, Ascend310P3
        ("atlas-300", "atlas-300i-duo"),
        ("atlas-35", "atlas-350"),
        ("atals-a2", "atlas-a2"),  # a misspelt brand: the closest spelling as a whole
        ("Atlas 300T A2", "atlas-a2"),  # a server's name: its generation after the model
        ("Atlas 800T A2", "atlas-a2"),
        ("Atlas 910 A3", "atlas-a3"),  # not the training series' Ascend910A by '910a'
        ("atlas-350i-duo", "atlas-300i-duo"),  # not the 350 by its number: the closest name
        ("Atlas 300V", "atlas-300i-duo"),  # a one-word model by its number
        ("300I Pro", "atlas-300i-duo"),
        ("Atlas 3 训练系列产品 / Atlas A3 推理系列产品", "atlas-a3"),  # a series word is no model
        ("atlas-trainng", "atlas-training"),
    ],
)
def test_an_unknown_product_is_pointed_at_the_product_its_model_names(
    name: str, meant: str
) -> None:
    """The suggestion a job takes for its product: the one its model designates (the name's
    words after Atlas or Ascend), before the closest spelling of the whole name, which pointed
    A2 jobs at the legacy training series (another hccl_timeout and other defaults)."""
    (error,) = resolve(ResolveRequest(name)).errors
    assert (error.code, error.suggestion) == (Code.UNKNOWN_PRODUCT, meant)


def test_a_model_shared_by_two_products_suggests_no_product_by_its_model_alone() -> None:
    """'ascend910' begins both the A2's SoCs (910B) and the training series' (910A): the model
    does not tell, so the closest spelling decides, as for any other name."""
    (error,) = resolve(ResolveRequest("ascend910")).errors
    assert error.suggestion == _closest_spelling("ascend910")


def _closest_spelling(name: str) -> str:
    from npu_resolver._model import closest
    from npu_resolver._products import _ALIASES, alias_key

    return _ALIASES[closest(alias_key(name), _ALIASES)]


def test_a_job_and_a_policy_list_the_products_an_option_exists_on_alike() -> None:
    """A job's drop and a policy's refusal of the same option name its products in one order,
    the product table's (R-IBC-1: input_batch_cpy on atlas-350, atlas-a3 and atlas-a2)."""
    from npu_resolver import PolicyError, parse_policy

    (dropped,) = resolve(ResolveRequest("atlas-training", {"input_batch_cpy": True})).warnings
    assert "(only atlas-350, atlas-a3, atlas-a2)" in dropped.message
    with pytest.raises(PolicyError) as refused:
        parse_policy(
            "[profiles.default.products.atlas-training.defaults]\ninput_batch_cpy = true\n"
        )
    assert "(only atlas-350, atlas-a3, atlas-a2: R-IBC-1)" in str(refused.value)


def test_every_public_name_is_listed_and_importable() -> None:
    """Less-used parts load lazily; they still show in dir() (completion, help()) and in
    __all__, and each resolves."""
    import npu_resolver

    listed = dir(npu_resolver)
    for name in npu_resolver.__all__:
        assert name in listed, name
        assert getattr(npu_resolver, name) is not None
    assert {"diff", "load_policy", "describe_option"} <= set(listed)


def test_describe_option_says_where_an_option_acts_and_with_what() -> None:
    """explain's data, from the same tables as the answers: an inference-only option has no
    training default and one mode (R-BUF-1); a product's refused values are listed apart
    (R-PM-4); the old spellings an option reads (R-PM-2); an option this version dropped acts
    nowhere (R-ERP-1)."""
    from npu_resolver import describe_option

    by_name = CATALOG.by_name
    buffer = describe_option(by_name["buffer_optimize"])["products"]["atlas-a2"]
    assert buffer["modes"] == ["inference"]
    assert buffer["defaults"] == {"training": None, "inference": "l2_optimize"}
    precision = describe_option(by_name["precision_mode"])
    assert precision["aliases"] == {
        "force_fp32": "cube_fp16in_fp32out",
        "allow_mix_precision": "allow_mix_precision_fp16",
    }
    training = precision["products"]["atlas-training"]
    assert "allow_mix_precision_bf16" not in training["allowed_values"]
    assert training["unsupported_values"]["allow_mix_precision_bf16"] == "R-PM-4"
    dropped = describe_option(by_name["enable_reduce_precision"])["products"]["atlas-a2"]
    assert dropped["supported"] is False and dropped["modes"] == []


def test_diff_rows_are_options_some_column_has_and_same_compares_values_as_json() -> None:
    from npu_resolver import diff, diff_of, fingerprint

    result = diff(ResolveRequest(product=""), ["atlas-a2", "atlas-training"])
    assert all(any(cell is not None for cell in row.cells.values()) for row in result.rows)
    assert "buffer_optimize" not in [row.option for row in result.rows]  # inference only
    one = resolve(ResolveRequest("atlas-a2", {"dump_config": {"a": 1, "b": 2}}))
    two = resolve(ResolveRequest("atlas-a3", {"dump_config": {"b": 2, "a": 1}}))
    rows = {row.option: row for row in diff_of([("atlas-a2", one), ("atlas-a3", two)]).rows}
    assert rows["dump_config"].same  # the same object, its keys in another order
    # A fingerprint tells a bool from the int it equals, whichever was hashed first.
    assert fingerprint("atlas-a2", {"x": True}) != fingerprint("atlas-a2", {"x": 1})


def test_a_diff_narrowed_to_a_product_it_lacks_names_the_products_it_has() -> None:
    from npu_resolver import diff

    result = diff(ResolveRequest(product=""), ["atlas-a2", "atlas-training"])
    narrowed = result.only(["atlas-training"])
    assert narrowed.products == ("atlas-training",)
    assert all(row.cells.keys() == {"atlas-training"} for row in narrowed.rows)
    assert all(row.same for row in narrowed.rows)  # one column differs from nothing
    with pytest.raises(ValueError, match=r"no column for 'atlas-a3'; .* atlas-a2, atlas-training"):
        result.only(["atlas-training", "atlas-a3"])


def test_a_product_row_that_leaves_a_capability_unsaid_is_refused() -> None:
    """A capability left out would read as unsupported and gate the product out silently."""
    row = dataclasses.replace(PRODUCTS[1], id="atlas-950", aoe_tuning=None)
    with pytest.raises(ValueError, match="'atlas-950' does not say whether it has aoe_tuning"):
        check_capabilities((*PRODUCTS, row))
    check_capabilities(PRODUCTS)
