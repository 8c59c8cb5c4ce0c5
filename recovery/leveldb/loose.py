"""Posts found in raw bytes where no checksum holds (a damaged table block, a torn log).

A post certifies itself: only its BLAKE2b links key and value here, so the
caller still proves each one (decode and signature).
"""

from __future__ import annotations

import re

from cablestore.recovery.leveldb.records import POST_KEY_LENGTH, POST_PREFIX, VALUE, Record, varint

# A table entry of a ``!post!`` key: shared and unshared lengths adding up to
# 46 (prefix, hash, 8-byte tag); a restart entry has the whole key (0, 46).
_ENTRY = re.compile(b"|".join(re.escape(bytes([s, POST_KEY_LENGTH + 8 - s])) for s in [0, *range(len(POST_PREFIX), POST_KEY_LENGTH)]))
# A WriteBatch put of a ``!post!`` key: tag 1, the key's length, the key.
_BATCH_PUT = re.compile(rb"\x01" + bytes([POST_KEY_LENGTH]) + re.escape(POST_PREFIX))


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
        key = bytes(buf[m.start() + 2 : m.start() + 2 + POST_KEY_LENGTH])
        got = value_at(m.start() + 2 + POST_KEY_LENGTH) if len(key) == POST_KEY_LENGTH else None
        if not got:
            continue
        real = POST_PREFIX + post_hash(got[0])
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
        key = POST_PREFIX + post_hash(value)
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
