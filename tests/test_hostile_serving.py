"""Serving hostile peers: each attack over real sockets on 127.0.0.1 against a PeerServer, with a good peer checking its answers.

Limits are set small (and timeouts short) so each attack shows in about a second.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from benchmarks.hostile_serve import Sockets
from cablestore import Keypair, Store, make_post, post_hash
from cablestore.authoring.workload import generate
from cablestore.peer import Connection, Node, PeerLimits, PeerServer
from cablestore.peer.limits import MIB
from cablestore.wire import messages as M
from cablestore.wire.codec import encode_varint

from .peer_helpers import RawPeer, hashes_of, posts_of

FAR = 1 << 62


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "served"
    with Store(path) as store:
        store.ingest_many(generate(seed=20, posts=1500))
        channel = store.channel_list()[0]
        whole = store.channel_time_range(channel, 0, FAR, 0)
        texts = [h for h in whole if store.get(h) is not None]
        expected = {
            "channels": tuple(store.listed_spellings(store.channel_list())),  # as posts spell them
            "range": store.channel_time_range(channel, 0, FAR, 50),
            "whole": whole,
            "posts": sorted(store.get(h) for h in texts[:8]),
            "state": sorted(store.channel_state_answer(channel)),
        }
    return path, channel, texts, expected


class Good:
    """The good peer: asks the four requests and checks each answer against the store."""

    def __init__(self, peer: RawPeer, channel: str, texts, expected):
        self.peer, self.channel, self.texts, self.expected = peer, channel, texts, expected
        self.n = 0x7F000000
        self.latencies: list[float] = []

    def _rid(self) -> bytes:
        self.n += 1
        return self.n.to_bytes(4, "big")

    async def round(self) -> None:
        """One of each request; every answer must be the store's."""
        for make, check in (
            (lambda r: M.ChannelListRequest(r, 0, 0), lambda a: len(a) == 1 and a[0].channels == self.expected["channels"]),
            (lambda r: M.TimeRangeRequest(r, self.channel, 0, FAR, 50), lambda a: hashes_of(a) == self.expected["range"]),
            (lambda r: M.PostRequest(r, tuple(self.texts[:8])), lambda a: sorted(posts_of(a)) == self.expected["posts"]),
            (lambda r: M.ChannelStateRequest(r, self.channel, 0), lambda a: sorted(hashes_of(a)) == self.expected["state"]),
        ):
            start = time.perf_counter()
            answers = await self.peer.ask(make(self._rid()))
            self.latencies.append(time.perf_counter() - start)
            assert check(answers), answers


async def serving(path, policy: PeerLimits):
    store = Store(path)
    server = await PeerServer(Node(store, policy=policy), "127.0.0.1", 0).start()
    return store, server


async def stop_serving(store, server) -> None:
    await server.close()
    server.node.close()
    store.close()


# --- 1. a full request table: refuse the peer over its share, never answer others wrongly ----------


def test_a_live_request_flood_is_refused_per_peer_and_others_get_whole_answers(served):
    path, channel, texts, expected = served

    async def main():
        policy = PeerLimits(live_per_peer=40, live_reserved=4, live_total=100)
        store, server = await serving(path, policy)
        try:
            floods = [await RawPeer.connect(server.port) for _ in range(4)]
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            sent = []
            for i, peer in enumerate(floods):
                reqs = [M.TimeRangeRequest(bytes([1, i, 0, j]), channel, 0, 0, 0) if j % 2 else M.ChannelStateRequest(bytes([1, i, 0, j]), channel, 1) for j in range(60)]
                await peer.send(*reqs)
                sent.append(reqs)
            node = server.node
            for _ in range(100):
                await asyncio.sleep(0.02)
                if node.live_count + node.stats["requests_refused"] == 240:
                    break
            assert node.live_count <= policy.live_total + 4 * policy.live_reserved
            assert all(c.live <= policy.live_per_peer for c in node.connections)
            assert node.stats["requests_refused"] == 240 - node.live_count > 0
            for _ in range(3):
                await good.round()  # the old table answered these with [] and 0 hashes
            # The good peer's own live request gets its reserved slot and the whole present answer.
            live = M.TimeRangeRequest(b"\x7e\x00\x00\x01", channel, 0, 0, 0)
            await good.peer.send(live)
            while len(hashes_of(m for m in good.peer.inbox if m.req_id == live.req_id)) < len(expected["whole"]):
                assert await good.peer.read(5)
            assert hashes_of(m for m in good.peer.inbox if m.req_id == live.req_id) == expected["whole"]
            # Each flood request either stays live (its answer, no conclusion) or was refused: one empty response.
            refused = 0
            for peer, reqs in zip(floods, sent, strict=True):
                ids = {r.req_id for r in reqs}
                while {m.req_id for m in peer.inbox} != ids:
                    assert await peer.read(5)
                for r in reqs:
                    mine = [m for m in peer.inbox if m.req_id == r.req_id]
                    if mine == [M.HashResponse(r.req_id)]:
                        refused += 1
                    else:
                        assert hashes_of(mine) and not any(m.concludes for m in mine)
            assert refused == node.stats["requests_refused"]
            for peer in floods:
                peer.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 2. backpressure: a peer that never reads stops being read, then is closed -------------------


