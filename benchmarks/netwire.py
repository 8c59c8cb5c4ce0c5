"""The network benchmark's wire and graphs: a counting relay on every edge, the topologies, the partition's cut.

:class:`Relay` is one asyncio loop in a thread of the benchmark process with
one listener per edge of the graph: the dialling peer's ``--peer`` names the
relay's port, and the relay copies each connection to the dialled peer's
current port.  On the way it counts bytes and Cable messages (plain framing:
a varint length, then the message) and decodes the post responses, so it
knows which posts reached which peer how many times: what ``serve``'s
counters do not say (they count per connection and are lost with a killed
process).  A killed peer's relay side simply fails to connect, and the
dialling peer sees a dropped connection and backs off as it would.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter, defaultdict

from cablestore.wire.codec import post_hash
from cablestore.wire.decoding import decode_payload
from cablestore.wire.fields import read_varint
from cablestore.wire.messages import POST_RESPONSE

TOPOLOGIES = ("line", "ring", "random")
MESSAGE_NAMES = ("hash response", "post response", "post request", "cancel request", "time range request", "channel state request",
                 "channel list request", "channel list response", "moderation state request")


def edges_of(topology: str, n: int, seed: int = 1) -> list[tuple[int, int]]:
    """The edges ``(dialler, dialled)`` of ``topology`` on ``n`` peers; each edge is dialled by one side only.

    line: each peer dials the one before; ring: the line closed by its last peer
    dialling the first; random: a connected simple 3-regular graph (``n`` even,
    at least 4) drawn with ``seed`` by the configuration model, each edge dialled
    by its higher-numbered end.
    """
    if topology == "line":
        return [(i, i - 1) for i in range(1, n)]
    if topology == "ring":
        return [(i, i - 1) for i in range(1, n)] + ([(0, n - 1)] if n > 2 else [])
    if topology != "random":
        raise ValueError(f"unknown topology {topology!r}: one of {', '.join(TOPOLOGIES)}")
    if n < 4 or n % 2:
        raise ValueError("a random 3-regular graph needs an even number of peers, at least 4")
    rng = random.Random(seed)
    while True:
        stubs = [i for i in range(n) for _ in range(3)]
        rng.shuffle(stubs)
        pairs = {tuple(sorted(stubs[k:k + 2])) for k in range(0, len(stubs), 2)}
        if len(pairs) == len(stubs) // 2 and all(a != b for a, b in pairs) and _connected(n, pairs):
            return sorted((b, a) for a, b in pairs)


def _neighbours(n: int, edges) -> list[set[int]]:
    out: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        out[a].add(b)
        out[b].add(a)
    return out


def _connected(n: int, edges) -> bool:
    near, seen, todo = _neighbours(n, edges), {0}, [0]
    while todo:
        for m in near[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return len(seen) == n


def partition(n: int, edges) -> tuple[list[int], list[int], list[int]]:
    """Two halves and the peers between them: ``(side_a, cut, side_b)``; stopping ``cut`` leaves no path from a to b.

    The halves are the first and second half of a breadth-first order from peer
    0; the cut is the smaller of each half's peers that have a neighbour in the other.
    """
    near, order, seen = _neighbours(n, edges), [0], {0}
    for i in order:
        for m in sorted(near[i] - seen):
            seen.add(m)
            order.append(m)
    half_a, half_b = set(order[: n // 2]), set(order[n // 2:])
    border_a = {i for i in half_a if near[i] & half_b}
    border_b = {i for i in half_b if near[i] & half_a}
    if len(border_b) < len(border_a):
        half_a, half_b, border_a = half_b, half_a, border_b
    return sorted(half_a - border_a), sorted(border_a), sorted(half_b)


class _Flow:
    """One direction of one relayed connection: its bytes parsed into Cable messages."""

    def __init__(self, relay: Relay, to: int) -> None:
        self.relay, self.to, self.buf = relay, to, bytearray()

    def feed(self, data: bytes) -> None:
        relay = self.relay
        relay.bytes += len(data)
        self.buf += data
        while True:
            try:
                size, start = read_varint(self.buf, 0)
            except Exception:  # an incomplete varint: wait for more bytes
                return
            if len(self.buf) < start + size:
                return
            payload = bytes(self.buf[start:start + size])
            del self.buf[:start + size]
            relay.messages += 1
            kind = MESSAGE_NAMES[payload[0]] if payload and payload[0] < len(MESSAGE_NAMES) else "other"
            relay.by_type[kind] += start + size
            if payload and payload[0] == POST_RESPONSE:
                for post in decode_payload(payload).posts:
                    relay.post_bytes += len(post)
                    relay.arrivals[self.to][post_hash(post)] += 1


class Relay:
    """Counting relays for the edges of a graph, on 127.0.0.1, in a thread of their own (use as a context manager)."""

    def __init__(self, edges: list[tuple[int, int]]) -> None:
        self.edges = edges
        self.target_ports: dict[int, int] = {}  # peer -> the port it listens on now (set by the benchmark)
        self.ports: dict[tuple[int, int], int] = {}  # edge -> the relay's port its dialler is given
        self.bytes = self.messages = self.post_bytes = self.connections = 0
        self.by_type: Counter = Counter()  # message kind -> bytes, length prefix included
        self.arrivals: dict[int, Counter] = defaultdict(Counter)  # peer -> post hash -> times it arrived there
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relay", daemon=True)
        self._servers: list[asyncio.AbstractServer] = []

    def __enter__(self) -> Relay:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(30)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def _listen(self) -> None:
        for edge in self.edges:
            server = await asyncio.start_server(lambda r, w, e=edge: self._relay(e, r, w), "127.0.0.1", 0)
            self._servers.append(server)
            self.ports[edge] = server.sockets[0].getsockname()[1]

    async def _relay(self, edge: tuple[int, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dialler, dialled = edge
        port = self.target_ports.get(dialled)
        try:
            if port is None:
                raise ConnectionRefusedError
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        self.connections += 1
        up, down = _Flow(self, dialled), _Flow(self, dialler)
        await asyncio.gather(_pipe(reader, up_writer, up), _pipe(up_reader, writer, down))

    def snapshot(self) -> dict:
        """The counts so far (read in the relay's thread, so they are consistent)."""
        async def read() -> dict:
            return {"bytes": self.bytes, "messages": self.messages, "post_bytes": self.post_bytes, "connections": self.connections,
                    "by_type": dict(self.by_type.most_common()),
                    "arrivals": {peer: Counter(c) for peer, c in self.arrivals.items()}}
        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(30)

    def close(self) -> None:
        if not self._thread.is_alive():
            return

        async def shut() -> None:
            for server in self._servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flow: _Flow) -> None:
    try:
        while data := await reader.read(1 << 16):
            flow.feed(data)
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
