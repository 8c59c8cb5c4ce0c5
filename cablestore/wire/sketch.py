"""Invertible Bloom lookup tables of post hashes (docs/reconcile.md §5): a range's difference in bytes proportional to it.

A sketch of a set of hashes is ``m`` cells, each the count (mod 256), the
XOR of the 8-byte keys and the XOR of the 4-byte checks of the hashes that
map to it.  Each hash maps to one cell in each third of the table.  One
side's sketch minus the other's (over the same range, the same ``m`` and
salt) holds only the hashes in one set and not the other; peeling the cells
that hold exactly one of them lists them all, with which side holds each,
when ``m`` is about 1.6 times their number (:func:`cells_for`).

A key is the hash keyed by the salt the initiator draws for each sketch
(BLAKE2b-64 with that key), so no author can make two posts collide in
advance; a check is the top 32 bits of the key times an odd constant (mod
2**64), so a cell that holds more than one hash is told from a pure one
except with odds of about 2**-32 (a false one leads to a key no item has,
which ends the exchange in an error and native requests, never a wrong
list).  Sans I/O.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

from cablestore.errors import ReconcileError

KEY_SIZE = 8  # bytes of a hash's key in a sketch (and of the keys a Difference lists)
CHECK_SIZE = 4
SALT_SIZE = 8
CELL_SIZE = 1 + KEY_SIZE + CHECK_SIZE  # count mod 256, key XOR, check XOR
HASHES = 3  # cells a hash is added to: one in each third of the table
MAX_CELLS = 12288  # cells of one sketch (160 KB)
_KEY_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / the golden ratio, odd: a key's check is the top half of key * _GOLDEN mod 2**64


def cells_for(difference: int) -> int:
    """The cells a sketch needs to list ``difference`` hashes with ~97 % odds (measured; a failure costs a round trip)."""
    d = max(1, difference)
    want = 1.6 * d + 6 + 4 * min(d, 3)
    return min(MAX_CELLS, HASHES * math.ceil(want / HASHES))


def key_of(salt: bytes, post_hash: bytes) -> int:
    """A hash's key under ``salt``, as an integer."""
    return int.from_bytes(hashlib.blake2b(post_hash, digest_size=KEY_SIZE, key=salt).digest(), "little")


def _check(key: int) -> int:
    return (key * _GOLDEN & _KEY_MASK) >> 32


def _cells(key: int, third: int) -> tuple[int, int, int]:
    return key % third, third + (key >> 21) % third, 2 * third + (key >> 42) % third


