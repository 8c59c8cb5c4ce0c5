"""LevelDB's log format read record by record: the write-ahead logs' WriteBatches (the MANIFEST, in the
same format, is read by :mod:`cablestore.recovery.leveldb.manifest`).

The format is leveldb's ``doc/log_format.md``: 32 KiB blocks of records
with a 7-byte header (masked CRC32C of the type and data, length, type
FULL/FIRST/MIDDLE/LAST).  A write-ahead log's record is a WriteBatch: an
8-byte sequence number, a 4-byte count, then puts (1, key, value) and
deletes (0, key), each key and value after its varint length.  A record
whose checksum fails is not trusted, but the posts in it are still looked
for (:func:`cablestore.recovery.leveldb.loose.loose_posts`).
"""

from __future__ import annotations

from collections.abc import Iterator

from cablestore.recovery.leveldb.loose import loose_posts
from cablestore.recovery.leveldb.records import DELETION, VALUE, FileScan, Record, crc, masked, varint

LOG_BLOCK = 32768


def log_payloads(data: bytes) -> Iterator[tuple[bytes, str, int]]:
    """``(payload, status, offset)`` of each record of a log-format file.

    ``status`` is ``"ok"`` (every fragment's checksum checked), ``"torn"``
    (cut short at the end of the file: what a crash mid-write leaves) or
    ``"bad"``: a checksum failed, or a fragment's neighbours were lost; the
    rest of a block after a bad header comes as one ``"bad"`` payload (its
    length field cannot be trusted).
    """
    pending: list[bytes] | None = None
    pending_ok, pending_at = True, 0
    n = len(data)
    for block in range(0, n, LOG_BLOCK):
        pos, stop = block, min(block + LOG_BLOCK, n)
        while pos + 7 <= stop:
            length = int.from_bytes(data[pos + 4 : pos + 6], "little")
            kind = data[pos + 6]
            if kind == 0 and length == 0 and not any(data[pos : pos + 4]):
                if any(data[pos:stop]):
                    yield data[pos:stop], "bad", pos
                break  # zeros: padding or preallocation
            end = pos + 7 + length
            if end > stop and stop == n and kind in (1, 2, 3, 4):
                if pending is not None:
                    pending.append(data[pos + 7 : n])
                    yield b"".join(pending), "torn", pending_at
                    pending = None
                else:
                    yield data[pos + 7 : n], "torn", pos
                break
            ok = end <= stop and kind in (1, 2, 3, 4)
            ok = ok and masked(crc(data[pos + 6 : end])) == int.from_bytes(data[pos : pos + 4], "little")
            if not ok:
                if pending is not None:
                    yield b"".join(pending), "bad", pending_at
                    pending = None
                yield data[pos:stop], "bad", pos
                break
            fragment = data[pos + 7 : end]
            if kind == 1:  # FULL
                if pending is not None:
                    yield b"".join(pending), "bad", pending_at
                    pending = None
                yield fragment, "ok", pos
            elif kind == 2:  # FIRST
                if pending is not None:
                    yield b"".join(pending), "bad", pending_at
                pending, pending_ok, pending_at = [fragment], True, pos
            elif pending is None:  # MIDDLE or LAST without its FIRST
                pending, pending_ok, pending_at = [fragment], False, pos
            else:
                pending.append(fragment)
            if kind == 4 and pending is not None:  # LAST
                yield b"".join(pending), "ok" if pending_ok else "bad", pending_at
                pending = None
            pos = end
    if pending is not None:
        yield b"".join(pending), "torn", pending_at  # cut short at the end of the file


def batch_records(payload: bytes, certified: bool, source: str, wanted: tuple[bytes, ...]) -> list[Record]:
    """The puts and deletes of a WriteBatch (ValueError if it does not parse)."""
    if len(payload) < 12:
        raise ValueError("batch too short")
    seq = int.from_bytes(payload[:8], "little")
    count = int.from_bytes(payload[8:12], "little")
    pos, n, out = 12, len(payload), []
    for i in range(count):
        if pos >= n:
            raise ValueError("batch shorter than its count")
        kind = payload[pos]
        size, pos = varint(payload, pos + 1, n)
        key, pos = payload[pos : pos + size], pos + size
        value = b""
        if kind == VALUE:
            size, pos = varint(payload, pos, n)
            value, pos = payload[pos : pos + size], pos + size
        elif kind != DELETION:
            raise ValueError(f"unknown batch record type {kind}")
        if pos > n:
            raise ValueError("record runs past the batch")
        if key.startswith(wanted):
            out.append(Record(bytes(key), seq + i, kind, bytes(value), certified, source))
    if pos != n:
        raise ValueError("bytes after the batch's last record")
    return out


def read_log(data: bytes, name: str, wanted: tuple[bytes, ...] = (b"",)) -> FileScan:
    """Every put and delete of a write-ahead log, each record's checksum checked."""
    scan = FileScan(name, len(data), "log")
    for payload, status, at in log_payloads(data):
        source = f"{name}@{at}"
        if status == "ok":
            try:
                scan.records.extend(batch_records(payload, True, source, wanted))
                scan.units += 1
                continue
            except ValueError as exc:
                scan.damaged.append(f"{at}+{len(payload)}: checksum ok but {exc}")
        elif status == "bad":
            scan.damaged.append(f"{at}+{len(payload)}: checksum mismatch")
        scan.records.extend(loose_posts(payload, source))  # a torn write too: never acknowledged, still proven posts
    return scan
