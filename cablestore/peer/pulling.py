"""``serve`` as a full peer: pulling from every peer that connects, since deployed peers never push.

Deployed peers (cable-core.js 0.2.1, the cable-client.js it runs) never push
a post nobody asked for: they only answer requests, live ones included.  A
server that only answers therefore never receives what its clients write.
:class:`Puller` runs, for every accepted connection, the sync side as well
(:class:`cablestore.peer.sync.Sync` with ``live=True``): the peer's channel
list, then time range and channel state of every channel either side knows
(under every spelling the peer lists), the moderation state, and the live
requests kept open, so what a client writes later reaches the store and,
through the store's commits, the live requests of every other peer.

What is pulled is handled like any other input: posts only as answers to
our requests, checked and ingested by the store, within the connection's
share of the limits (:mod:`cablestore.peer.limits`).  Peers are
unauthenticated, so the sync cursor of an accepted peer is keyed by what is
known of it (:mod:`cablestore.peer.cursors`): its user over the Cable
Handshake, else its remote host (not the port, which changes on each
connection): a peer that reconnects asks only for ``[cursor, ...)``, not the
whole history again.  Peers behind one address share a cursor; the margin
(an hour) covers their differing clocks, not a second peer holding posts an
hour older than the first's newest.  Sans-I/O: the transport calls
:meth:`Puller.accept` and :meth:`Puller.poll`.
"""

from __future__ import annotations

from cablestore.peer.cursors import accepted_name
from cablestore.peer.limits import DEFAULT_PROGRESS_TIMEOUT
from cablestore.peer.node import Node
from cablestore.peer.protocol import Connection
from cablestore.peer.sync import Sync
from cablestore.wire.messages import ChannelStateRequest, ReconcileRequest, StateChangesRequest, TimeRangeRequest


class Puller:
    """One live :class:`Sync` per accepted connection of ``node``."""

    def __init__(self, node: Node, *, progress_timeout: int = DEFAULT_PROGRESS_TIMEOUT) -> None:
        self.node = node
        self.progress_timeout = progress_timeout
        self.syncs: dict[Connection, Sync] = {}
        self.finished: list[dict] = []  # summaries of the pulls that ended (kept: the last 64)

    def accept(self, conn: Connection, now: int, cursor: str | None = None) -> Sync:
        """Start pulling from ``conn``: its channels and ours, then live.

        ``cursor``: the name its sync cursors are kept under (default
        :func:`cablestore.peer.cursors.accepted_name` of its address: an accepted peer; a peer we dial
        is known by the address we dial).
        """
        with self.node.lock:
            store = self.node.store
            # Our channels are read once the peer answered its channel list: a peer that never answers costs one request.
            sync = Sync(conn, cursor or accepted_name(conn.name), also=lambda: store.listed_spellings(store.channel_list()), live=True,
                        progress_timeout=self.progress_timeout)
            self.syncs[conn] = sync
            self.node.stats["pulls"] += 1
            sync.poll(now)
            return sync

    def poll(self, now: int) -> None:
        """Advance every pull; forget those whose connection closed or that gave up."""
        with self.node.lock:
            for conn, sync in list(self.syncs.items()):
                self._learn_from_requests(conn, sync)
                sync.poll(now)
                if conn.closed or sync.reason is not None:
                    self._end(conn, "pulls_given_up" if sync.reason and not conn.closed else "pulls_ended")

    @staticmethod
    def _learn_from_requests(conn: Connection, sync: Sync) -> None:
        """A channel the peer asks us about is one it knows: pull it too.

        The peer's channel list is asked once, when it connects; a client
        that joins a channel afterwards (cable-client.js joins its default
        channel just after connecting) is known to write there because it
        asks for that channel's time range or state (interop, cable-client.js).
        """
        for entry in list(conn.inbound.values()):
            spelling = getattr(entry.request, "channel", None)
            if isinstance(entry.request, (TimeRangeRequest, ChannelStateRequest, ReconcileRequest, StateChangesRequest)) and spelling:
                sync.learn(spelling)

    def _end(self, conn: Connection, outcome: str) -> None:
        sync = self.syncs.pop(conn)
        summary = sync.summary()
        self.node.stats["pulled_posts"] += summary["posts_ingested"]
        self.node.stats[outcome] += 1
        self.finished = [*self.finished[-63:], summary]

    def close(self) -> None:
        """Stop every pull (cancelling what is open)."""
        with self.node.lock:
            for conn, sync in list(self.syncs.items()):
                sync.abandon("server stopped")
                self._end(conn, "pulls_ended")
