"""``!recon``: per channel, the count and the sum of the hashes of its ``!chat`` rows, per time bucket.

What set reconciliation (docs/reconcile.md) asks of a store is the
fingerprint of a range of a channel's items ``(timestamp, hash)``: their
count and the sum of their hashes (little-endian, mod 2**256).  Sums add, so
the store keeps them per time bucket at three granularities and a range's
sum is its whole buckets (a few rows per level) plus the items at its two
edges, read from ``!chat``: O(log n) rows, not every hash.

    !recon!<ch><shift><bucket> -> <count u64 BE><sum 32 bytes LE>

``<shift>`` is one byte, the bucket's width as a power of two of
milliseconds (:data:`SHIFTS`: about 17 minutes, 19 hours, 50 days);
``<bucket>`` is ``timestamp >> shift`` as 8 big-endian bytes.  The items are
exactly the channel's ``!chat`` rows (post/texts, and the post/deletes listed
under the channel), so the rows are a function of that view: a post adds
its hash to the buckets of each of its ``!chat`` rows and its removal
subtracts it, in the same WriteBatch (:func:`add` per post into the finest
buckets, :func:`expand` once a batch); a bucket left empty has no row.
Unlike every other view the rows are sums over many posts: the rebuild
folds each post's :func:`add` into a dict and renders it once (:func:`rows`),
and the bulk reindex reads them off the ``!chat`` rows it wrote
(:func:`rows_from_chat`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from cablestore.compiled import native as _native
from cablestore.errors import CorruptRecordError
from cablestore.keyspace import keys
from cablestore.wire.codec import DELETE, TEXT

from .base import View

NAME = "recon"
PREFIX = keys.RECON
SHIFTS = (20, 26, 32)  # bucket widths, finest first: 2**20 ms ~ 17.5 min, 2**26 ~ 18.6 h, 2**32 ~ 49.7 days
_FINEST = SHIFTS[0]
_CHAT = keys.CHAT
_CHAT_SIZE = len(_CHAT)
_MONO = keys.MONO_SIZE
_ROW_MIN = _CHAT_SIZE + _MONO  # a !chat key names a channel, a timestamp and a hash
_MOD = 1 << 256
_LEVELS = tuple((bytes((shift,)), shift - _FINEST) for shift in SHIFTS)  # each granularity's shift byte, and its bucket from the finest
VALUE_SIZE = 40
ACC_SIZE = 40  # a finest bucket's accumulator while a batch adds to it (see add)


def row_key(channel_escaped: bytes, shift: int, bucket: int) -> bytes:
    """The row of bucket ``bucket`` (``timestamp >> shift``) of a channel (``<ch>`` escaped)."""
    return PREFIX + channel_escaped + bytes((shift,)) + bucket.to_bytes(8, "big")


def level_prefix(channel_escaped: bytes, shift: int) -> bytes:
    """Every row of one granularity of a channel, in bucket order."""
    return PREFIX + channel_escaped + bytes((shift,))


def encode(total: int, count: int) -> bytes:
    """A row's value: the count (u64 big-endian) then the sum mod 2**256 (32 bytes little-endian)."""
    return count.to_bytes(8, "big") + (total % _MOD).to_bytes(32, "little")


def decode(value: bytes) -> tuple[int, int]:
    """``(sum, count)`` of a row's value; a damaged one raises :class:`cablestore.errors.CorruptRecordError`."""
    if len(value) != VALUE_SIZE:
        raise CorruptRecordError(f"a !recon row of {len(value)} bytes, not {VALUE_SIZE}")
    return int.from_bytes(value[8:], "little"), int.from_bytes(value[:8], "big")


