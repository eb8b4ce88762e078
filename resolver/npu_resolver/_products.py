"""The products of the source, with the aliases callers use for them and what each supports.

Adding a product means adding one row to PRODUCTS: its family and capabilities put it in the
gates of the option table that follow them (naming it there only where the source gives it a
default or a value of its own).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Final
from unicodedata import normalize

from ._model import MAX_SUGGESTED_TEXT, Code, Diagnostic, Severity, closest, keep, plain_text
from ._values import show


class Family(enum.StrEnum):
    NEW = "new"
    LEGACY = "legacy"


@dataclass(frozen=True, slots=True)
class Product:
    id: str
    name: str
    source_name: str
    family: Family
    aliases: tuple[str, ...]
    # What the source says the product supports. Each row of PRODUCTS states every one (checked
    # below). They are not part of the wire form: a client gives a product a server describes
    # as this table does the row's own, and leaves them None (not known) for one it does not
    # know; they take no part in equality, so a product equals the row it describes.
    aoe_tuning: bool | None = field(default=None, compare=False)
    """AOE tuning is available, in training ("AOE调优特性仅支持如下产品的训练场景"): aoe_mode,
    work_path and aoe_config_file act (R-AOE-1)."""
    aoe_subgraph_tuning: bool | None = field(default=None, compare=False)
    """With AOE tuning, its subgraph tuning, aoe_mode '1', is too (R-AOE-3)."""
    aicore_num: bool | None = field(default=None, compare=False)
    """aicore_num, the Cube and Vector core counts for operator compile, is supported (R-ACN-1)."""
    hifloat8: bool | None = field(default=None, compare=False)
    """The source documents the hifloat8 precision modes, precision_mode_v2 mixed_hif8 and
    cube_hif8, for it (R-PM2-3), though this version of the runtime supports them nowhere yet."""
    ub_fusion: bool | None = field(default=None, compare=False)
    """It has UB fusion: a fusion switch file's UBFusion switches act (R-FSF-1), op_debug_level 4
    writes the UB fusion compute description file (R-DEP-3)."""
    tbe_mapping_files: bool | None = field(default=None, compare=False)
    """op_debug_level 1, 2 and 4 write the TBE instruction mapping files (R-DEP-3)."""


PRODUCTS: Final[tuple[Product, ...]] = (
    Product(
        id="atlas-350",
        name="Atlas 350",
        source_name="Atlas 350 加速卡",
        family=Family.NEW,
        aliases=("Atlas 350", "Atlas 350 加速卡", "Atlas 350 accelerator card"),
        aoe_tuning=False,
        aoe_subgraph_tuning=False,
        aicore_num=False,
        hifloat8=True,
        ub_fusion=False,
        tbe_mapping_files=False,
    ),
    Product(
        id="atlas-a3",
        name="Atlas A3",
        source_name="Atlas A3 训练系列产品 / Atlas A3 推理系列产品",
        family=Family.NEW,
        aliases=(
            "Atlas A3",
            "Atlas A3 训练系列产品",
            "Atlas A3 推理系列产品",
            "Atlas A3 training series",
            "Atlas A3 inference series",
            "Ascend910_9391",
            "Ascend910_9392",
            "Ascend910_9381",
            "Ascend910_9382",
            "Ascend910_9372",
            "Ascend910_9362",
        ),
        aoe_tuning=True,
        aoe_subgraph_tuning=False,
        aicore_num=True,
        hifloat8=False,
        ub_fusion=True,
        tbe_mapping_files=True,
    ),
    Product(
        id="atlas-a2",
        name="Atlas A2",
        source_name="Atlas A2 训练系列产品 / Atlas A2 推理系列产品",
        family=Family.NEW,
        aliases=(
            "Atlas A2",
            "Atlas A2 训练系列产品",
            "Atlas A2 推理系列产品",
            "Atlas A2 training series",
            "Atlas A2 inference series",
            "Ascend910B1",
            "Ascend910B2",
            "Ascend910B2C",
            "Ascend910B3",
            "Ascend910B4",
            "Ascend910B4-1",
        ),
        aoe_tuning=True,
        aoe_subgraph_tuning=False,
        aicore_num=True,
        hifloat8=False,
        ub_fusion=True,
        tbe_mapping_files=True,
    ),
    Product(
        id="atlas-training",
        name="Atlas training series",
        source_name="Atlas 训练系列产品",
        family=Family.LEGACY,
        aliases=(
            "Atlas training series",
            "Atlas 训练系列产品",
            "Ascend910A",
            "Ascend910ProA",
            "Ascend910ProB",
            "Ascend910PremiumA",
        ),
        aoe_tuning=True,
        aoe_subgraph_tuning=True,
        aicore_num=False,
        hifloat8=False,
        ub_fusion=True,
        tbe_mapping_files=True,
    ),
    Product(
        id="atlas-300i-duo",
        name="Atlas 300I Duo",
        source_name="Atlas 300I Duo 推理卡",
        family=Family.LEGACY,
        aliases=(
            "Atlas 300I Duo",
            "Atlas 300I Duo 推理卡",
            "Atlas 300I Duo inference card",
            "Ascend310P3",
        ),
        aoe_tuning=False,
        aoe_subgraph_tuning=False,
        aicore_num=False,
        hifloat8=False,
        ub_fusion=True,
        tbe_mapping_files=True,
    ),
)

SERIES: Final[Mapping[str, str]] = {
    "Atlas 推理系列产品": "atlas-300i-duo",
    "Atlas inference series": "atlas-300i-duo",
}
"""Names of a series of which the source documents one card alone: an unknown product spelt
so is pointed at that card, but never taken for it (the series holds other cards)."""


CAPABILITIES: Final = tuple(f.name for f in fields(Product) if not f.compare)


def check_capabilities(products: tuple[Product, ...]) -> None:
    """Every row says what the product supports: a capability left unsaid would read as
    unsupported, and gate the product out silently."""
    for product in products:
        for name in CAPABILITIES:
            if not isinstance(getattr(product, name), bool):
                raise ValueError(f"product {product.id!r} does not say whether it has {name}")


check_capabilities(PRODUCTS)

PRODUCT_IDS: Final[tuple[str, ...]] = tuple(p.id for p in PRODUCTS)
BY_ID: Final[Mapping[str, Product]] = {p.id: p for p in PRODUCTS}
NEW_FAMILY: Final = frozenset(p.id for p in PRODUCTS if p.family is Family.NEW)
LEGACY_FAMILY: Final = frozenset(p.id for p in PRODUCTS if p.family is Family.LEGACY)
AOE_TUNING: Final = frozenset(p.id for p in PRODUCTS if p.aoe_tuning)
AOE_SUBGRAPH_TUNING: Final = frozenset(
    p.id for p in PRODUCTS if p.aoe_tuning and p.aoe_subgraph_tuning
)
AICORE_NUM: Final = frozenset(p.id for p in PRODUCTS if p.aicore_num)
HIFLOAT8: Final = frozenset(p.id for p in PRODUCTS if p.hifloat8)
UB_FUSION: Final = frozenset(p.id for p in PRODUCTS if p.ub_fusion)
TBE_MAPPING_FILES: Final = frozenset(p.id for p in PRODUCTS if p.tbe_mapping_files)


def listed(pids: Collection[str]) -> str:
    """Products as a message lists them: comma-separated, in the table's order."""
    return ", ".join(pid for pid in PRODUCT_IDS if pid in pids)


