"""Reading LevelDB's own files, leniently, to find what LevelDB itself would lose.

LevelDB deletes every table its MANIFEST does not list when it opens a
database: with a damaged MANIFEST that is most of the data.  Before opening,
:func:`unlisted_tables` compares the table files on disk with the MANIFEST's
edits.  :func:`records` reassembles log-format records (the MANIFEST and the
write-ahead logs share the format) without checking CRCs, so a damaged
record still yields what it says; :func:`mentioned_tables` names every table
an edit mentions.  :func:`manifest_tables` is the strict reading, the live
tables of a MANIFEST every record of which checks (salvage's list of what
LevelDB would keep).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from cablestore.recovery.leveldb.log import log_payloads
from cablestore.recovery.leveldb.records import varint

BLOCK = 32768
TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
_TABLE = re.compile(r"^(\d+)\.(ldb|sst)$")
# VersionEdit tags (leveldb/db/version_edit.cc)
_COMPARATOR, _LOG, _NEXT_FILE, _LAST_SEQ, _COMPACT_POINTER, _DELETED_FILE, _NEW_FILE, _PREV_LOG = 1, 2, 3, 4, 5, 6, 7, 9


def torn_tail(data: bytes) -> bool:
    """True if the MANIFEST's records stop before its data does: a damaged file.

    LevelDB syncs every MANIFEST record and pads only the last 1-6 bytes of
    a block, so a record cut short, a header of zeros with data after it,
    or an unknown record type means the file was damaged (or the machine
    lost power mid-write).  LevelDB reads such a spot as the end of the
    file, or skips it, forgetting the tables the lost edit listed.
    """
    pending = False
    for start in range(0, len(data), BLOCK):
        block = data[start : start + BLOCK]
        pos = 0
        while pos + 7 <= len(block):
            length = int.from_bytes(block[pos + 4 : pos + 6], "little")
            kind = block[pos + 6]
            if kind not in (1, 2, 3, 4) or pos + 7 + length > len(block):
                return any(data[start + pos :])  # zeros to the end are preallocation, not damage
            pos += 7 + length
            pending = kind in (2, 3)
        if any(block[pos:]):
            return True
    return pending


def records(data: bytes) -> Iterator[bytes]:
    """Yield each record's payload (7-byte headers, 32 KiB blocks, CRCs ignored)."""
    pending = b""
    for start in range(0, len(data), BLOCK):
        block = data[start : start + BLOCK]
        pos = 0
        while pos + 7 <= len(block):
            length = int.from_bytes(block[pos + 4 : pos + 6], "little")
            kind = block[pos + 6]
            if pos + 7 + length > len(block):
                break  # cut short: LevelDB reads the end of the file here
            fragment = block[pos + 7 : pos + 7 + length]
            pos += 7 + length
            if kind == 1:  # FULL
                yield fragment
                pending = b""
            elif kind == 2:  # FIRST
                pending = fragment
            elif kind == 3:  # MIDDLE
                pending += fragment
            elif kind == 4:  # LAST
                yield pending + fragment
                pending = b""
            else:  # zero padding at a block's end, or damage: skip the rest of the block
                break


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    return varint(buf, pos, len(buf))


def _skip_string(buf: bytes, pos: int) -> int:
    n, pos = _varint(buf, pos)
    if pos + n > len(buf):
        raise ValueError("string runs past the edit")
    return pos + n


def mentioned_tables(manifest: bytes) -> tuple[set[int], int] | None:
    """Table numbers any edit of the MANIFEST adds or deletes, and the last log number it records.

    None if an edit does not parse.
    """
    found: set[int] = set()
    log_number = 0
    try:
        for edit in records(manifest):
            pos = 0
            while pos < len(edit):
                tag, pos = _varint(edit, pos)
                if tag == _LOG:
                    log_number, pos = _varint(edit, pos)
                elif tag in (_NEXT_FILE, _LAST_SEQ, _PREV_LOG):
                    _, pos = _varint(edit, pos)
                elif tag == _COMPARATOR:
                    pos = _skip_string(edit, pos)
                elif tag == _COMPACT_POINTER:
                    _, pos = _varint(edit, pos)
                    pos = _skip_string(edit, pos)
                elif tag == _DELETED_FILE:
                    _, pos = _varint(edit, pos)
                    number, pos = _varint(edit, pos)
                    found.add(number)
                elif tag == _NEW_FILE:
                    _, pos = _varint(edit, pos)
                    number, pos = _varint(edit, pos)
                    _, pos = _varint(edit, pos)
                    pos = _skip_string(edit, _skip_string(edit, pos))  # smallest, largest key
                    found.add(number)
                else:
                    return None
    except (ValueError, IndexError):
        return None
    return found, log_number


def manifest_tables(data: bytes) -> tuple[set[int], int] | None:
    """The live table numbers of a MANIFEST and its last log number; None unless every record checks and parses."""
    live: set[int] = set()
    log_number = 0
    try:
        for payload, status, _ in log_payloads(data):
            if status != "ok":
                return None
            pos, n = 0, len(payload)
            while pos < n:
                tag, pos = varint(payload, pos, n)
                if tag == _LOG:
                    log_number, pos = varint(payload, pos, n)
                elif tag in (_NEXT_FILE, _LAST_SEQ, _PREV_LOG):
                    _, pos = varint(payload, pos, n)
                elif tag == _COMPARATOR:
                    size, pos = varint(payload, pos, n)
                    pos += size
                elif tag == _COMPACT_POINTER:  # level, key
                    _, pos = varint(payload, pos, n)
                    size, pos = varint(payload, pos, n)
                    pos += size
                elif tag == _DELETED_FILE:  # level, number
                    _, pos = varint(payload, pos, n)
                    number, pos = varint(payload, pos, n)
                    live.discard(number)
                elif tag == _NEW_FILE:  # level, number, size, smallest, largest
                    _, pos = varint(payload, pos, n)
                    number, pos = varint(payload, pos, n)
                    _, pos = varint(payload, pos, n)
                    for _ in range(2):
                        size, pos = varint(payload, pos, n)
                        pos += size
                    live.add(number)
                else:
                    return None
                if pos > n:
                    return None
    except ValueError:
        return None
    return live, log_number


def unlisted_tables(path: Path) -> list[str]:
    """Complete tables a MANIFEST that lost edits does not mention: LevelDB would delete them.

    A crash during a compaction can leave a complete table the MANIFEST
    never listed (its data is still in the compaction's inputs or the log),
    so unlisted tables count only when the MANIFEST shows it lost edits:
    it is torn, or the log it names last is gone (LevelDB deletes a log only
    after an edit moving past it: that edit is missing).  A table cut short
    (no footer) is the leftover of an interrupted write.  An unreadable
    CURRENT or MANIFEST is left to LevelDB's own checks.
    """
    try:
        manifest_name = (path / "CURRENT").read_text().strip()
        manifest = (path / manifest_name).read_bytes()
    except (OSError, UnicodeDecodeError):
        return []
    parsed = mentioned_tables(manifest)
    if parsed is None:
        return []
    mentioned, log_number = parsed
    if not torn_tail(manifest) and (path / f"{log_number:06d}.log").exists():
        return []
    out = []
    for f in sorted(path.iterdir()):
        m = _TABLE.match(f.name)
        if m and int(m.group(1)) not in mentioned and _complete(f):
            out.append(f.name)
    return out


def _complete(table: Path) -> bool:
    try:
        with open(table, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() < 48:
                return False
            fh.seek(-8, 2)
            return fh.read(8) == TABLE_MAGIC
    except OSError:
        return False
