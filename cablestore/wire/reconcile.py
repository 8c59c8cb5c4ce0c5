"""Range-based set reconciliation of posts with sketches of dense ranges (docs/reconcile.md), sans I/O.

Two peers hold sets of items, ``(timestamp, post hash)`` pairs sorted by
timestamp then hash.  The initiator sends a fingerprint of its whole set
(with its count, in the clear); the other side answers each range with
"same" (skip), its own finer fingerprints where they differ, or the whole
list of its hashes where a range is small.  Where a range differs by
enough items for its size (the counts, and how many of a split's parts
differ, say by about how many), the initiator sends a sketch of it
(:mod:`cablestore.wire.sketch`, an invertible Bloom lookup table sized for
that difference) and the other side answers with the difference itself:
bytes proportional to the difference, not to the ranges holding it.  The
initiator then knows the hashes it lacks (``need``) and those only it
holds (``have``).  The ranges are A. Meyer's range-based set
reconciliation (arXiv 2212.13567) in the message layout of negentropy
protocol v1 (hoytech/negentropy), with Cable's LEB128 varints (64-bit
safe) and a BLAKE2b fingerprint; the codec is
:mod:`cablestore.wire.reconcile_codec`.

Both sides are stateless between messages except for the initiator's
``have``/``need``: the side that answers (:func:`respond`) needs only its
items.  Every message is bounded (ranges, ids, sketch cells and the items
the answering side reads for it), bounds must increase and the last range
must end at infinity, so a peer that lies can make a reconciliation
longer, never wrong (the posts it leads to are fetched and checked like
any other) and never longer than :data:`MAX_ROUNDS`.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cablestore.errors import ReconcileError
from cablestore.wire.fields import HASH_SIZE, encode_varint
from cablestore.wire.reconcile_codec import (
    DIFFERENCE,
    ESTIMATE,
    FINGERPRINT,
    FINGERPRINT_SIZE,
    HAVE_BITS,
    ID_KEYS,
    ID_LIST,
    INFINITY,
    MAX_IDS,
    MAX_RANGES,
    SKETCH,
    SKIP,
    VERSION,
    Range,
    decode,
    encode,
    position,
)
from cablestore.wire.reconcile_sizing import (
    ID_LIST_THRESHOLD,
    grouped,
    per_item,
    readable,
    sketchable,
    worth_a_sketch,
)
from cablestore.wire.sketch import CELL_SIZE, KEY_SIZE, MAX_CELLS, SALT_SIZE, Sketch, cells_for, estimate, key_of

BUCKETS = 16  # ranges a differing range is split into
MESSAGE_READS = 1 << 18  # the most items the answering side reads for the sketches of one message (the initiator plans 3/4)
MAX_ROUNDS = 32  # messages the initiator sends in one reconciliation (log16 of 2**64 is 16)
MAX_ITEMS = 1 << 24  # items one side reconciles at once
ITEMS_PER_RANGE = 16  # items read to answer sketches that cost the answering side's budget as much as a range
_MOD = 1 << 256



def listing(upper: tuple[int, bytes], hashes: Sequence[bytes], salt: bytes | None = None) -> Range:
    """A small range listed: its hashes whole (the answering side's: the initiator fetches what it lacks by them) or,
    from the initiator, their keys under ``salt`` (8 bytes each: the answering side only matches them against its own)."""
    if salt is not None:
        return Range(upper, ID_KEYS, salt=salt, ids=tuple(key_of(salt, h).to_bytes(KEY_SIZE, "little") for h in hashes))
    return Range(upper, ID_LIST, ids=tuple(hashes))


def fingerprint(total: int, count: int) -> bytes:
    """The fingerprint of a range: BLAKE2b-128 of the sum of its hashes (little-endian, mod 2**256) and its count."""
    return hashlib.blake2b((total % _MOD).to_bytes(32, "little") + encode_varint(count), digest_size=FINGERPRINT_SIZE).digest()


def bound_between(below: tuple[int, bytes], at: tuple[int, bytes]) -> tuple[int, bytes]:
    """The shortest bound above the item ``below`` and at or below the next item ``at``: its timestamp alone if
    theirs differ, else with the shortest prefix of ``at``'s hash that differs from ``below``'s."""
    (ts_a, a), (ts_b, b) = below, at
    if ts_a != ts_b:
        return (ts_b, b"")
    shared = next((i for i in range(HASH_SIZE) if a[i] != b[i]), HASH_SIZE - 1)
    return (ts_b, b[: shared + 1])


# --- items -------------------------------------------------------------------------------------------
class Items:
    """One side's items, sorted, with prefix sums so any range's fingerprint is two bisections and a subtraction.

    The exchange reads items through five members, which the store's
    ``StoreItems`` has too: ``len()``, ``index(bound)``, ``fingerprint(lo,
    hi)``, ``between(i)`` and ``items[lo:hi]``.
    """

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
        return len(self.items) if bound == INFINITY else bisect.bisect_left(self.items, position(bound))

    def fingerprint(self, lo: int, hi: int) -> bytes:
        """The fingerprint of items ``[lo, hi)``."""
        return fingerprint(self._sums[hi] - self._sums[lo], hi - lo)

    def between(self, i: int) -> tuple[int, bytes]:
        """The shortest bound above item ``i - 1`` and at or below item ``i``: where a split before item ``i`` goes."""
        return bound_between(self.items[i - 1], self.items[i])


def split(items: Items, lo: int, hi: int, upper: tuple[int, bytes], salt: bytes | None = None) -> list[Range]:
    """Items ``[lo, hi)`` (the range ending at ``upper``) listed if few (:func:`listing`, keyed by ``salt`` if given),
    else as :data:`BUCKETS` fingerprints."""
    n = hi - lo
    if n <= ID_LIST_THRESHOLD:
        return [listing(upper, [h for _, h in items.items[lo:hi]], salt)]
    out, parts = [], min(BUCKETS, n)  # every part holds an item, so the bounds between them increase
    for i in range(parts):
        a, b = lo + n * i // parts, lo + n * (i + 1) // parts
        out.append(Range(upper if i == parts - 1 else items.between(b), FINGERPRINT, items.fingerprint(a, b), count=b - a))
    return out


def _keyed(items: Items, lo: int, hi: int, salt: bytes) -> dict[int, bytes]:
    """Items ``[lo, hi)``'s hashes by their keys under ``salt`` (fewer entries than items: two keys collide)."""
    return {key_of(salt, h): h for _, h in items.items[lo:hi]}


# --- the exchange --------------------------------------------------------------------------------------
@dataclass
class _Budget:
    """What one message may still carry: listed ids and sketch cells (:data:`MAX_IDS`, ``sketch.MAX_CELLS``) and the
    items the answering side reads to answer its sketches (:data:`MESSAGE_READS`)."""

    ids: int = MAX_IDS
    cells: int = MAX_CELLS
    reads: int = MESSAGE_READS


def _narrow(items: Items, lo: int, hi: int, upper: tuple[int, bytes], differ: int, budget: _Budget, salts: Callable[[], bytes], sketched: dict) -> list[Range] | None:
    """The initiator's next step for a range that differs by about ``differ`` items: its keys listed when
    that is cheaper than a sketch; a sketch sized for ``differ`` when the range has few enough items for it
    (None when the message has no room left for it: the rest goes next round); else :func:`split`."""
    n = hi - lo
    cells = cells_for(differ)
    if ID_LIST_THRESHOLD < n <= budget.ids and cells * CELL_SIZE >= n * KEY_SIZE:
        return [listing(upper, [h for _, h in items.items[lo:hi]], salts())]  # so dense that listing is cheaper
    if not worth_a_sketch(n, differ):
        return split(items, lo, hi, upper, salts())
    if cells > budget.cells or n > budget.reads:
        return None
    salt = salts()
    keyed = _keyed(items, lo, hi, salt)
    if len(keyed) < n:  # two keys collide under this salt (odds 2**-64 a pair)
        return split(items, lo, hi, upper, salts())
    budget.cells -= cells
    budget.reads -= n
    sketched[salt] = keyed  # the difference names these keys next round: no second read of the range then
    return [Range(upper, SKETCH, salt=salt, sketch=Sketch(cells).add(keyed).encode())]


def _difference(items: Items, lo: int, hi: int, r: Range, budget: _Budget) -> list[Range]:
    """The answering side's answer to a sketch: the difference listed (its ids whole, the initiator's as keys); an
    estimate of its size when the sketch was too small to list it; split when it would read too many items."""
    n = hi - lo
    cells = len(r.sketch) // CELL_SIZE
    if n > min(readable(cells), budget.reads):
        return split(items, lo, hi, r.upper)
    budget.reads -= n
    keyed = _keyed(items, lo, hi, r.salt)
    if len(keyed) < n:
        return split(items, lo, hi, r.upper)
    theirs = Sketch.decode(r.sketch).subtract(Sketch(cells).add(keyed))
    guess = estimate(theirs)
    plus, minus, left = theirs.peel()
    if left or any(k not in keyed for k in minus):
        return [Range(r.upper, ESTIMATE, estimate=min(guess, MAX_ITEMS))]
    keys = tuple(k.to_bytes(KEY_SIZE, "little") for k in plus)
    return [Range(r.upper, DIFFERENCE, salt=r.salt, ids=tuple(keyed[k] for k in minus), keys=keys)]


def _learn_difference(items: Items, lo: int, hi: int, r: Range, have: set, need: set, sketched: dict) -> None:
    """The initiator, from a Difference: its items the keys name are ``have``; the ids listed it lacks, ``need``
    (its items' keys as the sketch was made of them, else read again)."""
    keyed = sketched.pop(r.salt, None) or _keyed(items, lo, hi, r.salt)
    for key in r.keys:
        mine = keyed.get(int.from_bytes(key, "little"))
        if mine is None:
            raise ReconcileError("a difference names a key of none of this side's items in its range")
        have.add(mine)
    need.update(set(r.ids) - set(keyed.values()))


def _answer(items: Items, ranges: list[Range], initiator: bool, have: set, need: set, salts: Callable[[], bytes] = lambda: b"",
            budget: _Budget | None = None, sketched: tuple[dict, dict] | None = None) -> list[Range]:
    """Our ranges in answer to ``ranges``; within :data:`MAX_RANGES` and the message's :class:`_Budget`: what does
    not fit is left as one fingerprint of everything from there on, for the next round (the other side splits it).
    ``sketched``: the initiator's keys of the ranges it sketched last round, by salt, and where to put this round's."""
    before, now = sketched if sketched is not None else ({}, {})
    out: list[Range] = []
    if budget is None:
        budget = _Budget(reads=MESSAGE_READS * 3 // 4 if initiator else MESSAGE_READS)
    spans, lo = [], 0
    for r in ranges:
        hi = max(items.index(r.upper), lo)
        spans.append((lo, hi))
        lo = hi
    ours = {r.upper: items.fingerprint(lo, hi) for r, (lo, hi) in zip(ranges, spans, strict=True) if r.mode == FINGERPRINT}  # bounds are unique
    differs = [r.mode == FINGERPRINT and ours[r.upper] != r.fingerprint for r in ranges]
    expect = per_item([(r.count - (hi - lo), hi - lo) for r, (lo, hi) in zip(ranges, spans, strict=True) if r.mode == FINGERPRINT], sum(differs))
    guesses = [max(1, abs(r.count - (hi - lo)), math.ceil(expect * (hi - lo))) if d else 0 for r, (lo, hi), d in zip(ranges, spans, differs, strict=True)]
    work = grouped(ranges, spans, differs, guesses) if initiator else list(zip(ranges, spans, differs, guesses, strict=True))
    for r, (lo, hi), differ, guess in work:
        if r.mode == FINGERPRINT and not differ:
            add = [Range(r.upper, SKIP)]
        elif r.mode == FINGERPRINT and initiator:
            add = _narrow(items, lo, hi, r.upper, guess, budget, salts, now)
        elif r.mode == FINGERPRINT and hi - lo > ID_LIST_THRESHOLD and sketchable(max(hi - lo, r.count), abs(r.count - (hi - lo))):
            add = [Range(r.upper, FINGERPRINT, ours[r.upper], count=hi - lo)]  # our count: the initiator sketches it whole
        elif r.mode == FINGERPRINT:
            add = split(items, lo, hi, r.upper)
        elif r.mode == ESTIMATE and initiator:
            add = _narrow(items, lo, hi, r.upper, r.estimate, budget, salts, now)
        elif r.mode == SKETCH and not initiator:
            add = _difference(items, lo, hi, r, budget)
        elif r.mode == DIFFERENCE and initiator:
            _learn_difference(items, lo, hi, r, have, need, before)
            add = [Range(r.upper, SKIP)]
        elif r.mode == ID_LIST and initiator:
            theirs = set(r.ids)
            mine = {h for _, h in items.items[lo:hi]}
            have.update(mine - theirs)
            need.update(theirs - mine)
            add = [Range(r.upper, SKIP)]
        elif r.mode in (ID_LIST, ID_KEYS) and not initiator:
            # A bit for each id (or key) listed: do we hold it?  Then only our ids it did not list, whole: about
            # half the bytes of our list.  (Whole ids are their own keys.)
            mine = [h for _, h in items.items[lo:hi]]
            ours = [key_of(r.salt, h).to_bytes(KEY_SIZE, "little") for h in mine] if r.mode == ID_KEYS else mine
            listed, held = set(r.ids), set(ours)
            add = [Range(r.upper, HAVE_BITS, ids=tuple(h for h, k in zip(mine, ours, strict=True) if k not in listed), held=tuple(k in held for k in r.ids))]
            if len(add[0].ids) > budget.ids:
                add = split(items, lo, hi, r.upper)  # too many to list at once: narrow it down first
        elif r.mode in (ID_KEYS, ESTIMATE, SKETCH, DIFFERENCE):
            names = {ID_KEYS: "id keys", ESTIMATE: "an estimate", SKETCH: "a sketch", DIFFERENCE: "a difference"}
            side = "initiator" if initiator else "answering side"
            raise ReconcileError(f"{names[r.mode]} sent to the {side} (it only goes the other way)")
        elif r.mode == HAVE_BITS and initiator:
            listed = [h for _, h in items.items[lo:hi]]  # what this side listed for the range
            if len(r.held) != len(listed):
                raise ReconcileError(f"a bitfield of {len(r.held)} bits for a range this side listed {len(listed)} ids of")
            have.update(h for h, held in zip(listed, r.held, strict=True) if not held)
            need.update(set(r.ids) - set(listed))
            add = [Range(r.upper, SKIP)]
        else:
            add = [Range(r.upper, SKIP)]
        more = sum(len(a.ids) + len(a.keys) for a in add) if add is not None else 0
        if add is None or len(out) + len(add) >= MAX_RANGES or more > budget.ids:
            out.append(Range(INFINITY, FINGERPRINT, items.fingerprint(lo, len(items)), count=len(items) - lo))  # the rest, next round
            break
        out += add
        budget.ids -= more
    merged: list[Range] = []
    for r in out:  # adjacent skips are one range
        if merged and r.mode == SKIP and merged[-1].mode == SKIP:
            merged[-1] = r
        else:
            merged.append(r)
    return merged


def respond(items: Items, message: bytes) -> bytes:
    """The answering side: its answer to one reconciliation message (it keeps no state between messages)."""
    return answer_ranges(items, decode(message))[0]


def answer_ranges(items: Items, ranges: list[Range]) -> tuple[bytes, int]:
    """The answering side's message for the ranges of a message already decoded (:func:`decode`), and what it
    cost, in ranges: one each, and one more for each :data:`ITEMS_PER_RANGE` items read to answer sketches."""
    budget = _Budget()
    message = encode(_answer(items, ranges, False, set(), set(), budget=budget))
    return message, len(ranges) + (MESSAGE_READS - budget.reads) // ITEMS_PER_RANGE


def _random_salt() -> bytes:
    """A fresh salt for a list of keys or a sketch: 8 random bytes from the OS."""
    return os.urandom(SALT_SIZE)


@dataclass
class Initiator:
    """The side that starts: :meth:`start`, then :meth:`receive` each answer until it returns None (done).

    ``have``: hashes only this side holds; ``need``: hashes only the other
    side holds (to fetch); ``rounds``: messages sent; ``sent``/``received``:
    their bytes; ``salts``: where each sketch's salt comes from.
    """

    items: Items
    have: set = field(default_factory=set)
    need: set = field(default_factory=set)
    rounds: int = 0
    sent: int = 0
    received: int = 0
    salts: Callable[[], bytes] = _random_salt
    _sketched: dict = field(default_factory=dict, repr=False)  # salt -> our keyed items of a range sketched last round

    def start(self) -> bytes:
        """The first message: the whole set as one fingerprint (an empty set: an empty id list).

        One fingerprint (about 20 bytes) settles a scope both sides hold
        alike in one round trip, however small; a scope that differs costs
        one round trip more than starting with its parts would (none when the
        other side holds few enough items to list them in its answer).
        """
        n = len(self.items)
        if n == 0:
            return self._send([Range(INFINITY, ID_LIST)])
        return self._send([Range(INFINITY, FINGERPRINT, self.items.fingerprint(0, n), count=n)])

    def receive(self, message: bytes) -> bytes | None:
        """The next message to send, or None once every range agrees or was listed."""
        self.received += len(message)
        sketched: dict = {}
        out = _answer(self.items, decode(message), True, self.have, self.need, self.salts, sketched=(self._sketched, sketched))
        self._sketched = sketched
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


__all__ = ["VERSION", "Initiator", "Items", "Range", "answer_ranges", "bound_between", "decode", "encode", "fingerprint", "respond", "split"]
