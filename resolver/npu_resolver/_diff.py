"""One config resolved for several products, side by side.

A platform team moving a job from one card to another asks exactly this: which options change
value or source, and which disappear.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ._catalog import CATALOG, Catalog
from ._content import shared_reads
from ._fingerprint import fragment
from ._model import JSON, Resolution, ResolveRequest, Source, plain_text, read_request
from ._pipeline import check_arguments, resolve, shared_suggestions
from ._products import PRODUCTS, product_id
from ._state import PolicyLike

MIN_DIFF_PRODUCTS: Final = 2
"""Names a diff needs: two names of one product will do (they make one column)."""
MAX_DIFF_PRODUCTS: Final = 16
"""Columns a diff takes: each costs a full resolve, and a server holds one call for all of
them. The same limit in process and through a server, so both give the same answer."""


MAX_PRODUCT_NAME: Final = 256
"""Characters a diff's product name may have: every product's names are a few dozen, and an
unknown name is a column of its own, its header and key in every row of the answer."""


class DiffError(ValueError):
    """A diff that cannot be made: fewer than two product names, more columns than
    MAX_DIFF_PRODUCTS, or a name longer than MAX_PRODUCT_NAME. `reason` is the code a server
    refuses it with (TOO_FEW_PRODUCTS, TOO_MANY_PRODUCTS or PRODUCT_NAME_TOO_LONG)."""

    def __init__(self, message: str, reason: str = "TOO_FEW_PRODUCTS") -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[DiffError], tuple[str, str]]:
        return (type(self), (str(self), self.reason))


def diff_columns(products: Sequence[str]) -> list[str]:
    """The columns of a diff: each product once, by its canonical id (an unknown name stands
    as given and gets an UNKNOWN_PRODUCT column). A name that is not a str is a TypeError, as
    a ResolveRequest's product is; a str subclass (an enum member) is the text it holds."""
    return _columns(products, None)[0]


def _columns(products: Sequence[str], most: int | None) -> tuple[list[str], bool]:
    """diff_columns, read only until there are more columns than `most` (a refusal costs no
    more than the names it needs); with whether every name was read."""
    columns: dict[str, None] = {}
    for read, name in enumerate(products, 1):
        if not isinstance(name, str):
            raise TypeError(f"a diff's product names are str, not {type(name).__name__}")
        text = plain_text(name)
        if len(text) > MAX_PRODUCT_NAME:
            raise DiffError(
                f"a diff's product name {read} has {len(text):,} characters; a product's name "
                f"has at most {MAX_PRODUCT_NAME} (the known ones: "
                f"{', '.join(p.id for p in PRODUCTS)})",
                "PRODUCT_NAME_TOO_LONG",
            )
        columns[product_id(text) or text] = None
        if most is not None and len(columns) > most:
            return list(columns), read == len(products)
    return list(columns), True


def ordered_products(products: object) -> Sequence[str]:
    """`products` when it can be a diff's columns, in order; a TypeError otherwise: one str
    (not a list of its characters), or a set, None or an iterator (whose order, and so the
    columns', would be chance). The client asks the same before sending a diff."""
    if isinstance(products, str | bytes):
        raise TypeError(
            f"a diff's products is a list of product names, not one {type(products).__name__}; "
            f"pass [{products!r}, ...] with two or more names"
        )
    if not isinstance(products, Sequence):
        raise TypeError(
            f"a diff's products is a list of product names, not {type(products).__name__}; "
            "pass them in the order the columns should take"
        )
    return products


def check_diff_products(products: Sequence[str]) -> list[str]:
    """The diff's columns (as diff_columns), or DiffError when `products` holds fewer than
    two names (two names of one product will do) or names more than MAX_DIFF_PRODUCTS
    different products, or a name is longer than MAX_PRODUCT_NAME. Cheap, so that adapters can
    ask before reading anything else of the request (see ordered_products for its
    TypeErrors)."""
    products = ordered_products(products)
    if len(products) < MIN_DIFF_PRODUCTS:
        raise DiffError(f"a diff needs {MIN_DIFF_PRODUCTS} or more products")
    columns, every_name = _columns(products, MAX_DIFF_PRODUCTS)
    if len(columns) > MAX_DIFF_PRODUCTS:
        known = ", ".join(p.id for p in PRODUCTS)
        named = str(len(columns)) if every_name else f"more than {MAX_DIFF_PRODUCTS}"
        raise DiffError(
            f"a diff takes at most {MAX_DIFF_PRODUCTS} products and this one names "
            f"{named} (a product named twice counts once); name at most "
            f"{MAX_DIFF_PRODUCTS}: the {len(PRODUCTS)} known ones are {known}",
            "TOO_MANY_PRODUCTS",
        )
    return columns


@dataclass(frozen=True, slots=True)
class DiffCell:
    """One product's side of a DiffRow: the option's effective `value` there and its `source`."""

    value: JSON
    source: Source


@dataclass(frozen=True, slots=True)
class DiffRow:
    """One option across the diff's products: a cell per product (None where the option is
    absent), and `same` when every product has it alike (equal value, as JSON, and source)."""

    option: str
    cells: Mapping[str, DiffCell | None]
    """Per product: the effective value and source, or None when the option is absent."""
    same: bool