def test_peers_that_never_read_hold_a_bounded_buffer_and_are_closed_when_stalled(served):
    path, channel, texts, expected = served

    async def main():
        policy = PeerLimits(stall_timeout=800)
        store, server = await serving(path, policy)
        try:
            sockets = Sockets(f"127.0.0.1:{server.port}")
            sockets.open(4, asyncio.Event())
            wanted = tuple(texts[:512])
            for n, s in enumerate(sockets.socks):  # ~100 MB of answers asked for, never read
                sockets.queue(s, b"".join(M.encode(M.PostRequest(bytes([2, n, j >> 8, j & 255]), wanted)) for j in range(300)))
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            node = server.node
            start = time.monotonic()
            while node.closed_by["stalled"] < 4 and time.monotonic() - start < 10:
                sockets.pump(read=False)
                await good.round()
            per_connection = policy.output_high + 2 * 64 * 1024 + policy.input_reserved + policy.read_chunk
            assert node.closed_by["stalled"] == 4
            assert node.peak_buffered < 5 * per_connection  # not ~100 MB: its output stopped its input
            sockets.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 3. partial frames: a bounded pool, and a slow message closes its sender --------------------------


def test_partial_frames_are_bounded_by_the_pool_and_closed_when_slow(served):
    path, channel, texts, expected = served

    async def main():
        policy = PeerLimits(max_connections=40, memory_mb=117, frame_timeout=800)  # a pool of about 8 MB
        store, server = await serving(path, policy)
        try:
            frame = encode_varint(M.DEFAULT_LIMITS.max_message) + bytes(3 * MIB)
            sockets = Sockets(f"127.0.0.1:{server.port}")
            sockets.open(30, asyncio.Event())
            for s in sockets.socks:
                sockets.pending[s] = memoryview(frame)
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            node = server.node
            start = time.monotonic()
            while node.closed_by["slow"] < 30 and time.monotonic() - start < 10:
                sockets.pump(read=False)
                await good.round()
            assert node.closed_by["slow"] == 30
            bound = policy.pool_bytes() + 31 * (policy.read_chunk + policy.input_reserved)
            assert 4 * MIB < node.peak_buffered <= bound  # 90 MB sent; the pool and the reserved shares held
            sockets.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 4. many connections: a cap, idle ones closed, and no per-event walk over all of them ---------------


def test_connections_over_the_cap_are_refused_idle_ones_closed_and_work_per_event_is_constant(served, monkeypatch):
    path, channel, texts, expected = served
    calls = []
    original = Connection.data_to_send

    def counted(self, max_bytes=None):
        calls.append(self)
        return original(self, max_bytes)

    monkeypatch.setattr(Connection, "data_to_send", counted)

    async def main():
        policy = PeerLimits(max_connections=30, memory_mb=120, idle_timeout=2000)
        store, server = await serving(path, policy)
        try:
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            idle = [await RawPeer.connect(server.port) for _ in range(80)]
            gone = await asyncio.gather(*(p.closed_by_peer(0.5) for p in idle))
            refused = [p for p, g in zip(idle, gone, strict=True) if g]
            assert len(refused) == 51 and server.node.stats["connections_refused"] == 51
            await asyncio.sleep(0.1)
            calls.clear()
            for _ in range(10):
                await good.round()
            # 40 answers with 29 idle connections open: only the connection that had bytes to write was visited.
            assert len(calls) >= 40 and {id(c) for c in calls} == {id(next(iter(server.node.connections)))}
            kept = [p for p in idle if p not in refused]
            assert all(await asyncio.gather(*(p.closed_by_peer(3) for p in kept)))  # idle past the timeout; the good peer is busy, not idle
            assert server.node.closed_by["idle"] == 29
            await good.round()
            for p in idle:
                p.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 5. fairness: one connection's burst does not hold up another's answers -----------------------------


