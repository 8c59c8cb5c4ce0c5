"""Read-side of the ``!recon`` view: the count and the sum of the hashes of any range of a channel's items.

Set reconciliation (docs/reconcile.md) fingerprints ranges of a channel's
items ``(timestamp, hash)``: the ``!chat`` rows.  A range is summed from the
whole time buckets inside it (``views/recon.py``: at most two short runs of
rows per granularity) and the items at its two edges, read from ``!chat``,
all from one snapshot: O(log n) rows whatever the range holds.

:class:`StoreItems` answers what the reconciliation algorithm asks of one
side (:class:`cablestore.wire.reconcile.Items` holds a side's items in
memory, by position) from one snapshot: a position is known by a bound with
that many items below it, counted from the sums; a range's fingerprint is
its sum; the item at a position is found by descending the buckets' counts,
coarsest first, and reading the one fine bucket that holds it.  Only the
ranges that differ are read item by item: a scope held alike costs a few
rows whatever its size.  The channel state answer's few hashes are not
among the items.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cablestore.errors import CorruptRecordError, QueryError, ReconcileError
from cablestore.keyspace.keys import HASH_SIZE, channel_key, next_prefix
from cablestore.store.handle import Component
from cablestore.views import chat, recon
from cablestore.wire import reconcile as algorithm
from cablestore.wire.reconcile import INFINITY

NO_END = 1 << 64  # a bound's timestamp above every item: the range has no end
_MOD = 1 << 256


def _bound(bound: Any, what: str) -> tuple[int, bytes]:
    """``bound`` checked: ``(timestamp, hash prefix)``, the timestamp at most :data:`NO_END`, the prefix at most 32 bytes."""
    try:
        ts, prefix = bound
    except (TypeError, ValueError):
        raise QueryError(f"{what} must be a (timestamp, hash prefix) pair, got {bound!r}") from None
    if not isinstance(ts, int) or isinstance(ts, bool) or not 0 <= ts <= NO_END:
        raise QueryError(f"{what}'s timestamp must be an integer from 0 to 2**64, got {ts!r}")
    if not isinstance(prefix, bytes) or len(prefix) > HASH_SIZE or (ts == NO_END and prefix):
        raise QueryError(f"{what}'s hash prefix must be at most {HASH_SIZE} bytes (none at 2**64), got {prefix!r}")
    return ts, prefix


def _chat_key(chat_prefix: bytes, bound: tuple[int, bytes]) -> bytes:
    """Where a bound lies among a channel's ``!chat`` keys: its prefix padded with zero bytes."""
    ts, prefix = bound
    if ts >= NO_END:
        return next_prefix(chat_prefix)
    return chat_prefix + ts.to_bytes(8, "big") + prefix + bytes(HASH_SIZE - len(prefix))


def _padded(bound: tuple[int, bytes]) -> tuple[int, bytes]:
    """A bound compared with items: its prefix padded with zero bytes."""
    return bound[0], bound[1] + bytes(HASH_SIZE - len(bound[1]))


def range_sum(reader: Any, channel_escaped: bytes, lo: tuple[int, bytes], hi: tuple[int, bytes]) -> tuple[int, int]:
    """``(sum of hashes mod 2**256, count)`` of a channel's items from ``lo`` up to, not including, ``hi``.

    ``reader``: a plyvel DB or snapshot; ``channel_escaped``: ``<ch>`` as keys
    spell it.  A damaged ``!recon`` row raises
    :class:`cablestore.errors.CorruptRecordError` (``check`` reports it,
    ``reindex`` rewrites it).
    """
    chat_prefix = chat.escaped_prefix(channel_escaped)
    start, stop = _chat_key(chat_prefix, lo), _chat_key(chat_prefix, hi)
    if start >= stop:
        return 0, 0
    runs, edge_lo, edge_hi = recon.plan(lo[0], not lo[1], hi[0])
    if edge_lo is None:
        return _chat_sum(reader, start, stop)
    total, count = _chat_sum(reader, start, _chat_key(chat_prefix, (edge_lo, b"")))
    more, n = _chat_sum(reader, _chat_key(chat_prefix, (edge_hi, b"")), stop)
    total, count = total + more, count + n
    for shift, first, end in runs:
        rows = reader.iterator(start=recon.row_key(channel_escaped, shift, first), stop=recon.row_key(channel_escaped, shift, end), include_key=False)
        with rows:
            for value in rows:
                row_total, row_count = recon.decode(value)
                total, count = total + row_total, count + row_count
    return total % _MOD, count


