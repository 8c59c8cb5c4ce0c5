"""The status page: what the store holds, on disk, its last check, and (served) the connected peers.

The last check is what the last ``check --repair`` recorded
(``!local!checked``, :func:`cablestore.rebuild.verify.last_check`): a plain
``check`` is read-only and records nothing, so a store never repaired-checked
says "never recorded" instead of inventing a date.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cablestore.progress import plural
from cablestore.rebuild.verify import last_check

if TYPE_CHECKING:
    from cablestore.peer.node import Node
    from cablestore.store.store import Store

NEVER = "never recorded"  # the last check: no `check --repair` has run
SHOWN_LIMITS = (
    "max_connections", "memory_mb", "connections_per_address", "connections_per_user", "live_per_peer",
    "idle_timeout", "frame_timeout", "request_timeout", "handshake_timeout",
)


#: How the status page counts each type of post.
TYPE_WORDS = {
    "post/text": "messages", "post/delete": "deletions", "post/info": "user infos", "post/topic": "topic changes",
    "post/join": "joins", "post/leave": "leaves", "post/role": "role changes", "post/moderation": "moderation actions",
    "post/block": "blocks", "post/unblock": "unblocks",
}


def status(store: Store, node: Node | None = None, followed: str | None = None) -> dict[str, Any]:
    """Counts of the store, its size on disk, the last check, and the peers of ``node`` (a served store's, else None).

    ``followed``: the path of the store when ``store`` is a copy of its files
    (:class:`cablestore.web.follow.Followed`), named instead of the copy.
    """
    stats = store.stats()
    if followed is not None:
        stats = replace(stats, path=followed)
    out: dict[str, Any] = {
        "stats": stats, "last_check": describe_check(last_check(store)), "readonly": store.readonly, "followed": followed is not None, "type_words": TYPE_WORDS,
    }
    if node is not None:
        out.update(peers(node))
    return out


def describe_check(record: dict[str, Any] | None) -> str:
    """One line for the last check's record (:func:`cablestore.rebuild.verify.last_check`), or :data:`NEVER`."""
    if record is None:
        return NEVER
    when = datetime.fromtimestamp(record["at"] / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
    found = plural(int(record.get("faults", 0)), "fault")
    outcome = "repaired, consistent" if record.get("repaired") and record.get("consistent") else ("consistent" if record.get("consistent") else "not consistent")
    return f"{when}: {found} found in {plural(int(record.get('posts', 0)), 'post')} ({record.get('engine', '?')} engine), {outcome}"


def peers(node: Node) -> dict[str, Any]:
    """The connected peers of a serving :class:`cablestore.peer.Node`, their traffic, and the limits they are held to."""
    policy = asdict(node.policy)
    rows = []
    with node.lock:
        for conn in list(node.connections):
            rows.append({
                "name": conn.name,
                "address": conn.address or "",
                "direction": "in" if conn.accepted else "out",
                "user": conn.user.hex() if conn.user else "",
                "authenticated": conn.authenticated,
                "live": conn.live,
                "stats": dict(conn.stats),
            })
    for row in rows:
        row["traffic"] = ", ".join(f"{words(k)}: {quantity(k, v)}" for k, v in row["stats"].items()) or "none yet"
    totals = [(words(k), quantity(k, v)) for k, v in node.snapshot().items()]
    return {"peers": rows, "limits": [LIMIT_WORDS[k](policy[k]) for k in SHOWN_LIMITS], "totals": totals}


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def _at_most(n: int, what: str) -> str:
    return "no limit" if not n else plural(n, what)


#: Each shown limit of :class:`cablestore.peer.limits.PeerLimits`: (what a person calls it, its value with a unit), as the
#: ``serve`` option that sets it says it.
LIMIT_WORDS = {
    "max_connections": lambda v: ("connections at once (--max-connections)", _at_most(v, "connection")),
    "memory_mb": lambda v: ("memory budget (--memory-mb)", f"{v:,} MB"),
    "connections_per_address": lambda v: ("connections from one address (--max-per-address)", _at_most(v, "connection")),
    "connections_per_user": lambda v: ("connections of one user (--max-per-user)", _at_most(v, "connection")),
    "live_per_peer": lambda v: ("live requests per peer (--max-live)", _at_most(v, "request")),
    "idle_timeout": lambda v: ("a silent peer is closed after (--idle-timeout)", _seconds(v)),
    "frame_timeout": lambda v: ("a peer slow to send one message is closed after (--slow-timeout)", _seconds(v)),
    "request_timeout": lambda v: ("a forwarded request is given up after (--request-timeout)", _seconds(v)),
    "handshake_timeout": lambda v: ("a handshake may take (--handshake-timeout)", _seconds(v)),
}


def words(name: str) -> str:
    """A counter's name as words (``peak_buffered_bytes``: "peak buffered")."""
    return name.removesuffix("_bytes").removesuffix("_ms").replace("_", " ")


def quantity(name: str, value: Any) -> str:
    """A counter's value with its unit; a table of counts (connections closed, by reason) as ``reason: n`` pairs."""
    if isinstance(value, dict):
        return ", ".join(f"{words(str(k))}: {quantity(str(k), v)}" for k, v in value.items()) or "none"
    if name.endswith("_bytes") and isinstance(value, int):
        return f"{value:,} bytes"
    if name.endswith("_ms") and isinstance(value, (int, float)):
        return _seconds(value)
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