def add(fine: dict, post_type: int, entries, sign: int = 1, in_view_order: bool = False) -> None:
    """Add (``sign`` 1) or take away (-1) the hashes of a post's ``!chat`` rows to ``fine``, the finest buckets' sums.

    ``post_type``: the post's type; ``entries``: its derived entries
    (``views.entries``), as pairs or bare keys: only its ``!chat`` rows
    count.  ``fine``: a finest bucket's group (:func:`group`) -> its
    accumulator (:data:`ACC_SIZE` bytes: the sum mod 2**256 little-endian,
    then the count as a signed 64-bit little-endian), so the compiled twin
    adds a hash without making a Python int; :func:`expand` makes every
    granularity's rows of it.  Only the finest bucket is touched per post
    (the hot path of ingest).  ``in_view_order``: ``entries`` lists each
    view's rows together (as ``views.entries`` does), so the rows after the
    ``!chat`` ones are not looked at.
    """
    if post_type != TEXT and post_type != DELETE:
        return
    seen = False
    for entry in entries:
        key = entry if type(entry) is bytes else entry[0]
        if key[:_CHAT_SIZE] != _CHAT or len(key) < _ROW_MIN:
            if seen and in_view_order:
                return
            continue
        seen = True
        value = int.from_bytes(key[-32:], "little")
        _accumulate(fine, group(key), value if sign == 1 else -value, sign)


def group(chat_key: bytes) -> bytes:
    """The finest bucket of a ``!chat`` key: its channel's ``!chat`` prefix, then ``timestamp >> SHIFTS[0]`` as 8 big-endian bytes."""
    return chat_key[:-_MONO] + (int.from_bytes(chat_key[-_MONO:-32], "big") >> _FINEST).to_bytes(8, "big")


def _accumulate(fine: dict, key: bytes, total: int, count: int) -> None:
    """Add a sum and a count to the accumulator ``fine[key]`` (made if missing)."""
    acc = fine.get(key)
    if acc is None:
        acc = fine[key] = bytearray(ACC_SIZE)
    held_total, held_count = accumulated(acc)
    acc[:] = ((held_total + total) % _MOD).to_bytes(32, "little") + (held_count + count).to_bytes(8, "little", signed=True)


def accumulated(acc) -> tuple[int, int]:
    """``(sum, count)`` of an accumulator of ``fine`` (see :func:`add`)."""
    return int.from_bytes(acc[:32], "little"), int.from_bytes(acc[32:], "little", signed=True)


add_py = add
if _native is not None:  # the same sums, compiled (cablestore.compiled): the per-post part of ingest's cost of this view
    _native.bind_recon(_CHAT, _FINEST)
    add = _native.recon_add


def merge(fine: dict, other: dict) -> None:
    """Add the finest buckets' sums ``other`` into ``fine``."""
    for key, acc in other.items():
        _accumulate(fine, key, *accumulated(acc))


def expand(fine: dict) -> dict:
    """Every granularity's rows (row key -> ``[sum, count]``) of the finest buckets' sums ``fine``."""
    out: dict = {}
    get = out.get
    for key, acc in fine.items():
        total, count = accumulated(acc)
        if not total and not count:
            continue
        head, bucket = PREFIX + key[_CHAT_SIZE:-8], int.from_bytes(key[-8:], "big")
        for shift_byte, up in _LEVELS:
            row = head + shift_byte + (bucket >> up).to_bytes(8, "big")
            held = get(row)
            if held is None:
                out[row] = [total, count]
            else:
                held[0] += total
                held[1] += count
    return out


def merged(value: bytes | None, total: int, count: int) -> bytes | None:
    """A row's new value once ``total`` and ``count`` are added to its stored ``value``; None: the bucket is empty (no row).

    A damaged stored value counts as empty (``check`` reports it, ``reindex`` rewrites it).
    """
    if value is not None and len(value) == VALUE_SIZE:
        held_total, held_count = decode(value)
        total, count = total + held_total, count + held_count
    return encode(total, count) if count > 0 else None


