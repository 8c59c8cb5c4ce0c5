"""The values views are computed from: an indexed post and a tombstone.

Both are plain data so that the live store and the Spark rebuild can hand
them to the same view functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import blake3
import msgpack

from cablestore.compiled import native as _native
from cablestore.errors import CorruptRecordError
from cablestore.keyspace.keys import canonical_channel, mono
from cablestore.wire.codec import CHANNEL_CODEPOINTS, CHANNEL_TYPES, POST_TYPE_NAMES, Post, decode_post, post_hash, slot_setters


def _tag(target: bytes, by: bytes, fields: list) -> bytes:
    return blake3.blake3(target + by + msgpack.packb(fields)).digest(8)


def _is_key(value) -> bool:
    return isinstance(value, bytes) and len(value) == 32


def _is_channel(value) -> bool:
    # Canonical, by this version's rule or by the casefold-only rule of stores
    # written by 0.1.0 (read canonicalized).  Casefolding can triple a
    # name's length: 64 "ß" are 128 codepoints canonical.
    return isinstance(value, str) and 1 <= len(value) <= 3 * CHANNEL_CODEPOINTS[1] and value in (canonical_channel(value), value.casefold())


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a ``post/delete`` left behind for one target (primary data).

    The deleted post's content is gone for good, so everything a rebuild or a
    late-arriving copy needs is kept here: who deleted it, and the target's
    author, type, timestamp and channels when the target was known.

    A post/delete deleted by its author (a delete of a delete) keeps what it
    still has to learn of its targets: ``retired`` tombstones, the ones of
    its targets it knew nothing of.  A retired tombstone deletes nothing (the
    target may be stored again); it waits for its target, which, when
    offered, teaches the deletes of that delete its channels, and then goes.
    The tombstones of the deleted delete name them in ``keeps`` (the
    targets), so they go with those tombstones.
    """

    target: bytes
    by: bytes  # hash of the post/delete
    deleter: bytes  # public key of the post/delete's author
    author: bytes | None = None
    post_type: int | None = None
    timestamp: int | None = None
    channels: tuple[str, ...] = ()
    retired: bool = False  # its post/delete was deleted by its author: it deletes nothing, it only waits to learn
    keeps: tuple[bytes, ...] = ()  # target is a deleted post/delete: its retired tombstones' targets, sorted

    def fields(self) -> list:
        """The stored fields, in record order (the tag covers them): five, and a map of the others when any is set."""
        fields = [self.deleter, self.author, self.post_type, self.timestamp, list(self.channels)]
        extra = {}
        if self.retired:
            extra["retired"] = True
        if self.keeps:
            extra["keeps"] = list(self.keeps)
        return fields + [extra] if extra else fields

    def pack(self) -> bytes:
        """The stored value: msgpack ``[deleter, author, type, timestamp, channels, tag]``, or with ``{retired, keeps}`` before the tag."""
        fields = self.fields()
        return msgpack.packb(fields + [_tag(self.target, self.by, fields)])

    @classmethod
    def unpack(cls, target: bytes, by: bytes, value: bytes) -> Tombstone:
        """Decode a stored tombstone; a damaged one raises :class:`CorruptRecordError`.

        Every field is type-checked and the record carries a tag over its
        key and fields, so a flipped bit in a channel name or an author is a
        fault, never a wrong view entry.
        """
        try:
            return cls._parse(target, by, value)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptRecordError(
                f"tombstone {target.hex()}/{by.hex()} is damaged ({exc}); Store.check(fix=True) sets it aside"
            ) from exc

    @classmethod
    def _parse(cls, target: bytes, by: bytes, value: bytes) -> Tombstone:
        record = msgpack.unpackb(value)
        if not isinstance(record, list) or len(record) not in (6, 7):
            raise ValueError("not a 6- or 7-field record")
        *fields, tag = record
        deleter, author, post_type, timestamp, channels = fields[:5]
        extra = fields[5] if len(fields) == 6 else {}
        if not isinstance(extra, dict) or (len(fields) == 6 and not extra) or not set(extra) <= {"retired", "keeps"}:
            raise ValueError("the sixth field is not a map of retired and keeps")
        retired, keeps = extra.get("retired", False), extra.get("keeps", [])
        if retired is not True and "retired" in extra:
            raise ValueError(f"retired {retired!r}")
        if not isinstance(keeps, list) or ("keeps" in extra and not keeps) or not all(_is_key(k) for k in keeps) or keeps != sorted(set(keeps)):
            raise ValueError("keeps is not a sorted list of hashes")
        if len(target) != 32 or len(by) != 32 or not _is_key(deleter) or not (author is None or _is_key(author)):
            raise ValueError("hash or key of the wrong length")
        if not (post_type is None or (type(post_type) is int and post_type in POST_TYPE_NAMES)):
            raise ValueError(f"post type {post_type!r}")
        if not (timestamp is None or (type(timestamp) is int and 0 <= timestamp < 1 << 64)):
            raise ValueError(f"timestamp {timestamp!r}")
        if not isinstance(channels, list) or not all(_is_channel(c) for c in channels):
            raise ValueError("channels are not canonical channel names")
        if tag != _tag(target, by, fields):
            raise ValueError("tag does not match the record")
        channels = tuple(dict.fromkeys(map(canonical_channel, channels)))
        return cls(target, by, deleter, author, post_type, timestamp, channels, retired, tuple(keeps))

    def with_target(self, author: bytes, post_type: int, timestamp: int, channels: Iterable[str]) -> Tombstone:
        """This tombstone, completed with what its target turned out to be."""
        return Tombstone(self.target, self.by, self.deleter, author, post_type, timestamp, tuple(channels), self.retired, self.keeps)

    def with_channels(self, channels: Iterable[str]) -> Tombstone:
        """This tombstone with more channels its target is known to have been in."""
        merged = tuple(sorted(set(self.channels) | set(channels)))
        return Tombstone(self.target, self.by, self.deleter, self.author, self.post_type, self.timestamp, merged, self.retired, self.keeps)

    def with_keeps(self, keeps: Iterable[bytes]) -> Tombstone:
        """This tombstone naming ``keeps`` as its (deleted post/delete) target's retired tombstones."""
        return Tombstone(self.target, self.by, self.deleter, self.author, self.post_type, self.timestamp, self.channels, self.retired, tuple(sorted(set(keeps))))

    def with_retired(self, retired: bool) -> Tombstone:
        """This tombstone retired (its post/delete was deleted by its author) or active again (that post/delete is back)."""
        return Tombstone(self.target, self.by, self.deleter, self.author, self.post_type, self.timestamp, self.channels, retired, self.keeps)

    @property
    def knows_target(self) -> bool:
        """True once the tombstone has learned who wrote its target (and its type, timestamp, channels)."""
        return self.author is not None

    @property
    def authorized(self) -> bool:
        """True unless the target is known to belong to someone else, or the tombstone is retired (it deletes nothing)."""
        return not self.retired and (self.author is None or self.author == self.deleter)


