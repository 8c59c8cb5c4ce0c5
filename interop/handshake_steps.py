"""run.py's ``handshake`` step: cablestore's Cable Handshake (cablestore.wire.handshake) against cable-handshake.ts 1.0.0 over loopback TCP.

cable-handshake.ts is driven by ``handshake.mjs`` (CABLE_HANDSHAKE_TS: a
built checkout); our side is a :class:`CableHandshake` on asyncio streams.
Each case runs both ends with a script of steps and compares what each
saw: whether the handshake completed, the static key each learned, every
message's length and SHA-256, and the end-of-stream markers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from pathlib import Path

from handshake_moderation import moderation_cases
from handshake_peers import peer_cases

from cablestore.wire.crypto import Keypair
from cablestore.wire.handshake import (
    CABLE_PROLOGUE,
    LEGACY_PROLOGUE,
    PROLOGUES,
    CableHandshake,
    EndOfStream,
    Failed,
    HandshakeComplete,
    MessageReceived,
)
from cablestore.wire.static_keys import identify, x25519_of, x25519_private_of

HERE = Path(__file__).resolve().parent
def _fixed(label: str) -> bytes:
    return hashlib.blake2b(label.encode(), digest_size=32).digest()


CABAL, OTHER_CABAL = _fixed("cablestore interop cabal key"), _fixed("another cabal key")
OURS, THEIRS = Keypair.from_seed(_fixed("cablestore interop: our user")), Keypair.from_seed(_fixed("cablestore interop: their user"))
STEP_SECONDS = 15


def pattern(n: int) -> bytes:
    """The message handshake.mjs sends for ``send:N``: byte k is (31k + N) mod 256."""
    return bytes((31 * k + n) & 0xFF for k in range(n))


def _digest(data: bytes) -> dict:
    return {"length": len(data), "sha256": hashlib.sha256(data).hexdigest()}


async def _ours(hs: CableHandshake, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, steps: list[str]) -> dict:
    """Drive our side: the handshake, then each step (send:N, recv, end); what we saw."""
    loop = asyncio.get_running_loop()
    now = lambda: int(loop.time() * 1000)  # noqa: E731
    events: asyncio.Queue = asyncio.Queue()
    seen: list[dict] = []

    async def pump() -> None:
        while not hs.finished:
            timeout = None if hs.deadline is None else max(0, hs.deadline - now()) / 1000
            try:
                data = await asyncio.wait_for(reader.read(65536), timeout)
            except TimeoutError:
                for e in hs.check_time(now()):
                    events.put_nowait(e)
                continue
            except ConnectionError:
                data = b""
            for e in hs.receive_data(data, now()):
                events.put_nowait(e)
            writer.write(hs.data_to_send())
        events.put_nowait(None)

    writer.write(hs.data_to_send())
    task = asyncio.create_task(pump())
    try:
        first = await asyncio.wait_for(events.get(), STEP_SECONDS)
        if not isinstance(first, HandshakeComplete):
            return {"handshake": False, "error": str(first.error) if isinstance(first, Failed) else "the connection ended"}
        out = {"handshake": True, "remote_static": first.remote_static.hex(), "prologue": first.prologue.decode(),
               "remote_user": (identify(first.remote_static, {THEIRS.public_key}) or b"").hex() or None, "seen": seen}
        for step in steps:
            if step.startswith("send:"):
                msg = pattern(int(step[5:]))
                hs.send_message(msg)
                writer.write(hs.data_to_send())
                seen.append({"event": "sent", **_digest(msg)})
            elif step == "end":
                hs.end(now())
                writer.write(hs.data_to_send())
                seen.append({"event": "sent-eos"})
            elif step == "recv":
                e = await asyncio.wait_for(events.get(), STEP_SECONDS)
                if isinstance(e, MessageReceived):
                    seen.append({"event": "message", **_digest(e.data)})
                elif isinstance(e, EndOfStream):
                    seen.append({"event": "eos"})
                else:
                    seen.append({"event": "error", "message": str(e.error) if isinstance(e, Failed) else "the connection ended"})
                    break
        await writer.drain()
        return out
    except TimeoutError:
        seen.append({"event": "error", "message": "timed out"})
        return out if "out" in locals() else {"handshake": False, "error": "timed out"}
    finally:
        await asyncio.sleep(0.2)
        task.cancel()
        writer.close()


def _node(role: str, port: int, psk: bytes, prologue: bytes, steps: list[str]) -> subprocess.Popen:
    return subprocess.Popen(["node", str(HERE / "handshake.mjs"), role, str(port), psk.hex(), x25519_private_of(THEIRS).hex(), prologue.decode(), ",".join(steps)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _theirs(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=30)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    hs = next((x for x in lines if x["event"] == "handshake"), None)
    errors = [x["message"] for x in lines if x["event"] == "error"] + ([err.strip()[-300:]] if err.strip() else [])
    return {"handshake": hs is not None, "local_static": hs and hs["local_static"], "exit": proc.returncode, "errors": errors,
            "seen": [x for x in lines if x["event"] not in ("listening", "handshake", "done", "error")]}


async def _ts_initiator(case: dict) -> tuple[dict, dict]:
    """cable-handshake.ts connects; our CableHandshake responds."""
    result: dict = {}

    async def handle(reader, writer):
        hs = CableHandshake(initiator=False, cabal_key=CABAL, keypair=OURS, now=int(asyncio.get_running_loop().time() * 1000),
                            accept_prologues=case.get("accept", PROLOGUES))
        result.update(await _ours(hs, reader, writer, case["our_steps"]))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = _node("initiator", port, case.get("their_psk", CABAL), case["their_prologue"], case["their_steps"])
    theirs = await asyncio.to_thread(_theirs, proc)
    for _ in range(100):
        if result:
            break
        await asyncio.sleep(0.05)
    server.close()
    await server.wait_closed()
    return result or {"handshake": False, "error": "no connection"}, theirs


async def _ts_responder(case: dict) -> tuple[dict, dict]:
    """Our CableHandshake connects; cable-handshake.ts responds."""
    proc = _node("responder", 0, case.get("their_psk", CABAL), case["their_prologue"], case["their_steps"])
    line = await asyncio.to_thread(proc.stdout.readline)
    port = json.loads(line)["port"]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    hs = CableHandshake(initiator=True, cabal_key=CABAL, keypair=OURS, now=int(asyncio.get_running_loop().time() * 1000),
                        prologue=case.get("our_prologue", CABLE_PROLOGUE))
    ours = await _ours(hs, reader, writer, case["our_steps"])
    return ours, await asyncio.to_thread(_theirs, proc)


def _ts_to_ts(case: dict) -> tuple[dict, dict]:
    """Both ends cable-handshake.ts (to tell its own behaviour from a disagreement with us)."""
    responder = _node("responder", 0, CABAL, case["their_prologue"], case["our_steps"])
    port = json.loads(responder.stdout.readline())["port"]
    initiator = _node("initiator", port, CABAL, case["their_prologue"], case["their_steps"])
    return _theirs(responder), _theirs(initiator)


BIG = 200_000  # fragmented into 4 segments
CASES = [
    {"name": "TS initiator (CABLE1.0, its default) -> cablestore responder", "run": "ts-initiator", "their_prologue": LEGACY_PROLOGUE,
     "their_steps": ["send:100", f"send:{BIG}", "recv", "recv", "eos", "readeos"], "our_steps": ["recv", "recv", "send:70000", "send:5", "recv"],
     "expect": "ok"},
    {"name": "TS initiator (CABLE/1.0) -> cablestore responder", "run": "ts-initiator", "their_prologue": CABLE_PROLOGUE,
     "their_steps": ["send:100", f"send:{BIG}", "recv", "recv", "eos", "readeos"], "our_steps": ["recv", "recv", "send:70000", "send:5", "recv"],
     "expect": "ok"},
    {"name": "cablestore initiator (CABLE/1.0) -> TS responder (CABLE/1.0)", "run": "ts-responder", "their_prologue": CABLE_PROLOGUE,
     "our_prologue": CABLE_PROLOGUE, "our_steps": ["send:100", f"send:{BIG}", "recv", "recv", "end", "recv"],
     "their_steps": ["recv", "recv", "send:70000", "send:5", "recv", "eos"], "expect": "ok"},
    {"name": "cablestore initiator (CABLE1.0) -> TS responder (CABLE1.0, its default)", "run": "ts-responder", "their_prologue": LEGACY_PROLOGUE,
     "our_prologue": LEGACY_PROLOGUE, "our_steps": ["send:100", f"send:{BIG}", "recv", "recv", "end", "recv"],
     "their_steps": ["recv", "recv", "send:70000", "send:5", "recv", "eos"], "expect": "ok"},
    {"name": "wrong cabal key: TS initiator -> cablestore responder", "run": "ts-initiator", "their_prologue": LEGACY_PROLOGUE, "their_psk": OTHER_CABAL,
     "their_steps": [], "our_steps": [], "expect": "both fail"},
    {"name": "wrong cabal key: cablestore initiator -> TS responder", "run": "ts-responder", "their_prologue": CABLE_PROLOGUE, "their_psk": OTHER_CABAL,
     "their_steps": [], "our_steps": [], "expect": "both fail"},
    {"name": "prologue mismatch: cablestore initiator (CABLE/1.0) -> TS responder (CABLE1.0)", "run": "ts-responder", "their_prologue": LEGACY_PROLOGUE,
     "their_steps": [], "our_steps": [], "expect": "both fail"},
    {"name": "prologue mismatch: TS initiator (CABLE1.0) -> cablestore responder accepting only CABLE/1.0", "run": "ts-initiator",
     "their_prologue": LEGACY_PROLOGUE, "accept": (CABLE_PROLOGUE,), "their_steps": [], "our_steps": [], "expect": "both fail"},
    {"name": "exactly 65,519 bytes: cablestore -> TS", "run": "ts-responder", "their_prologue": CABLE_PROLOGUE,
     "our_steps": ["send:65519", "end", "recv"], "their_steps": ["recv", "recv", "eos"], "expect": "ok"},
    {"name": "exactly 65,519 bytes: TS -> cablestore", "run": "ts-initiator", "their_prologue": CABLE_PROLOGUE,
     "their_steps": ["send:65519", "eos", "readeos"], "our_steps": ["recv", "recv"], "expect": "record"},
    {"name": "exactly 65,519 bytes: TS -> TS (its own behaviour)", "run": "ts-to-ts", "their_prologue": LEGACY_PROLOGUE,
     "their_steps": ["send:65519", "eos"], "our_steps": ["recv", "readeos"], "expect": "record"},
]


def _verdict(case: dict, ours: dict, theirs: dict) -> tuple[bool, list[str]]:
    notes = []
    if case["expect"] == "both fail":
        return (not ours["handshake"] and not theirs["handshake"]), notes
    if case["expect"] == "record":
        return True, notes
    ok = ours["handshake"] and theirs["handshake"]
    if ok:
        ok &= ours["remote_static"] == theirs["local_static"] == x25519_of(THEIRS.public_key).hex()
        ok &= ours["remote_user"] == THEIRS.public_key.hex()
        ok &= ours["prologue"].encode() == case["their_prologue"]
        sent_by_us = [x for x in ours["seen"] if x["event"] == "sent"]
        got_by_them = [x for x in theirs["seen"] if x["event"] == "message" and x["length"]]
        sent_by_them = [x for x in theirs["seen"] if x["event"] == "sent"]
        got_by_us = [x for x in ours["seen"] if x["event"] == "message"]
        same = [{k: x[k] for k in ("length", "sha256")} for x in sent_by_us] == [{k: x[k] for k in ("length", "sha256")} for x in got_by_them]
        same &= [{k: x[k] for k in ("length", "sha256")} for x in sent_by_them] == [{k: x[k] for k in ("length", "sha256")} for x in got_by_us]
        ok &= same
        ended = any(x["event"] == "eos" for x in ours["seen"]) and (
            any(x["event"] == "eos" for x in theirs["seen"]) or any(x["event"] == "message" and x["length"] == 0 for x in theirs["seen"]))
        ok &= ended
        notes.append(f"messages same both ways: {same}; end of stream both ways: {ended}")
    return bool(ok), notes


def handshake_step(tmp: Path) -> dict:
    """Every case; {"cases": [...], "as_expected": n, "total": n}."""
    rows = []
    for case in CASES:
        runner = {"ts-initiator": _ts_initiator, "ts-responder": _ts_responder}.get(case["run"])
        ours, theirs = asyncio.run(runner(case)) if runner else _ts_to_ts(case)
        ok, notes = _verdict(case, ours, theirs)
        sides = ("cablestore", "cable-handshake.ts") if runner else ("cable-handshake.ts responder", "cable-handshake.ts initiator")
        rows.append({"case": case["name"], "expect": case["expect"], "as_expected": ok, "notes": notes, "sides": sides, "ends": [ours, theirs]})
    # Through real cablestore processes: serve and sync --cabal-key, then moderation over authenticated connections.
    for row in peer_cases(tmp, CABAL, THEIRS) + moderation_cases(tmp, CABAL):
        rows.append({**row, "notes": [", ".join(f"{k}: {v}" for k, v in row.pop("result").items())], "sides": (), "ends": []})
    return {"cases": rows, "as_expected": sum(r["as_expected"] for r in rows), "total": len(rows)}


def print_handshake(result: dict) -> None:
    """The human report of :func:`handshake_step`."""
    print(f"== the Cable Handshake against cable-handshake.ts 1.0.0: {result['as_expected']}/{result['total']} as expected")
    for row in result["cases"]:
        print(f"  {'ok ' if row['as_expected'] else 'UNEXPECTED '}{row['case']} (expected: {row['expect']})")
        for side, r in zip(row["sides"], row["ends"], strict=True):
            seen = ", ".join(f"{x['event']}{' ' + str(x['length']) if 'length' in x else ''}{': ' + x['message'] if 'message' in x else ''}"
                             for x in r.get("seen", []))
            err = r.get("error") or "; ".join(r.get("errors", []))
            print(f"      {side}: handshake {'completed' if r['handshake'] else 'FAILED'}"
                  f"{' (' + r['prologue'] + ')' if r.get('prologue') else ''}{'; ' + seen if seen else ''}{'; error: ' + err if err else ''}")
        for note in row["notes"]:
            print(f"      {note}")
