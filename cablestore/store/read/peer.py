"""What the store answers a Cable peer with, and the peer's own records: the channel state answer, the
spelling a channel is listed under, a page of a time range, the tombstoned among listed hashes, the live
state's member check, the check of a relayed post and the sync cursors (``!local!sync!``, written through
the store's writer).  :class:`cablestore.store.store.Store` delegates to these functions, so nothing
in :mod:`cablestore.peer` reads or writes LevelDB itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from cablestore.keyspace.keys import DELETED, POSTS, SYNC_CURSORS, channel_key, escape
from cablestore.store.read.hashes import chat_bounds
from cablestore.views import author, blocks
from cablestore.views import channel as channel_view
from cablestore.wire.codec import BLOCK, TOPIC, UNBLOCK, decode_post
from cablestore.wire.crypto import check_signature

CURSOR = SYNC_CURSORS


def channel_state_answer(store: Any, channel: str) -> list[bytes]:
    """The hashes answering a channel state request.

    ``Store.channel_state`` (latest topic, latest join/leave and post/info of
    each member), plus, for each member or ex-member whose membership is
    decided by a post/topic (a topic counts as joining, spec 5.4.3) that is
    not the channel's latest, that topic: without it a peer syncing from
    here could not tell they are a member.  Those topics come first, so a
    peer applying the posts in the order listed ends on the latest topic.
    """
    hashes = store.channel_state(channel)
    ch = channel_key(channel)
    members = channel_view.members_prefix(ch)
    extra = []
    for _, value in store.db.iterator(prefix=members):  # each member's latest post there (the register)
        found = channel_view.membership(value)
        if found is not None and found.post_type == TOPIC:
            extra.append(found.hash)
    known = set(hashes)
    # Superseded post/topics first, the current state after them: a peer that applies posts in the
    # order they arrive and keeps the last topic it saw (cable-core.js 0.2.1 does) must end on the
    # latest topic, so no older topic may arrive after it.
    return [h for h in dict.fromkeys(extra) if h not in known] + hashes


def time_range_page(store: Any, channel: str, start: int, end: int, below: bytes | None, n: int) -> list[bytes]:
    """Up to ``n`` ``!chat`` keys of a channel's time range ``[start, end)``, newest first, below the key ``below`` (None: from the top).

    Paging by key, not by timestamp, so posts sharing a timestamp are never
    skipped or repeated; ``limit`` is only a count here, so a ``limit`` of
    2^64 - 1 is as good as 0.
    """
    lo, hi = chat_bounds(channel, start, end)
    with store.db.iterator(start=lo, stop=hi if below is None else below, reverse=True, include_value=False) as it:
        out = []
        for key in it:
            out.append(key)
            if len(out) == n:
                break
        return out


def tombstoned(store: Any, hashes: list[bytes]) -> set[bytes]:
    """The hashes among ``hashes`` that have a tombstone (candidates for ``Store.is_deleted``), found with one iterator.

    Most hashes a peer lists have none; one seek each is much cheaper than
    ``is_deleted``'s snapshot and iterator per hash (a 65,536-hash response).
    """
    found: set[bytes] = set()
    if not hashes:
        return found
    with store.db.iterator(include_value=False) as it:
        for h in hashes:
            it.seek(DELETED + h)
            key = next(it, None)
            if key is not None and key.startswith(DELETED + h):
                found.add(h)
    return found


def any_member(store: Any, channel: str, public_keys: Iterable[bytes]) -> bool:
    """True if one of ``public_keys`` is a member or ex-member of ``channel`` (canonical): their latest post/info is in its state."""
    get, ch = store.db.get, escape(channel)
    return any(get(channel_view.member_key(ch, pk)) is not None for pk in public_keys)


def check_relayed(ingest: Any, buf: bytes, now: int) -> bytes:
    """Check a post another peer sent for a forwarded request: it decodes, its timestamp is acceptable
    (the store's rule, :meth:`cablestore.store.write.ingest.Ingest.check_fields`), its signature verifies (always).
    Returns its hash; raises the CableError that says what is wrong."""
    h, _ = ingest.check_fields(buf, now)
    check_signature(buf)
    return h


def has_posts(store: Any) -> bool:
    """True if the store holds any post."""
    with store.db.iterator(prefix=POSTS, include_value=False) as it:
        return next(it, None) is not None


def cursor_key(peer: str, channel: str) -> bytes:
    """``!local!sync!<peer><ch>``: ``<peer>`` is the BLAKE2b-256 of the remote peer's name."""
    return CURSOR + hashlib.blake2b(peer.encode("utf-8"), digest_size=32).digest() + channel_key(channel)


def sync_cursor(store: Any, peer: str, channel: str) -> int | None:
    """The stored sync cursor (ms), or None if this channel was never synced from ``peer``."""
    value = store.db.get(cursor_key(peer, channel))
    return None if value is None else int.from_bytes(value, "big")


def set_sync_cursor(writer: Any, peer: str, channel: str, timestamp: int) -> None:
    """Store the sync cursor through the store's writer; it never moves backwards."""
    writer.put_local(cursor_key(peer, channel), max(0, timestamp).to_bytes(8, "big"), only_if_greater=True)


def known_user(store: Any, public_key: bytes) -> bool:
    """True if the store knows the user: an author of a stored post (one seek in ``!author!``), a user a block names, or one the moderation seed names.

    A connection's remote static key identifies a user only when it is the
    X25519 form of a known user's key (:func:`cablestore.wire.static_keys.identify`):
    a key that never wrote a post here and is named by no block or seed is an unknown user.
    """
    with store.db.iterator(prefix=author.prefix(public_key, None), include_value=False) as it:
        if next(it, None) is not None:
            return True
    return public_key in store.blocks() or public_key in store.blocked_by() or public_key in store.seed()


def shunned(store: Any, user: bytes) -> frozenset[bytes]:
    """The authors whose posts are left out of post responses to ``user`` (an authenticated requester, moderation.md §4.6.1.1):
    those whose latest post/block or post/unblock naming ``user`` blocks them, and those ``user``'s latest one blocks.

    Read once per authenticated connection, when the handshake is through:
    one pass over the ``p`` entries of the blocks view (every post/block and
    post/unblock, oldest first), decoding each; a block made while the
    connection is open applies from the next connection.
    """
    latest: dict[tuple[bytes, bytes], bool] = {}  # (author, named) -> blocks, from the newest post of the two
    with store.db.snapshot() as snap:
        for key in snap.iterator(prefix=blocks.candidates_prefix(), include_value=False):
            buf = snap.get(POSTS + key[-32:])
            if buf is None:
                continue
            post = decode_post(buf)
            if post.post_type not in (BLOCK, UNBLOCK):
                continue
            for named in post.recipients:
                if post.public_key == user or named == user:
                    latest[(post.public_key, named)] = post.post_type == BLOCK  # oldest first: the last one stands
    return frozenset(named if by == user else by for (by, named), blocking in latest.items() if blocking and by != named)
