"""An in-memory Bloom filter over the hashes that have tombstones.

Every post offered to the store must be checked for tombstones naming it
(``!deleted!<target>...``), and that is a prefix scan: LevelDB's own Bloom
filters only answer point lookups, so each check cost an iterator seek into
every level of the tree, more as the store grew.  Almost no post has a
tombstone, so this filter answers "certainly none" for nearly all of them
without touching the database.

Targets are BLAKE2b hashes, uniformly random, so the filter's bit positions
are slices of the hash itself: no hashing.  It is built from one key-only
scan of ``!deleted!`` when the store opens, learns every tombstone a write
transaction adds (before the commit: a false positive only costs the scan it
would have done anyway), and doubles in size, rescanning, when it fills.  A
removed tombstone stays in the filter until the next rebuild of the filter:
again only a false positive.  At 1M posts it holds ~70k targets in 256 KB.
"""

from __future__ import annotations

import plyvel

_PREFIX = b"!deleted!"
_PROBES = 4  # 4 slices of 32 bits from the target hash; ~1% false positives at 16 bits per entry
_BITS_PER_ENTRY = 16
_MIN_BITS = 1 << 16


class TombstoneFilter:
    """``might_have(target)``: False only if no tombstone names ``target``."""

    def __init__(self, db: plyvel.DB) -> None:
        self._db = db
        self._build(_MIN_BITS)

    def _build(self, bits: int) -> None:
        while True:  # streamed, never a set of every target; doubles while the scan overflows it
            self._mask = bits - 1
            self._bits = bytearray(bits >> 3)
            self._count = 0
            self._capacity = bits // _BITS_PER_ENTRY
            for key in self._db.iterator(prefix=_PREFIX, include_value=False):
                self._set(key[len(_PREFIX) : len(_PREFIX) + 32])
            if self._count <= self._capacity // 2:
                return
            bits *= 4

    def _positions(self, target: bytes):
        mask = self._mask
        for i in range(_PROBES):
            yield int.from_bytes(target[4 * i : 4 * i + 4], "big") & mask

    def _set(self, target: bytes) -> None:
        bits = self._bits
        for pos in self._positions(target):
            bits[pos >> 3] |= 1 << (pos & 7)
        self._count += 1

    def grow_if_full(self) -> None:
        """Rebuild a larger filter from the DB when this one is full.

        Call only between write transactions: the rebuild sees committed
        tombstones only.
        """
        if self._count > self._capacity:
            self._build((self._mask + 1) * 2)

    def add(self, target: bytes) -> None:
        """Remember that ``target`` may have a tombstone (call before writing it)."""
        self._set(target)

    def might_have(self, target: bytes) -> bool:
        """False only if no tombstone names ``target`` (True may be a false positive)."""
        bits, mask = self._bits, self._mask
        for i in range(0, 4 * _PROBES, 4):
            pos = int.from_bytes(target[i : i + 4], "big") & mask
            if not bits[pos >> 3] & (1 << (pos & 7)):
                return False
        return True
