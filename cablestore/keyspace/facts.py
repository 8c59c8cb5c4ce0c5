"""Facts: what the moderation state needs of a post a block removed from the store.

A block with ``drop = 1`` removes every post of its recipients and refuses
the ones still to come (moderation.md §4.6: such posts "MUST be discarded").
The moderation state is a function of the whole set of posts offered, and
whose block stands can depend on the blocked user's own moderation posts and
``accept-role`` (a block that stands only through authority its target
gave does not stand; an admin who opted out of roles can be blocked), so the
store keeps, for each post/info and post of types 6-9 it removes or refuses
that way, the fields the state reads, never the post: no text, no reason, no
signature, nothing a peer is ever sent.

    !facts!<hash> -> msgpack [post_type, public_key, timestamp, channel,
                              recipients, role, action, drop, notify, undrop,
                              accept_role, tag]

``tag`` is the first 8 bytes of blake3 over the hash and the other fields, so
a flipped bit is a damaged record, never a wrong state.  :func:`unpack`
gives a :class:`cablestore.wire.codec.Post` with an empty signature, which
the moderation state treats like the post it stands for, except that it is
never listed as a relevant post (there are no bytes to send).
"""

from __future__ import annotations

import blake3
import msgpack

from cablestore.errors import CorruptRecordError
from cablestore.keyspace.keys import FACTS
from cablestore.wire.codec import BLOCK, INFO, MODERATION, ROLE, UNBLOCK, Post

FACT_TYPES = frozenset({INFO, ROLE, MODERATION, BLOCK, UNBLOCK})  # what the moderation state is computed from

def key(h: bytes) -> bytes:
    """Where the fact of post ``h`` is kept."""
    return FACTS + h


def _fields(post: Post) -> list:
    accept = post.accept_role if post.post_type == INFO else None
    return [
        post.post_type,
        post.public_key,
        post.timestamp,
        post.channel,
        list(post.recipients) if post.recipients is not None else None,
        post.role,
        post.action,
        post.drop,
        post.notify,
        post.undrop,
        accept,
    ]


def _tag(h: bytes, fields: list) -> bytes:
    return blake3.blake3(h + msgpack.packb(fields)).digest(8)


def pack(h: bytes, post: Post) -> bytes:
    """The stored value of the fact of ``post`` (hash ``h``)."""
    fields = _fields(post)
    return msgpack.packb(fields + [_tag(h, fields)])


def unpack(h: bytes, value: bytes) -> Post:
    """The fact as a :class:`Post` with no signature, links, reason or text; :class:`CorruptRecordError` if damaged."""
    try:
        record = msgpack.unpackb(value)
        fields, tag = record[:-1], record[-1]
        ok = isinstance(record, list) and len(record) == 12 and tag == _tag(h, fields)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several kinds for damaged bytes
        raise CorruptRecordError(f"fact {h.hex()}: not a fact record ({exc})") from None
    if not ok or fields[0] not in FACT_TYPES:
        raise CorruptRecordError(f"fact {h.hex()}: damaged record")
    post_type, public_key, timestamp, channel, recipients, role, action, drop, notify, undrop, accept = fields
    info = None
    if post_type == INFO:
        info = () if accept is None else (("accept-role", chr(accept)),)
    return Post(
        public_key, b"", (), post_type, timestamp, channel=channel, info=info, reason="", privacy=0,
        recipients=tuple(recipients) if recipients is not None else None, role=role, action=action, drop=drop, notify=notify, undrop=undrop,
    )


__all__ = ["FACTS", "FACT_TYPES", "key", "pack", "unpack"]
