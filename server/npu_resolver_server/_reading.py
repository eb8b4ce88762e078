"""A request's bytes read: bounded before protobuf decodes them, so that no map, Struct or
field count makes the decoder spend seconds, and refused as INVALID_ARGUMENT when they are not
the message they claim to be."""

from __future__ import annotations

from typing import Final, Literal, TypeVar

from google.protobuf import message

from npu_resolver import MAX_DIFF_PRODUCTS

from ._encode import count_fields, length_delimited, struct_items, without_field
from ._replies import RefusedError

M = TypeVar("M", bound=message.Message)


def parse(kind: type[M], raw: bytes) -> M:
    try:
        return kind.FromString(raw)
    except message.DecodeError as exc:
        raise RefusedError(f"the request is not a valid {kind.DESCRIPTOR.name}: {exc}") from None


LeftOut = Literal["deep", "wide"] | None
CONFIG_FIELD: Final = 2
"""`config` in ResolveRequest and DiffRequest alike."""
DECODER_DEPTH: Final = 32
"""About the JSON depth of a config Struct that protobuf's decoder (upb: 100 message levels,
three a JSON level) still reads."""


LARGE_REQUEST_BYTES: Final = 256 * 1024
"""Below this size no map in a request is large enough to matter. protobuf's decoder reads a
map in time quadratic in its size: 80,000 entries take about 90 ms, 300,000 about 1.1 s."""
MAX_MAP_ENTRIES: Final = 8192
"""Entries of one map (env, attachments) read: a job's environment holds a few hundred."""
MAX_TOP_LEVEL_FIELDS: Final = 65_536
"""Fields at a request's top level looked at, before protobuf, for its maps' sizes (a few tens
of milliseconds); a request with more is refused unread."""


UNREADABLE: Final = "unreadable"
"""A large request the walk before decoding cannot read: cut short, or holding a group (long
deprecated, never in this API) that protobuf would read as an unknown field. Such a request is
refused unread: handing it to the decoder would let a group hide a map behind it."""


_MAPS: dict[str, dict[int, str]] = {}


def _maps(kind: type[message.Message]) -> dict[int, str]:
    """The map fields of a request message, by number (found once per message type)."""
    found = _MAPS.get(kind.DESCRIPTOR.full_name)
    if found is None:
        found = _MAPS[kind.DESCRIPTOR.full_name] = {
            f.number: f.name
            for f in kind.DESCRIPTOR.fields
            if f.message_type is not None and f.message_type.GetOptions().map_entry
        }
    return found


def too_large(kind: type[message.Message], raw: bytes, max_keys: int) -> str | None:
    """The field of a request too large to decode, read from its bytes before protobuf reads
    them: a map (env, attachments) of more than MAX_MAP_ENTRIES entries, "config" for a config
    Struct of more than `max_keys` keys and items in all, at any level (more than the server
    reads), "request" for more than MAX_TOP_LEVEL_FIELDS fields in all; UNREADABLE for one this
    walk cannot read."""
    if len(raw) <= LARGE_REQUEST_BYTES:
        return None
    counts = count_fields(raw, MAX_TOP_LEVEL_FIELDS + 1)
    if counts is None:  # a group, or bytes cut short: not decoded either (see UNREADABLE)
        return UNREADABLE
    for number, name in _maps(kind).items():
        if counts.get(number, 0) > MAX_MAP_ENTRIES:
            return name
    total = sum(counts.values())
    if total > MAX_TOP_LEVEL_FIELDS:
        products = kind.DESCRIPTOR.fields_by_name.get("products")
        # A Diff naming products again and again: in a diff's words, wherever its other
        # fields come (the count stops past the limit), when the names are most of it (and
        # so far more than a diff takes).
        named = counts.get(products.number, 0) if products is not None else 0
        return "products" if 2 * named > total else "request"
    keys = 0
    for config in length_delimited(raw, CONFIG_FIELD) or ():  # each occurrence adds its keys
        # Occurrences merge into one Struct: their keys and items add up.
        items = struct_items(config, max_keys - keys)
        if items is None:
            return UNREADABLE
        keys += items
        if keys > max_keys:
            return "config"
    return None


def unreadable(kind: type[message.Message]) -> RefusedError:
    """The refusal of a large request the walk before decoding cannot read (see UNREADABLE)."""
    return RefusedError(
        f"the request is not a valid {kind.DESCRIPTOR.name} as this server reads one over "
        f"{LARGE_REQUEST_BYTES // 1024} KiB (cut short, or holding a group)"
    )


def parse_with_config(kind: type[M], raw: bytes, max_keys: int) -> tuple[M, LeftOut]:
    """The request, and why its config Struct was left out unread: "deep" when it is nested
    deeper than the protobuf decoder reads (about 32 levels), "wide" when it has more keys than
    the server reads (`max_keys`), which the decoder would spend seconds on. Such a config is
    refused in a report, as a deep or wide config_json is, rather than the whole request as
    malformed: callers in other languages send Struct, and a batch must not fail as a whole for
    one item. A request with a map of thousands of entries is refused."""
    large = too_large(kind, raw, max_keys)
    if large == UNREADABLE:
        raise unreadable(kind)
    if large == "config":
        refused = RefusedError(f"the request's {kind.DESCRIPTOR.name} config is too large")
        return _without_config(kind, raw, refused), "wide"
    if large == "products":
        raise RefusedError(
            f"the request has more than {MAX_TOP_LEVEL_FIELDS:,} fields, most of them product "
            f"names; a diff takes at most {MAX_DIFF_PRODUCTS} (a product named twice is one "
            "column)",
            "products",
            "TOO_MANY_PRODUCTS",
        )
    if large is not None:
        what = (
            f"more than {MAX_TOP_LEVEL_FIELDS:,} fields"
            if large == "request"
            else f"more than {MAX_MAP_ENTRIES:,} {large} entries"
        )
        raise RefusedError(
            f"the request has {what}; send the job's own variables and only the attachments "
            "its options name",
            large,
            "TOO_MANY_ENTRIES",
        )
    try:
        return parse(kind, raw), None
    except RefusedError as refused:
        if "MaxDepth" not in str(refused):  # upb's words; another protobuf runtime: malformed
            raise
        return _without_config(kind, raw, refused), "deep"


def without_map(kind: type[M], raw: bytes, name: str, max_keys: int) -> M | None:
    """The request read without its map `name` (one refused as too large to decode), for what
    the rest of it says; None when the rest cannot be read either."""
    number = next((n for n, m in _maps(kind).items() if m == name), None)
    rest = without_field(raw, number) if number is not None else None
    if rest is None:
        return None
    try:
        return parse_with_config(kind, rest, max_keys)[0]
    except RefusedError:
        return None


def _without_config(kind: type[M], raw: bytes, refused: RefusedError) -> M:
    """The request read without its config Struct; `refused` when even that does not read."""
    rest = without_field(raw, CONFIG_FIELD)
    if rest is None:
        raise refused
    try:
        return kind.FromString(rest)
    except message.DecodeError:
        raise refused from None
