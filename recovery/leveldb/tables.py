"""LevelDB's table files read block by block, each record with its checksum's verdict.

The format is leveldb's ``doc/table_format.md`` (the logs, ``doc/log_format.md``,
are read by :mod:`cablestore.recovery.leveldb.log`):

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

import cramjam

from cablestore.recovery.leveldb.loose import loose_posts
from cablestore.recovery.leveldb.records import (  # noqa: F401  (the readers' shared names, public here too)
    DELETION,
    FOOTER,
    MAGIC,
    MAX_BLOCK,
    MAX_SEQ,
    NO_COMPRESSION,
    SNAPPY,
    TRAILER,
    VALUE,
    FileScan,
    Record,
    crc,
    masked,
    varint,
)

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
