"""The products of the source, with the aliases callers use for them.

Adding a product means adding one row to PRODUCTS (and naming it in the option table where the
source gates an option or a value on it).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from unicodedata import normalize

from ._model import keep, plain_text


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


PRODUCTS: Final[tuple[Product, ...]] = (
    Product(
        id="atlas-350",
        name="Atlas 350",
        source_name="Atlas 350 加速卡",
        family=Family.NEW,
        aliases=("Atlas 350", "Atlas 350 加速卡", "Atlas 350 accelerator card"),
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
    ),
)

SERIES: Final[Mapping[str, str]] = {
    "Atlas 推理系列产品": "atlas-300i-duo",
    "Atlas inference series": "atlas-300i-duo",
}
"""Names of a series of which the source documents one card alone: an unknown product spelt
so is pointed at that card, but never taken for it (the series holds other cards)."""

PRODUCT_IDS: Final[tuple[str, ...]] = tuple(p.id for p in PRODUCTS)
BY_ID: Final[Mapping[str, Product]] = {p.id: p for p in PRODUCTS}
NEW_FAMILY: Final = frozenset(p.id for p in PRODUCTS if p.family is Family.NEW)
LEGACY_FAMILY: Final = frozenset(p.id for p in PRODUCTS if p.family is Family.LEGACY)


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


_SEEN: dict[str, str | None] = {}
_MAX_NAME: Final = 256
"""A longer text is still looked up (spaces do not count), but not kept."""


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
