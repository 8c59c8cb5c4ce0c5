"""Shared helpers for the peer tests: in-memory pipes and store comparisons."""

from __future__ import annotations

import asyncio
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


# --- real sockets on 127.0.0.1 ------------------------------------------------------------


class RawPeer:
    """A bare TCP client for tests: sends messages, collects what comes back by ``req_id`` (asyncio streams)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.decoder = Decoder()
        self.inbox: list = []  # decoded messages not claimed yet

    @classmethod
    async def connect(cls, port: int) -> RawPeer:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, *messages) -> None:
        from cablestore.wire import messages as M

        self.writer.write(b"".join(M.encode(m) for m in messages))
        await self.writer.drain()

    async def read(self, timeout: float) -> bool:
        """Read once (up to ``timeout`` s); False at EOF."""
        try:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout)
        except TimeoutError:
            return True
        except ConnectionError:
            return False
        if not data:
            return False
        self.inbox += [m for m in self.decoder.feed(data) if not isinstance(m, Exception)]
        return True

    async def answers(self, req_id: bytes, timeout: float = 10.0) -> list:
        """Every response to ``req_id`` up to and including its conclusion (raises on timeout or EOF)."""
        deadline = asyncio.get_running_loop().time() + timeout
        got = []
        while True:
            mine = [m for m in self.inbox if not m.is_request and m.req_id == req_id]
            self.inbox = [m for m in self.inbox if m.is_request or m.req_id != req_id]
            got += mine
            if got and got[-1].concludes:
                return got
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AssertionError(f"no conclusion for {req_id.hex()} within {timeout} s: {got}")
            if not await self.read(min(left, 0.2)):
                raise AssertionError(f"connection closed while waiting for {req_id.hex()}: {got}")

    async def ask(self, request, timeout: float = 10.0) -> list:
        """Send ``request`` and return its answers."""
        await self.send(request)
        return await self.answers(request.req_id, timeout)

    async def closed_by_peer(self, timeout: float) -> bool:
        """True if the other side closes (or resets) the connection within ``timeout`` s."""
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            try:
                data = await asyncio.wait_for(self.reader.read(1 << 16), 0.1)
            except TimeoutError:
                continue
            except ConnectionError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.writer.close()


def hashes_of(answers) -> list[bytes]:
    """The hashes of a list of hash responses, in order."""
    return [h for m in answers for h in m.hashes]


def posts_of(answers) -> list[bytes]:
    """The posts of a list of post responses, in order."""
    return [p for m in answers for p in m.posts]
