"""Protobuf wire format written and cut by hand on the hot path.

Building a ResolveResponse message and serializing it costs more than resolving; writing the
bytes costs a fraction of that, and most pieces of an answer recur from call to call (a
provenance entry, a diagnostic, an option set to a common value), so their bytes are memoized
in bounded tables. `encode_resolution` gives bytes that parse to exactly the message
`resolution_to_proto` builds; anything it does not recognize (an unexpected value type, a
string that is not valid UTF-8, a number too large for a double) is left to that reference
path, which encodes it or raises as it always did.

`length_delimited` cuts a ResolveBatchRequest into its items' own bytes, so that each item
finds the answer cache entry a unary Resolve of it left, without re-serializing it."""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Iterable, Mapping
from operator import attrgetter, is_
from typing import Any, Final, TypeVar

from npu_resolver import Code, Diagnostic, Provenance, Resolution, Severity, Source
from npu_resolver_client.wire import SEVERITY_TO_PB, SOURCE_TO_PB, resolution_to_proto

K = TypeVar("K", bound=Hashable)

MEMO_ENTRIES: Final = 4096
"""Bound of each memo table (a few hundred kB each); a full table is emptied and refilled with
what recurs."""
MAX_MEMO_BYTES: Final = 2048
"""Longer pieces are written anew each time, never kept: a caller's megabyte-long value, kept
in 4,096 entries, would pin gigabytes (and such values rarely recur)."""

_SMALL: Final = tuple(bytes((n,)) for n in range(128))
_double: Final = struct.Struct("<d").pack
_NULL: Final = b"\x08\x00"
_TRUE: Final = b"\x20\x01"
_FALSE: Final = b"\x20\x00"
_MEMO_SCALARS: Final = frozenset({str, int, bool, type(None)})
"""Value types whose equality, with the type, implies equal bytes (not floats: 0.0 == -0.0)."""
_UNSET_TYPE: Final = type(Provenance(Source.DEFAULT).requested)  # the core's 'no requested value'
_MEMO_REQUESTED: Final = _MEMO_SCALARS | {_UNSET_TYPE}


class UnsupportedValueError(Exception):
    """A value this module does not write: the reference path encodes it (or refuses it)."""


def varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    if value < 128:
        return _SMALL[value]
    out = bytearray()
    while value > 127:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited field (wire type 2): a string, bytes or a sub-message."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def length_delimited(raw: bytes, number: int) -> list[bytes] | None:
    """The payloads of every occurrence of length-delimited field `number` in `raw`, in order:
    a repeated message's items exactly as the sender wrote them. `raw` must already have been
    parsed by the generated code; None if it holds anything this walk does not expect."""
    fields = _fields(raw)
    if fields is None:
        return None
    return [raw[payload:end] for key, _, payload, end in fields if key == number << 3 | 2]


def without_field(raw: bytes, number: int) -> bytes | None:
    """`raw` with every occurrence of length-delimited field `number` left out, the other
    fields exactly as written; None if it is not a message this walk can cut."""
    fields = _fields(raw)
    if fields is None:
        return None
    return b"".join(raw[start:end] for key, start, _, end in fields if key != number << 3 | 2)


def count_fields(raw: bytes, most: int) -> dict[int, int] | None:
    """How many times each field number occurs at the top level of `raw`, read no further than
    `most` fields (so a total of `most` means "at least"); None if it is not a message this walk
    reads. Cheap next to protobuf's decoder, which reads a map in time quadratic in its size."""
    fields = _fields(raw, most)
    if fields is None:
        return None
    counts: dict[int, int] = {}
    for key, _, _, _ in fields:
        counts[key >> 3] = counts.get(key >> 3, 0) + 1
    return counts


_STRUCT, _ENTRY, _VALUE, _LIST = range(4)
_INNER: Final = {
    (_STRUCT, 1): _ENTRY,  # Struct.fields: a map entry, one key of the object
    (_ENTRY, 2): _VALUE,  # the entry's value
    (_VALUE, 5): _STRUCT,  # Value.struct_value
    (_VALUE, 6): _LIST,  # Value.list_value
    (_LIST, 1): _VALUE,  # ListValue.values: one item of the list
}


_SCALAR_SIZES: Final = {0x08: 2, 0x11: 9, 0x20: 2}
"""A Value that is null, a number or a bool: its one field's first byte and the Value's size."""


