"""What a store answers a peer with, as functions of the store: the channel state answer, the spelling a
channel is listed under (:mod:`cablestore.store.spelling`, re-exported), the pages of a time range, and
the check of a relayed post.  The answering half
of a connection (:mod:`cablestore.peer.answering`) and the live pushes (:mod:`cablestore.peer.live`) call
them; they hold no connection state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cablestore.errors import FutureTimestampError
from cablestore.keyspace.keys import TS_SIZE, channel_key, next_prefix
from cablestore.store.queries import last_under
from cablestore.store.spelling import listed_spelling, listed_spellings  # noqa: F401 - the one rule (authoring, `channels`, lists)
from cablestore.wire.codec import TOPIC, decode_post, post_hash
from cablestore.wire.crypto import check_signature

if TYPE_CHECKING:
    from cablestore.store.store import Store

U64_MAX = (1 << 64) - 1
WEEK_MS = 7 * 24 * 60 * 60 * 1000


def channel_state_answer(store: Store, channel: str) -> list[bytes]:
    """The hashes answering a channel state request.

    ``Store.channel_state`` (latest topic, latest join/leave and post/info of
    each member), plus, for each member or ex-member whose membership is
    decided by a post/topic (a topic counts as joining, spec 5.4.3) that is
    not the channel's latest, that topic: without it a peer syncing from
    here could not tell they are a member.  Those topics come first, so a
    peer applying the posts in the order listed ends on the latest topic.
    """
    from cablestore.views import channel as channel_view

    hashes = store.channel_state(channel)
    ch = channel_key(channel)
    members = channel_view.PREFIX + ch + b"m"
    candidates = channel_view.PREFIX + ch + b"a"
    extra = []
    with store.db.snapshot() as snap, snap.iterator() as it:
        people = [k[len(members) :] for k in snap.iterator(prefix=members, include_value=False)]
        for pk in people:
            last = last_under(it, candidates + pk)
            if last is not None and last[1] == bytes([TOPIC]):
                extra.append(last[0][-32:])
    known = set(hashes)
    # Superseded post/topics first, the current state after them: a peer that applies posts in the
    # order they arrive and keeps the last topic it saw (cable-core.js 0.2.1 does) must end on the
    # latest topic, so no older topic may arrive after it.
    return [h for h in dict.fromkeys(extra) if h not in known] + hashes


def time_range_bounds(channel: str, start: int, end: int) -> tuple[bytes, bytes]:
    """The ``(lowest, above highest)`` keys of a channel time range ``[start, end)`` (``end = 0``: no bound)."""
    from cablestore.views import chat

    prefix = chat.channel_prefix(channel)
    lo = prefix + min(start, U64_MAX).to_bytes(TS_SIZE, "big")
    hi = next_prefix(prefix) if end == 0 or end > U64_MAX else prefix + end.to_bytes(TS_SIZE, "big")
    return lo, hi


def time_range_page(store: Store, lo: bytes, below: bytes, n: int) -> list[bytes]:
    """Up to ``n`` keys of a time range, newest first, from ``lo`` up to (not including) ``below``.

    Paging by key, not by timestamp, so posts sharing a timestamp are never
    skipped or repeated; ``limit`` is only a count here, so a ``limit`` of
    2^64 - 1 is as good as 0.
    """
    with store.db.iterator(start=lo, stop=below, reverse=True, include_value=False) as it:
        out = []
        for key in it:
            out.append(key)
            if len(out) == n:
                break
        return out


def check_relayed(buf: bytes, now: int) -> bytes:
    """Check a post another peer sent for a forwarded request: it decodes, its signature verifies, it is not from the far future.

    Returns its hash; raises the :class:`cablestore.errors.CableError` that
    says what is wrong.
    """
    post = decode_post(buf)
    check_signature(buf)
    if post.timestamp >= now + WEEK_MS:
        raise FutureTimestampError(f"timestamp {post.timestamp} is at or beyond now + 7 days")
    return post_hash(buf)