@dataclass(frozen=True, slots=True)
class DiffResult:
    """A diff: its columns (`products`, canonical ids, or an unknown name as given), each
    column's full Resolution in `results`, and one DiffRow per option any column has, in
    `rows`; `differing` is the rows that are not the same everywhere."""

    products: tuple[str, ...]
    results: Mapping[str, Resolution]
    rows: tuple[DiffRow, ...]

    @property
    def differing(self) -> tuple[DiffRow, ...]:
        return tuple(row for row in self.rows if not row.same)

    def only(self, products: Sequence[str]) -> DiffResult:
        """The same diff with only `products`' columns, their rows compared again: those of
        this result (a server's, whose catalog may be newer), not the local catalog's. A
        product this result has no column for is a ValueError naming the ones it has."""
        missing = [pid for pid in products if pid not in self.results]
        if missing:
            raise ValueError(
                f"this diff has no column for {', '.join(map(repr, missing))}; "
                f"its products are {', '.join(self.products)}"
            )
        results = {pid: self.results[pid] for pid in products}
        compared = resolved_columns(results)
        rows = []
        for row in self.rows:
            cells = {pid: row.cells.get(pid) for pid in products}
            if any(cell is not None for cell in cells.values()):
                rows.append(DiffRow(row.option, cells, same=_same(row.option, cells, compared)))
        return DiffResult(tuple(products), results, tuple(rows))

    def to_json(self) -> dict[str, JSON]:
        """The DiffResponse's JSON mapping (proto field names, enums by their bare names): a
        product where the option is absent has no cell, as on the wire."""
        return {
            "products": list(self.products),
            "rows": [
                {
                    "option": row.option,
                    "cells": {
                        pid: {"value": cell.value, "source": cell.source.value}
                        for pid, cell in row.cells.items()
                        if cell is not None
                    },
                    "same": row.same,
                }
                for row in self.rows
            ],
            "differing": [row.option for row in self.differing],
            "results": {pid: res.to_json() for pid, res in self.results.items()},
        }


def diff(
    request: ResolveRequest,
    products: Sequence[str],
    *,
    policy: PolicyLike | None = None,
    catalog: Catalog = CATALOG,
) -> DiffResult:
    """Resolve `request` once per product (its own `product` is ignored) and line them up.

    Raises DiffError when fewer than two names are given, more than MAX_DIFF_PRODUCTS
    distinct products are named (a product named twice, by id or alias, counts once, so
    ["atlas-a2", "atlas-a2"] is a one-column diff) or a name is longer than MAX_PRODUCT_NAME
    (as a server refuses them); an unknown product is a column whose result carries
    UNKNOWN_PRODUCT. A request, products or policy of the wrong type is a TypeError."""
    check_arguments(request, policy, "diff")
    # A product named twice, by id or alias, is one column, resolved once.
    columns = check_diff_products(products)
    # Each attachment read once, and a close name sought once, for all the columns.
    with shared_reads(), shared_suggestions():
        resolved = [
            (product, resolve(_for_product(request, product), catalog=catalog, policy=policy))
            for product in columns
        ]
    return diff_of(resolved, catalog=catalog)


def _for_product(request: ResolveRequest, product: str) -> ResolveRequest:
    """`request` for another product. Its mappings are its own and already plain: copied as
    they are, not walked and checked again for every column."""
    return read_request(
        product,
        dict(request.config),
        dict(request.env),
        request.workdir,
        request.profile,
        request.strict,
        request.validate_only,
        dict(request.attachments),
    )


def diff_of(columns: Sequence[tuple[str, Resolution]], *, catalog: Catalog = CATALOG) -> DiffResult:
    """Resolutions already made, one per column with the product name it was asked for, lined
    up option by option (a server's answer when the config cannot be read at all is one)."""
    results: dict[str, Resolution] = {}
    for product, result in columns:
        results[result.product or product] = result
    compared = resolved_columns(results)
    rows = []
    for option in catalog.options:
        cells: dict[str, DiffCell | None] = {}
        for pid, result in results.items():
            if option.name in result.options:
                cells[pid] = DiffCell(
                    result.options[option.name], result.provenance[option.name].source
                )
            else:
                cells[pid] = None
        if all(cell is None for cell in cells.values()):
            continue
        rows.append(DiffRow(option.name, cells, same=_same(option.name, cells, compared)))
    return DiffResult(tuple(results), results, tuple(rows))


def resolved_columns(results: Mapping[str, Resolution]) -> frozenset[str]:
    """The columns a row's `same` compares: the products resolved. One not resolved at all (an
    unknown product, a config not read: no option in its answer) has no cell in any row, and
    counted, would make every row differ and hide what the others differ in."""
    return frozenset(pid for pid, result in results.items() if result.options)


def _same(option: str, cells: Mapping[str, DiffCell | None], compared: Collection[str]) -> bool:
    """Every product compared has the option alike: equal as JSON is equal (an object's keys in
    another order, 2.0 and 2), as the fingerprint has it (repr() told those apart), from one
    source."""
    values = {
        None if c is None else (fragment(option, c.value), c.source)
        for pid, c in cells.items()
        if pid in compared
    }
    return len(values) <= 1
