"""In-memory Bloom filters over hashes named by key prefixes: "certainly none" without a seek.

LevelDB's own Bloom filters answer point lookups only; a question about a
prefix ("does any tombstone name this hash?", "does any stored post link to
it?") is an iterator seek into every level of the tree, 30-40 µs in a
million-post store, and more as the store grows.  Almost every post offered
to the store has no tombstone and is linked by nothing yet, so these filters
answer "certainly none" for nearly all of them without touching the
database:

- :func:`tombstone_filter`: the targets of ``!deleted!<target><by>``.
- :func:`link_filter`: the targets of ``!rev!<target>l<hash>`` (a stored post
  ``<hash>`` links to ``<target>``; see ``views/links.py``).

The hashes are BLAKE2b, uniformly random, so the filter's bit positions are
slices of the hash itself: no hashing.  A filter is built from one key-only
scan when the store first writes, learns every hash a write transaction adds
(before the commit: a false positive only costs the seek it would have done
anyway), and doubles in size, rescanning, when it fills.  A removed entry
stays in the filter until the next rebuild of the filter: again only a false
positive.  Whatever writes these keys under a store's transactions (a
repair, a reindex) must drop the filters (:meth:`cablestore.store.write.writer.Writer.forget_caches`).  At 1M
posts the tombstone filter holds ~70k targets in 256 KB; the link filter
~850k in 2 MB, built by a 0.6 s scan: so the link filter is built only once
a store has asked it :data:`LINK_FILTER_AFTER` questions (a few seeks'
worth of time), and a command that writes one post never pays the scan.
"""

from __future__ import annotations

from collections.abc import Callable

import plyvel

from cablestore.compiled import native as _native
from cablestore.keyspace.keys import DELETED, REVERSE

_PROBES = 4  # 4 slices of 32 bits from the hash; ~1% false positives at 16 bits per entry
_BITS_PER_ENTRY = 16
_MIN_BITS = 1 << 16
LINK_FILTER_AFTER = 2_000  # questions answered by seeking (~30-40 µs each at 1M posts) before the link filter is built


class HashFilter:
    """``might_have(h)``: False only if no key under ``prefix`` names the 32-byte hash ``h`` right after the prefix."""

    def __init__(self, db: plyvel.DB, prefix: bytes) -> None:
        self._db, self._prefix = db, prefix
        self._build(_MIN_BITS)

    def _build(self, bits: int) -> None:
        start = len(self._prefix)
        while True:  # streamed, never a set of every hash; grows while the scan overflows it
            self._mask = bits - 1
            self._bits = bytearray(bits >> 3)
            self._count = 0
            self._capacity = bits // _BITS_PER_ENTRY
            last = None
            for key in self._db.iterator(prefix=self._prefix, include_value=False):
                # A key too short to name a hash (damaged: `check` reports it) names none.
                if len(key) >= start + 32:
                    h = key[start : start + 32]
                    if h != last:  # a hash's keys are adjacent: count it once
                        self._set(h)
                        last = h
            if self._count <= self._capacity // 2:
                return
            bits *= 4

    def _set(self, h: bytes) -> None:
        if _native is not None:  # the same bits, compiled (cablestore.compiled)
            _native.filter_set(self._bits, self._mask, h, _PROBES)
            self._count += 1
            return
        bits, mask = self._bits, self._mask
        for i in range(0, 4 * _PROBES, 4):
            pos = int.from_bytes(h[i : i + 4], "big") & mask
            bits[pos >> 3] |= 1 << (pos & 7)
        self._count += 1

    def grow_if_full(self) -> None:
        """Rebuild a larger filter from the DB when this one is full.

        Call only between write transactions: the rebuild sees committed keys only.
        """
        if self._count > self._capacity:
            self._build((self._mask + 1) * 2)

    def add(self, h: bytes) -> None:
        """Remember that a key may name ``h`` (call before writing it)."""
        self._set(h)

    def might_have(self, h: bytes) -> bool:
        """False only if no key names ``h`` (True may be a false positive)."""
        if _native is not None:
            return _native.filter_test(self._bits, self._mask, h, _PROBES)
        bits, mask = self._bits, self._mask
        for i in range(0, 4 * _PROBES, 4):
            pos = int.from_bytes(h[i : i + 4], "big") & mask
            if not bits[pos >> 3] & (1 << (pos & 7)):
                return False
        return True


def tombstone_filter(db: plyvel.DB) -> HashFilter:
    """Which hashes a tombstone (``!deleted!<target><by>``) may name."""
    return HashFilter(db, DELETED)


class LazyFilter:
    """A :class:`HashFilter` made by ``make()`` only after ``after`` questions; until then every answer is "maybe"."""

    def __init__(self, make: Callable[[], HashFilter], after: int) -> None:
        self._make, self._after, self._asked = make, after, 0
        self._filter: HashFilter | None = None

    def might_have(self, h: bytes) -> bool:
        """False only if no key names ``h``; True ("maybe") for the first ``after`` questions."""
        if self._filter is None:
            self._asked += 1
            if self._asked <= self._after:
                return True  # the caller seeks, as it would without a filter
            self._filter = self._make()  # sees the committed keys: what every answer is about
        return self._filter.might_have(h)

    def add(self, h: bytes) -> None:
        """Remember that a key may name ``h`` (once built: a filter built later scans what this write commits)."""
        if self._filter is not None:
            self._filter.add(h)

    def grow_if_full(self) -> None:
        """:meth:`HashFilter.grow_if_full`, once built."""
        if self._filter is not None:
            self._filter.grow_if_full()


def link_filter(db: plyvel.DB) -> LazyFilter:
    """Which hashes a stored post may link to (``!rev!<target>l<hash>``).

    Built after :data:`LINK_FILTER_AFTER` questions (see the module's docstring).
    Every ``!rev!`` key is a linker's: format 1's own ``!rev!<hash>`` entry of
    a post never reaches an open store (a format-1 store is refused until
    ``cablestore migrate`` reindexes it, which drops those rows).
    """
    return LazyFilter(lambda: HashFilter(db, REVERSE), LINK_FILTER_AFTER)


__all__ = ["LINK_FILTER_AFTER", "HashFilter", "LazyFilter", "link_filter", "tombstone_filter"]
