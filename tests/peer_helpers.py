"""Shared helpers for the peer tests: in-memory pipes and store comparisons."""

from __future__ import annotations

import time

from cablestore.wire.decoding import Decoder

WALL = time.time_ns() // 1_000_000


def pump(*pairs, now: int = WALL, rounds: int = 500, polls=()) -> int:
    """Move bytes both ways between connected ``(x, y)`` connection pairs until quiet."""
    for i in range(rounds):
        moved = False
        for sync in polls:
            sync.poll(now)
        for x, y in pairs:
            for src, dst in ((x, y), (y, x)):
                data = src.data_to_send()
                if data:
                    dst.receive_data(data, now)
                    moved = True
        for sync in polls:
            sync.poll(now)
        if not moved:
            return i
    raise AssertionError(f"still talking after {rounds} rounds")


def link(node_x, node_y, name_x="x", name_y="y"):
    """Two connections, one on each node, that ``pump`` joins."""
    return node_x.connect(name_y), node_y.connect(name_x)


def answers(store) -> dict:
    """What every query answers, for comparing stores.

    Time ranges include the post/deletes: a store that never held a deleted
    post lists its delete where the peer it synced from listed it.
    """
    out = {"channels": store.channel_list()}
    for ch in out["channels"]:
        members = store.members(ch)
        out[ch] = {
            "time_range": store.channel_time_range(ch),
            "state": sorted(store.channel_state(ch)),
            "members": members,
            "topic": store.topic(ch),
            "names": [store.name(pk) for pk in members],
        }
    return out


def responses(data: bytes) -> list:
    """Decode bytes a connection sent."""
    return Decoder().feed(data)
