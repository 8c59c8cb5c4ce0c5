"""The bytes of a set reconciliation message (docs/reconcile.md §3): ranges, their modes and payloads, and the limits.

:mod:`cablestore.wire.reconcile` holds the exchange; this module only
encodes and decodes, and refuses (``ReconcileError``) any message that is
malformed or over its limits, so the exchange only ever sees well-formed,
bounded ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cablestore.errors import ReconcileError
from cablestore.wire.fields import HASH_SIZE, encode_varint, read_varint
from cablestore.wire.sketch import CELL_SIZE, KEY_SIZE, MAX_CELLS, SALT_SIZE

VERSION = 0x02  # first byte of every reconciliation message (0x01: fingerprints without counts, no sketches)
SKIP, FINGERPRINT, ID_LIST, HAVE_BITS, ID_KEYS, SKETCH, DIFFERENCE, ESTIMATE = range(8)
FINGERPRINT_SIZE = 16
MAX_RANGES = 8192  # ranges in one message (about 200 KB)
MAX_IDS = 8192  # hashes and keys listed in one message (256 KB)
MAX_ESTIMATE = 1 << 24  # the largest difference an Estimate may claim (a range holds at most MAX_ITEMS of each side)
INFINITY = (1 << 64, b"")  # the upper bound of the last range: above every item


@dataclass(frozen=True)
class Range:
    """One range of a message: its exclusive upper bound ``(timestamp, hash prefix)`` and what it carries.

    ``count``: a fingerprint's item count, in the clear (how far apart the
    two sides are sizes a sketch); ``ids``: hashes listed (ID_KEYS: keys);
    ``held``: HAVE_BITS, which of the ids the other side listed this side
    holds; ``salt``/``sketch``: a SKETCH's key salt and encoded cells
    (:mod:`cablestore.wire.sketch`); ``keys``: a DIFFERENCE's keys of the
    initiator's items the other side lacks; ID_KEYS and SKETCH keys are the
    items' hashes keyed by ``salt`` (``sketch.key_of``); ``estimate``: an ESTIMATE's
    guess of how many items differ.
    """

    upper: tuple[int, bytes]
    mode: int
    fingerprint: bytes = b""
    ids: tuple[bytes, ...] = ()
    held: tuple[bool, ...] = ()
    count: int = 0
    salt: bytes = b""
    sketch: bytes = b""
    keys: tuple[bytes, ...] = ()
    estimate: int = 0


def position(bound: tuple[int, bytes]) -> tuple[int, bytes]:
    """A bound as an item key: its prefix padded with zero bytes (the smallest hash with that prefix)."""
    ts, prefix = bound
    return (ts, prefix + bytes(HASH_SIZE - len(prefix)))


def _listed(items: Sequence[bytes]) -> bytes:
    return encode_varint(len(items)) + b"".join(items)


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
            out += encode_varint(r.count) + r.fingerprint
        elif r.mode == ID_LIST:
            out += _listed(r.ids)
        elif r.mode == ID_KEYS:
            out += r.salt + _listed(r.ids)
        elif r.mode == HAVE_BITS:
            bits = bytearray((len(r.held) + 7) // 8)
            for i, held in enumerate(r.held):
                if held:
                    bits[i // 8] |= 1 << (i % 8)
            out += encode_varint(len(r.held)) + bits + _listed(r.ids)
        elif r.mode == SKETCH:
            out += r.salt + encode_varint(len(r.sketch) // CELL_SIZE) + r.sketch
        elif r.mode == DIFFERENCE:
            out += r.salt + _listed(r.ids) + _listed(r.keys)
        elif r.mode == ESTIMATE:
            out += encode_varint(r.estimate)
    return bytes(out)


class _Reader:
    """A cursor over one message that refuses to read past its end and counts what it listed."""

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos, self.ids, self.cells = buf, 1, 0, 0

    def varint(self) -> int:
        value, self.pos = read_varint(self.buf, self.pos)
        return value

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.buf):
            raise ReconcileError(f"{what} cut short")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def listed(self, size: int, what: str) -> tuple[bytes, ...]:
        count = self.varint()
        self.ids += count
        if self.ids > MAX_IDS or self.pos + count * size > len(self.buf):
            raise ReconcileError(f"{what} of {count} (at most {MAX_IDS} listed a message, within its bytes)")
        data = self.take(count * size, what)
        return tuple(data[p : p + size] for p in range(0, len(data), size))


def _range(rd: _Reader, upper: tuple[int, bytes]) -> Range:
    """One range's mode and payload."""
    mode = rd.varint()
    if mode == SKIP:
        return Range(upper, mode)
    if mode == FINGERPRINT:
        count = rd.varint()
        return Range(upper, mode, rd.take(FINGERPRINT_SIZE, "a fingerprint"), count=count)
    if mode == ID_LIST:
        return Range(upper, mode, ids=rd.listed(HASH_SIZE, "an id list"))
    if mode == ID_KEYS:
        salt = rd.take(SALT_SIZE, "a salt")
        return Range(upper, mode, salt=salt, ids=rd.listed(KEY_SIZE, "id keys"))
    if mode == HAVE_BITS:
        n = rd.varint()
        if n > MAX_IDS:
            raise ReconcileError(f"a bitfield of {n} bits (at most {MAX_IDS})")
        bits = rd.take((n + 7) // 8, "a bitfield")
        held = tuple(bool(bits[i // 8] >> (i % 8) & 1) for i in range(n))
        return Range(upper, mode, ids=rd.listed(HASH_SIZE, "an id list"), held=held)
    if mode == SKETCH:
        salt, cells = rd.take(SALT_SIZE, "a salt"), rd.varint()
        rd.cells += cells
        if not cells or cells % 3 or rd.cells > MAX_CELLS:
            raise ReconcileError(f"a sketch of {cells} cells (a multiple of 3; at most {MAX_CELLS} a message)")
        return Range(upper, mode, salt=salt, sketch=rd.take(cells * CELL_SIZE, "a sketch"))
    if mode == DIFFERENCE:
        salt = rd.take(SALT_SIZE, "a salt")
        ids = rd.listed(HASH_SIZE, "an id list")
        return Range(upper, mode, salt=salt, ids=ids, keys=rd.listed(KEY_SIZE, "a key list"))
    if mode == ESTIMATE:
        estimate = rd.varint()
        if not 1 <= estimate <= MAX_ESTIMATE:
            raise ReconcileError(f"an estimate of {estimate} differences (1 to {MAX_ESTIMATE})")
        return Range(upper, mode, estimate=estimate)
    raise ReconcileError(f"unknown range mode {mode}")


def decode(buf: bytes) -> list[Range]:
    """The ranges of a message; a malformed one (or one over the limits) raises :class:`cablestore.errors.ReconcileError`."""
    if not buf or buf[0] != VERSION:
        raise ReconcileError(f"not a reconciliation message of version {VERSION}")
    rd, last, ranges = _Reader(buf), 0, []
    try:
        while rd.pos < len(buf):
            if len(ranges) >= MAX_RANGES:
                raise ReconcileError(f"more than {MAX_RANGES} ranges in one message")
            delta, size = rd.varint(), rd.varint()
            if size > HASH_SIZE:
                raise ReconcileError(f"a bound's hash prefix of {size} bytes")
            prefix = rd.take(size, "a bound's hash prefix")
            if delta == 0:
                if size:
                    raise ReconcileError("an infinite bound with a hash prefix")
                upper = INFINITY
            else:
                last = last + delta - 1
                upper = (last, prefix)
            ranges.append(_range(rd, upper))
    except ReconcileError:
        raise
    except Exception as exc:  # a varint cut short or too long: DecodeError
        raise ReconcileError(f"malformed reconciliation message: {exc}") from exc
    bounds = [position(r.upper) for r in ranges]
    if not ranges or ranges[-1].upper != INFINITY or any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
        raise ReconcileError("ranges must have increasing bounds, the last one infinite")
    return ranges


__all__ = ["INFINITY", "MAX_IDS", "MAX_RANGES", "Range", "VERSION", "decode", "encode", "position"]
