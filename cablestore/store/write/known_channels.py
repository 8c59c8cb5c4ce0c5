"""The channels a post belongs to, as far as a batch knows: its own, its targets' (a post/delete) or its author's (a post/info).

The indexer lists a post/delete under these channels and records them on
the tombstones it leaves; membership changed earlier in the same batch
counts.
"""

from __future__ import annotations

from cablestore import views
from cablestore.keyspace.keys import POSTS, canonical_channel, escape
from cablestore.keyspace.records import Indexed
from cablestore.store.read.hashes import channel_names
from cablestore.store.write.batch import IndexState
from cablestore.wire.codec import CHANNEL_TYPES, DELETE, INFO, Post, decode_post


def of_indexed(state: IndexState, ip: Indexed) -> tuple[str, ...]:
    """The channels of a post being indexed or removed: a delete's come from the tombstones it made."""
    if ip.channel is not None:
        return (ip.channel,)
    if ip.post.post_type == DELETE:
        return tuple(sorted({c for t in ip.tombstones for c in t.channels}))
    if ip.post.post_type == INFO:
        return of_member(state, ip.post.public_key)
    return ()


def of_post(state: IndexState, h: bytes, post: Post) -> tuple[str, ...]:
    """The channels a post that is not stored belongs to, as far as the store knows."""
    if post.post_type in CHANNEL_TYPES:
        return (canonical_channel(post.channel),)
    if post.post_type == DELETE:
        found = set()
        for target in dict.fromkeys(post.hashes):
            blob = state.get(POSTS + target)
            if blob is not None and blob[:32] != post.public_key:
                continue  # another author's post: the delete is not listed there
            if blob is not None:
                stored = decode_post(blob)
                made = tuple(state.tombstones_by(target, stored.hashes)) if stored.post_type == DELETE else ()
                found.update(of_indexed(state, Indexed.of(blob, stored, target, made)))
            else:
                found.update(c for t in state.tombstones(target) if t.author == post.public_key for c in t.channels)
        return tuple(sorted(found))
    if post.post_type == INFO:
        return of_member(state, post.public_key)
    return ()


def of_member(state: IndexState, public_key: bytes) -> tuple[str, ...]:
    """The channels ``public_key`` is a member of now."""
    # Membership changed earlier in this batch must count: settle this member's
    # groups of the channel view (:func:`views.channel.member_group`) that the batch touched,
    # found from the channels of the member's posts the batch indexed or removed.
    here = state.author_channels.get(public_key, frozenset())
    state.settle_groups(views.channel.NAME, [views.channel.member_group(escape(c), public_key) for c in here])
    names = set(channel_names(state.txn.db)) | here  # channels new in this batch count where the member posted
    member_key = views.channel.member_key
    return tuple(sorted(n for n in names if views.channel.is_member(state.get(member_key(escape(n), public_key)))))
