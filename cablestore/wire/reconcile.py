"""Range-based set reconciliation of posts (docs/reconcile.md): the message codec and the algorithm, sans I/O.

Two peers hold sets of items, ``(timestamp, post hash)`` pairs sorted by
timestamp then hash.  The initiator splits its set into ranges and sends a
fingerprint of each; the other side answers each range with "same" (skip),
its own finer fingerprints where they differ, or the whole list of its
hashes where a range is small; the initiator does the same with what comes
back, until every range agrees or was listed.  The initiator then knows the
hashes it lacks (``need``) and those only it holds (``have``).  The scheme
is A. Meyer's range-based set reconciliation (arXiv 2212.13567), in the
message layout of negentropy protocol v1 (hoytech/negentropy) but with
Cable's LEB128 varints (64-bit safe) and a BLAKE2b fingerprint; see
docs/reconcile.md for the byte layout.

Both sides are stateless between messages except for the initiator's
``have``/``need``: the side that answers (:func:`respond`) needs only its
items.  Every message is bounded (:data:`MAX_RANGES`, :data:`MAX_IDS`,
its bytes by the Cable frame), bounds must increase and the last range
must end at infinity, so a peer that lies about fingerprints can make a
reconciliation longer, never wrong (the posts it leads to are fetched and
checked like any other) and never longer than :data:`MAX_ROUNDS`.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cablestore.errors import ReconcileError
from cablestore.wire.fields import HASH_SIZE, encode_varint, read_varint

VERSION = 0x01  # first byte of every reconciliation message
SKIP, FINGERPRINT, ID_LIST, HAVE_BITS, ID_PREFIXES = 0, 1, 2, 3, 4
ID_PREFIX_SIZE = 8  # bytes of each id the initiator lists (the answering side only matches them; 2**-64 a false match)
FINGERPRINT_SIZE = 16
BUCKETS = 16  # ranges a differing range is split into
ID_LIST_THRESHOLD = 16  # a range of at most this many items is listed, not split
MAX_RANGES = 8192  # ranges in one message (about 200 KB)
MAX_IDS = 8192  # hashes listed in one message (256 KB)
MAX_ROUNDS = 32  # messages the initiator sends in one reconciliation (log16 of 2**64 is 16)
MAX_ITEMS = 1 << 24  # items one side reconciles at once
INFINITY = (1 << 64, b"")  # the upper bound of the last range: above every item
_MOD = 1 << 256


@dataclass(frozen=True)
class Range:
    """One range of a message: its exclusive upper bound ``(timestamp, hash prefix)`` and what it carries."""

    upper: tuple[int, bytes]
    mode: int
    fingerprint: bytes = b""
    ids: tuple[bytes, ...] = ()
    held: tuple[bool, ...] = ()  # HAVE_BITS: which of the ids the other side listed this side holds, in their order


def listing(upper: tuple[int, bytes], hashes: Sequence[bytes], prefixes: bool) -> Range:
    """A small range listed: its hashes whole (the answering side's: the initiator fetches what it lacks by them) or,
    from the initiator, their first :data:`ID_PREFIX_SIZE` bytes (the answering side only matches them against its own)."""
    if prefixes:
        return Range(upper, ID_PREFIXES, ids=tuple(h[:ID_PREFIX_SIZE] for h in hashes))
    return Range(upper, ID_LIST, ids=tuple(hashes))


def fingerprint(total: int, count: int) -> bytes:
    """The fingerprint of a range: BLAKE2b-128 of the sum of its hashes (little-endian, mod 2**256) and its count."""
    return hashlib.blake2b((total % _MOD).to_bytes(32, "little") + encode_varint(count), digest_size=FINGERPRINT_SIZE).digest()


# --- codec -------------------------------------------------------------------------------------------
def encode(ranges: Sequence[Range]) -> bytes:
    """A message: the version byte, then each range (bound, mode, payload); bound timestamps are deltas, 0 for infinity."""
    out = bytearray([VERSION])
    last = 0
    for r in ranges:
        ts, prefix = r.upper
        if (ts, prefix) == INFINITY:
            out += encode_varint(0) + encode_varint(0)
        else:
            out += encode_varint(ts - last + 1) + encode_varint(len(prefix)) + prefix
            last = ts
        out += encode_varint(r.mode)
        if r.mode == FINGERPRINT:
            out += r.fingerprint
        elif r.mode == ID_LIST:
            out += encode_varint(len(r.ids)) + b"".join(r.ids)
        elif r.mode == ID_PREFIXES:
            out += encode_varint(len(r.ids[0]) if r.ids else ID_PREFIX_SIZE) + encode_varint(len(r.ids)) + b"".join(r.ids)
        elif r.mode == HAVE_BITS:
            bits = bytearray((len(r.held) + 7) // 8)
            for i, held in enumerate(r.held):
                if held:
                    bits[i // 8] |= 1 << (i % 8)
            out += encode_varint(len(r.held)) + bits + encode_varint(len(r.ids)) + b"".join(r.ids)
    return bytes(out)


def decode(buf: bytes) -> list[Range]:
    """The ranges of a message; a malformed one (or one over the limits) raises :class:`cablestore.errors.ReconcileError`."""
    if not buf or buf[0] != VERSION:
        raise ReconcileError(f"not a reconciliation message of version {VERSION}")
    pos, last, ranges, ids = 1, 0, [], 0
    try:
        while pos < len(buf):
            if len(ranges) >= MAX_RANGES:
                raise ReconcileError(f"more than {MAX_RANGES} ranges in one message")
            delta, pos = read_varint(buf, pos)
            size, pos = read_varint(buf, pos)
            if size > HASH_SIZE or pos + size > len(buf):
                raise ReconcileError(f"a bound's hash prefix of {size} bytes")
            prefix, pos = bytes(buf[pos : pos + size]), pos + size
            if delta == 0:
                if size:
                    raise ReconcileError("an infinite bound with a hash prefix")
                upper = INFINITY
            else:
                last = last + delta - 1
                upper = (last, prefix)
            mode, pos = read_varint(buf, pos)
            if mode == FINGERPRINT:
                if pos + FINGERPRINT_SIZE > len(buf):
                    raise ReconcileError("a fingerprint cut short")
                ranges.append(Range(upper, mode, bytes(buf[pos : pos + FINGERPRINT_SIZE])))
                pos += FINGERPRINT_SIZE
            elif mode == ID_PREFIXES:
                size, pos = read_varint(buf, pos)
                count, pos = read_varint(buf, pos)
                ids += count
                if not 1 <= size <= HASH_SIZE or ids > MAX_IDS or pos + count * size > len(buf):
                    raise ReconcileError(f"{count} id prefixes of {size} bytes (1 to {HASH_SIZE}; at most {MAX_IDS} ids a message, within its bytes)")
                ranges.append(Range(upper, mode, ids=tuple(bytes(buf[p : p + size]) for p in range(pos, pos + count * size, size))))
                pos += count * size
            elif mode in (ID_LIST, HAVE_BITS):
                held: tuple[bool, ...] = ()
                if mode == HAVE_BITS:
                    n, pos = read_varint(buf, pos)
                    if n > MAX_IDS or pos + (n + 7) // 8 > len(buf):
                        raise ReconcileError(f"a bitfield of {n} bits (at most {MAX_IDS}, within the message's bytes)")
                    held = tuple(bool(buf[pos + i // 8] >> (i % 8) & 1) for i in range(n))
                    pos += (n + 7) // 8
                count, pos = read_varint(buf, pos)
                ids += count
                if ids > MAX_IDS or pos + count * HASH_SIZE > len(buf):
                    raise ReconcileError(f"an id list of {count} hashes (at most {MAX_IDS} a message, within its bytes)")
                listed = tuple(bytes(buf[p : p + HASH_SIZE]) for p in range(pos, pos + count * HASH_SIZE, HASH_SIZE))
                ranges.append(Range(upper, mode, ids=listed, held=held))
                pos += count * HASH_SIZE
            elif mode == SKIP:
                ranges.append(Range(upper, mode))
            else:
                raise ReconcileError(f"unknown range mode {mode}")
    except ReconcileError:
        raise
    except Exception as exc:  # a varint cut short or too long: DecodeError
        raise ReconcileError(f"malformed reconciliation message: {exc}") from exc
    bounds = [_key(r.upper) for r in ranges]
    if not ranges or ranges[-1].upper != INFINITY or any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
        raise ReconcileError("ranges must have increasing bounds, the last one infinite")
    return ranges


def bound_between(below: tuple[int, bytes], at: tuple[int, bytes]) -> tuple[int, bytes]:
    """The shortest bound above the item ``below`` and at or below the next item ``at``: its timestamp alone if
    theirs differ, else with the shortest prefix of ``at``'s hash that differs from ``below``'s."""
    (ts_a, a), (ts_b, b) = below, at
    if ts_a != ts_b:
        return (ts_b, b"")
    shared = next((i for i in range(HASH_SIZE) if a[i] != b[i]), HASH_SIZE - 1)
    return (ts_b, b[: shared + 1])


# --- items -------------------------------------------------------------------------------------------
def _key(bound: tuple[int, bytes]) -> tuple[int, bytes]:
    """A bound as an item key: its prefix padded with zero bytes (the smallest hash with that prefix)."""
    ts, prefix = bound
    return (ts, prefix + bytes(HASH_SIZE - len(prefix)))


class Items:
    """One side's items, sorted, with prefix sums so any range's fingerprint is two bisections and a subtraction."""

    def __init__(self, items: Iterable[tuple[int, bytes]]) -> None:
        self.items = sorted(set(items))
        if len(self.items) > MAX_ITEMS:
            raise ReconcileError(f"more than {MAX_ITEMS} items to reconcile at once")
        sums, total = [0], 0
        for _, h in self.items:
            if len(h) != HASH_SIZE:
                raise ReconcileError(f"an item's hash has {len(h)} bytes, not {HASH_SIZE}")
            total = (total + int.from_bytes(h, "little")) % _MOD
            sums.append(total)
        self._sums = sums

    def __len__(self) -> int:
        return len(self.items)

    def index(self, bound: tuple[int, bytes]) -> int:
        """How many items lie below ``bound``."""
        return len(self.items) if bound == INFINITY else bisect.bisect_left(self.items, _key(bound))

    def fingerprint(self, lo: int, hi: int) -> bytes:
        """The fingerprint of items ``[lo, hi)``."""
        return fingerprint(self._sums[hi] - self._sums[lo], hi - lo)

    def between(self, i: int) -> tuple[int, bytes]:
        """The shortest bound above item ``i - 1`` and at or below item ``i``: where a split before item ``i`` goes."""
        return bound_between(self.items[i - 1], self.items[i])

    def split(self, lo: int, hi: int, upper: tuple[int, bytes], prefixes: bool = False) -> list[Range]:
        """Items ``[lo, hi)`` (the range ending at ``upper``) listed if few (:func:`listing`), else as :data:`BUCKETS` fingerprints."""
        n = hi - lo
        if n <= ID_LIST_THRESHOLD:
            return [listing(upper, [h for _, h in self.items[lo:hi]], prefixes)]
        out, parts = [], min(BUCKETS, n)  # every part holds an item, so the bounds between them increase
        for i in range(parts):
            a, b = lo + n * i // parts, lo + n * (i + 1) // parts
            out.append(Range(upper if i == parts - 1 else self.between(b), FINGERPRINT, self.fingerprint(a, b)))
        return out


# --- the exchange --------------------------------------------------------------------------------------
def _answer(items: Items, ranges: list[Range], initiator: bool, have: set, need: set) -> list[Range]:
    """Our ranges in answer to ``ranges``; within :data:`MAX_RANGES` and :data:`MAX_IDS`: what does not fit is left
    as one fingerprint of everything from there on, for the next round (the other side splits it again)."""
    out: list[Range] = []
    ids = 0
    lo = 0
    for r in ranges:
        hi = max(items.index(r.upper), lo)
        if r.mode == FINGERPRINT and items.fingerprint(lo, hi) == r.fingerprint:
            add = [Range(r.upper, SKIP)]
        elif r.mode == FINGERPRINT:
            add = items.split(lo, hi, r.upper, prefixes=initiator)
        elif r.mode == ID_LIST and initiator:
            theirs = set(r.ids)
            mine = {h for _, h in items.items[lo:hi]}
            have.update(mine - theirs)
            need.update(theirs - mine)
            add = [Range(r.upper, SKIP)]
        elif r.mode in (ID_LIST, ID_PREFIXES) and not initiator:
            # A bit for each id (or id prefix) listed: do we hold it?  Then only our ids it did not list, whole:
            # about half the bytes of our list.  (Whole ids compare as prefixes of HASH_SIZE bytes.)
            mine = [h for _, h in items.items[lo:hi]]
            size = HASH_SIZE if r.mode == ID_LIST else len(r.ids[0]) if r.ids else ID_PREFIX_SIZE
            ours, listed = {h[:size] for h in mine}, set(r.ids)
            add = [Range(r.upper, HAVE_BITS, ids=tuple(h for h in mine if h[:size] not in listed), held=tuple(p in ours for p in r.ids))]
            if ids + len(add[0].ids) > MAX_IDS:
                add = items.split(lo, hi, r.upper)  # too many to list at once: narrow it down first
        elif r.mode == ID_PREFIXES:
            raise ReconcileError("id prefixes sent to the initiator (only the answering side matches them)")
        elif r.mode == HAVE_BITS and initiator:
            listed = [h for _, h in items.items[lo:hi]]  # what this side listed for the range
            if len(r.held) != len(listed):
                raise ReconcileError(f"a bitfield of {len(r.held)} bits for a range this side listed {len(listed)} ids of")
            have.update(h for h, held in zip(listed, r.held, strict=True) if not held)
            need.update(set(r.ids) - set(listed))
            add = [Range(r.upper, SKIP)]
        else:
            add = [Range(r.upper, SKIP)]
        more = sum(len(a.ids) for a in add)
        if len(out) + len(add) >= MAX_RANGES or ids + more > MAX_IDS:
            out.append(Range(INFINITY, FINGERPRINT, items.fingerprint(lo, len(items))))  # the rest, next round
            break
        out += add
        ids += more
        lo = hi
    merged: list[Range] = []
    for r in out:  # adjacent skips are one range
        if merged and r.mode == SKIP and merged[-1].mode == SKIP:
            merged[-1] = r
        else:
            merged.append(r)
    return merged


def respond(items: Items, message: bytes) -> bytes:
    """The answering side: its answer to one reconciliation message (it keeps no state between messages)."""
    return answer_ranges(items, decode(message))


def answer_ranges(items: Items, ranges: list[Range]) -> bytes:
    """The answering side's message for the ranges of a message already decoded (:func:`decode`)."""
    return encode(_answer(items, ranges, False, set(), set()))


@dataclass
class Initiator:
    """The side that starts: :meth:`start`, then :meth:`receive` each answer until it returns None (done).

    ``have``: hashes only this side holds; ``need``: hashes only the other
    side holds (to fetch); ``rounds``: messages sent; ``sent``/``received``:
    their bytes.
    """

    items: Items
    have: set = field(default_factory=set)
    need: set = field(default_factory=set)
    rounds: int = 0
    sent: int = 0
    received: int = 0

    def start(self) -> bytes:
        """The first message: the whole set as one fingerprint (an empty set: an empty id list).

        One fingerprint (about 20 bytes) settles a scope both sides hold
        alike in one round trip, however small; a scope that differs costs
        one round trip more than starting with its parts would (none when the
        other side holds few enough items to list them in its answer).
        """
        n = len(self.items)
        if n == 0:
            return self._send([Range(INFINITY, ID_LIST, ids=tuple(h for _, h in self.items.items))])
        return self._send([Range(INFINITY, FINGERPRINT, self.items.fingerprint(0, n))])

    def receive(self, message: bytes) -> bytes | None:
        """The next message to send, or None once every range agrees or was listed."""
        self.received += len(message)
        out = _answer(self.items, decode(message), True, self.have, self.need)
        if all(r.mode == SKIP for r in out):
            return None
        if self.rounds >= MAX_ROUNDS:
            raise ReconcileError(f"no agreement after {MAX_ROUNDS} rounds")
        return self._send(out)

    def _send(self, ranges: list[Range]) -> bytes:
        message = encode(ranges)
        self.rounds += 1
        self.sent += len(message)
        return message


__all__ = ["Initiator", "Items", "Range", "answer_ranges", "bound_between", "decode", "encode", "fingerprint", "respond"]