def _chat_sum(reader: Any, start: bytes, stop: bytes) -> tuple[int, int]:
    total = count = 0
    if start < stop:
        with reader.iterator(start=start, stop=stop, include_value=False) as keys:
            for key in keys:
                total += int.from_bytes(key[-HASH_SIZE:], "little")
                count += 1
    return total % _MOD, count


_START = (0, b"")


class _Listing:
    """``items[lo:hi]``, ``items[i]`` and ``iter(items)`` of a :class:`StoreItems`, read from ``!chat``."""

    def __init__(self, owner: StoreItems) -> None:
        self._owner = owner

    def __getitem__(self, where: Any) -> Any:
        owner = self._owner
        if isinstance(where, slice):
            lo, hi = where.start or 0, len(owner) if where.stop is None else where.stop
            return owner.scan(owner.bound(lo), owner.bound(hi)) if lo < hi else []
        return owner.select(where)

    def __iter__(self) -> Any:
        return iter(self[0 : len(self._owner)])


class StoreItems:
    """One channel's items in a snapshot of a store, for :func:`cablestore.wire.reconcile.respond` and ``Initiator``.

    ``reader``: a plyvel snapshot (or DB) that stays open while this is used;
    ``channel_escaped``: ``<ch>`` as keys spell it.  ``reads`` counts the
    LevelDB rows read, to show what a reconciliation cost.
    """

    def __init__(self, reader: Any, channel_escaped: bytes) -> None:
        self._reader = reader
        self._channel = channel_escaped
        self._chat = chat.escaped_prefix(channel_escaped)
        self.reads = 0
        total, self._n = self._sum(_START, INFINITY)
        if self._n > algorithm.MAX_ITEMS:
            raise ReconcileError(f"more than {algorithm.MAX_ITEMS} items to reconcile at once")
        self._bounds: dict[int, tuple[int, bytes]] = {0: _START, self._n: INFINITY}  # position -> a bound with that many items below
        self.items = _Listing(self)
        # What select read, kept for the reconciliation (a split asks for many positions in the same buckets):
        self._levels: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (shift, window start) -> (bucket, count) rows
        self._fine: dict[int, list[tuple[int, bytes]]] = {}  # fine bucket (timestamp >> SHIFTS[0]) -> its items

    def __len__(self) -> int:
        return self._n

    def _sum(self, lo: tuple[int, bytes], hi: tuple[int, bytes]) -> tuple[int, int]:
        """:func:`range_sum`, its edges taken from the fine buckets read once a reconciliation (:meth:`_bucket`)."""
        low, high = _padded(lo), _padded(hi)
        if low >= high:
            return 0, 0
        runs, edge_lo, edge_hi = recon.plan(lo[0], not lo[1], hi[0])
        edges = [(low, high)] if edge_lo is None else [(low, (edge_lo, bytes(HASH_SIZE))), ((edge_hi, bytes(HASH_SIZE)), high)]
        total = count = 0
        fine = recon.SHIFTS[0]
        for a, b in edges:
            last = (min(b[0], NO_END) - (0 if any(b[1]) else 1)) >> fine  # the fine bucket of the last item below b
            for bucket in range(a[0] >> fine, last + 1):
                for item in self._bucket(bucket):
                    if a <= item < b:
                        total += int.from_bytes(item[1], "little")
                        count += 1
        for shift, first, stop in runs:
            with self._reader.iterator(start=recon.row_key(self._channel, shift, first), stop=recon.row_key(self._channel, shift, stop), include_key=False) as rows:
                for value in rows:
                    self.reads += 1
                    row_total, row_count = recon.decode(value)
                    total, count = total + row_total, count + row_count
        return total % _MOD, count

    def _bucket(self, bucket: int) -> list[tuple[int, bytes]]:
        """The items of one fine bucket, read from ``!chat`` once a reconciliation."""
        found = self._fine.get(bucket)
        if found is None:
            fine = recon.SHIFTS[0]
            found = self._fine[bucket] = self.scan((bucket << fine, b""), ((bucket + 1) << fine, b""))
        return found

    def index(self, bound: tuple[int, bytes]) -> int:
        """How many items lie below ``bound`` (remembered, so positions map back to bounds)."""
        if bound == INFINITY:
            return self._n
        at = self._sum(_START, bound)[1]
        self._bounds.setdefault(at, bound)
        return at

    def bound(self, at: int) -> tuple[int, bytes]:
        """A bound with ``at`` items below it: one :meth:`index` answered, or the item at ``at`` itself."""
        found = self._bounds.get(at)
        if found is None:
            found = self._bounds[at] = self.select(at)
        return found

    def fingerprint(self, lo: int, hi: int) -> bytes:
        """The fingerprint of the items at positions ``[lo, hi)``."""
        total, count = self._sum(self.bound(lo), self.bound(hi))
        if count != hi - lo:
            raise CorruptRecordError(f"the !recon rows of a channel count {count} items where {hi - lo} are")
        return algorithm.fingerprint(total, count)

    def scan(self, lo: tuple[int, bytes], hi: tuple[int, bytes]) -> list[tuple[int, bytes]]:
        """The items from bound ``lo`` up to bound ``hi``, read from ``!chat``."""
        out = []
        with self._reader.iterator(start=_chat_key(self._chat, lo), stop=_chat_key(self._chat, hi), include_value=False) as keys:
            for key in keys:
                out.append((int.from_bytes(key[-40:-32], "big"), key[-HASH_SIZE:]))
        self.reads += len(out) + 1
        return out

    def select(self, at: int) -> tuple[int, bytes]:
        """The item at position ``at``: the buckets' counts descended coarsest first, then its fine bucket read from ``!chat``."""
        if not 0 <= at < self._n:
            raise IndexError(at)
        left, window = at, (0, NO_END)
        for shift in reversed(recon.SHIFTS):
            for bucket, count in self._rows(shift, window):
                if left < count:
                    window = (bucket << shift, (bucket + 1) << shift)
                    break
                left -= count
            else:
                raise CorruptRecordError(f"the !recon rows of a channel hold fewer than {at + 1} items")
        found = self._bucket(window[0] >> recon.SHIFTS[0])
        if left >= len(found):
            raise CorruptRecordError("a !recon row counts more items than its bucket holds")
        return found[left]

    def _rows(self, shift: int, window: tuple[int, int]) -> list[tuple[int, int]]:
        """``(bucket, count)`` of the rows of granularity ``shift`` within ``window``, read once a reconciliation."""
        found = self._levels.get((shift, window[0]))
        if found is None:
            start = recon.row_key(self._channel, shift, window[0] >> shift)
            stop = next_prefix(recon.level_prefix(self._channel, shift)) if window[1] >= NO_END else recon.row_key(self._channel, shift, window[1] >> shift)
            with self._reader.iterator(start=start, stop=stop) as rows:
                found = [(int.from_bytes(key[-8:], "big"), recon.decode(value)[1]) for key, value in rows]
            self.reads += len(found) + 1
            self._levels[(shift, window[0])] = found
        return found

    def between(self, at: int) -> tuple[int, bytes]:
        """A bound above item ``at - 1`` and at or below item ``at``: one :meth:`index` answered, or the shortest."""
        if at not in self._bounds:
            self._bounds[at] = algorithm.bound_between(self.select(at - 1), self.select(at))
        return self._bounds[at]