def _scalar(raw: bytes, pos: int, size: int) -> bool:
    """Whether the Value at `pos` is one scalar field, holding nothing more to count."""
    first = raw[pos]
    if first == 0x1A:  # string_value: its length must reach the Value's end exactly
        length, start = _read_varint(raw, pos + 1, _MAX_KEY_BYTES)
        return start - pos + length == size
    return _SCALAR_SIZES.get(first) == size


MAX_FIELDS_PER_ITEM: Final = 4
"""Fields read per key or item counted: an object's key takes 3 (the entry, its key, its value)
and a list's item 1 or 2, so only fields that count for nothing (unknown ones, a Value's kind
written again) go past this; the walk stops there as it does past `most` items."""


def struct_items(raw: bytes, most: int) -> int | None:
    """The keys and items in all of a google.protobuf.Struct's bytes, at every level (what
    config_shape counts in the decoded object), read no further than `most` of them (so a total
    above `most` means "more"); None if it is not a message this walk reads. protobuf's decoder
    reads each map in time quadratic in its size, a nested one too: 150,000 keys one level
    down take it half a second. Every field it reads is counted against a budget, so that
    no input makes it read more than MAX_FIELDS_PER_ITEM fields per item of `most`."""
    count = 0
    steps = MAX_FIELDS_PER_ITEM * (most + 1)
    pending = [(0, len(raw), _STRUCT)]
    inners = _INNER
    read = _read_varint
    try:
        while pending:
            pos, end, kind = pending.pop()
            while pos < end:
                steps -= 1
                if steps < 0:  # fields that count for nothing (unknown, repeated): as many
                    return most + 1  # as a config of more keys would take
                key = raw[pos]  # a one-byte key and length are the rule: read them here
                pos += 1
                if key > 127:
                    key, pos = read(raw, pos - 1, _MAX_KEY_BYTES)
                wire = key & 7
                if wire == 2:
                    size = raw[pos]
                    pos += 1
                    if size > 127:
                        size, pos = read(raw, pos - 1, _MAX_KEY_BYTES)
                    inner = inners.get((kind, key >> 3))
                    if inner is not None:
                        if inner == _ENTRY or kind == _LIST:
                            count += 1
                            if count > most:
                                return count
                        if size and not (inner == _VALUE and _scalar(raw, pos, size)):
                            pending.append((pos, pos + size, inner))
                    pos += size
                else:
                    pos = _past(raw, pos, wire)
            if pos != end:
                return None  # a field runs past the end of its message
    except IndexError:  # cut short inside a varint, or a varint longer than protobuf allows
        return None
    return count


def _fields(raw: bytes, most: int | None = None) -> list[tuple[int, int, int, int]] | None:
    """The top-level fields of `raw` as (key, start, payload start, end) offsets, the first
    `most` of them when given; None if it is cut short or holds a group (long deprecated, and
    never in this API)."""
    out: list[tuple[int, int, int, int]] = []
    pos, end = 0, len(raw)
    try:
        while pos < end:
            if most is not None and len(out) >= most:
                return out
            start = pos
            key, pos = _read_varint(raw, pos, _MAX_KEY_BYTES)
            kind = key & 7
            if kind == 2:
                size, pos = _read_varint(raw, pos, _MAX_KEY_BYTES)
                payload, pos = pos, pos + size
            else:
                payload, pos = pos, _past(raw, pos, kind)
            out.append((key, start, payload, pos))
    except IndexError:  # cut short inside a varint, or a varint longer than protobuf allows
        return None
    return out if pos == end else None


_MAX_KEY_BYTES: Final = 5
"""A field's key and a length are 32-bit: protobuf's parser refuses a longer varint for them
(even one padded with zeros), so this walk does too."""
_MAX_VARINT_BYTES: Final = 10


def _past(raw: bytes, pos: int, wire: int) -> int:
    """The end of a varint, 64-bit or 32-bit field's payload that starts at `pos`; IndexError
    for a group, the one other wire type (long deprecated, and never in this API)."""
    if wire == 0:
        return _read_varint(raw, pos, _MAX_VARINT_BYTES)[1]
    if wire in (1, 5):
        return pos + (8 if wire == 1 else 4)
    raise IndexError("a group")


def _read_varint(raw: bytes, pos: int, limit: int) -> tuple[int, int]:
    value = shift = 0
    last = pos + limit
    while pos < last:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 128:
            return value, pos
        shift += 7
    raise IndexError("varint too long")


def _text(tag: bytes, text: str) -> bytes:
    data = text.encode()
    return tag + varint(len(data)) + data