class Sketch:
    """``m`` cells (a multiple of :data:`HASHES`); :meth:`add` hashes' keys, :meth:`encode`, :meth:`subtract`, :meth:`peel`."""

    __slots__ = ("checks", "counts", "keys", "third")

    def __init__(self, cells: int) -> None:
        if not HASHES <= cells <= MAX_CELLS or cells % HASHES:
            raise ReconcileError(f"a sketch of {cells} cells (a multiple of {HASHES}, at most {MAX_CELLS})")
        self.third = cells // HASHES
        self.counts = [0] * cells
        self.keys = [0] * cells
        self.checks = [0] * cells

    def __len__(self) -> int:
        return len(self.counts)

    def add(self, keys: Iterable[int]) -> Sketch:
        """Each key added to its three cells (counts kept whole here, taken mod 256 when encoded or subtracted)."""
        counts, xkeys, checks, third = self.counts, self.keys, self.checks, self.third
        third2, golden, mask = 2 * third, _GOLDEN, _KEY_MASK
        for key in keys:  # _cells and _check inlined: this loop is a sketch's cost
            check = (key * golden & mask) >> 32
            i, j, k = key % third, third + (key >> 21) % third, third2 + (key >> 42) % third
            counts[i] += 1
            counts[j] += 1
            counts[k] += 1
            xkeys[i] ^= key
            xkeys[j] ^= key
            xkeys[k] ^= key
            checks[i] ^= check
            checks[j] ^= check
            checks[k] ^= check
        return self

    def encode(self) -> bytes:
        """The cells as the wire carries them: each its count mod 256, key XOR and check XOR (little-endian)."""
        out = bytearray()
        for count, key, check in zip(self.counts, self.keys, self.checks, strict=True):
            out.append(count & 0xFF)
            out += key.to_bytes(KEY_SIZE, "little") + check.to_bytes(CHECK_SIZE, "little")
        return bytes(out)

    @classmethod
    def decode(cls, buf: bytes) -> Sketch:
        """The cells of :meth:`encode`; their number is the buffer's length over :data:`CELL_SIZE`."""
        if len(buf) % CELL_SIZE:
            raise ReconcileError(f"a sketch of {len(buf)} bytes is not whole cells of {CELL_SIZE}")
        sketch = cls(len(buf) // CELL_SIZE)
        for i, pos in enumerate(range(0, len(buf), CELL_SIZE)):
            sketch.counts[i] = buf[pos]
            sketch.keys[i] = int.from_bytes(buf[pos + 1 : pos + 1 + KEY_SIZE], "little")
            sketch.checks[i] = int.from_bytes(buf[pos + 1 + KEY_SIZE : pos + CELL_SIZE], "little")
        return sketch

    def subtract(self, other: Sketch) -> Sketch:
        """This sketch less ``other`` (same size): the cells of the hashes only one of the two holds."""
        if len(other) != len(self):
            raise ReconcileError(f"sketches of {len(self)} and {len(other)} cells")
        self.counts = [(a - b) & 0xFF for a, b in zip(self.counts, other.counts, strict=True)]
        self.keys = [a ^ b for a, b in zip(self.keys, other.keys, strict=True)]
        self.checks = [a ^ b for a, b in zip(self.checks, other.checks, strict=True)]
        return self

    def peel(self) -> tuple[list[int], list[int], int]:
        """``(plus, minus, left)``: the keys counted +1 (this side's) and -1 (the subtracted side's) and the cells
        left holding something (0: the whole difference was listed).  Consumes the sketch."""
        counts, keys, checks, third = self.counts, self.keys, self.checks, self.third
        plus: list[int] = []
        minus: list[int] = []
        todo = [i for i, c in enumerate(counts) if c in (1, 0xFF)]
        budget = len(counts) * HASHES  # each peel empties a cell; a forged table cannot loop
        while todo and budget > 0:
            budget -= 1
            i = todo.pop()
            count, key = counts[i], keys[i]
            if count not in (1, 0xFF) or checks[i] != _check(key) or i not in _cells(key, third):
                continue
            (plus if count == 1 else minus).append(key)
            check = checks[i]
            for j in _cells(key, third):
                counts[j] = (counts[j] - count) & 0xFF
                keys[j] ^= key
                checks[j] ^= check
                if counts[j] in (1, 0xFF):
                    todo.append(j)
        left = sum(1 for c, k, x in zip(counts, keys, checks, strict=True) if c or k or x)
        return plus, minus, left


def estimate(sketch: Sketch) -> int:
    """How many hashes a subtracted sketch holds, from its counts alone (call it before :meth:`Sketch.peel`).

    A cell's count is the difference of the two sides' counts of it, each
    side's about a Poisson count, so the counts' variance is the hashes a
    cell holds: ``HASHES`` a hash over the cells.  It holds for a difference
    on one side or on both, and long after every cell is full (until counts
    pass 127); raised by its own spread (about sqrt(2/m) over m cells), and
    at least one more than a sketch of this size lists reliably, so a sketch
    too small is always followed by a larger one.
    """
    cells = len(sketch.counts)
    signed = [c - 256 if c >= 128 else c for c in sketch.counts]  # counts mod 256, read as signed
    mean = sum(signed) / cells
    variance = sum((c - mean) ** 2 for c in signed) / cells
    listable = max((d for d in range(1, cells + 1) if cells_for(d) <= cells), default=0)  # what cells_for sized it for
    spread = 1 + math.sqrt(2 / cells)  # a variance over m cells is off by about sqrt(2/m): err on the large side
    return max(math.ceil(variance * cells / HASHES * spread), listable + 1)


__all__ = ["CELL_SIZE", "KEY_SIZE", "MAX_CELLS", "SALT_SIZE", "Sketch", "cells_for", "estimate", "key_of"]
