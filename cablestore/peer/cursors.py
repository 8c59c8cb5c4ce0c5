"""Sync cursors: under which name a remote peer's are kept, and where the next sync of a channel starts.

A cursor (``!local!sync!``, see KEYSPACE.md) is the timestamp from which
the next sync of a channel from a peer asks for history: the newest post
the peer listed in the last complete history answer, less a margin for
clock skew.  A peer that listed nothing of the channel held nothing of it
when it was asked, so that moment (less the margin) is the cursor: a peer
met while it is itself still empty (a syncing peer, to the serving side
that pulls from it) is not asked for everything again on the next contact.

Posts a peer receives later with timestamps older than its cursor (from a
third peer, or written offline for longer than the margin) are missed by
an incremental sync; docs/operations.md lists this among the known limits.
"""

from __future__ import annotations

from typing import Any

from cablestore.peer.table import Job
from cablestore.wire.codec import decode_post


def accepted_name(remote: str) -> str:
    """An accepted peer's name when nothing authenticates it: ``accepted:<host>`` (``remote`` is ``host:port``).

    Not the port, which changes on each connection; peers behind one
    address share it.
    """
    host = remote.rsplit(":", 1)[0] if ":" in remote else remote
    return f"accepted:{host}"


def cursor_key(conn: Any, peer: str) -> str:
    """The name a peer's cursors are kept under: ``user:<key>`` once the Cable Handshake authenticated a user the store knows; else ``peer``.

    A user's key follows them across addresses and source ports; ``peer`` is
    what the caller knows (the address dialled, ``peer:HOST:PORT`` for a
    peer ``serve`` dials, :func:`accepted_name` for an accepted one).
    """
    user = conn.user
    return f"user:{user.hex()}" if user is not None else peer


def stored_cursor(store: Any, key: str, peer: str, channel: str) -> int:
    """Where the channel's history is asked from: its cursor under ``key``, else under ``peer`` (a user met unidentified before), else 0."""
    found = store.sync_cursor(key, channel)
    if found is None and key != peer:
        found = store.sync_cursor(peer, channel)
    return found or 0


def next_cursor(store: Any, history: list[Job], asked_at: int | None, margin: int) -> int | None:
    """The channel's next cursor from its complete history answers (one per spelling asked), or None if nothing is known for sure.

    The oldest of the spellings' newest posts, so none is skipped next time;
    a spelling that listed nothing counts as of ``asked_at``.  None when a
    listed newest post is not held.
    """
    stamps = []
    for job in history:
        if job.newest is None:
            if job.hashes_seen or asked_at is None:
                return None
            stamps.append(asked_at)
            continue
        buf = store.get(job.newest)
        if buf is None:
            return None
        stamps.append(decode_post(buf).timestamp)
    return min(stamps) - margin if stamps else None
