"""How far apart two sides' ranges look, and which of them a reconciliation sketches (docs/reconcile.md §3, Sizing).

Pure functions of counts: :mod:`cablestore.wire.reconcile` asks them which
ranges to sketch whole, how large to make a sketch, and how many items the
answering side may read for one.  Splitting a range costs ~350 bytes a
level; a sketch costs ~21 bytes a difference plus ~18 cells, but reads
every item of its range on both sides: these bounds keep that read in
proportion to the difference (and bounded outright).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cablestore.wire.reconcile_codec import FINGERPRINT, Range
from cablestore.wire.sketch import CELL_SIZE, KEY_SIZE, cells_for

ID_LIST_THRESHOLD = 16  # a range of at most this many items is listed, not split or sketched
SKETCH_ITEMS_PER_DIFFERENCE = 2048  # the initiator sketches a range of at most this many items per expected difference
SKETCH_ANY_ITEMS = 4096  # ... or of at most this many, however few differ (cheaper than splitting, and quick to read)
SKETCH_ITEMS_PER_CELL = 2048  # the answering side reads at most this many of its items for each cell of a sketch
SKETCH_MAX_ITEMS = 1 << 16  # the most items either side reads for one sketch


def sketchable(n: int, differ: int) -> bool:
    """Whether a range of ``n`` items that differs by about ``differ`` is sketched whole rather than split."""
    return n <= min(max(SKETCH_ITEMS_PER_DIFFERENCE * differ, SKETCH_ANY_ITEMS), SKETCH_MAX_ITEMS)


def worth_a_sketch(n: int, differ: int, theirs: int = 0) -> bool:
    """Whether the initiator sketches a range of its ``n`` items (``theirs`` on the other side, if known) that
    differs by about ``differ``: more than a listing's worth of items, fewer bytes than listing their keys, and
    :func:`sketchable` by the larger count."""
    return n > ID_LIST_THRESHOLD and cells_for(differ) * CELL_SIZE < n * KEY_SIZE and sketchable(max(n, theirs), differ)


def readable(cells: int) -> int:
    """The most items the answering side reads to answer a sketch of ``cells``."""
    return min(max(SKETCH_ITEMS_PER_CELL * cells, SKETCH_ANY_ITEMS), SKETCH_MAX_ITEMS)


def per_item(counted: Sequence[tuple[int, int]], differing: int) -> float:
    """How many items an item of a message's fingerprint ranges is likely to differ by, from ``counted``:
    ``(their count - ours, ours)`` of each fingerprint range, ``differing`` of which differ.

    The variance of the count differences (each side's missing items fall
    into ranges about as Poisson counts do, and the difference of two has
    the sum of their means as variance), at least what the share that
    differs implies (a Poisson mean with that share of ranges non-empty);
    over the ranges' mean size, so a range of n items differs by about n
    times it.
    """
    if not counted:
        return 0.0
    f, mean_n = len(counted), max(1.0, sum(n for _, n in counted) / len(counted))
    share = -math.log(1 - differing / f) if differing < f else math.log(2 * f)
    mean = sum(delta for delta, _ in counted) / f
    variance = sum((delta - mean) ** 2 for delta, _ in counted) / (f - 1) if f > 1 else 0.0
    lam = max(share, variance)
    return lam / (1 - math.exp(-lam)) / mean_n if lam > 0 else 0.0


def grouped(ranges: list[Range], spans: list[tuple[int, int]], differs: list[bool], guesses: list[int]) -> list:
    """The initiator's ranges as ``(range, span, differs, guess)``, each run of fingerprints that differ (and those
    equal between them) merged into one range as long as it stays worth a sketch whole by the sum of their guesses:
    one sketch costs its fixed cells once, not once a part (the parts the other side split a range into show how
    many of them differ, which the counts alone do not when both sides lack items of one range)."""
    out, i = [], 0
    while i < len(ranges):
        r, (lo, hi) = ranges[i], spans[i]
        if r.mode != FINGERPRINT or not differs[i] or not worth_a_sketch(hi - lo, guesses[i], r.count):
            out.append((r, (lo, hi), differs[i], guesses[i]))
            i += 1
            continue
        total, theirs, last, j = guesses[i], r.count, i, i + 1
        while j < len(ranges) and ranges[j].mode == FINGERPRINT and worth_a_sketch(spans[j][1] - lo, total + guesses[j], theirs + ranges[j].count):
            total, theirs = total + guesses[j], theirs + ranges[j].count
            last = j if differs[j] else last
            j += 1
        out.append((ranges[last], (lo, spans[last][1]), True, total))
        out += [(ranges[k], spans[k], False, 0) for k in range(last + 1, j)]  # equal: skipped
        i = j
    return out


__all__ = ["ID_LIST_THRESHOLD", "SKETCH_ANY_ITEMS", "SKETCH_ITEMS_PER_CELL", "SKETCH_ITEMS_PER_DIFFERENCE", "SKETCH_MAX_ITEMS",
           "grouped", "per_item", "readable", "sketchable", "worth_a_sketch"]
