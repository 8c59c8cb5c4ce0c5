"""Forwarding a remote peer's request with ``ttl > 0`` to the other connections, and relaying their
responses back, checked (posts decoded, signed, not from the far future, and asked for), within the
forwarding limits.  A mixin of :class:`cablestore.peer.protocol.Connection`.
"""

from __future__ import annotations

from dataclasses import replace

from cablestore.errors import CableError, UnknownRequestError, UnsolicitedPostError
from cablestore.peer import limits
from cablestore.peer.table import Inbound
from cablestore.wire.messages import CancelRequest, ChannelListRequest, HashResponse, ModerationStateRequest, PostRequest, PostResponse


class Forwarding:
    """The forwarding half of a connection's answers (see :class:`cablestore.peer.protocol.Connection`)."""

    #: Request kinds that are never forwarded: only one channel list response may be sent.
    LOCAL_ONLY = (ChannelListRequest, ModerationStateRequest)

    def _maybe_forward(self, entry: Inbound, m) -> None:
        if m.ttl <= 0 or isinstance(m, self.LOCAL_ONLY) or entry.remaining == 0 or not self._take_forward(entry):
            return
        forwarded = replace(m, ttl=m.ttl - 1)
        fanout = self.state.policy.forward_fanout
        if not isinstance(m, PostRequest):
            entry.relayed = set()
        for conn in self.state.connections:
            if len(entry.forwarded) >= fanout:
                break
            if conn is not self and not conn.closed and conn._output_ok():
                conn._send(forwarded)
                entry.forwarded.add(conn)
                entry.pending.add(conn)
                conn.awaiting.add(entry)

    def _relay(self, entry: Inbound, m, now: int) -> None:
        """A response from a peer we forwarded ``entry`` to: checked, then passed back to where it came from."""
        origin, request = entry.origin, entry.request
        if isinstance(m, HashResponse) and not isinstance(request, PostRequest):
            fresh = [h for h in dict.fromkeys(m.hashes) if h not in entry.relayed]
            if fresh and (len(entry.relayed) + len(fresh) > limits.RELAYED_HASHES or not origin._output_ok()):
                self.state.stats["relays_cut"] += 1
                self._cancel_forward(entry, self)
                return
            entry.relayed.update(fresh)
            if fresh:
                origin.push(entry, fresh)
        elif isinstance(m, PostResponse) and isinstance(request, PostRequest):
            good = []
            for buf in m.posts:
                try:
                    h = self.state.store.check_relayed(buf, now)
                    if h not in entry.relay_wanted:
                        raise UnsolicitedPostError(f"relayed post {h.hex()} was not asked for (or was relayed already)")
                except CableError as exc:
                    self.state.stats["relayed_refused"] += 1
                    self._refuse(exc)
                    continue
                entry.relay_wanted.discard(h)
                good.append(buf)
            if good:
                if origin._output_ok():
                    origin._send_posts(entry.req_id, good)
                else:
                    self.state.stats["relays_cut"] += 1
                    self._cancel_forward(entry, self)
                    return
        elif not isinstance(m, (HashResponse, PostResponse)) or not m.concludes:
            raise UnknownRequestError(f"{type(m).__name__} does not answer a forwarded {type(request).__name__}")
        if m.concludes:
            entry.pending.discard(self)
            self.awaiting.discard(entry)
            origin._finish_inbound(entry)

    def _cancel_forward(self, entry: Inbound, conn) -> None:
        """Stop waiting on ``conn`` for ``entry`` (it floods, or the requester cannot take more)."""
        if conn in entry.pending and not conn.closed:
            conn._send(CancelRequest(self.state.new_req_id(), cancel_id=entry.req_id))
        entry.pending.discard(conn)
        conn.awaiting.discard(entry)
        entry.origin._finish_inbound(entry)

    def _stop_forwards(self, entry: Inbound) -> None:
        for conn in list(entry.pending):
            if not conn.closed:
                conn._send(CancelRequest(self.state.new_req_id(), cancel_id=entry.req_id))
            conn.awaiting.discard(entry)
        entry.pending.clear()

    def _take_forward(self, entry: Inbound) -> bool:
        peer, policy = self.state, self.state.policy
        if self.forwards >= policy.forwards_per_peer or (self.forwards >= policy.forwards_reserved and peer.forward_count >= policy.forwards_total):
            peer.stats["forwards_refused"] += 1
            return False
        entry.holds_forward = True
        self.forwards += 1
        peer.forward_count += 1
        return True
