"""LevelDB's table files read block by block, each record with its checksum's verdict.

The format is leveldb's ``doc/table_format.md`` (the logs, ``doc/log_format.md``,
are read by :mod:`cablestore.store.leveldb_log`):

* a table is data blocks, each followed by a 5-byte trailer (compression
  type, masked CRC32C of the block and the type), then the filter,
  metaindex and index blocks and a 48-byte footer ending in a magic number.
  A block is prefix-compressed entries, then a restart array and its
  length.  An entry's key is an internal key: the user key, then 8 bytes of
  ``sequence << 8 | type`` (0 a deletion, 1 a value).

:func:`read_table` reads through the index when the footer and the index
check out, else block by block from the start (a table cut short, or its
footer damaged): each block is found by its trailer's checksum.  A block
whose checksum fails is not trusted, but the posts in it can
still be found (:func:`loose_posts`): a post certifies itself, so the
caller proves each one by its hash and signature.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import cramjam
import google_crc32c

MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
FOOTER = 48
TRAILER = 5
MAX_SEQ = (1 << 56) - 1  # index and seek keys carry it; stored entries never do
DELETION, VALUE = 0, 1
NO_COMPRESSION, SNAPPY = 0, 1
MAX_BLOCK = 4 << 20  # a block is ~32 KiB (cablestore's block_size) plus one entry: 4 MiB bounds a search for its end
_MASK_DELTA = 0xA282EAD8
_POST = b"!post!"
_POST_KEY = len(_POST) + 32


def crc(data: bytes, value: int = 0) -> int:
    """CRC32C of ``data`` (continuing ``value``): ``google-crc32c``, hardware-accelerated."""
    return google_crc32c.extend(value, data)


def masked(value: int) -> int:
    """LevelDB's masked CRC: rotated right by 15 bits, plus a constant."""
    return ((((value >> 15) | (value << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Record:
    """One put or delete found in a file."""

    key: bytes  # the user key
    seq: int
    kind: int  # VALUE or DELETION
    value: bytes
    certified: bool  # its block's or log record's checksum checked
    source: str  # file name and where in it


@dataclass
class FileScan:
    """What reading one table or log found."""

    name: str
    size: int
    mode: str  # "index", "blocks" (a table read block by block), "log" (cablestore.store.leveldb_log)
    records: list[Record] = field(default_factory=list)
    units: int = 0  # blocks or log records whose checksum checked
    damaged: list[str] = field(default_factory=list)  # "offset+length: why", for each unit that did not check

    @property
    def intact(self) -> bool:
        """Read through its index (or a log), every part's checksum checked."""
        return self.mode in ("index", "log") and not self.damaged


def varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[pos:end]`` and the position after it; ValueError if it runs past ``end``."""
    value = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:  # a varint64 at most (sequence and file numbers in logs and the MANIFEST)
            break
    raise ValueError("bad varint")


# --- blocks -------------------------------------------------------------


def block_entries(content: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The (internal key, value) entries of a block; ValueError where the block does not parse."""
    n = len(content)
    if n < 4:
        raise ValueError("block too short")
    restarts = int.from_bytes(content[-4:], "little")
    limit = n - 4 - 4 * restarts
    if restarts < 1 or limit < 0:
        raise ValueError("bad restart array")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = varint(content, pos, limit)
        unshared, pos = varint(content, pos, limit)
        size, pos = varint(content, pos, limit)
        if shared > len(key) or pos + unshared + size > limit:
            raise ValueError("entry runs past the block")
        key = key[:shared] + content[pos : pos + unshared]
        pos += unshared
        yield key, content[pos : pos + size]
        pos += size


def _block_content(data, start: int, end: int) -> bytes:
    """The block's bytes, decompressed (``data[end]`` is its compression type)."""
    raw = data[start:end]
    if data[end] == SNAPPY:
        return bytes(cramjam.snappy.decompress_raw(raw))
    if data[end] != NO_COMPRESSION:
        raise ValueError(f"unknown compression type {data[end]}")
    return raw


def _checks(data, start: int, end: int) -> bool:
    """True if a block ``data[start:end]`` with its trailer at ``end`` matches its checksum."""
    if end + TRAILER > len(data) or data[end] not in (NO_COMPRESSION, SNAPPY):
        return False
    want = int.from_bytes(data[end + 1 : end + 5], "little")
    return masked(crc(data[end : end + 1], crc(data[start:end]))) == want


def _records(entries, certified: bool, source: str, wanted: tuple[bytes, ...]) -> Iterator[Record]:
    for ikey, value in entries:
        if len(ikey) < 8:
            continue
        tag = int.from_bytes(ikey[-8:], "little")
        seq, kind, key = tag >> 8, tag & 0xFF, ikey[:-8]
        if kind not in (DELETION, VALUE) or seq >= MAX_SEQ or not key.startswith(wanted):
            continue  # an index block's separator, or not a key the caller reads
        yield Record(key, seq, kind, value, certified, source)


def _read_block(scan: FileScan, data, start: int, end: int, wanted: tuple[bytes, ...]) -> None:
    """Read one block whose checksum checked (a parse failure makes it damaged)."""
    source = f"{scan.name}@{start}"
    try:
        found = list(_records(block_entries(_block_content(data, start, end)), True, source, wanted))
    except (ValueError, cramjam.DecompressionError) as exc:
        if scan.mode == "index":
            scan.damaged.append(f"{start}+{end - start}: checksum ok but {exc}")
            _loose_block(scan, data, start, end)
        # else a table's filter block, read as if it were a data block: its bytes are as written
        return
    scan.units += 1
    scan.records.extend(found)


def _loose_block(scan: FileScan, data, start: int, end: int, whole: bool = True) -> None:
    """The posts still readable in a block whose checksum fails (``whole``: its trailer is at ``end``), or in a region."""
    content = data[start:end]
    if whole and end < len(data):
        try:
            content = _block_content(data, start, end)
        except (ValueError, cramjam.DecompressionError):
            pass  # compressed and damaged: only the raw search below can find anything
    scan.records.extend(loose_posts(content, f"{scan.name}@{start}"))


# --- tables -------------------------------------------------------------


def read_table(data: bytes, name: str, wanted: tuple[bytes, ...] = (b"",), range_wanted: Callable[[bytes, bytes | None], bool] | None = None) -> FileScan:
    """Every record of a table whose user key starts with one of ``wanted``.

    ``range_wanted(low, high)``: False if no wanted key can lie in a block
    whose keys are in ``(low, high]`` (then the block's checksum is still
    checked, but its entries are not parsed).
    """
    scan = FileScan(name, len(data), "index")
    handles = index(data)
    if handles is None:
        scan.mode = "blocks"
        _read_blocks(scan, data, wanted)
        return scan
    low = b""
    for high, start, size in handles:
        end = start + size
        if not _checks(data, start, end):
            scan.damaged.append(f"{start}+{size}: checksum mismatch")
            _loose_block(scan, data, start, end)
        elif range_wanted is None or range_wanted(low, high):
            _read_block(scan, data, start, end, wanted)
        else:
            scan.units += 1
        low = high
    return scan


def handle(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The block handle (offset, size) at ``buf[pos:end]`` and the position after it."""
    offset, pos = varint(buf, pos, end)
    size, pos = varint(buf, pos, end)
    return offset, size, pos


def index(data: bytes) -> list[tuple[bytes, int, int]] | None:
    """``(last user key bound, offset, size)`` of each data block, from a footer and index that check out."""
    if len(data) < FOOTER or bytes(data[-8:]) != MAGIC:
        return None
    footer = len(data) - FOOTER
    try:
        _, _, pos = handle(data, footer, footer + 40)
        offset, size, _ = handle(data, pos, footer + 40)
        if offset + size + TRAILER > footer or not _checks(data, offset, offset + size):
            return None
        handles = []
        for ikey, value in block_entries(_block_content(data, offset, offset + size)):
            start, length, _ = handle(value, 0, len(value))
            if start + length + TRAILER > offset:
                return None
            handles.append((bytes(ikey[:-8]), start, length))
        return handles
    except (ValueError, cramjam.DecompressionError):
        return None


def _ends(data: bytes, start: int, limit: int) -> Iterator[int]:
    """Positions ``end`` in ``(start, limit)`` where a block ``data[start:end]`` has a trailer that checks.

    Most candidates fail before a checksum is computed: an uncompressed data
    block starts with an entry sharing nothing (a 0) and ends with its
    restart array, whose first offset is 0; a Snappy block starts with its
    length (never 0) and a literal, and is at most 7/6 of that length; a
    filter block (uncompressed, any first byte) ends with its base, 11.
    """
    if start + 4 >= limit:
        return
    plain = data[start] == 0
    size = -1 if plain else _snappy_start(data, start)
    snappy_end = start + size + size // 6 + 64 if size > 0 else -1
    if plain:
        matches = _PLAIN_END.finditer(data, start + 3, limit)
    else:  # a Snappy block's end within its bound, then only a filter block's
        bound = min(limit, snappy_end + 1)
        matches = itertools.chain(_OTHER_END.finditer(data, start + 3, bound), _FILTER_END.finditer(data, max(start + 3, bound - 1), limit))
    running, done = 0, start
    for m in matches:
        end = m.end() - 1
        if end + TRAILER > len(data):
            return
        if end < done:
            continue  # found twice where the two searches meet
        if data[end] == SNAPPY:
            if end > snappy_end:
                continue
        elif plain:
            n = int.from_bytes(data[end - 4 : end], "little")
            if not n or start + 4 * n + 4 > end or data[end - 4 * n - 4 : end - 4 * n] != b"\0\0\0\0":
                if data[end - 1] != 11:
                    continue
        elif data[end - 1] != 11 or int.from_bytes(data[end - 5 : end - 1], "little") > end - start - 5:
            continue
        running = crc(data[done:end], running)
        done = end
        if masked(crc(data[end : end + 1], running)) == int.from_bytes(data[end + 1 : end + 5], "little"):
            yield end
            done = end + 1  # the block just yielded is a candidate no more
            running = crc(data[end : end + 1], running)


_TYPE_BYTE = re.compile(rb"[\x00\x01]")
_PLAIN_END = re.compile(rb"\x00")
_OTHER_END = re.compile(rb"\x01|\x0b\x00")  # a Snappy block's type, or a filter block's base and type
_FILTER_END = re.compile(rb"\x0b\x00")


def read_blocks(data: bytes, name: str, wanted: tuple[bytes, ...] = (b"",), start: int = 0) -> FileScan:
    """A table read block by block from ``start`` (a block's first byte), as :func:`read_table` reads one without its index."""
    scan = FileScan(name, len(data), "blocks")
    _read_blocks(scan, data, wanted, start)
    return scan


def _read_blocks(scan: FileScan, data: bytes, wanted: tuple[bytes, ...], pos: int = 0) -> None:
    """Read a table without its index, from ``pos`` (a block's start): each block ends where a trailer's checksum matches."""
    raw = data
    limit = len(raw) - TRAILER
    while pos < limit:
        end = next(_ends(raw, pos, min(limit + 1, pos + MAX_BLOCK)), None)
        if end is not None:
            _read_block(scan, raw, pos, end, wanted)
            pos = end + TRAILER
            continue
        nxt = _resync(raw, pos, limit)
        stop = len(raw) if nxt is None else nxt
        scan.damaged.append(f"{pos}+{stop - pos}: no block checks (cut short or damaged)")
        _loose_block(scan, raw, pos, stop, whole=False)
        if nxt is None:
            return
        pos = nxt


_RESYNC_SPAN = 256 << 10


def _resync(raw: bytes, pos: int, limit: int) -> int | None:
    """The start of the next block after a damaged one: the first spot a block checks from (a bounded search).

    A block follows a trailer (type byte 0 or 1, 4 checksum bytes) and
    starts like one: an uncompressed block with an entry sharing nothing
    (a 0), a Snappy block with its length then a literal.
    """
    stop = min(limit, pos + _RESYNC_SPAN)
    for m in _TYPE_BYTE.finditer(raw, pos + 1, stop):
        start = m.start() + TRAILER
        if start < limit and _starts_block(raw, start):
            if next(_ends(raw, start, min(limit + 1, start + _RESYNC_SPAN)), None) is not None:
                return start
    return None


def _starts_block(raw: bytes, start: int) -> bool:
    """Whether a data block may start at ``start``: its first entry shares nothing with a key before it."""
    try:
        if raw[start] == 0:  # uncompressed: shared 0, then the key's and the value's lengths
            unshared, pos = varint(raw, start + 1, min(len(raw), start + 6))
            _, pos = varint(raw, pos, min(len(raw), pos + 5))
            return unshared >= 8
        return _snappy_start(raw, start) >= 0
    except (ValueError, IndexError):
        return False


def _snappy_start(raw: bytes, start: int) -> int:
    """The uncompressed length of a Snappy block that may start at ``start``, else -1.

    The stream is the length, then a literal (tag's low bits 00) whose first
    byte is the block's first byte: 0, for an entry sharing nothing.
    """
    try:
        size, pos = varint(raw, start, min(len(raw), start + 5))
        tag = raw[pos]
        if size < 8 or tag & 3:
            return -1
        extra = (tag >> 2) - 59 if tag >> 2 >= 60 else 0
        return size if raw[pos + 1 + extra] == 0 else -1
    except (ValueError, IndexError):
        return -1


# --- posts without their block ------------------------------------------

# A table entry of a ``!post!`` key: shared and unshared lengths adding up to
# 46 (prefix, hash, 8-byte tag); a restart entry has the whole key (0, 46).
_ENTRY = re.compile(b"|".join(re.escape(bytes([s, _POST_KEY + 8 - s])) for s in [0, *range(len(_POST), _POST_KEY)]))
# A WriteBatch put of a ``!post!`` key: tag 1, the key's length, the key.
_BATCH_PUT = re.compile(rb"\x01" + bytes([_POST_KEY]) + re.escape(_POST))


def loose_posts(buf: bytes, source: str) -> list[Record]:
    """Every ``!post!`` put whose value's BLAKE2b matches its key, found in raw bytes (uncertified).

    Used where no checksum holds: only the hash links key and value, so
    the caller still proves each post (decode and signature).  A WriteBatch
    put whose key is damaged but whose value decodes as a post is kept under
    the value's own hash: a post certifies itself (its signature), so a
    flipped bit in the key loses nothing.
    """
    from cablestore.wire.codec import post_hash

    out, seen = [], set()
    n = len(buf)

    def value_at(pos: int) -> tuple[bytes, int] | None:
        try:
            size, pos = varint(buf, pos, n)
        except ValueError:
            return None
        if size < 96 or pos + size > n:
            return None
        return bytes(buf[pos : pos + size]), pos

    for m in _BATCH_PUT.finditer(buf):
        key = bytes(buf[m.start() + 2 : m.start() + 2 + _POST_KEY])
        got = value_at(m.start() + 2 + _POST_KEY) if len(key) == _POST_KEY else None
        if not got:
            continue
        real = _POST + post_hash(got[0])
        if real != key and not _decodes(got[0]):
            continue  # a damaged key (a flipped bit in its hash) before a post that decodes: keyed by its own hash
        if real not in seen:
            seen.add(real)
            out.append(Record(real, 0, VALUE, got[0], False, source))
    for m in _ENTRY.finditer(buf):
        shared, unshared = buf[m.start()], buf[m.start() + 1]
        try:
            size, pos = varint(buf, m.start() + 2, n)
        except ValueError:
            continue
        if size < 96 or pos + unshared + size > n:
            continue
        delta = buf[pos : pos + unshared]
        value = bytes(buf[pos + unshared : pos + unshared + size])
        key = _POST + post_hash(value)
        if bytes(delta[:-8]) != key[shared:] or key in seen:
            continue
        tag = int.from_bytes(delta[-8:], "little")
        if tag & 0xFF != VALUE:
            continue
        seen.add(key)
        out.append(Record(key, tag >> 8, VALUE, value, False, source))
    return out


def _decodes(value: bytes) -> bool:
    from cablestore.errors import CableError
    from cablestore.wire.codec import decode_post

    try:
        decode_post(value)
    except CableError:
        return False
    return True