_IGNORED: Final = str.maketrans("", "", "-_")


def alias_key(text: str) -> str:
    """Case, spaces, '-' and '_' do not distinguish product names: any space (a no-break or
    full-width one, as names copied from the source's pages hold, or a file's newline), and
    their full-width forms (NFKC: 'Ａｔｌａｓ　Ａ２' is 'Atlas A2')."""
    return "".join(normalize("NFKC", text).casefold().split()).translate(_IGNORED)


def names(product: Product) -> tuple[str, ...]:
    """Every spelling that names the product: its id, display and source names, aliases (the
    source names are what `products` prints, so they must be taken back)."""
    return (product.id, product.name, product.source_name, *product.aliases)


def _build_alias_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for product in PRODUCTS:
        for name in names(product):
            key = alias_key(name)
            if table.setdefault(key, product.id) != product.id:
                raise ValueError(f"product alias {name!r} names two products")
    return table


_ALIASES: Final = _build_alias_table()


_SERIES_WORDS: Final = {alias_key(name): BY_ID[pid] for name, pid in SERIES.items()}


def unknown_product(text: str) -> Diagnostic:
    """UNKNOWN_PRODUCT for a name no product has: the ids to use, and as its suggestion the
    product whose name is closest (or the one card of a series the name names)."""
    text = plain_text(text)
    message = f"product {show(text)} is not recognized; use one of {', '.join(PRODUCT_IDS)}."
    series = _SERIES_WORDS.get(alias_key(text))
    if series is not None:  # closer in spelling to a card of another series
        message += (
            f" {show(text)} names a series, of which the source documents only the "
            f"{series.source_name} ({series.id}): name that card if it is yours."
        )
        return Diagnostic(Severity.ERROR, Code.UNKNOWN_PRODUCT, "product", "", message, series.id)
    suggestion = ""
    if len(text) <= MAX_SUGGESTED_TEXT:
        suggestion = _by_model(text)
        if not suggestion:
            close = closest(alias_key(text), _ALIASES)
            suggestion = _ALIASES[close] if close else ""
    return Diagnostic(Severity.ERROR, Code.UNKNOWN_PRODUCT, "product", "", message, suggestion)