class RangeQueries(Component):
    """Range sums of a channel's items, for set reconciliation."""

    def range_sum(self, channel: str, lo: tuple[int, bytes] = (0, b""), hi: tuple[int, bytes] = (NO_END, b"")) -> tuple[int, int]:
        """``(sum, count)`` of the channel's ``!chat`` items ``(timestamp, hash)`` from bound ``lo`` up to bound ``hi``.

        A bound is ``(timestamp, hash prefix)`` as in docs/reconcile.md: it
        lies below every item of a later timestamp, or of that timestamp and
        a hash at or above the prefix padded with zero bytes.  The sum is of
        the hashes read as little-endian integers, mod 2**256
        (``cablestore.wire.reconcile.fingerprint(sum, count)`` is the
        range's fingerprint).  Reads O(log n) rows of one snapshot.
        """
        if not isinstance(channel, str):
            raise QueryError(f"channel must be a str, got {type(channel).__name__}")
        lo, hi = _bound(lo, "lo"), _bound(hi, "hi")
        with self.db.snapshot() as snap:
            return range_sum(snap, channel_key(channel), lo, hi)

    @contextmanager
    def range_items(self, channel: str) -> Iterator[StoreItems]:
        """The channel's items as set reconciliation reads them (:class:`StoreItems`), over one snapshot held while the block runs.

        The block is a call in flight: ``close()`` waits for it.
        """
        if not isinstance(channel, str):
            raise QueryError(f"channel must be a str, got {type(channel).__name__}")
        with self._handle.gate.call(self.path), self.db.snapshot() as snap:
            yield StoreItems(snap, channel_key(channel))