def test_a_burst_from_one_connection_is_answered_in_turns_with_the_good_peer(served):
    path, channel, texts, expected = served

    async def main():
        store, server = await serving(path, PeerLimits())
        try:
            flood = await RawPeer.connect(server.port)
            burst = [M.TimeRangeRequest(bytes([5, 0, j >> 8, j & 255]), channel, 0, FAR, 0) for j in range(3000)]
            await flood.send(*burst)

            async def drain():
                while await flood.read(1):
                    flood.inbox.clear()

            reading = asyncio.create_task(drain())  # the flooder reads its answers: its burst is work, not a stall
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            await asyncio.sleep(0.05)
            for _ in range(5):
                await good.round()
            flooder = list(server.node.connections)[0]
            # All 20 good answers came while most of the burst still waited (the old peer answered a read's
            # messages all at once, so the good peer waited for the whole burst).
            assert flooder.stats["requests"] < len(burst) // 2 and max(good.latencies) < 2.0
            reading.cancel()
            flood.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 6. a time range limit of 2^63 or more ---------------------------------------------------------------------


def test_a_time_range_limit_of_2_to_the_63_or_more_is_answered_whole_and_the_connection_kept(served):
    path, channel, texts, expected = served

    async def main():
        store, server = await serving(path, PeerLimits())
        try:
            peer = await RawPeer.connect(server.port)
            for i, limit in enumerate((1 << 63, (1 << 64) - 1)):
                answers = await peer.ask(M.TimeRangeRequest(bytes([6, 0, 0, i]), channel, 0, FAR, limit))
                assert hashes_of(answers) == expected["whole"] and answers[-1].concludes
            assert (await peer.ask(M.ChannelListRequest(b"\x06\x00\x01\x00", 0, 0)))[0].channels == expected["channels"]
            peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 7. relaying: checked posts only; a duplicate forwarded request concluded --------------------------------


def test_relayed_posts_are_checked_and_a_duplicate_forwarded_request_is_concluded(served):
    path, channel, texts, expected = served
    kp = Keypair.from_seed(bytes(32))
    now = int(time.time() * 1000)
    good, unasked = (make_post(kp, 0, now - 1000 - i, channel=channel, text=f"relayed {i}")[0] for i in range(2))
    future = make_post(kp, 0, now + 30 * 24 * 3600 * 1000, channel=channel, text="from the future")[0]
    forged = good[:40] + bytes([good[40] ^ 1]) + good[41:]

    async def main():
        store, server = await serving(path, PeerLimits(request_timeout=1000))
        try:
            before = list(store.items())
            relayer = await RawPeer.connect(server.port)
            asker = await RawPeer.connect(server.port)
            dup = await RawPeer.connect(server.port)
            request = M.PostRequest(b"\x07\x00\x00\x01", (post_hash(good), post_hash(future), post_hash(forged)), ttl=1)
            await asker.send(request)
            while not any(isinstance(m, M.PostRequest) for m in relayer.inbox):
                assert await relayer.read(5)
            (forwarded,) = [m for m in relayer.inbox if isinstance(m, M.PostRequest)]
            assert forwarded.req_id == request.req_id and forwarded.ttl == 0
            await relayer.send(M.PostResponse(request.req_id, (forged, future, good[:100], unasked, good)), M.PostResponse(request.req_id))
            # Concluded once every forward concluded (dup never answers its copy: after the 1 s request timeout).
            answers = await asker.answers(request.req_id, timeout=5)
            assert posts_of(answers) == [good] and answers[-1].concludes
            assert server.node.stats["relayed_refused"] == 4  # forged, future, undecodable, unasked
            # dup got the forward too; sending the same req_id back (a second route) gets a conclusion at once.
            start = time.monotonic()
            assert await dup.ask(M.PostRequest(request.req_id, forwarded.hashes), timeout=1) == [M.PostResponse(request.req_id)]
            assert time.monotonic() - start < 1 and server.node.stats["duplicates_concluded"] == 1
            assert list(store.items()) == before  # a relay passes posts on, it does not keep them
            for p in (relayer, asker, dup):
                p.close()
        finally:
            await stop_serving(store, server)

    run(main())


# --- 7. set reconciliation: bounded per message and per connection ------------------------------------------


def _many_ranges(channel_start: int, n: int) -> bytes:
    """A reconciliation message of ``n`` fingerprint ranges that match nothing (each costs the answering side reads)."""
    from cablestore.wire import reconcile as R

    ranges = [R.Range((channel_start + i * 1000, b""), R.FINGERPRINT, bytes(16)) for i in range(n - 1)]
    return R.encode([*ranges, R.Range(R.INFINITY, R.FINGERPRINT, bytes(16))])