def _optional_text(tag: bytes, text: str) -> bytes:
    """A proto3 string field: absent when empty."""
    return _text(tag, text) if text else b""


# --------------------------------------------------------------------------- JSON values


def _value(data: Any) -> bytes:
    """A google.protobuf.Value, as `Struct.update` would set it."""
    kind = type(data)
    if kind is str:
        return _text(b"\x1a", data)
    if kind is bool:
        return _TRUE if data else _FALSE
    if kind is int or kind is float:
        return b"\x11" + _double(data)
    if data is None:
        return _NULL
    if kind is dict:
        return field(5, _struct(data))
    if kind is list or kind is tuple:
        return field(6, b"".join([field(1, _value(item)) for item in data]))
    raise UnsupportedValueError(kind.__name__)


def _struct_entry(key: Any, data: Any) -> bytes:
    """One `fields` map entry of a Struct, with its tag and length."""
    if type(key) is not str:
        raise UnsupportedValueError(type(key).__name__)
    return field(1, _text(b"\x0a", key) + field(2, _value(data)))


def _struct(data: dict[Any, Any]) -> bytes:
    return b"".join([_struct_entry(key, value) for key, value in data.items()])


# --------------------------------------------------------------------------- memo tables


class _Memo(dict[K, bytes]):
    """Encoded bytes by key, emptied when full so that memory stays bounded."""

    def __init__(self, encode: Callable[[K], bytes]) -> None:
        super().__init__()
        self._encode = encode

    def __missing__(self, key: K) -> bytes:
        encoded = self._encode(key)
        if len(encoded) <= MAX_MEMO_BYTES:
            if len(self) >= MEMO_ENTRIES:
                self.clear()
            self[key] = encoded
        return encoded


def _option_entry(key: tuple[str, type, Any]) -> bytes:
    return _struct_entry(key[0], key[2])


_provenance_fields: Final = attrgetter("source", "rules", "requested", "env_var", "detail")
_ProvenanceKey = tuple[str, tuple[Source, tuple[str, ...], Any, str, str], type]
"""(name, (source, rules, requested, env_var, detail), type of requested): all that decides a
provenance entry's bytes, as plain tuples (hashed without calling Python code)."""


def _provenance_entry(key: _ProvenanceKey) -> bytes:
    """A `provenance` map entry of ResolveResponse (field 4), with its tag and length."""
    name, (source, rules, requested, env_var, detail), kind = key
    parts = [b"\x08" + varint(SOURCE_TO_PB[source])]
    parts += [_text(b"\x12", rule) for rule in rules]
    if kind is not _UNSET_TYPE:  # an empty object or list is a value asked for too
        parts.append(field(3, _value(requested)))
    parts.append(_optional_text(b"\x22", env_var))
    parts.append(_optional_text(b"\x2a", detail))
    return field(4, _text(b"\x0a", name) + field(2, b"".join(parts)))


_diagnostic_fields: Final = attrgetter(
    "severity", "code", "option", "rule", "message", "suggestion"
)


def _diagnostic(key: tuple[Severity, Code, str, str, str, str]) -> bytes:
    """A `diagnostics` item of ResolveResponse (field 5), with its tag and length."""
    severity, code, option, rule, message, suggestion = key
    return field(
        5,
        b"\x08"
        + varint(SEVERITY_TO_PB[severity])
        + _optional_text(b"\x12", code.value)
        + _optional_text(b"\x1a", option)
        + _optional_text(b"\x22", rule)
        + _optional_text(b"\x2a", message)
        + _optional_text(b"\x32", suggestion),
    )


def _path_key(name: str) -> bytes:
    """A `paths` entry's key field with the value's tag: a few names, the same every time."""
    return _text(b"\x0a", name) + b"\x12"


_PATH_KEYS: Final = _Memo(_path_key)


def _path_entry(name: str, path: str) -> bytes:
    """A `paths` map entry of ResolveResponse (field 6), with its tag and length. The path is
    not memoized: paths follow the job's workdir, new with every job."""
    data = path.encode()
    entry = _PATH_KEYS[name] + varint(len(data)) + data
    return b"\x32" + varint(len(entry)) + entry


_OPTIONS: Final = _Memo(_option_entry)
_PROVENANCE: Final = _Memo(_provenance_entry)
_DIAGNOSTICS: Final = _Memo(_diagnostic)


