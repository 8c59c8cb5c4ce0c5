"""The reverse-hash lookup: from a post's hash to the view keys that index it.

    !rev!<hash> -> msgpack [timestamp, post_type, public_key, [channel, ...]]

The entry stores the few fields the view modules build keys from, not the
keys themselves, and :func:`keys` runs the views on them: one definition of
every key, and a third of the bytes (a text post's keys repeat its public key
and channel; this stores each once).  It gives every key of the post but
its linker entries (``!rev!<target>l<hash>``, one per link): a post's links
are in its bytes, which every removal reads, so storing them here again cost
0.17x the raw post bytes on disk for nothing.  (Entries written before
carry the links as a fifth field; :func:`stand_in` still reads them.)

The fields are the ones ``views`` read, links aside: post type, public key,
timestamp, channel, and for a post/delete the channels it is listed under.
A view that starts reading another field must add it here
(``tests/test_reverse.py`` checks every post type against the views).
"""

from __future__ import annotations

import msgpack

from cablestore.compiled import native as _native
from cablestore.keyspace.keys import REVERSE, mono
from cablestore.keyspace.records import Indexed, Tombstone
from cablestore.wire.codec import CHANNEL_TYPES, DELETE, Post

PREFIX = REVERSE


def key(post_hash: bytes) -> bytes:
    return PREFIX + post_hash


def pack(ip: Indexed) -> bytes:
    if ip.post.post_type == DELETE:
        channels = sorted({c for t in ip.tombstones for c in t.channels})
    else:
        channels = [ip.channel] if ip.channel is not None else []
    return _pack([ip.post.timestamp, ip.post.post_type, ip.post.public_key, channels])


_pack = msgpack.Packer().pack  # msgpack.packb's own settings, without a new Packer per post
pack_py = pack
if _native is not None:  # the compiled twin (cablestore.compiled): the same bytes
    _native.bind_reverse(pack_py, PREFIX)
    pack = _native.reverse_pack


def stand_in(post_hash: bytes, value: bytes) -> Indexed:
    """An Indexed with just the fields the views read, rebuilt from the entry."""
    timestamp, post_type, public_key, channels, *rest = msgpack.unpackb(value)
    post = Post(public_key, b"", tuple(rest[0]) if rest else (), post_type, timestamp)
    if post_type == DELETE:
        made = (Tombstone(b"", post_hash, public_key, channels=tuple(channels)),)
        return Indexed(post_hash, post, mono(timestamp, post_hash), None, made)
    return Indexed(post_hash, post, mono(timestamp, post_hash), channels[0] if channels else None)


def channel_of(value: bytes) -> str | None:
    """The channel of a channel post from its entry (None for other posts or a damaged entry)."""
    try:
        _, post_type, _, channels, *_ = msgpack.unpackb(value)
        return channels[0] if post_type in CHANNEL_TYPES and channels else None
    except (ValueError, TypeError, IndexError, msgpack.UnpackException):
        return None  # the rebuild reports and repairs a damaged entry
