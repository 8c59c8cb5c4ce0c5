"""run.py's ``handshake`` step, moderation over authenticated connections (moderation.md §4.6.1.1, §4.7).

cable-handshake.ts (``handshake_peer.mjs ask``) initiates to ``cablestore
serve --cabal-key`` whose store has a local user, with the static key of the
user it speaks for, and asks a draft8 channel list and moderation state:

* a user the local user blocks is closed right after the handshake (no
  answer comes back);
* an identified user (one whose posts the store holds) gets the local user's
  ``notify = 0`` block that does not name them; an unknown key gets only the
  ``notify = 1`` blocks, and so does a plain peer (``--plain-listen``,
  cable.js framing, no handshake);
* on a fresh store, ``cablestore seed set`` with a seeded admin who blocked a
  user closes that user after the handshake, and so does the store after
  ``cablestore seed clear`` (what a seeded user did that was applied stays
  applied, §4.7.2).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from handshake_peers import HERE, _lines, _wait_file

from cablestore import JOIN, Store, make_post
from cablestore.authoring.author import Author
from cablestore.authoring.keyfile import write_cabal_key, write_keyfile
from cablestore.wire import messages as M
from cablestore.wire.crypto import Keypair
from cablestore.wire.decoding import decode
from cablestore.wire.static_keys import x25519_private_of


def _serve(tmp: Path, store: Path, cabal: bytes, local: Keypair, plain: bool = False) -> tuple[subprocess.Popen, str, str | None]:
    """``cablestore serve --cabal-key`` as ``local``: the process, its port and (``plain``) its plain listener's port."""
    key_file, user_file, port_file = tmp / "mod-cabal.key", tmp / "mod-user.key", tmp / "mod.port"
    for f in (key_file, user_file, port_file):
        f.unlink(missing_ok=True)
    write_cabal_key(key_file, cabal)
    write_keyfile(user_file, local)
    extra = ["--plain-listen", "127.0.0.1:0"] if plain else []
    serve = subprocess.Popen([sys.executable, "-m", "cablestore", "serve", str(store), "--listen", "127.0.0.1:0", "--cabal-key", str(key_file), "--key", str(user_file),
                              "--no-pull", "--quiet", "--port-file", str(port_file), "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = _wait_file(port_file, serve)
    plain_port = None
    while plain and plain_port is None:
        line = json.loads(serve.stdout.readline() or "{}")
        if not line:
            raise RuntimeError("serve printed no plain listener")
        if line.get("kind") == "plain":
            plain_port = str(line["port"])
    return serve, port, plain_port


def _stop(serve: subprocess.Popen) -> None:
    serve.send_signal(signal.SIGTERM)
    serve.communicate(timeout=30)


def _ask(port: str, cabal: bytes, who: Keypair, prologue: bytes = b"CABLE/1.0") -> dict:
    """cable-handshake.ts as ``who`` asks a channel list and the moderation state of ``dev``: what came back."""
    list_id, state_id = os.urandom(8), os.urandom(8)
    requests = [M.ChannelListRequest(list_id, 0, 0), M.ModerationStateRequest(state_id, ("dev",), 0, 0)]
    ask = subprocess.run(["node", str(HERE / "handshake_peer.mjs"), "ask", port, cabal.hex(), x25519_private_of(who).hex(), prologue.decode(),
                          *(M.encode(r, M.DRAFT8).hex() for r in requests)], capture_output=True, text=True, timeout=60)
    lines = _lines(ask.stdout)
    answers = [decode(bytes.fromhex(x["hex"]), M.DRAFT8) for x in lines if x["event"] == "message" and x.get("hex")]
    return {
        "handshake": any(x["event"] == "handshake" for x in lines),
        "answers": len(answers),
        "state": {h for a in answers if isinstance(a, M.HashResponse) and a.req_id == state_id for h in a.hashes},
        "closed_by_serve": ask.returncode != 0 and not answers,
    }


def _plain_state(port: str) -> set[bytes]:
    """A plain peer (cable.js 0.2.1 framing, no handshake) asks the moderation state of ``dev``: the hashes answered."""
    req = M.ModerationStateRequest(os.urandom(4), ("dev",), 0, 0, ttl=0)
    got, buf = set(), b""
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as s:
        s.sendall(M.encode(req))
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return got
            buf += chunk
            while (head := _varint(buf)) is not None and len(buf) >= head[0] + head[1]:
                msg, buf = decode(buf[: head[0] + head[1]]), buf[head[0] + head[1] :]
                if isinstance(msg, M.HashResponse) and msg.req_id == req.req_id:
                    if not msg.hashes:
                        return got  # the concluding empty response
                    got |= set(msg.hashes)


def _varint(buf: bytes) -> tuple[int, int] | None:
    """``(value, bytes used)`` of the varint at the start of ``buf``, or None when it is not whole."""
    value = 0
    for i, b in enumerate(buf[:10]):
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value, i + 1
    return None


def moderation_cases(tmp: Path, cabal: bytes) -> list[dict]:
    """The rows for :func:`handshake_steps.handshake_step`."""
    run = tmp / "moderation"
    run.mkdir()
    local, blocked, quiet, known, stranger, admin, target = (Keypair() for _ in range(7))
    path = run / "served"
    with Store(path, local_user=local.public_key) as s:
        me = Author(s, local)
        me.join("dev")
        s.ingest(make_post(known, JOIN, int(time.time() * 1000), channel="dev")[0])
        loud = me.block([blocked.public_key], notify=True)
        hush = me.block([quiet.public_key], notify=False)
    rows = []
    serve, port, plain_port = _serve(run, path, cabal, local, plain=True)
    try:
        closed = _ask(port, cabal, blocked)
        ident = _ask(port, cabal, known)
        unknown = _ask(port, cabal, stranger)
        plain = _plain_state(plain_port)
    finally:
        _stop(serve)
    rows.append({"case": "TS initiator with a blocked user's key -> serve: closed right after the handshake (§4.6.1.1)", "expect": "closed",
                 "as_expected": closed["handshake"] and closed["closed_by_serve"], "result": {**closed, "state": len(closed["state"])}})
    rows.append({"case": "TS initiator as an identified user: gets the notify=0 block that does not name them", "expect": "both blocks",
                 "as_expected": ident["handshake"] and {loud, hush} <= ident["state"], "result": {**ident, "state": len(ident["state"])}})
    rows.append({"case": "TS initiator with an unknown key: no notify=0 block", "expect": "the notify=1 block only",
                 "as_expected": unknown["handshake"] and loud in unknown["state"] and hush not in unknown["state"], "result": {**unknown, "state": len(unknown["state"])}})
    rows.append({"case": "a plain peer (--plain-listen, no handshake): no notify=0 block", "expect": "the notify=1 block only",
                 "as_expected": loud in plain and hush not in plain, "result": {"state": len(plain)}})

    # A fresh store joined with a moderation seed: a seeded admin's block applies, and stays applied after the seed is cleared.
    fresh = run / "seeded"
    with Store(run / "admin-posts", local_user=admin.public_key) as a:  # the admin's own store: where their block is written
        block_buf = a.get(Author(a, admin).block([target.public_key], notify=True))
    with Store(fresh, local_user=local.public_key) as s:
        s.ingest_many([make_post(target, JOIN, int(time.time() * 1000) - 1000, channel="dev")[0], block_buf])
    seed = (bytes([0]) + admin.public_key).hex()  # role 0: admin (§5.1.2)
    for phase, cmd in (("no seed", None), ("seed set", ["seed", "set", str(fresh), seed]), ("seed clear", ["seed", "clear", str(fresh)])):
        if cmd:
            subprocess.run([sys.executable, "-m", "cablestore", *cmd], check=True, capture_output=True, text=True, timeout=60)
        serve, port, _ = _serve(run, fresh, cabal, local)
        try:
            got = _ask(port, cabal, target)
        finally:
            _stop(serve)
        if cmd is None:  # the control: without the seed the admin is nobody to the local user, and the target is answered
            rows.append({"case": "a block by a user the local user gave no role, no seed -> TS initiator as its target: answered", "expect": "answered",
                         "as_expected": got["handshake"] and not got["closed_by_serve"] and got["answers"] > 0, "result": {**got, "state": len(got["state"])}})
            continue
        rows.append({"case": f"a seeded admin's block after `{phase}` -> TS initiator as its target: closed after the handshake (§4.7.2)", "expect": "closed",
                     "as_expected": got["handshake"] and got["closed_by_serve"], "result": {**got, "state": len(got["state"])}})
    return rows
