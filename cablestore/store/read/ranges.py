"""Read-side of the ``!recon`` view: the count and the sum of the hashes of any range of a channel's items.

Set reconciliation (docs/reconcile.md) fingerprints ranges of a channel's
items ``(timestamp, hash)``: the ``!chat`` rows.  A range is summed from the
whole time buckets inside it (``views/recon.py``: at most two short runs of
rows per granularity) and the items at its two edges, read from ``!chat``,
all from one snapshot: O(log n) rows whatever the range holds.
"""

from __future__ import annotations

from typing import Any

from cablestore.errors import QueryError
from cablestore.keyspace.keys import HASH_SIZE, channel_key, next_prefix
from cablestore.store.handle import Component
from cablestore.views import chat, recon

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
