"""The good client of the hostile-peer harness (:mod:`benchmarks.hostile`), and what it measures with.

    python -m benchmarks.hostile_client ADDRESS EXPECT SAMPLES STOP

asks a served store for the channel list, a 50-hash time range, 8 posts and
a channel state, one after the other in a loop, checks each answer against
EXPECT (what the store holds) and writes one line per answer to SAMPLES
(sent, done, kind, correct) until the file STOP exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from cablestore import Store
from cablestore.wire import messages as M
from cablestore.wire.decoding import Decoder

FAR = 1 << 62  # a finite time_end beyond every post
GOOD_ID = 0x7F000000  # the good client's req_ids start here (attackers use others)


def rss_mb(pid: int) -> float:
    """Resident memory of a process (VmRSS), MB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class RssSampler(threading.Thread):
    """Samples a process's RSS every 50 ms; ``peak()`` since the last ``reset()``."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self._peak, self._stop = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self._stop.wait(0.05):
            self._peak = max(self._peak, rss_mb(self.pid))

    def reset(self) -> None:
        self._peak = rss_mb(self.pid)

    def peak(self) -> float:
        return max(self._peak, rss_mb(self.pid))

    def stop(self) -> None:
        self._stop.set()


def store_digest(path: Path) -> str:
    """BLAKE2b of every key and value, in order."""
    h = hashlib.blake2b(digest_size=16)
    with Store(path, create=False) as store:
        for k, v in store.items():
            h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
    return h.hexdigest()


# --- the good client (its own process) ---------------------------------------------------


def expectations(path: Path) -> dict:
    with Store(path, create=False) as store:
        channel = store.channel_list()[0]
        hashes = store.channel_time_range(channel, 0, FAR, 50)
        texts = [h for h in store.channel_time_range(channel, 0, FAR, 0) if store.get(h) is not None][:8]
        return {
            "channel": channel,
            "channels": store.listed_spellings(store.channel_list()),  # as posts spell them (issue 24)
            "range": [h.hex() for h in hashes],
            "posts": [h.hex() for h in texts],
            "post_bytes": sorted(store.get(h).hex() for h in texts),
            "state": sorted(h.hex() for h in store.channel_state_answer(channel)),
        }


def good_client(address: str, expect_file: str, samples_file: str, stop_file: str) -> None:
    """Ask the four requests in a loop until ``stop_file`` exists; one line per answer: sent, done, kind, correct."""
    exp = json.loads(Path(expect_file).read_text())
    host, port = address.rsplit(":", 1)
    channel = exp["channel"]
    asks = [
        ("list", lambda r: M.ChannelListRequest(r, 0, 0)),
        ("range", lambda r: M.TimeRangeRequest(r, channel, 0, FAR, 50)),
        ("posts", lambda r: M.PostRequest(r, tuple(bytes.fromhex(h) for h in exp["posts"]))),
        ("state", lambda r: M.ChannelStateRequest(r, channel, 0)),
    ]
    n = GOOD_ID
    sock, decoder = None, Decoder()
    with open(samples_file, "w") as out:
        while not os.path.exists(stop_file):
            for kind, make in asks:
                if sock is None:
                    try:
                        sock = socket.create_connection((host, int(port)), timeout=2)
                        sock.settimeout(0.2)
                        decoder = Decoder()
                    except OSError:
                        out.write(f"{time.time():.4f} {time.time():.4f} connect 0\n")
                        time.sleep(0.2)
                        break
                n += 1
                req_id = n.to_bytes(4, "big")
                t0 = time.time()
                try:
                    sock.sendall(M.encode(make(req_id)))
                    correct = _collect(sock, decoder, req_id, kind, exp, t0 + 5)
                except OSError:
                    correct = False
                    sock.close()
                    sock = None
                out.write(f"{t0:.4f} {time.time():.4f} {kind} {int(correct)}\n")
                out.flush()
    if sock is not None:
        sock.close()


def _collect(sock, decoder, req_id: bytes, kind: str, exp: dict, deadline: float) -> bool:
    got: list = []
    while time.time() < deadline:
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not data:
            raise ConnectionError("closed")
        for m in decoder.feed(data):
            if isinstance(m, Exception) or getattr(m, "is_request", False) or m.req_id != req_id:
                continue  # forwarded requests and others' answers
            if isinstance(m, M.ChannelListResponse):
                return kind == "list" and list(m.channels) == exp["channels"]
            if isinstance(m, M.HashResponse):
                if m.hashes:
                    got += [h.hex() for h in m.hashes]
                    continue
                if kind == "range":
                    return got == exp["range"]
                return kind == "state" and sorted(got) == exp["state"]
            if isinstance(m, M.PostResponse):
                if m.posts:
                    got += [p.hex() for p in m.posts]
                    continue
                return kind == "posts" and sorted(got) == exp["post_bytes"]
    return False


def phase_figures(samples: list[tuple[float, float, str, int]], start: float, end: float) -> dict:
    """The good client's answers in ``[start, end]``: count, wrong, longest gap without a correct answer, p50/p99 (ms)."""
    inside = [s for s in samples if start <= s[1] <= end]
    correct = sorted(s[1] for s in inside if s[3])
    marks = [start, *correct, end]
    gap = max(b - a for a, b in zip(marks, marks[1:], strict=False))
    lat = sorted((s[1] - s[0]) * 1000 for s in inside if s[3])

    def q(p):
        return round(lat[min(len(lat) - 1, int(len(lat) * p))], 1) if lat else None

    return {"answers": len(inside), "wrong": sum(1 for s in inside if not s[3]), "gap_s": round(gap, 2), "p50_ms": q(0.5), "p99_ms": q(0.99)}




if __name__ == "__main__":
    good_client(*sys.argv[1:5])
