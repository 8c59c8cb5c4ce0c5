"""The attacks on `cablestore serve` of the hostile-peer harness (:mod:`benchmarks.hostile`).

Each runs in a thread of the harness, against ``address``, until ``stop`` is
set; ``size`` scales it; ``info`` holds what it needs of the served store and
collects the results of the attacks that check answers themselves.
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import threading
import time

from benchmarks.hostile_client import FAR, GOOD_ID
from cablestore.wire import messages as M
from cablestore.wire.codec import encode_varint
from cablestore.wire.decoding import Decoder


def random_req_id(rng: random.Random) -> bytes:
    return rng.randrange(1, GOOD_ID).to_bytes(4, "big")


class Sockets:
    """Many non-blocking client sockets: connect, send what the kernel takes, read and drop, close."""

    def __init__(self, address: str):
        host, port = address.rsplit(":", 1)
        self.addr = (host, int(port))
        self.socks: list[socket.socket] = []
        self.pending: dict[socket.socket, memoryview] = {}
        self.sel = selectors.DefaultSelector()
        self.refused = 0

    def open(self, n: int, stop: threading.Event) -> None:
        for _ in range(n):
            if stop.is_set():
                return
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
            try:
                s.connect(self.addr)
            except OSError:
                self.refused += 1
                s.close()
                continue
            s.setblocking(False)
            self.socks.append(s)

    def queue(self, s: socket.socket, data: bytes) -> None:
        old = self.pending.get(s)
        self.pending[s] = memoryview(bytes(old) + data) if old is not None and len(old) else memoryview(data)

    def pump(self, read: bool = True) -> None:
        """Send what the sockets take; with ``read``, read and drop what came."""
        for s, view in list(self.pending.items()):
            try:
                while len(view):
                    n = s.send(view[: 1 << 16])
                    view = view[n:]
            except BlockingIOError:
                pass
            except OSError:
                view = memoryview(b"")
                self._drop(s)
            if len(view):
                self.pending[s] = view
            else:
                self.pending.pop(s, None)
        if read:
            for s in list(self.socks):
                try:
                    while s.recv(1 << 16):
                        pass
                    self._drop(s)  # EOF
                except BlockingIOError:
                    pass
                except OSError:
                    self._drop(s)

    def _drop(self, s) -> None:
        if s in self.socks:
            self.socks.remove(s)
        self.pending.pop(s, None)
        s.close()

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()
        self.socks.clear()
        self.pending.clear()


def attack_live_flood(address, size, stop, info):
    """``size`` = (connections, live requests each): live time ranges and states, never cancelled."""
    conns, each = size
    rng = random.Random(1)
    sk = Sockets(address)
    sk.open(conns, stop)
    for s in sk.socks:
        now = int(time.time() * 1000)  # live time ranges from now: the table fills at once
        live = (M.TimeRangeRequest(random_req_id(rng), info["channel"], now, 0, 0) if i % 2 else M.ChannelStateRequest(random_req_id(rng), info["channel"], 1) for i in range(each))
        sk.queue(s, b"".join(M.encode(m) for m in live))
    while not stop.wait(0.02):
        sk.pump()
    sk.close()


def attack_no_read(address, size, stop, info):
    """``size`` = (connections, requests each): whole channels and all their posts, never reading."""
    conns, each = size
    rng = random.Random(2)
    sk = Sockets(address)
    sk.open(conns, stop)
    hashes = tuple(bytes.fromhex(h) for h in info["all_hashes"][:1024])
    for s in sk.socks:
        msgs = [M.encode(M.TimeRangeRequest(random_req_id(rng), info["channel"], 0, FAR, 0) if i % 2 else M.PostRequest(random_req_id(rng), hashes)) for i in range(each)]
        sk.queue(s, b"".join(msgs))
    while not stop.wait(0.05):
        sk.pump(read=False)
    sk.close()


def attack_partial_frames(address, size, stop, info):
    """``size`` connections each send most of a 4 MiB frame, then stall."""
    frame = encode_varint(M.DEFAULT_LIMITS.max_message) + bytes(M.DEFAULT_LIMITS.max_message - 1024)
    sk = Sockets(address)
    sk.open(size, stop)
    for s in sk.socks:
        sk.pending[s] = memoryview(frame)  # one shared buffer
    while not stop.wait(0.05):
        sk.pump(read=False)
    sk.close()


def attack_slowloris(address, size, stop, info):
    """``size`` connections each send one byte a second (of channel list requests)."""
    trickle(address, size, stop, M.encode(M.ChannelListRequest(b"\x01\x02\x03\x04", 0, 0)))


def trickle(address, size, stop, msg: bytes) -> None:
    """``size`` connections to ``address`` each sending ``msg`` over and over, one byte a second, until ``stop``."""
    sk = Sockets(address)
    sk.open(size, stop)
    i = 0
    while not stop.wait(1.0):
        for s in list(sk.socks):
            sk.queue(s, msg[i % len(msg) : i % len(msg) + 1])
        sk.pump()
        i += 1
    sk.close()


def attack_idle_close(address, size, stop, info):
    """``size`` idle connections opened, then all closed at once; twice."""
    for _ in range(2):
        sk = Sockets(address)
        sk.open(size, stop)
        stop.wait(1.0)
        sk.close()
        if stop.is_set():
            return


def attack_unfair_small(address, size, stop, info):
    """One connection pipelines ``size`` small requests (50-hash time ranges, channel lists, 8 posts), reading the answers."""
    rng = random.Random(3)
    sk = Sockets(address)
    sk.open(1, stop)
    hashes = tuple(bytes.fromhex(h) for h in info["all_hashes"][:8])
    makers = [
        lambda: M.TimeRangeRequest(random_req_id(rng), info["channel"], 0, FAR, 50),
        lambda: M.ChannelListRequest(random_req_id(rng), 0, 0),
        lambda: M.PostRequest(random_req_id(rng), hashes),
    ]
    for s in sk.socks:
        sk.queue(s, b"".join(M.encode(makers[i % 3]()) for i in range(size)))
    while not stop.wait(0.01):
        sk.pump()
    sk.close()


def attack_unfair_whole(address, size, stop, info):
    """One connection pipelines ``size`` whole-channel time ranges, reading the answers."""
    rng = random.Random(4)
    sk = Sockets(address)
    sk.open(1, stop)
    for s in sk.socks:
        sk.queue(s, b"".join(M.encode(M.TimeRangeRequest(random_req_id(rng), info["channel"], 0, FAR, 0)) for _ in range(size)))
    while not stop.wait(0.01):
        sk.pump()
    sk.close()


def _read_answers(sock, req_id: bytes, deadline: float) -> list:
    """Every message for ``req_id`` up to its conclusion (blocking socket)."""
    dec, out = Decoder(), []
    sock.settimeout(0.2)
    while time.time() < deadline:
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not data:
            break
        for m in dec.feed(data):
            if not isinstance(m, Exception) and not m.is_request and m.req_id == req_id:
                out.append(m)
                if m.concludes:
                    return out
    return out


def attack_huge_limit(address, size, stop, info):
    """Time ranges with ``limit`` of 2^63 and 2^64 - 1: answered whole, the connection kept."""
    host, port = address.rsplit(":", 1)
    results = []
    with socket.create_connection((host, int(port)), timeout=5) as s:
        for i, limit in enumerate((1 << 63, (1 << 64) - 1)):
            req_id = (0x10 + i).to_bytes(4, "big")
            s.sendall(M.encode(M.TimeRangeRequest(req_id, info["channel"], 0, FAR, limit)))
            answers = _read_answers(s, req_id, time.time() + 5)
            got = [h.hex() for m in answers for h in m.hashes]
            results.append(got == info["whole_range"] and bool(answers) and answers[-1].concludes)
    info["checks"]["huge limit answered whole"] = all(results)
    stop.wait()


def attack_relay(address, size, stop, info):
    """A relaying peer answers forwarded post requests with bad posts; a duplicate forwarded request; ``size`` rounds."""
    from cablestore.wire.codec import post_hash

    host, port = address.rsplit(":", 1)
    posts = [bytes.fromhex(p) for p in info["foreign_posts"]]  # signed posts the server does not hold
    good = posts[0]
    forged = good[:40] + bytes([good[40] ^ 1]) + good[41:]
    future = bytes.fromhex(info["future_post"])
    undecodable = good[:100]
    unasked = posts[1]
    ok = True
    relayer = socket.create_connection((host, int(port)), timeout=5)
    time.sleep(0.2)  # the relayer is connected before the asker asks
    rounds = 0
    with relayer, socket.create_connection((host, int(port)), timeout=5) as asker, socket.create_connection((host, int(port)), timeout=5) as dup:
        relay_dec = Decoder()
        relayer.settimeout(0.2)
        while not stop.is_set() and rounds < size:
            rounds += 1
            req_id = (0x20000000 + rounds).to_bytes(4, "big")
            asker.sendall(M.encode(M.PostRequest(req_id, (post_hash(good), post_hash(future), post_hash(forged)), ttl=1)))
            forwarded = None
            deadline = time.time() + 5
            while forwarded is None and time.time() < deadline:
                with contextlib.suppress(TimeoutError):
                    for m in relay_dec.feed(relayer.recv(1 << 16)):
                        if isinstance(m, M.PostRequest) and m.req_id == req_id:
                            forwarded = m
            if forwarded is None:
                ok = False
                break
            relayer.sendall(M.encode(M.PostResponse(req_id, (forged, future, undecodable, unasked, good))) + M.encode(M.PostResponse(req_id)))
            # Relayed at once; concluded only when every forward concluded (the good client never answers
            # forwards: after the request timeout), so read for a second.
            answers = _read_answers(asker, req_id, time.time() + 1.0)
            relayed = [p for m in answers if isinstance(m, M.PostResponse) for p in m.posts]
            ok &= relayed == [good]
            # The same request again, from another peer (a second route): a concluding response, not silence.
            t0 = time.time()
            dup.sendall(M.encode(M.PostRequest(req_id, forwarded.hashes, ttl=0)))
            dup_answers = _read_answers(dup, req_id, time.time() + 5)
            ok &= bool(dup_answers) and dup_answers[-1].concludes and time.time() - t0 < 2
    info["checks"]["relay: only the good post passed on, duplicate concluded"] = ok and rounds > 0
    stop.wait()


SERVE_ATTACKS = [
    # name, function, full size, short size, issue item
    ("live-table flood", attack_live_flood, (5, 1100), (5, 1100), 1),
    ("never reading", attack_no_read, (16, 2000), (8, 500), 2),
    ("partial 4 MiB frames", attack_partial_frames, (800, None), (300, None), 3),
    ("1 byte/s connections", attack_slowloris, (3000, None), (600, None), 4),
    ("idle connections closed at once", attack_idle_close, (5000, None), (1500, None), 4),
    ("small-request burst", attack_unfair_small, (50_000, None), (20_000, None), 5),
    ("whole-channel burst", attack_unfair_whole, (5000, None), (2000, None), 5),
    ("limit >= 2^63", attack_huge_limit, (1, None), (1, None), 6),
    ("relay: bad posts, duplicate", attack_relay, (20, None), (5, None), 7),
]


def size_text(size) -> str:
    return " x ".join(str(s) for s in (size if isinstance(size, tuple) else (size,)) if s is not None)


def unwrap_size(size):
    return size if size[1] is not None else size[0]


