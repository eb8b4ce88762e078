"""A bounded LRU of serialized answers, keyed by the raw request bytes and the policy version.

A resolution is a pure function of (request, catalog, policy), so a repeated request can be
answered with the bytes sent before. Only OK replies and INVALID_ARGUMENT replies (their status
and details) are kept; the bound is on entries and on bytes held.

A reply is kept from the second time its request is seen (a doorkeeper, as in TinyLFU or a CDN's
"min uses 2"): one-off requests, most of a launcher's traffic by count of distinct configs, would
otherwise fill the cache with replies nobody asks for again and evict the recurring ones. The
doorkeeper is a fixed table of 16-bit tags, so it costs the same memory whatever the traffic.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

import grpc

MAX_KEY_BYTES: Final = 64 * 1024
"""Requests larger than this are not cached (they are rare, and would crowd the cache out)."""
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
DOORKEEPER_SLOTS: Final = 1 << 16
"""Requests remembered as seen once (128 KiB); an older one is forgotten when its slot is
reused, and a tag collision (1 in 65,535) at worst admits a reply one sight early."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One reply as sent: OK with a payload, or a failure with its status details."""

    code: grpc.StatusCode
    payload: bytes = b""
    message: str = ""
    status_details: bytes = b""
    product: str = ""
    ok: bool = True
    codes: tuple[str, ...] = ()
    codes_counted: bool = False
    """The handler counted its items' diagnostics itself (a batch, a diff): `codes` is then
    only what the call's log line lists."""

    @property
    def size(self) -> int:
        return len(self.payload) + len(self.status_details) + len(self.message) + 200


class AnswerCache:
    def __init__(self, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, bytes], Answer] = OrderedDict()
        self._bytes = 0
        self._seen = array("H", bytes(2 * DOORKEEPER_SLOTS if max_entries else 0))
        self.hits = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, policy_version: str, request: bytes) -> Answer | None:
        if not self.max_entries or len(request) > MAX_KEY_BYTES:
            return None
        key = (policy_version, request)
        answer = self._entries.get(key)
        if answer is None:
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return answer

    def put(self, policy_version: str, request: bytes, answer: Answer) -> None:
        if not self.max_entries or len(request) > MAX_KEY_BYTES:
            return
        if answer.code not in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT):
            return
        key = (policy_version, request)
        size = answer.size + len(request)
        if size > self.max_bytes or not self._seen_before(key):
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size + len(request)
        self._entries[key] = answer
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            (_, old_request), evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size + len(old_request)

    def _seen_before(self, key: tuple[str, bytes]) -> bool:
        """True from a key's second sight; the first one only leaves its tag."""
        digest = hash(key)
        slot = digest & (DOORKEEPER_SLOTS - 1)
        tag = (digest >> 16) % 0xFFFF + 1  # never 0, the empty slot
        if self._seen[slot] == tag:
            return True
        self._seen[slot] = tag
        return False

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0
