"""run.py's ``handshake`` step, its cases through real cablestore processes.

* cable-handshake.ts initiates to ``cablestore serve --cabal-key`` (the same
  key) and sends draft8 requests, a channel list and a channel time range,
  as messages of its transport; the answers must come back and decode.
* ``cablestore sync --cabal-key`` initiates to a small cable-handshake.ts
  responder (``handshake_peer.mjs relay``) that serves posts: it carries the
  messages between its transport and a plain draft8 peer over a cablestore
  store (a :class:`cablestore.peer.PeerServer` whose node speaks draft8's
  framing); the sync must complete (every request answered) with posts
  ingested, messages flowing both ways through cable-handshake.ts's transport.
* Three cabals on one port (``cablestore serve --cabal STORE=KEYFILE`` three
  times): cable-handshake.ts initiators with each cabal's key, both
  prologues, each see their own cabal's channels and posts only (a channel
  of the same name in every cabal included); one with a key no cabal holds
  gets nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from cablestore import Keypair, Store
from cablestore.authoring.author import Author
from cablestore.authoring.keyfile import write_cabal_key, write_keyfile
from cablestore.authoring.workload import generate
from cablestore.keyspace.keys import canonical_channel
from cablestore.peer import Node, PeerServer
from cablestore.wire import messages as M
from cablestore.wire.decoding import decode
from cablestore.wire.static_keys import x25519_private_of

HERE = Path(__file__).resolve().parent
WEEK = 7 * 24 * 3600 * 1000


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _wait_file(path: Path, proc: subprocess.Popen, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise RuntimeError(f"serve did not start: {proc.communicate(timeout=5)}")


def _store(tmp: Path, name: str, posts: int) -> tuple[Path, set[str]]:
    path = tmp / name
    with Store(path) as s:
        s.ingest_many(generate(seed=39, posts=posts))
        return path, {c.name for c in s.channels()}


def ts_to_serve(tmp: Path, cabal: bytes, theirs, prologue: bytes) -> dict:
    """cable-handshake.ts initiates to ``cablestore serve --cabal-key``; its draft8 requests are answered."""
    path, channels = _store(tmp, "served", 300)
    key_file, user_file, port_file = tmp / "serve-cabal.key", tmp / "serve-user.key", tmp / "serve.port"
    write_cabal_key(key_file, cabal)
    write_keyfile(user_file)
    serve = subprocess.Popen([sys.executable, "-m", "cablestore", "serve", str(path), "--listen", "127.0.0.1:0", "--cabal-key", str(key_file),
                              "--key", str(user_file), "--no-pull", "--quiet", "--port-file", str(port_file), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = _wait_file(port_file, serve)
        channel = sorted(channels)[0]
        list_id, range_id = os.urandom(8), os.urandom(8)
        requests = [M.ChannelListRequest(list_id, 0, 0), M.TimeRangeRequest(range_id, channel, 0, int(time.time() * 1000) + WEEK, 0)]
        ask = subprocess.run(["node", str(HERE / "handshake_peer.mjs"), "ask", port, cabal.hex(), x25519_private_of(theirs).hex(), prologue.decode(),
                              *(M.encode(r, M.DRAFT8).hex() for r in requests)], capture_output=True, text=True, timeout=60)
    finally:
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=30)
    lines = _lines(ask.stdout)
    answers = [decode(bytes.fromhex(x["hex"]), M.DRAFT8) for x in lines if x["event"] == "message" and x.get("hex")]
    listed = next((a for a in answers if isinstance(a, M.ChannelListResponse) and a.req_id == list_id), None)
    hashes = [h for a in answers if isinstance(a, M.HashResponse) and a.req_id == range_id for h in a.hashes]
    summary = _lines(out)[-1] if _lines(out) else {}
    return {
        "handshake": any(x["event"] == "handshake" for x in lines),
        "channel_list_answered": listed is not None and {canonical_channel(c) for c in listed.channels} == channels,  # listed under their spellings
        "time_range_hashes": len(hashes),
        "ts_exit": ask.returncode,
        "ts_errors": [x["message"] for x in lines if x["event"] == "error"] + ([ask.stderr.strip()[-300:]] if ask.stderr.strip() else []),
        "serve_handshakes": summary.get("handshakes"),
        "serve_closed": summary.get("closed"),
        "serve_exit": serve.returncode,
    }


def sync_to_ts(tmp: Path, cabal: bytes, theirs, prologue: bytes) -> dict:
    """``cablestore sync --cabal-key`` initiates to a cable-handshake.ts responder relaying to a draft8 peer over a store."""
    path, _ = _store(tmp, "behind-ts", 300)
    ready, stop, box = threading.Event(), None, {}

    def backend() -> None:
        async def main():
            nonlocal stop
            stop = asyncio.Event()
            with Store(path) as store:
                server = await PeerServer(Node(store, framing=M.DRAFT8), "127.0.0.1", 0).start()
                box["port"], box["held"] = server.port, len(store)
                ready.set()
                await stop.wait()
                await server.close()
        box["loop"] = asyncio.new_event_loop()
        box["loop"].run_until_complete(main())

    thread = threading.Thread(target=backend, daemon=True)
    thread.start()
    if not ready.wait(30):
        raise RuntimeError("the draft8 backend did not start")
    relay = subprocess.Popen(["node", str(HERE / "handshake_peer.mjs"), "relay", cabal.hex(), x25519_private_of(theirs).hex(), prologue.decode(), str(box["port"])],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = json.loads(relay.stdout.readline())["port"]
        key_file = tmp / "sync-cabal.key"
        write_cabal_key(key_file, cabal)
        flags = ["--legacy-prologue"] if prologue == b"CABLE1.0" else []
        sync = subprocess.run([sys.executable, "-m", "cablestore", "sync", str(tmp / "synced"), "--connect", f"127.0.0.1:{port}", "--cabal-key", str(key_file),
                               "--json", "--progress-timeout", "10", *flags], capture_output=True, text=True, timeout=120)
        out, err = relay.communicate(timeout=30)
    finally:
        if relay.poll() is None:
            relay.kill()
        box["loop"].call_soon_threadsafe(stop.set)
        thread.join(30)
    summary = json.loads(sync.stdout) if sync.stdout.strip().startswith("{") else {}
    lines = _lines(out)
    flow = next((x for x in lines if x["event"] in ("eos", "relayed")), {})
    return {
        "handshake": any(x["event"] == "handshake" for x in lines),
        "sync_complete": summary.get("complete"),
        "posts_ingested": summary.get("posts_ingested"),
        "posts_held_behind_ts": box.get("held"),
        "messages_to_backend": flow.get("to_backend"),
        "messages_from_backend": flow.get("from_backend"),
        "ts_end_of_stream": any(x["event"] == "eos" for x in lines),
        "sync_exit": sync.returncode,
        "errors": [x["message"] for x in lines if x["event"] == "error"] + ([sync.stderr.strip()[-300:]] if sync.stderr.strip() else []),
    }


def _ask(port: str, cabal: bytes, theirs, prologue: bytes, requests) -> tuple[subprocess.CompletedProcess, list]:
    """cable-handshake.ts initiates to ``port`` with ``cabal`` and sends ``requests``: the process and the answers, decoded."""
    ask = subprocess.run(["node", str(HERE / "handshake_peer.mjs"), "ask", port, cabal.hex(), x25519_private_of(theirs).hex(), prologue.decode(),
                          *(M.encode(r, M.DRAFT8).hex() for r in requests)], capture_output=True, text=True, timeout=60)
    return ask, [decode(bytes.fromhex(x["hex"]), M.DRAFT8) for x in _lines(ask.stdout) if x["event"] == "message" and x.get("hex")]


def ts_to_cabals(tmp: Path, theirs) -> list[dict]:
    """Three cabals on one ``cablestore serve`` port; cable-handshake.ts initiators with each key (both prologues) and with none of them."""
    keys, stores, own = [os.urandom(32) for _ in range(3)], [], []
    for i, key in enumerate(keys):
        path, key_file = tmp / f"cabal{i}", tmp / f"cabal{i}.key"
        with Store(path) as store:
            author = Author(store, Keypair())
            own.append(author.text("lobby", f"the lobby of cabal {i}"))  # a channel of that name in every cabal: its own post only
            author.text(f"room-{i}", f"cabal {i}'s own room")
        write_cabal_key(key_file, key)
        stores.append(f"{path}={key_file}")
    port_file = tmp / "cabals.port"
    serve = subprocess.Popen([sys.executable, "-m", "cablestore", "serve", "--listen", "127.0.0.1:0", *(a for s in stores for a in ("--cabal", s)),
                              "--no-pull", "--quiet", "--port-file", str(port_file), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    asked = []
    try:
        port = _wait_file(port_file, serve)
        for i, key in enumerate([*keys, os.urandom(32)]):
            for prologue in (b"CABLE1.0", b"CABLE/1.0") if i < 3 else (b"CABLE1.0",):
                list_id, range_id = os.urandom(8), os.urandom(8)
                requests = [M.ChannelListRequest(list_id, 0, 0), M.TimeRangeRequest(range_id, "lobby", 0, int(time.time() * 1000) + WEEK, 0)]
                ask, answers = _ask(port, key, theirs, prologue, requests)
                listed = next((a for a in answers if isinstance(a, M.ChannelListResponse) and a.req_id == list_id), None)
                hashes = {h for a in answers if isinstance(a, M.HashResponse) and a.req_id == range_id for h in a.hashes}
                asked.append((i, prologue, ask, listed, hashes))
    finally:
        serve.send_signal(signal.SIGTERM)
        out, _ = serve.communicate(timeout=30)
    summary = _lines(out)[-1] if _lines(out) else {}
    rows = []
    for i, prologue, ask, listed, hashes in asked:
        errors = [x["message"] for x in _lines(ask.stdout) if x["event"] == "error"]
        if i < 3:
            channels = sorted(listed.channels) if listed else None
            ok = ask.returncode == 0 and channels == sorted(["lobby", f"room-{i}"]) and hashes == {own[i]}
            rows.append({"case": f"3 cabals on one serve port: TS initiator ({prologue.decode()}) with cabal {i}'s key sees its own cabal only", "expect": "ok",
                         "as_expected": bool(ok), "result": {"channels": channels, "lobby_hashes_of_its_cabal": len(hashes & {own[i]}),
                                                             "lobby_hashes_of_others": len(hashes - {own[i]}), "ts_exit": ask.returncode, "ts_errors": errors}})
        else:
            ok = ask.returncode != 0 and listed is None and not hashes
            rows.append({"case": "3 cabals on one serve port: TS initiator with a key no cabal holds gets nothing", "expect": "fail",
                         "as_expected": bool(ok), "result": {"answers": len(hashes) + (listed is not None), "ts_exit": ask.returncode, "ts_errors": errors}})
    handshakes = [c.get("handshakes") for c in summary.get("cabals", [])]
    ok = handshakes == [2, 2, 2] and summary.get("handshakes_failed_key") == 1 and serve.returncode == 0
    rows.append({"case": "3 cabals on one serve port: serve's counts (2 handshakes a cabal, 1 failed on the key)", "expect": "ok", "as_expected": bool(ok),
                 "result": {"handshakes": handshakes, "handshakes_failed_key": summary.get("handshakes_failed_key"), "serve_exit": serve.returncode}})
    return rows


def peer_cases(tmp: Path, cabal: bytes, theirs) -> list[dict]:
    """Both cases, each with the prologue cable-handshake.ts uses by default and the spec's; rows for :func:`handshake_step`."""
    rows = []
    for prologue in (b"CABLE1.0", b"CABLE/1.0"):
        run = tmp / ("peers-spec" if prologue == b"CABLE/1.0" else "peers-legacy")
        run.mkdir()
        served = ts_to_serve(run, cabal, theirs, prologue)
        ok = served["handshake"] and served["channel_list_answered"] and served["time_range_hashes"] > 0 and served["ts_exit"] == 0
        rows.append({"case": f"TS initiator ({prologue.decode()}) -> cablestore serve --cabal-key: draft8 channel list and time range answered",
                     "expect": "ok", "as_expected": bool(ok), "result": served})
        synced = sync_to_ts(run, cabal, theirs, prologue)
        ok = synced["handshake"] and synced["sync_complete"] and (synced["posts_ingested"] or 0) > 0 \
            and (synced["messages_to_backend"] or 0) > 0 and (synced["messages_from_backend"] or 0) > 0
        rows.append({"case": f"cablestore sync --cabal-key ({prologue.decode()}) -> TS responder serving posts", "expect": "ok",
                     "as_expected": bool(ok), "result": synced})
    many = tmp / "peers-cabals"
    many.mkdir()
    return rows + ts_to_cabals(many, theirs)