def _options(options: Mapping[str, Any]) -> list[bytes]:
    memo = _OPTIONS
    scalars = _MEMO_SCALARS
    return [
        memo[name, kind, value] if (kind := type(value)) in scalars else _struct_entry(name, value)
        for name, value in options.items()
    ]


_SAME_PROVENANCE: Final[dict[tuple[str, int], tuple[Provenance, bytes]]] = {}
"""Entry bytes by (name, id of the Provenance): the core hands out the same immutable objects
call after call. Each holds its Provenance, so an id is checked against a live object."""


def _provenances(provenance: Mapping[str, Provenance]) -> tuple[list[bytes], bool]:
    """The entries' bytes, and whether each was memoized (so depends on its object alone, and
    is short)."""
    memo = _PROVENANCE
    same = _SAME_PROVENANCE
    scalars = _MEMO_REQUESTED
    fields = _provenance_fields
    out = []
    kept = True
    for name, entry in provenance.items():
        seen = same.get((name, id(entry)))
        if seen is not None and seen[0] is entry:
            out.append(seen[1])
            continue
        values = fields(entry)
        key = (name, values, type(values[2]))
        if key[2] not in scalars:  # an object or list requested: neither immutable nor hashable
            out.append(_provenance_entry(key))
            kept = False
            continue
        encoded = memo[key]
        out.append(encoded)
        if len(encoded) > MAX_MEMO_BYTES:  # not kept by the memo either
            kept = False
            continue
        if len(same) >= MEMO_ENTRIES:
            same.clear()
        same[name, id(entry)] = (entry, encoded)
    return out, kept


_BlockKey = tuple[tuple[str, ...], tuple[int, ...]]
_PROVENANCE_BLOCKS: Final[dict[_BlockKey, tuple[tuple[Provenance, ...], bytes]]] = {}
MAX_BLOCKS: Final = 512
"""Whole provenance maps kept (one to two kB each): one per product, mode and set of options a
caller's jobs keep setting, whatever values they give."""
MAX_BLOCK_BYTES: Final = 16 * 1024
"""A longer map (its records asked for long values) is not kept: 512 of them stay 8 MiB."""


def _provenance_block(provenance: Mapping[str, Provenance]) -> bytes:
    """Every `provenance` entry of ResolveResponse. The core hands out the same immutable
    records call after call, often the same map of them (a caller's value changes its option's
    value, not its provenance): such a map is written once, found by its names and records."""
    entries = tuple(provenance.values())
    key = (tuple(provenance), tuple(map(id, entries)))
    seen = _PROVENANCE_BLOCKS.get(key)
    if seen is not None and all(map(is_, seen[0], entries)):
        return seen[1]
    parts, kept = _provenances(provenance)
    encoded = b"".join(parts)
    if kept and len(encoded) <= MAX_BLOCK_BYTES:  # immutable records, their own bytes
        if len(_PROVENANCE_BLOCKS) >= MAX_BLOCKS:
            _PROVENANCE_BLOCKS.clear()
        _PROVENANCE_BLOCKS[key] = (entries, encoded)
    return encoded


def _diagnostics(diagnostics: Iterable[Diagnostic]) -> list[bytes]:
    memo = _DIAGNOSTICS
    fields = _diagnostic_fields
    return [memo[fields(d)] for d in diagnostics]


# --------------------------------------------------------------------------- the response


def write_response(resolution: Resolution) -> bytes:
    """The ResolveResponse bytes, written here; raises on anything it does not write (an
    unexpected type, a string that is not UTF-8, an int beyond a double)."""
    if type(resolution.ok) is not bool:
        raise UnsupportedValueError("ok")
    return b"".join(
        [
            b"\x08\x01" if resolution.ok else b"",
            _optional_text(b"\x12", resolution.product),
            field(3, b"".join(_options(resolution.options))),
            _provenance_block(resolution.provenance),
            *_diagnostics(resolution.diagnostics),
            *[_path_entry(name, path) for name, path in resolution.paths.items()],
            _optional_text(b"\x3a", resolution.catalog_version),
            _optional_text(b"\x42", resolution.policy_version),
            _optional_text(b"\x4a", resolution.fingerprint),
        ]
    )


def encode_resolution(resolution: Resolution) -> bytes:
    """The serialized ResolveResponse of `resolution` (the bytes of `resolution_to_proto`)."""
    try:
        return write_response(resolution)
    except Exception:  # the reference path encodes it, or raises what it always raised
        return resolution_to_proto(resolution).SerializeToString()
