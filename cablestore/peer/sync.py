"""Syncing with one remote peer: channel list, then each channel's history and state.

:class:`Sync` is sans-I/O like :mod:`cablestore.peer`: it issues requests on
a :class:`cablestore.peer.protocol.Connection` and advances each time the transport
calls :meth:`Sync.poll`.  It keeps a cursor per remote peer and channel under
``!local!sync!`` (see KEYSPACE.md): the timestamp of the newest post of the
last complete history fetch, less ``margin`` ms for clock skew, so a repeated
sync asks only for ``[cursor, ...)``.  A channel is synced by one
:class:`Sync` of a node at a time (``Node.syncing``); others wait for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cablestore.keyspace.keys import canonical_channel, channel_key
from cablestore.peer.protocol import Connection, Job
from cablestore.wire.codec import decode_post

if TYPE_CHECKING:
    from cablestore.store.store import Store

CURSOR = b"!local!sync!"
WEEK_MS = 7 * 24 * 60 * 60 * 1000
DEFAULT_MARGIN = 60 * 60 * 1000  # an hour: posts skewed further back than this are missed by a resync


def cursor_key(peer: str, channel: str) -> bytes:
    """``!local!sync!<peer><ch>``: ``<peer>`` is the BLAKE2b-256 of the remote peer's name."""
    return CURSOR + hashlib.blake2b(peer.encode("utf-8"), digest_size=32).digest() + channel_key(channel)


def read_cursor(store: Store, peer: str, channel: str) -> int | None:
    """The stored cursor (ms), or None if this channel was never synced from ``peer``."""
    value = store.db.get(cursor_key(peer, channel))
    return None if value is None else int.from_bytes(value, "big")


def write_cursor(store: Store, peer: str, channel: str, timestamp: int) -> None:
    """Store the cursor; it never moves backwards."""
    old = read_cursor(store, peer, channel)
    if old is None or timestamp > old:
        store.db.put(cursor_key(peer, channel), max(0, timestamp).to_bytes(8, "big"), sync=store.sync)


class _Channel:
    def __init__(self, name: str):
        self.name = name
        self.history: Job | None = None
        self.state: Job | None = None
        self.live: list[Job] = []
        self.finished = False


class Sync:
    """Pull a remote peer's channels into the store.

    ``channels``: names to sync (None: all the peer lists); ``window``:
    ``(start, end)`` ms to fetch instead of ``[cursor, now + 7 days)`` (an
    explicit window leaves the cursor alone); ``live``: afterwards keep live
    time range and state requests open.  ``done`` once every request concluded.
    """

    def __init__(
        self,
        conn: Connection,
        peer: str,
        *,
        channels: Iterable[str] | None = None,
        live: bool = False,
        window: tuple[int, int] | None = None,
        margin: int = DEFAULT_MARGIN,
    ) -> None:
        self.conn = conn
        self.node = conn.node
        self.peer = peer
        self.live = live
        self.window = window
        self.margin = margin
        self.wanted = None if channels is None else list(dict.fromkeys(canonical_channel(c) for c in channels))
        self.channels: dict[str, _Channel] = {}
        self.listing: Job | None = None
        self.started = False

    # --- driving ------------------------------------------------------------------
    def poll(self, now: int) -> None:
        """Advance: start what can start, finish what concluded."""
        with self.node.lock:
            if not self.started:
                self.started = True
                if self.wanted is None:
                    self.listing = self.conn.request_channel_list(now=now, job=Job(tag=self))
                else:
                    self._add(self.wanted)
            if self.listing is not None and self.listing.done and not self.channels:
                self._add(canonical_channel(c) for c in self.listing.channels)
            for ch in self.channels.values():
                self._advance(ch, now)

    def _add(self, names) -> None:
        for name in names:
            self.channels.setdefault(name, _Channel(name))

    def _advance(self, ch: _Channel, now: int) -> None:
        if ch.finished:
            return
        if ch.history is None:
            if ch.name in self.node.syncing:
                return  # another sync holds this channel: wait for it
            self.node.syncing.add(ch.name)
            start, end = self.window or (read_cursor(self.node.store, self.peer, ch.name) or 0, now + WEEK_MS)
            ch.history = self.conn.request_time_range(ch.name, start, end, 0, now=now, job=Job(tag=self))
            ch.state = self.conn.request_state(ch.name, 0, now=now, job=Job(tag=self))
            return
        if not (ch.history.done and ch.state.done):
            return
        ch.finished = True
        self.node.syncing.discard(ch.name)
        if ch.history.complete and ch.history.newest is not None and self.window is None:
            buf = self.node.store.get(ch.history.newest)
            if buf is not None:
                write_cursor(self.node.store, self.peer, ch.name, decode_post(buf).timestamp - self.margin)
        if self.live:
            ch.live.append(self.conn.request_time_range(ch.name, max(0, now - self.margin), 0, 0, now=now, job=Job(tag=self)))
            ch.live.append(self.conn.request_state(ch.name, 1, now=now, job=Job(tag=self)))

    # --- results ------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once the listing and every channel's history and state concluded."""
        if self.conn.closed:
            return True
        if not self.started or (self.listing is not None and not self.listing.done):
            return False
        return all(ch.finished for ch in self.channels.values())

    def abandon(self) -> None:
        """Release the channels this sync holds (the connection died)."""
        with self.node.lock:
            for ch in self.channels.values():
                if ch.history is not None and not ch.finished:
                    ch.finished = True
                    self.node.syncing.discard(ch.name)

    def summary(self) -> dict:
        """Counts for humans and ``--json``."""
        jobs = [j for ch in self.channels.values() for j in (ch.history, ch.state) if j is not None]
        counted = jobs + [j for ch in self.channels.values() for j in ch.live]  # live pushes count too
        stats = self.conn.stats
        return {
            "peer": self.peer,
            "channels": sorted(self.channels),
            "hashes_received": sum(j.hashes_seen for j in counted),
            "posts_requested": sum(j.posts_requested for j in counted),
            "posts_ingested": stats["ingested"],
            "posts_refused": stats["refused"],
            "unsolicited": stats["unsolicited"],
            "messages_dropped": stats["dropped"],
            "incomplete_channels": sorted(ch.name for ch in self.channels.values() if ch.history and not (ch.history.complete and ch.state.complete)),
            "complete": self.done and not self.conn.closed and all(j.complete for j in jobs),
        }
