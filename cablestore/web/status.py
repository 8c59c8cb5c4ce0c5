"""The status page: what the store holds, on disk, its last check, and (served) the connected peers.

The store does not record when ``cablestore check`` last ran (no key of
KEYSPACE.md holds it, and a read-only archive cannot write one), so the page
says "never recorded" instead of inventing a date.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cablestore.peer.node import Node
    from cablestore.store.store import Store

NEVER = "never recorded"  # the last check: the store keeps no record of it
SHOWN_LIMITS = (
    "max_connections", "memory_mb", "connections_per_address", "connections_per_user", "live_per_peer",
    "idle_timeout", "frame_timeout", "request_timeout", "handshake_timeout",
)


def status(store: Store, node: Node | None = None) -> dict[str, Any]:
    """Counts of the store, its size on disk, the last check, and the peers of ``node`` (a served store's, else None)."""
    stats = store.stats()
    out: dict[str, Any] = {"stats": stats, "last_check": NEVER, "readonly": store.readonly}
    if node is not None:
        out.update(peers(node))
    return out


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
    return {"peers": rows, "limits": [(k, policy[k]) for k in SHOWN_LIMITS], "totals": node.snapshot()}
