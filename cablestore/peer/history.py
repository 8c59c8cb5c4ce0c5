"""A channel's history a page at a time: how long a page is, and where the next one ends.

A peer lists a channel's history faster than its posts arrive, and a sync
may wait on at most the node's pending-hash bound
(:meth:`cablestore.peer.limits.PeerLimits.max_pending_hashes`): asked whole,
a channel of more posts than the bound failed ("overflow", every 1M-post
sync).  So :class:`cablestore.peer.sync.Sync` asks each channel's time range
with ``limit`` = :func:`page_size` (the bound shared by the channels synced
at once) and, once a full page is fetched, asks the range again ending just
after the oldest post of the page it holds: the serving side lists newest
first, so the pages meet without a gap (posts at the boundary are listed
twice, and asked for once).
"""

from __future__ import annotations

from typing import Any

from cablestore.peer import cursors, limits
from cablestore.peer.table import Job
from cablestore.wire.codec import decode_post


def page_size(policy: Any, parallel: int) -> int:
    """Hashes a history request asks for at most: the pending-hash bound over twice the channels synced at once."""
    return max(limits.MIN_HISTORY_PAGE, policy.max_pending_hashes() // (2 * max(1, parallel)))


def next_pages(sync: Any, ch: Any, now: int) -> bool:
    """Ask for the next page of each spelling of ``ch`` whose last page came full; True if any was asked.

    A page whose posts all share one timestamp cannot be followed (asked
    again it would list the same): its job fails, and the sync says so,
    rather than call the channel complete.
    """
    asked = False
    for spelling, (first, _) in (ch.jobs or {}).items():
        job, end = (ch.pages.get(spelling) or [(first, sync.window[1] if sync.window else None)])[-1]
        if not job.complete or job.hashes_seen < sync.page:
            continue
        # The oldest post of the page this store holds (one deleted here is listed but not fetched).
        buf = next((b for b in map(sync.state.store.get, reversed(job.oldest)) if b is not None), None)
        if buf is None:
            job.fail("history: none of the oldest posts of a full page is held, so the next page cannot be asked for")
            continue
        oldest = decode_post(buf).timestamp
        if end is not None and oldest + 1 >= end:
            job.fail(f"history: more than a page ({sync.page}) of posts share the timestamp {oldest}")
            continue
        start = sync.window[0] if sync.window else cursors.stored_cursor(sync.state.store, sync.cursor_key, sync.peer, ch.name)
        page = sync.conn.request_time_range(spelling, start, oldest + 1, sync.page, now=now, job=Job(tag=sync))
        ch.pages.setdefault(spelling, []).append((page, oldest + 1))
        asked = True
    return asked
