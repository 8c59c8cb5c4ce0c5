"""The values views are computed from: an indexed post and a tombstone.

Both are plain data so that the live store and the Spark rebuild can hand
them to the same view functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgpack

from .codec import CHANNEL_TYPES, Post, decode_post, post_hash
from .errors import CorruptRecordError
from .keys import canonical_channel, mono


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a ``post/delete`` left behind for one target (primary data).

    The deleted post's content is gone for good, so everything a rebuild or a
    late-arriving copy needs is kept here: who deleted it, and the target's
    author, type, timestamp and channels when the target was known.
    """

    target: bytes
    by: bytes  # hash of the post/delete
    deleter: bytes  # public key of the post/delete's author
    author: bytes | None = None
    post_type: int | None = None
    timestamp: int | None = None
    channels: tuple[str, ...] = ()

    def pack(self) -> bytes:
        """The stored value: msgpack ``[deleter, author, type, timestamp, channels]``."""
        return msgpack.packb([self.deleter, self.author, self.post_type, self.timestamp, list(self.channels)])

    @classmethod
    def unpack(cls, target: bytes, by: bytes, value: bytes) -> "Tombstone":
        """Decode a stored tombstone; a damaged one raises :class:`CorruptRecordError`."""
        try:
            deleter, author, post_type, timestamp, channels = msgpack.unpackb(value)
            if len(target) != 32 or len(by) != 32 or len(deleter) != 32:
                raise ValueError("hash or key of the wrong length")
            return cls(target, by, deleter, author, post_type, timestamp, tuple(channels))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptRecordError(
                f"tombstone {target.hex()}/{by.hex()} is damaged ({exc}); run `cablestore check STORE --repair`"
            ) from exc

    @property
    def authorized(self) -> bool:
        """True unless the target is known to belong to someone else."""
        return self.author is None or self.author == self.deleter


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
    def of(cls, buf: bytes, post: Post | None = None, h: bytes | None = None, tombstones: Iterable[Tombstone] = ()) -> "Indexed":
        """Index the post ``buf`` (decoded and hashed unless ``post`` and ``h`` are given)."""
        post = post if post is not None else decode_post(buf)
        h = h if h is not None else post_hash(buf)
        channel = canonical_channel(post.channel) if post.post_type in CHANNEL_TYPES else None
        return cls(h, post, mono(post.timestamp, h), channel, tuple(tombstones))
