"""Live requests: a time range with ``time_end = 0`` and a channel state with
``future = 1`` stay open, and every commit to the store (a remote peer, a
local author, ``ingest_many``) pushes what matches them.  A mixin of
:class:`cablestore.peer.protocol.Node`."""

from __future__ import annotations

from cablestore.keyspace.keys import canonical_channel
from cablestore.peer.answering import channel_state_answer
from cablestore.peer.table import Inbound
from cablestore.wire.codec import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC
from cablestore.wire.messages import TimeRangeRequest

STATE_TYPES = frozenset({TOPIC, JOIN, LEAVE, INFO, DELETE})


class LivePushes:
    """Pushes commits to the live requests in the table (see :class:`cablestore.peer.protocol.Node`)."""

    def _on_commit(self, change) -> None:
        with self.lock:
            lives = [e for e in self.requests.values() if isinstance(e, Inbound) and e.live and e.local_done]
            if not lives:
                return
            delete_channels: dict[bytes, set] = {}
            pushed = False
            for entry in lives:
                if isinstance(entry.request, TimeRangeRequest):
                    hashes = self._matching_chat(entry, change, delete_channels)
                else:
                    hashes = self._state_changes(entry, change)
                if hashes:
                    entry.origin._push(entry, hashes)
                    pushed = True
        if pushed and self.on_output is not None:
            self.on_output()

    def _matching_chat(self, entry: Inbound, change, delete_channels) -> list[bytes]:
        out = []
        for h, post in change.added:
            if post.timestamp < entry.request.time_start:
                continue
            if post.post_type == TEXT and canonical_channel(post.channel) == entry.channel:
                out.append(h)
            elif post.post_type == DELETE:
                if h not in delete_channels:
                    tombs = self.store.tombstones_made_by(h, post.hashes)
                    delete_channels[h] = {canonical_channel(c) for t in tombs for c in t.channels}
                if entry.channel in delete_channels[h]:
                    out.append(h)
        return out

    def _state_changes(self, entry: Inbound, change) -> list[bytes]:
        relevant = bool(change.removed) or any(p.post_type in STATE_TYPES for _, p in change.added)
        if not relevant:
            return []
        now = channel_state_answer(self.store, entry.channel)
        fresh = [h for h in now if h not in entry.state]
        entry.state = set(now)
        return fresh
