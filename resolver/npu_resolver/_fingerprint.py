"""The fingerprint: a stable hash of product + options, built from memoized pieces."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Final

from ._model import JSON, MAX_MEMO_TEXT

_FRAGMENTS: dict[tuple[str, type, JSON], str] = {}
_MAX_FRAGMENTS: Final = 4096
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})
canonical_json: Final = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False
).encode
"""One encoder for every fragment: json.dumps with options builds a new one per call."""


def fragment(name: str, value: JSON) -> str:
    """'"name":value' in canonical JSON, memoized for the scalar values that keep recurring."""
    kind = type(value)
    if kind not in _SCALARS:  # an object or list (an OrderedDict too): not hashable, not kept
        return f"{canonical_json(name)}:{canonical_json(value)}"
    key = (name, kind, value)
    text = _FRAGMENTS.get(key)
    if text is None:
        text = f"{canonical_json(name)}:{canonical_json(value)}"
        if len(_FRAGMENTS) < _MAX_FRAGMENTS and len(text) <= MAX_MEMO_TEXT:
            _FRAGMENTS[key] = text
    return text


@lru_cache(maxsize=64)
def _product_tail(product: str) -> str:
    """The text after the options: the same few products on every request."""
    return f'}},"product":{canonical_json(product)}}}'


def digest(product: str, fragments: list[str]) -> str:
    canonical = f'{{"options":{{{",".join(fragments)}{_product_tail(product)}'
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def fingerprint(product: str, options: Mapping[str, JSON]) -> str:
    """A stable hash of product + options: equal configs, equal fingerprints.

    The hashed text is the canonical JSON of {"options": ..., "product": ...} (sorted keys).
    """
    return digest(product, [fragment(name, options[name]) for name in sorted(options)])
