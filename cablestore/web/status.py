"""The status page: what the store holds, on disk, its last check, and (served) the connected peers.

The last check is what the last ``check --repair`` recorded
(``!local!checked``, :func:`cablestore.rebuild.verify.last_check`): a plain
``check`` is read-only and records nothing, so a store never repaired-checked
says "never recorded" instead of inventing a date.
"""

from __future__ import annotations

from dataclasses import asdict
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


def status(store: Store, node: Node | None = None) -> dict[str, Any]:
    """Counts of the store, its size on disk, the last check, and the peers of ``node`` (a served store's, else None)."""
    stats = store.stats()
    out: dict[str, Any] = {"stats": stats, "last_check": describe_check(last_check(store)), "readonly": store.readonly}
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
    return {"peers": rows, "limits": [(k, policy[k]) for k in SHOWN_LIMITS], "totals": node.snapshot()}