_BRANDS: Final = ("atlas", "ascend", "huawei")
_WORD_BREAKS: Final = re.compile(r"[\s\-]+")
MIN_DESIGNATION: Final = 2


def _model_words(name: str) -> list[str]:
    """A name's words after its brand ('Atlas 800T A2' -> ['800t', 'a2'], 'Ascend910B3' ->
    ['910b3']), each compared as product names are (alias_key)."""
    words = [key for key in map(alias_key, _WORD_BREAKS.split(normalize("NFKC", name))) if key]
    for brand in _BRANDS:
        if words and words[0].startswith(brand):
            rest = words[0][len(brand) :]
            return [rest, *words[1:]] if rest else words[1:]
    return words


def _designations() -> dict[str, frozenset[str]]:
    """Each product's designations: the first model word of each of its names ('a2', '910b3',
    '300i', '310p3', '350', 'training')."""
    return {
        product.id: frozenset(words[0] for name in names(product) if (words := _model_words(name)))
        for product in PRODUCTS
    }


_DESIGNATIONS: Final = _designations()


def _designated(matches: Callable[[str], bool]) -> str:
    """The one product with a designation that `matches`; "" for none or several."""
    found = [pid for pid, marks in _DESIGNATIONS.items() if any(map(matches, marks))]
    return found[0] if len(found) == 1 else ""


def _by_model(name: str) -> str:
    """The product a name's model designates, or "" when no one product stands out (the whole
    name's closest spelling is then suggested). In turn: a word of the name that is one
    product's designation, past the first word a model number ('Atlas 800T A2' and 'Atlas 910
    A3' name their generation after the model; 'atlas-a2-training' is an A2, not the training
    series that spelling is closest to as a whole); the first word as the start of one
    product's designation ('atlas-910b': the A2 of Ascend910B3, not the Atlas 350; 'atlas-300':
    the 300I Duo); a one-word model by its number ('Atlas 300V': the 300I Duo, by its 300)."""
    words = _model_words(name)
    for index, word in enumerate(words):
        if index and not any(c.isdigit() for c in word):
            continue  # 'training' after a model names a series, as in 'Atlas A2 training series'
        found = _designated(word.__eq__)
        if found:
            return found
    if not words or len(words[0]) < MIN_DESIGNATION:
        return ""
    found = _designated(lambda mark: mark.startswith(words[0]))
    if found or len(words) > 1:  # 'atlas-350i-duo' is not read by its '350' alone
        return found
    number = re.match(r"[0-9]+", words[0])
    if number is None or len(number.group()) < MIN_DESIGNATION:
        return ""
    return _designated(lambda mark: mark.startswith(number.group()))


_SEEN: dict[str, str | None] = {}
_MAX_NAME: Final = 256
"""A longer text is still looked up (spaces do not count), but not kept."""


def chips(pid: str) -> tuple[str, ...]:
    """The SoC version strings that name the product (its aliases that begin 'Ascend', as
    the runtime's SoC versions do): 'Ascend910B1' ... for atlas-a2."""
    return _CHIPS.get(pid, ())


_CHIPS: Final = {
    p.id: tuple(a for a in p.aliases if alias_key(a).startswith("ascend")) for p in PRODUCTS
}


def product_id(text: str) -> str | None:
    """The canonical id for an id, display name or SoC string; None when unknown."""
    text = plain_text(text)
    if text in _SEEN:
        return _SEEN[text]
    found = _ALIASES.get(alias_key(text))
    # Callers send a handful of spellings: kept while short and few, never grown unbounded.
    if len(text) <= _MAX_NAME:
        keep(_SEEN, text, found, 1024)
    return found