def write_rows(fine: dict, cached: dict | None, get, writes: dict, written: dict) -> None:
    """A batch's rows: every granularity's row of the finest buckets' sums ``fine`` added to its committed value.

    ``cached``: row -> its committed value (None: no row), as far as known
    (None: nothing known); ``get(row)``: the committed value of a row not in
    it.  Each new value (None: a delete) goes into ``writes`` and
    ``written``.  A row whose delta is nothing is left as it is.
    """
    for row, (total, count) in expand(fine).items():
        if total % _MOD or count:
            value = cached.get(row, _UNKNOWN) if cached is not None else _UNKNOWN
            writes[row] = written[row] = merged(get(row) if value is _UNKNOWN else value, total, count)


_UNKNOWN = object()
write_rows_py = write_rows
if _native is not None:  # the same rows, compiled (cablestore.compiled): a post a batch rewrites three of them
    _native.bind_recon_rows(PREFIX, tuple(up for _, up in _LEVELS), tuple(shift_byte[0] for shift_byte, _ in _LEVELS))
    write_rows = _native.recon_write


def rows(fine: dict) -> list[tuple[bytes, bytes]]:
    """The rows of the finest buckets' sums ``fine`` (see :func:`add`), at every granularity, sorted; empty buckets have none."""
    return [(key, encode(total, count)) for key, (total, count) in sorted(expand(fine).items()) if count > 0]


def rows_from_chat(chat_keys: Iterable[bytes]) -> Iterator[tuple[bytes, bytes]]:
    """Every row, from every ``!chat`` key of a store in key order (the bulk reindex): one pass, one open bucket per level."""
    open_rows: dict[int, list] = {}  # shift -> [row key, sum, count]
    start = len(_CHAT)
    for key in chat_keys:
        ch, ts, h = key[start:-_MONO], int.from_bytes(key[-_MONO:-32], "big"), int.from_bytes(key[-32:], "little")
        for shift in SHIFTS:
            key = PREFIX + ch + bytes((shift,)) + (ts >> shift).to_bytes(8, "big")
            held = open_rows.get(shift)
            if held is not None and held[0] == key:
                held[1] += h
                held[2] += 1
                continue
            if held is not None:
                yield held[0], encode(held[1], held[2])
            open_rows[shift] = [key, h, 1]
    for key, total, count in open_rows.values():
        yield key, encode(total, count)


# --- a range as whole buckets and edges -------------------------------------------------------------
def plan(lo_ts: int, lo_exact: bool, hi_ts: int) -> tuple[list[tuple[int, int, int]], int | None, int | None]:
    """How to sum the items of a range from ``lo_ts`` up to ``hi_ts`` (``hi_ts`` 2**64: no end).

    ``lo_exact``: the range starts exactly at ``lo_ts`` (a bound without a
    hash prefix).  Returns
    ``(buckets, edge_lo_end, edge_hi_start)``: the whole buckets, as
    ``(shift, first, stop)`` runs of rows; the items below the timestamp
    ``edge_lo_end`` and from ``edge_hi_start`` on are read from ``!chat``
    (None: nothing whole, read the whole range from ``!chat``).  At most two
    runs per granularity, each of fewer than 64 rows but at the coarsest.
    """
    fine = SHIFTS[0]
    first = (lo_ts >> fine) + (1 if lo_ts & ((1 << fine) - 1) or not lo_exact else 0)
    stop = hi_ts >> fine
    if first >= stop:
        return [], None, None
    edge_lo, edge_hi = first << fine, stop << fine
    runs = []
    for shift, upper in zip(SHIFTS, SHIFTS[1:], strict=False):
        ratio = 1 << (upper - shift)
        up_first, up_stop = -(-first // ratio), stop // ratio
        if up_first >= up_stop:
            break
        if first < up_first * ratio:
            runs.append((shift, first, up_first * ratio))
        if up_stop * ratio < stop:
            runs.append((shift, up_stop * ratio, stop))
        first, stop, fine = up_first, up_stop, upper
    runs.append((fine, first, stop))
    return runs, edge_lo, edge_hi


class ReconView(View):
    """The ``recon`` view: :data:`VIEW`.  Its rows are sums over posts (:func:`add`), not per-post entries."""

    NAME, PREFIX = NAME, PREFIX


VIEW = ReconView()
