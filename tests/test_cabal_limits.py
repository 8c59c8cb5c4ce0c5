"""A many-cabal listener's limits are one budget, shared fairly: connections and the buffer pool (real TCP on 127.0.0.1, real keys)."""

from __future__ import annotations

import os

import pytest

from cablestore import Store
from cablestore.errors import PolicyError
from cablestore.peer import PeerLimits, run_sync
from cablestore.peer.cabals import CabalListener
from cablestore.peer.limits import MIB, FairShares

from .test_cabals import _serving, run
from .test_private import Initiator, closed_with_nothing

KEYS = [os.urandom(32) for _ in range(3)]
SMALL = PeerLimits(max_connections=8, memory_mb=110)  # 3 cabals: one connection reserved for each, 8 in all


def test_fair_shares_keep_each_partys_reserve_and_lend_the_rest():
    shares = FairShares(100, 4)
    assert shares.reserve == 12  # half of 100 in four reserves
    assert shares.left(0) == 100 - 3 * 12  # one party alone: the unreserved half and its own reserve
    shares.add(0, 64)
    assert shares.left(0) == 0 and shares.left(1) == 12  # the busy one is at its most; the others keep their reserves
    shares.add(1, 12)
    assert shares.left(1) == 0 and shares.left(2) == 12
    shares.add(0, -20)
    assert shares.left(1) == 20 and shares.left(0) == 20  # what the busy one gave back is anyone's again
    shares.outside = 5  # held for no party yet (handshakes under way)
    assert shares.left(1) == 15 and shares.left(3) == 15 + 12  # a party still within its reserve has it on top
    assert FairShares(8, 1000, least=1).reserve == 1
    with pytest.raises(PolicyError):
        FairShares(8, 0)


def test_one_cabals_flood_of_connections_leaves_every_other_cabal_served(cabals, tmp_path):
    members = [Store(tmp_path / f"member{i}") for i in range(1, 3)]

    async def main():
        task, stop, port = await _serving(list(zip(cabals, KEYS, strict=True)), policy=SMALL)
        flood = []
        try:
            while True:  # cabal 0's members connect until the listener closes one
                peer = await Initiator.connect(port, key=KEYS[0])
                flood.append(peer)
                if not await peer.pump(lambda p=peer: p.hs.handshake_complete):
                    refused = await closed_with_nothing(peer.reader)
                    break
                assert len(flood) <= SMALL.max_connections
            synced = [await run_sync(members[i - 1], f"127.0.0.1:{port}", cabal_key=KEYS[i], timeout=30) for i in (1, 2)]
            return len(flood) - 1, refused, synced
        finally:
            for peer in flood:
                peer.writer.close()
            stop.set()
            summary.append(await task)

    summary = []
    held, refused, synced = run(main())
    assert held == SMALL.max_connections - 2  # everything but the other two cabals' reserved connection each
    assert refused == b""  # the one over cabal 0's share: closed with nothing sent
    assert all(s["complete"] for s in synced), synced
    assert [sorted(m.channel_list(0, 10)) for m in members] == [["secret-1"], ["secret-2"]]
    assert summary[0]["connections_refused"] == 1 and summary[0]["reserved_connections"] == 1
    assert [c["handshakes"] for c in summary[0]["cabals"]] == [held, 1, 1]
    for m in members:
        m.close()


def test_the_cabals_share_one_buffer_pool_and_none_spends_anothers_reserve(cabals):
    policy = PeerLimits(max_connections=8, memory_mb=120)

    async def main():
        listener = CabalListener(list(zip(cabals, KEYS, strict=True)), policy=policy, pull=False)
        try:
            nodes = [listener.wire_of(i).node for i in range(3)]
            whole, reserve = policy.pool_bytes(), listener.pool.reserve
            before = [n.pool_left for n in nodes]
            nodes[0].state.account(whole)  # cabal 0's connections buffer more than the whole pool
            during = [n.pool_left for n in nodes]
            nodes[0].state.account(-whole)
            return whole, reserve, before, during, [n.pool_left for n in nodes]
        finally:
            await listener.close()

    whole, reserve, before, during, after = run(main())
    assert reserve == whole // 6 and whole > 4 * MIB
    assert before == [whole - 2 * reserve] * 3  # alone, a cabal may use all but the others' reserves
    assert during[0] < 0 and during[1:] == [reserve, reserve]  # cabal 0 is over; the others still have their reserves
    assert after == before
