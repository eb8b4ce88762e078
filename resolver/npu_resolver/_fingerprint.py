"""The fingerprint: a stable hash of product + options, built from memoized pieces."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Final

from ._model import JSON, MAX_EXACT_INT, MAX_MEMO_TEXT, keep

_FRAGMENTS: dict[tuple[str, type, JSON], str] = {}
_MAX_FRAGMENTS: Final = 4096
_KEPT: Final = frozenset({str, int, bool, type(None)})
"""The types whose fragments are memoized by value. Not float: 0.0 == -0.0 would share one
entry (and nan != nan would never be found)."""
_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
canonical_json: Final = _ENCODER.encode
"""One encoder for every fragment: json.dumps with options builds a new one per call."""
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_encode_value: Final = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None,  # no check for cycles (see _value_text)
        _ENCODER.default,
        json.encoder.encode_basestring,
        None,
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        True,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan
    )
)
"""What canonical_json() runs for an object or list, built once: encode() builds it (and a
float formatter) on every call, most of the cost of encoding a small object."""


def alike_numbers(value: Any) -> Any:
    """`value` with every integral float written as the int it equals (2.0 as 2, -0.0 as 0):
    numbers that compare equal hash alike, so equal options get equal fingerprints however
    they travelled (a Struct carries every number as a double, and JSON text may write 2 as
    2.0). A float past 2**53 (as the wire reads them), NaN and the infinities stay as they are."""
    if isinstance(value, float):  # a subclass too: json writes it as a float
        return (
            int(value) if value.is_integer() and -MAX_EXACT_INT <= value <= MAX_EXACT_INT else value
        )
    if isinstance(value, dict):
        return {key: alike_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [alike_numbers(item) for item in value]
    return value


def _value_text(value: JSON) -> str:
    """canonical_json(value) for a value not memoized (an object, a list, a float), its numbers
    written alike (alike_numbers). A value that holds itself (never one the resolver took: each is
    walked to a bounded depth first) recurses to the limit and is then encoded by
    canonical_json, which says so as it always did."""
    try:
        value = alike_numbers(value)
    except RecursionError:
        return canonical_json(value)
    if _encode_value is None:  # a Python without json's C accelerator
        return canonical_json(value)
    try:
        return "".join(_encode_value(value, 0))
    except RecursionError:
        return canonical_json(value)


_string_text: Final = json.encoder.encode_basestring
"""canonical_json() of a str: what encode() returns for one (ensure_ascii is off)."""
_SCALAR_TEXT: Final[dict[type, Callable[[Any], str]]] = {
    str: _string_text,
    int: int.__repr__,  # as json writes an int (exactly int: bools and subclasses differ)
    bool: lambda flag: "true" if flag else "false",
    type(None): lambda _: "null",
}
"""canonical_json() of each kept type, without encode()'s generic path (which builds an
encoder for every int it writes)."""


def _key_text(name: str) -> str:
    """A key as canonical_json() writes it in an object: any other type than str (fingerprint()
    is public, and json takes an int, float, bool or None key) as the string json makes of it."""
    if type(name) is str:
        return _string_text(name)
    return canonical_json({name: 0})[1:-3]  # '{"1":0}' -> '"1"', or json's own TypeError


def fragment(name: str, value: JSON) -> str:
    """'"name":value' in canonical JSON, memoized for the scalar values that keep recurring."""
    kind = type(value)
    if kind not in _KEPT or type(name) is not str:
        # An object or list (an OrderedDict too), a float: not kept; nor a key of another
        # type (1, True and 1.0 are one dict key, but json writes them apart).
        return f"{_key_text(name)}:{_value_text(value)}"
    key = (name, kind, value)
    text = _FRAGMENTS.get(key)
    if text is None:
        text = f"{_string_text(name)}:{_SCALAR_TEXT[kind](value)}"
        if len(text) <= MAX_MEMO_TEXT:
            keep(_FRAGMENTS, key, text, _MAX_FRAGMENTS)
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

    The hashed text is the canonical JSON of {"options": ..., "product": ...} (sorted keys, no
    spaces, UTF-8), an integral float up to 2**53 written as the int it equals (2.0 as 2,
    -0.0 as 0), so that options that compare equal hash alike.
    """
    return digest(product, [fragment(name, options[name]) for name in sorted(options)])
