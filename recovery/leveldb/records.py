"""What every LevelDB file reader shares: the format's constants, CRC32C and its masking, varints,
and :class:`Record` / :class:`FileScan`, what a scan of one file found."""

from __future__ import annotations

from dataclasses import dataclass, field

import google_crc32c

MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
FOOTER = 48
TRAILER = 5
MAX_SEQ = (1 << 56) - 1  # index and seek keys carry it; stored entries never do
DELETION, VALUE = 0, 1
NO_COMPRESSION, SNAPPY = 0, 1
MAX_BLOCK = 4 << 20  # a block is ~32 KiB (cablestore's block_size) plus one entry: 4 MiB bounds a search for its end
_MASK_DELTA = 0xA282EAD8
POST_PREFIX = b"!post!"
POST_KEY_LENGTH = len(POST_PREFIX) + 32


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
    mode: str  # "index", "blocks" (a table read block by block), "log" (cablestore.recovery.leveldb.log)
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
