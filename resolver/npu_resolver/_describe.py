"""The catalog described as JSON: what a UI or a launcher needs to build its own forms.

Everything here is read from the precomputed views, so a description and a resolution can never
disagree about a gate, a range or a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ._catalog import CATALOG, Catalog, OptionView
from ._model import JSON, ResolveRequest
from ._pipeline import resolve
from ._products import PRODUCTS, Product, product_id, unknown_product
from ._schema import MODE_OPTION, Mode, Option


def list_products() -> list[Product]:
    return list(PRODUCTS)


def product_json(product: Product) -> dict[str, JSON]:
    return {
        "id": product.id,
        "name": product.name,
        "source_name": product.source_name,
        "family": product.family.value,
        "aliases": list(product.aliases),
    }


@lru_cache(maxsize=32)
def _untouched(pid: str, mode: Mode, catalog: Catalog) -> Mapping[str, JSON]:
    """The answer when nothing but the mode is set: what each option takes by default."""
    config: dict[str, JSON] = {MODE_OPTION: mode.graph_run_mode} if mode is Mode.INFERENCE else {}
    return resolve(ResolveRequest(product=pid, config=config), catalog=catalog).options


def _support(catalog: Catalog, option: Option, pid: str) -> dict[str, JSON]:
    views: dict[Mode, OptionView] = {m: catalog.view(pid, m)[option.name] for m in Mode}
    any_view = views[Mode.TRAINING]
    # A value is unsupported here when every mode the option acts in refuses it; one refused
    # in a single mode (force_fp16 is for online inference only) is a mode restriction.
    acting = {m: v for m, v in views.items() if v.acts} or views
    supported = any_view.product_ok and not option.unsupported_version
    refused = {  # where the option itself is missing, no value of it is worth listing
        m: {str(value): gate.rule for value, gate in v.blocked_values.items()} if supported else {}
        for m, v in acting.items()
    }
    everywhere = set.intersection(*(set(r) for r in refused.values()))
    blocked = {
        value: rule for r in refused.values() for value, rule in r.items() if value in everywhere
    }
    restrictions: list[JSON] = [
        {"value": value, "mode": mode.value, "rule": rule}
        for mode, r in refused.items()
        for value, rule in r.items()
        if value not in everywhere
    ]
    allowed = [c for c in option.choices if str(c) not in blocked]
    rng = any_view.range
    return {
        "supported": supported,
        "modes": [m.value for m, v in views.items() if v.acts],
        "allowed_values": allowed,
        "minimum": None if rng is None else rng.minimum,
        "maximum": None if rng is None else rng.maximum,
        "minimum_exclusive": False if rng is None else rng.min_exclusive,
        "defaults": {
            m.value: (
                m.graph_run_mode  # the mode's own value: 1 documented is training's
                if option.name == MODE_OPTION
                else v.default.value
                if v.default is not None and v.acts
                else None
            )
            for m, v in views.items()
        },
        "unsupported_values": blocked,
        "effective_defaults": {
            m.value: _untouched(pid, m, catalog).get(option.name) for m in views
        },
        "mode_restrictions": restrictions,
    }


def _product(product: str | None) -> str | None:
    """The canonical id of an id or alias (None for none); the words resolve uses for an
    unknown one, as a ValueError, and a TypeError for a name that is not a str."""
    if not product:
        return None
    if not isinstance(product, str):
        raise TypeError(f"a product is named by a str, not {type(product).__name__}")
    pid = product_id(product)
    if pid is None:
        unknown = unknown_product(product)
        hint = f" Did you mean {unknown.suggestion!r}?" if unknown.suggestion else ""
        raise ValueError(unknown.message + hint)
    return pid


def describe_option(
    option: Option, product: str | None = None, catalog: Catalog = CATALOG
) -> dict[str, Any]:
    """`product` (an id or alias) narrows the per-product part to one product; an unknown one
    raises ValueError naming the known ids and the closest."""
    if not isinstance(option, Option):
        raise TypeError(
            f"describe_option() takes an Option (CATALOG.by_name[name]), not "
            f"{type(option).__name__}"
        )
    pid = _product(product)
    pids = [pid] if pid else [p.id for p in PRODUCTS]
    return {
        "name": option.name,
        "section": option.section.value,
        "type": option.type.value,
        "summary": option.summary,
        "rules": list(option.all_rules),
        "env_var": option.env,
        "deprecated": option.deprecated,
        "experimental": option.experimental,
        "unsupported_version": option.unsupported_version,
        "attachment": option.attachment,
        "aliases": dict(option.aliases),
        "products": {pid: _support(catalog, option, pid) for pid in pids},
    }


def describe_catalog(product: str | None = None, catalog: Catalog = CATALOG) -> dict[str, Any]:
    """Every option with type, allowed values, defaults and gates per product, and rule ids.

    `product` (an id or alias) narrows the per-product part to one product; an unknown one
    raises ValueError naming the known ids and the closest.
    """
    pid = _product(product)
    return {
        "catalog_version": catalog.version,
        "products": [product_json(p) for p in PRODUCTS if pid is None or p.id == pid],
        "options": [describe_option(o, pid, catalog) for o in catalog.options],
    }