@dataclass(frozen=True, slots=True)
class Indexed:
    """A stored post with what the views need besides its bytes.

    ``tombstones`` are the ones this post made (only for ``post/delete``):
    a delete is listed under the channels of the posts it deleted.
    """

    hash: bytes
    post: Post
    mono: bytes
    channel: str | None  # canonical spelling, for channel post types
    tombstones: tuple[Tombstone, ...] = ()

    @classmethod
    def of(cls, buf: bytes, post: Post | None = None, h: bytes | None = None, tombstones: Iterable[Tombstone] = ()) -> Indexed:
        """Index the post ``buf`` (decoded and hashed unless ``post`` and ``h`` are given)."""
        post = post if post is not None else decode_post(buf)
        h = h if h is not None else post_hash(buf)
        if _new_indexed is not None and cls is Indexed and type(h) is bytes:
            return _new_indexed(h, post, tombstones)
        channel = canonical_channel(post.channel) if post.post_type in CHANNEL_TYPES else None
        if cls is not Indexed:
            return cls(h, post, mono(post.timestamp, h), channel, tuple(tombstones))
        # Built once per post on every ingest, reindex and rebuild: skip the frozen __init__.
        ip = object.__new__(Indexed)
        s_hash, s_post, s_mono, s_channel, s_tombstones = _INDEXED_SETTERS
        s_hash(ip, h)
        s_post(ip, post)
        s_mono(ip, mono(post.timestamp, h))
        s_channel(ip, channel)
        s_tombstones(ip, tombstones if type(tombstones) is tuple else tuple(tombstones))
        return ip


_INDEXED_SETTERS = slot_setters(Indexed)
assert len(_INDEXED_SETTERS) == 5

# The compiled constructor when the extension is there (cablestore.compiled).
_new_indexed = None
if _native is not None:
    _native.bind_records(Indexed, canonical_channel)
    _new_indexed = _native.new_indexed
