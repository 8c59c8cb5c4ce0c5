"""A sync's summary: what was asked, received and refused, for humans and ``--json`` (:meth:`cablestore.peer.sync.Sync.summary`)."""

from __future__ import annotations

from typing import Any


def summary(sync: Any) -> dict:
    """The summary of ``sync`` (a :class:`cablestore.peer.sync.Sync`); ``reason`` is None only when complete."""
    jobs = sync._jobs()
    stats = sync.conn.stats
    incomplete = sorted(ch.name for ch in sync.channels.values() if not ch.complete)
    reason = sync.reason
    if reason is None and sync.conn.closed and (sync.conn.error is not None or not sync.finite_done):
        reason = sync._closed_reason()
    if reason is None:
        # With channels named, the list only teaches spellings: a peer that does not answer it is no failure.
        failed = next((j for j in jobs if j.failed and not (j is sync.listing and sync.wanted is not None)), None)
        if failed is not None:
            reason = failed.reason
        elif incomplete:
            reason = f"{len(incomplete)} channels not synced"
        elif sync.unlisted:
            # A channel named on the command line that the peer does not list: it holds nothing of it.
            reason = f"the peer does not list {', '.join(repr(c) for c in sync.unlisted)}"
    complete = reason is None and sync.finite_done
    if not complete and reason is None:
        reason = "not finished"
    return {
        "peer": sync.peer,
        "channels": sorted(sync.channels),
        "channels_listed": None if sync.listing is None else len(sync._pages) + len(sync.listing.channels),
        "requests_sent": sum(j.requests for j in jobs),
        "requests_answered": sum(j.answered for j in jobs),
        "hashes_received": sum(j.hashes_seen for j in jobs),
        "posts_requested": sum(j.posts_requested for j in jobs),
        "posts_received": sum(j.posts_received for j in jobs),
        "posts_ingested": stats["ingested"],
        "posts_refused": stats["refused"],
        "unsolicited": stats["unsolicited"],
        "messages_received": stats["received"],
        "messages_dropped": stats["dropped"],
        "dropped_by_error": dict(sorted(sync.conn.errors.items())),
        "requests_from_peer": stats["requests"],
        "incomplete_channels": incomplete,
        "channels_not_live": len(sync.not_live),
        "reconciles": bool(sync.probe and sync.probe.result),  # the peer speaks set reconciliation
        "channels_reconciled": sum(1 for ch in sync.channels.values() if ch.reconciled),
        "reconcile_fallbacks": dict(sorted(sync.fallbacks.items())),  # channel -> why it was asked natively instead
        "reconcile_round_trips": max((ch.recon.round_trips for ch in sync.channels.values() if ch.recon), default=0),  # of one scope, at most
        "reconcile_bytes": sum(ch.recon.sent + ch.recon.received for ch in sync.channels.values() if ch.recon),  # a live sync: channels synced once, past MAX_LIVE_CHANNELS
        # Per spelling asked for: requests sent (time range, state and their post requests), hashes and posts got.
        "spellings": {
            spelling: {"asked": h.requests + s.requests, "hashes": h.hashes_seen + s.hashes_seen, "posts": h.posts_received + s.posts_received}
            for ch in sync.channels.values()
            for spelling, (h, s) in (ch.jobs or {}).items()
        },
        "complete": complete,
        "reason": None if complete else reason,
    }
