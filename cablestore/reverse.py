"""The reverse-hash lookup: from a post's hash to every view key that indexes it.

    !rev!<hash> -> msgpack [timestamp, [key prefix, ...]]

Every per-post view key ends in the post's mono timestamp (timestamp + hash),
so the entry stores only what comes before it, and the timestamp once:
``key = prefix + timestamp(8 bytes) + hash``.  That halves the entry without
losing anything a delete needs, even when the post's blob is gone.
"""

from __future__ import annotations

import msgpack

from .keys import MONO_SIZE, TS_SIZE

PREFIX = b"!rev!"


def key(post_hash: bytes) -> bytes:
    return PREFIX + post_hash


def pack(timestamp: int, mono: bytes, keys) -> bytes:
    prefixes = []
    for k in keys:
        if not k.endswith(mono):  # every view key ends in the mono timestamp
            raise ValueError(f"view key {k!r} does not end in the post's mono timestamp")
        prefixes.append(k[:-MONO_SIZE])
    return msgpack.packb([timestamp, prefixes])


def unpack(post_hash: bytes, value: bytes) -> list[bytes]:
    timestamp, prefixes = msgpack.unpackb(value)
    suffix = timestamp.to_bytes(TS_SIZE, "big") + post_hash
    return [p + suffix for p in prefixes]
