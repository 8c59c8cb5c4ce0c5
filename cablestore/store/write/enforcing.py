"""Acting on the moderation state: which posts a store keeps out, and removing them (moderation.md §4.4.6, §4.6, §5.1.3-5).

A post of a channel (post/text, post/topic, post/join, post/leave) is kept
out when, in the resolved state (``views.actions``, ``views.blocks``):

* it is a post/text or post/topic dropped by an applied ``drop post``;
* its channel is dropped by an applied ``drop channel``;
* its author is blocked: with ``drop = 1``, all of their posts; with
  ``drop = 0``, those timestamped at or after the block ("new posts");
* its author was unblocked with ``undrop = 0`` after a dropping block: those
  timestamped before the unblock ("keep the old posts as dropped");
* its author's notified block names the local user: those at or after it.

A block with ``drop = 1`` also keeps out every other post of its
recipients, of every type: post/info, post/delete and types 6-9 too
(moderation.md §4.6: their posts "MUST be discarded").  The moderation state
already resolves a blocked user as if they had written no moderation post
(:func:`cablestore.moderation.standing_blocks`); what it needs of the
post/infos and moderation posts it removes is kept as facts
(:mod:`cablestore.keyspace.facts`), and a post/delete's tombstones stay, so
removing them changes neither the state nor what later deletes decide.

The rule is a function of the post and the state, so what a store holds is
a function of the set of posts it was offered, except that content removed
while it was kept out comes back only when offered again (as for deletes;
a re-sync brings it back).  Other drops and blocks act on channel content
only: post/info, post/delete and types 6-9 are kept out only by a dropping
block of their author.
A kept-out post arriving is refused (:class:`DroppedError`,
:class:`BlockedError`); one already stored is removed in the WriteBatch of
the post that changed the state, with its view entries, like a delete but
without a tombstone: the resolved rows are the record of why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cablestore.errors import BlockedError, DroppedError, ModerationRefusalError
from cablestore.keyspace.keys import canonical_channel
from cablestore.views import actions, author, blocks
from cablestore.views import channel as channel_view
from cablestore.wire.codec import CHANNEL_TYPES, POST_TYPE_NAMES, TEXT, TOPIC, Post

DROPPABLE = frozenset({TEXT, TOPIC})  # what "drop post" may drop (§5.1.3.6)
ALL_TYPES = tuple(sorted(POST_TYPE_NAMES))  # what a dropping block keeps out


_DROPPED_POST = actions.DROPPED_POSTS
ROW_PREFIXES = (_DROPPED_POST, actions.DROPPED_CHANNELS, *blocks.KEEPING_OUT)


if TYPE_CHECKING:
    from cablestore.store.write.batch import IndexState


def memo_for(reader: Any) -> dict | None:
    """A per-transaction cache for :func:`refusal`: None when no row keeps anything out (the check is then free)."""
    for prefix in ROW_PREFIXES:
        with reader.iterator(prefix=prefix, include_value=False) as it:
            if next(it, None) is not None:
                return {}
    return None


def refusal(get: Callable[[bytes], bytes | None], h: bytes, post: Post, memo: dict | None = None) -> ModerationRefusalError | None:
    """Why the state read through ``get`` keeps ``post`` out, or None.

    ``memo``: rows already read in this transaction (the state does not
    change until it commits), from :func:`memo_for`.
    """
    t = post.post_type
    if memo is not None:
        get = _memoized(get, memo)
    if t not in CHANNEL_TYPES:
        block = get(blocks.blocked_key(post.public_key))
        if block is not None and blocks.decode_block(block).drop == 1:
            return BlockedError(f"author {post.public_key.hex()} is blocked (drop)")
        return None
    if t in DROPPABLE and get(actions.dropped_post_key(h)) is not None:
        return DroppedError(f"post {h.hex()} is dropped")
    if get(actions.dropped_channel_key(canonical_channel(post.channel))) is not None:
        return DroppedError(f"channel {post.channel!r} is dropped")
    who, ts = post.public_key, post.timestamp
    block = get(blocks.blocked_key(who))
    if block is not None and ((row := blocks.decode_block(block)).drop == 1 or ts >= row.timestamp):
        return BlockedError(f"author {who.hex()} is blocked")
    kept = get(blocks.kept_key(who))
    if kept is not None and ts < blocks.decode_since(kept).timestamp:
        return BlockedError(f"author {who.hex()}'s posts from before their unblock stay dropped")
    blocker = get(blocks.blocker_key(who))
    if blocker is not None and ts >= blocks.decode_since(blocker).timestamp:
        return BlockedError(f"author {who.hex()} blocks the local user")
    return None


def _memoized(get, memo: dict):
    def cached(key: bytes) -> bytes | None:
        if key.startswith(_DROPPED_POST):  # one per post: not worth keeping
            return get(key)
        if key not in memo:
            memo[key] = get(key)
        return memo[key]

    return cached


def candidates(batch: IndexState, changed: set[bytes]) -> set[bytes]:
    """Hashes of stored channel posts that resolved rows ``changed`` (keys newly written) may keep out."""
    found: set[bytes] = set()
    for key in changed:
        if key.startswith(actions.DROPPED_POSTS):
            found.add(key[-32:])
        elif key.startswith(actions.DROPPED_CHANNELS):
            ch = actions.channel_of_dropped_key(key)
            members = channel_view.members_prefix(ch)
            authors = [channel_view.member_of_key(k, ch) for k, _ in batch.current(members)]  # every author of a post there, then their posts there
            for prefix in channel_view.post_prefixes(ch, authors):
                found.update(k[-32:] for k, _ in batch.current(prefix))
        elif key.startswith(blocks.KEEPING_OUT):
            who = key[-32:]
            for t in ALL_TYPES if key.startswith(blocks.BLOCKED) else CHANNEL_TYPES:
                found.update(k[-32:] for k, _ in batch.current(author.prefix(who, t)))
    return found


__all__ = ["refusal", "candidates", "DROPPABLE"]
