"""Cable's field encodings (wire.md §6.1): unsigned LEB128 varints, length-prefixed
UTF-8 strings and hash lists, and the size limits of the spec.  The post codec
(:mod:`cablestore.wire.codec`) and the message codec build on these."""

from __future__ import annotations

from collections.abc import Iterable

from cablestore.errors import LimitError, TruncatedError, Utf8Error, VarintError

PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64
HASH_SIZE = 32
HEADER_FIXED = PUBLIC_KEY_SIZE + SIGNATURE_SIZE
U64_MAX = (1 << 64) - 1

# Limits from the spec (see shared DESIGN notes); codepoints unless stated.
MAX_TEXT_BYTES = 4096
CHANNEL_CODEPOINTS = (1, 64)
MAX_TOPIC_CODEPOINTS = 512
INFO_KEY_CODEPOINTS = (1, 128)
MAX_INFO_VALUE_BYTES = 4096
NAME_CODEPOINTS = (1, 32)
MAX_REASON_CODEPOINTS = 128
RECIPIENTS = (1, 16)  # recipient_count of user and post actions, blocks and unblocks
ACCEPT_ROLE = "accept-role"  # post/info key whose value is a varint, 0 or 1 (wire.md §6.2.4), not text
ACCEPT_ROLE_VALUES = {"\x00": 0, "\x01": 1}  # its one-byte values as decoded (Post.info holds str pairs)


def encode_varint(n: int) -> bytes:
    """``n`` (0 to 2**64 - 1) as a minimal unsigned LEB128 varint."""
    if n < 0 or n > U64_MAX:
        raise LimitError(f"varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned LEB128 varint at ``pos``; return ``(value, new_pos)``."""
    end = len(buf)
    if pos >= end:
        raise TruncatedError("varint runs past the end of the buffer")
    b = buf[pos]
    if b < 0x80:  # the common one-byte case
        return b, pos + 1
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise TruncatedError("varint runs past the end of the buffer")
        if pos - start >= 10:
            raise VarintError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    if b == 0:
        raise VarintError("non-minimal varint encoding")
    if result > U64_MAX:
        raise VarintError("varint overflows u64")
    return result, pos


def read_str(buf: bytes, pos: int, what: str) -> tuple[str, int, int]:
    """Return ``(string, byte_length, new_pos)`` for a length-prefixed UTF-8 string."""
    if pos < len(buf) and buf[pos] < 0x80:  # a one-byte length, read inline (hot)
        n = buf[pos]
        pos += 1
    else:
        n, pos = read_varint(buf, pos)
    end = pos + n
    if end > len(buf):
        raise TruncatedError(f"{what}: declared length {n} exceeds the buffer")
    try:
        return buf[pos:end].decode("utf-8"), n, end
    except UnicodeDecodeError as exc:
        raise Utf8Error(f"{what} is not valid UTF-8") from exc


def read_hashes(buf: bytes, pos: int, what: str) -> tuple[tuple[bytes, ...], int]:
    """A varint count and that many 32-byte hashes; return ``(hashes, new_pos)``."""
    count, pos = read_varint(buf, pos)
    # Checked before slicing so a huge count never allocates anything.
    if count * HASH_SIZE > len(buf) - pos:
        raise TruncatedError(f"{what}: {count} hashes exceed the buffer")
    hashes = tuple(buf[pos + i * HASH_SIZE : pos + (i + 1) * HASH_SIZE] for i in range(count))
    return hashes, pos + count * HASH_SIZE


def check_codepoints(value: str, bounds: tuple[int, int], what: str) -> None:
    """Refuse (:class:`cablestore.errors.LimitError`) a string whose codepoint count is outside ``bounds``."""
    lo, hi = bounds
    if not lo <= len(value) <= hi:
        raise LimitError(f"{what} must be {lo}-{hi} codepoints, got {len(value)}")


def encode_str(value: str) -> bytes:
    """A string as a varint byte length and its UTF-8 bytes."""
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates have no UTF-8 form
        raise Utf8Error(f"string is not encodable as UTF-8: {exc}") from exc
    return encode_varint(len(raw)) + raw


def check_accept_role(value: str) -> None:
    """Refuse (:class:`cablestore.errors.LimitError`) an ``accept-role`` value that is not the varint 0 or 1.

    wire.md §6.2.4 and cable.js 0.2.1 (``validation.checkAcceptRole``, on
    decoding and encoding alike): exactly one byte, ``0x00`` or ``0x01``.  The
    text ``"0"`` or ``"1"`` is refused as cable.js refuses it.
    """
    if value not in ACCEPT_ROLE_VALUES:
        raise LimitError(f"accept-role must be the varint 0 or 1 (one byte, 0x00 or 0x01), got {value.encode('utf-8', 'surrogatepass')[:16]!r}")


def accept_role_text(value: object) -> object:
    """An ``accept-role`` value as a post/info holds it: 0, 1, True or False become ``"\\x00"`` or ``"\\x01"``.

    Another integer raises :class:`cablestore.errors.LimitError`; anything else is returned as it is
    (a string is checked when the post is encoded).
    """
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return "\x01" if value else "\x00"
    if isinstance(value, int):
        raise LimitError(f"accept-role must be 0 or 1, got {value}")
    return value


def info_dict(pairs: Iterable[tuple[str, str]]) -> dict[str, str | int]:
    """A post/info's pairs as a dict for people and JSON: the last value of a repeated key, ``accept-role`` as the integer 0 or 1."""
    return {k: ACCEPT_ROLE_VALUES.get(v, v) if k == ACCEPT_ROLE else v for k, v in pairs}