def test_a_reconciliation_flood_is_answered_up_to_its_budget_then_refused_and_others_get_whole_answers(served, monkeypatch):
    from cablestore.peer import limits
    from cablestore.wire import reconcile as R

    path, channel, texts, expected = served
    monkeypatch.setattr(limits, "RECONCILE_RANGES_PER_CONNECTION", 3 * R.MAX_RANGES)

    async def main():
        store, server = await serving(path, PeerLimits())
        try:
            flood = await RawPeer.connect(server.port)
            message = _many_ranges(1_600_000_000_000, R.MAX_RANGES)
            asks = [M.ReconcileRequest(bytes([7, 0, 0, j]), channel, M.SCOPE_HISTORY, message) for j in range(6)]
            garbage = M.ReconcileRequest(b"\x07\x00\x01\x00", channel, M.SCOPE_STATE, b"\x01\xff")
            await flood.send(*asks)
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            for _ in range(3):
                await good.round()
            got = [await flood.answers(a.req_id) for a in asks]
            assert all(len(g) == 1 and isinstance(g[0], M.ReconcileResponse) for g in got)
            answered = [g[0].message for g in got]
            assert all(R.decode(m) for m in answered[:3])  # within the budget: real answers
            assert answered[3:] == [b""] * 3  # past it: refused, the requester asks natively
            assert server.node.stats["reconciles_refused"] == 3
            assert max(good.latencies) < 2.0
            # A malformed message is refused with an empty answer and counted; the connection stays.
            flooder = next(c for c in server.node.connections if c.stats["requests"] >= 6)
            flooder.reconcile_ranges = 0
            assert (await flood.ask(garbage))[0].message == b""
            assert flooder.errors["ReconcileError"] == 1 and not flooder.closed
            flood.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


def test_sketches_cost_the_connections_budget_the_items_they_read_then_are_refused(served, monkeypatch):
    """A sketch over the whole channel makes the answering side read every item of it: each counts one range per
    16 items read, so a peer sending them finds its budget spent after as many as it allows, and the good peer's
    answers stay whole and quick meanwhile."""
    from cablestore.peer import limits
    from cablestore.wire import reconcile as R
    from cablestore.wire.sketch import CELL_SIZE

    path, channel, texts, expected = served
    each = 1 + len(texts) // R.ITEMS_PER_RANGE  # one range, and the items it reads
    monkeypatch.setattr(limits, "RECONCILE_RANGES_PER_CONNECTION", 3 * each)

    async def main():
        store, server = await serving(path, PeerLimits())
        try:
            flood = await RawPeer.connect(server.port)
            sketch = R.encode([R.Range(R.INFINITY, R.SKETCH, salt=bytes(8), sketch=bytes(90 * CELL_SIZE))])
            asks = [M.ReconcileRequest(bytes([9, 0, 0, j]), channel, M.SCOPE_HISTORY, sketch) for j in range(5)]
            await flood.send(*asks)
            good = Good(await RawPeer.connect(server.port), channel, texts, expected)
            for _ in range(3):
                await good.round()
            answered = [(await flood.answers(a.req_id))[0].message for a in asks]
            assert all(R.decode(m)[0].mode in (R.ESTIMATE, R.DIFFERENCE) for m in answered[:3])  # read and answered
            assert answered[3:] == [b""] * 2  # the budget spent: refused
            assert server.node.stats["reconciles_refused"] == 2
            assert max(good.latencies) < 2.0
            flood.close()
            good.peer.close()
        finally:
            await stop_serving(store, server)

    run(main())


def test_a_peer_that_does_not_speak_reconciliation_drops_its_messages_as_unknown_and_answers_the_rest(served):
    path, channel, texts, expected = served

    async def main():
        store, server = await serving(path, PeerLimits(reconcile=0))
        try:
            peer = await RawPeer.connect(server.port)
            await peer.send(M.ReconcileRequest(b"\x08\x00\x00\x01"), M.StateChangesRequest(b"\x08\x00\x00\x02", channel))
            good = Good(peer, channel, texts, expected)
            await good.round()
            assert not [m for m in peer.inbox if m.req_id[:2] == b"\x08\x00"]
            conn = next(iter(server.node.connections))
            assert conn.errors["UnknownMessageTypeError"] == 2 and not conn.closed
            peer.close()
        finally:
            await stop_serving(store, server)

    run(main())
