"""The hostile servers of the hostile-peer harness (:mod:`benchmarks.hostile`): each meets one
`cablestore sync` process and misbehaves in one way; :func:`run_sync_attack` runs the sync and measures it."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.hostile_client import FAR, RssSampler
from benchmarks.hostile_serve import random_req_id
from cablestore.wire import messages as M
from cablestore.wire.decoding import Decoder

PY = sys.executable


class HostileServer(threading.Thread):
    """Accepts one `cablestore sync` connection and misbehaves as ``kind`` says."""

    def __init__(self, kind: str, scale: float):
        super().__init__(daemon=True)
        self.kind, self.scale = kind, scale
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()

    def run(self) -> None:
        self.listener.settimeout(30)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(0.2)
            with contextlib.suppress(OSError):
                getattr(self, "_" + self.kind.replace("-", "_"))(conn)
        self.listener.close()

    def _requests(self, conn):
        """Yield each request the client sends, until done."""
        dec = Decoder()
        while not self.done.is_set():
            try:
                data = conn.recv(1 << 16)
            except TimeoutError:
                yield None
                continue
            if not data:
                return
            for m in dec.feed(data):
                if not isinstance(m, Exception) and m.is_request:
                    yield m

    def _silent(self, conn):
        for _ in self._requests(conn):
            pass

    def _garbage(self, conn):
        conn.sendall(random.Random(5).randbytes(64 << 10))
        for _ in self._requests(conn):
            pass

    def _over_cap_list(self, conn):
        for m in self._requests(conn):
            if isinstance(m, M.ChannelListRequest):
                conn.sendall(M.encode(M.ChannelListResponse(m.req_id, tuple(f"c{i}" for i in range(5000)))))

    def _wrong_types(self, conn):
        for m in self._requests(conn):
            if isinstance(m, M.ChannelListRequest):
                conn.sendall(M.encode(M.PostResponse(m.req_id, (b"x" * 10,))) + M.encode(M.HashResponse(m.req_id, (bytes(32),))))
            elif m is not None and not isinstance(m, M.CancelRequest):
                conn.sendall(M.encode(M.ChannelListResponse(m.req_id, ("general",))))

    def _request_flood(self, conn):
        rng = random.Random(6)
        conn.setblocking(False)
        view = memoryview(b"")
        while not self.done.is_set():
            if not len(view):
                view = memoryview(b"".join(M.encode(M.TimeRangeRequest(random_req_id(rng), "general", 0, FAR, 0)) for _ in range(1000)))
            try:
                view = view[conn.send(view) :]
            except BlockingIOError:
                time.sleep(0.001)

    def _endless(self, conn, live_only: bool = False):
        rng = random.Random(7)
        conn.settimeout(None)
        dec = Decoder()
        asked = []
        while not asked:
            for m in dec.feed(conn.recv(1 << 16)):
                if isinstance(m, M.ChannelListRequest):
                    conn.sendall(M.encode(M.ChannelListResponse(m.req_id, ("general",))))
                elif isinstance(m, (M.TimeRangeRequest, M.ChannelStateRequest)):
                    if live_only and not (getattr(m, "time_end", 1) == 0 or getattr(m, "future", 0) == 1):
                        conn.sendall(M.encode(M.HashResponse(m.req_id)))  # the finite pass: an empty channel
                    else:
                        asked.append(m.req_id)
        while not self.done.is_set():
            conn.sendall(M.encode(M.HashResponse(asked[0], tuple(rng.randbytes(32) for _ in range(65_536)))))

    def _endless_hashes(self, conn):
        self._endless(conn)

    def _live_push_flood(self, conn):
        self._endless(conn, live_only=True)

    def _trickle(self, conn):
        rng = random.Random(8)
        asked, last = None, 0.0
        for m in self._requests(conn):
            if isinstance(m, M.ChannelListRequest):
                conn.sendall(M.encode(M.ChannelListResponse(m.req_id, ("general",))))
            elif isinstance(m, M.TimeRangeRequest) and asked is None:
                asked = m.req_id
            if asked is not None and time.time() - last >= self.scale:
                last = time.time()
                conn.sendall(M.encode(M.HashResponse(asked, (rng.randbytes(32),))))


SYNC_ATTACKS = [
    # kind, issue item, live
    ("silent", 8, False),
    ("garbage", 8, False),
    ("over-cap-list", 8, False),
    ("wrong-types", 8, False),
    ("request-flood", 8, False),
    ("endless-hashes", 9, False),
    ("live-push-flood", 9, True),
    ("trickle", 10, False),
]


def run_sync_attack(kind: str, live: bool, work: Path, progress_timeout: float, memory_mb: int, trickle_s: float) -> dict:
    server = HostileServer(kind, trickle_s)
    server.start()
    argv = [PY, "-m", "cablestore", "sync", str(work / f"sync-{kind}"), "--connect", f"127.0.0.1:{server.port}", "--json"]
    argv += ["--progress-timeout", str(progress_timeout), "--memory-mb", str(memory_mb), "--timeout", str(progress_timeout * 20)]
    if live:
        argv += ["--live", "--duration", str(progress_timeout * 10)]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = RssSampler(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=progress_timeout * 30 + 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sampler.stop()
        server.done.set()
    seconds = time.perf_counter() - start
    try:
        summary = json.loads(out)
        reason, synced = summary["reason"], summary["seconds"]
    except (ValueError, KeyError):
        reason, synced = (err.strip().splitlines() or ["?"])[-1], None
    deadline = progress_timeout * 10 if live else progress_timeout
    return {
        "attack": kind, "exit": proc.returncode, "reason": reason, "sync_s": synced, "deadline_s": deadline,
        "process_s": round(seconds, 2), "rss_mb": round(sampler.peak(), 1),
    }


