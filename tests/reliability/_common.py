"""What the reliability tests share: the figures callback type and hand-written wire bytes."""

from __future__ import annotations

from collections.abc import Callable

Figures = Callable[..., str]
"""`figures(name, **values)`: records a test's one line of figures (see conftest.py)."""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, for messages protobuf itself would refuse to build."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload
