"""The moderation steps of ``interop/run.py`` (see interop/README.md, "Moderation").

* :func:`codec_step`: cablestore writes every kind of moderation post with
  :class:`cablestore.authoring.author.Author`; cable.js 0.2.1's own
  ``parsePost`` (``interop/moderation.js``) decodes each, and every field,
  the hash, and cable.js's re-encoding of the parsed fields are compared
  with cablestore's.
* :func:`state_step`: a cable-core.js 0.2.1 peer (``harness.js serve``)
  authors moderation posts and answers moderation state requests (message
  type 8) sent over TCP; the answers are recorded, hashes named and in
  order, beside what cablestore answers holding the same posts.
* :func:`deliver_step`: cable-core.js (``harness.js pull-moderation``) asks a
  minimal peer holding cablestore's moderation posts for moderation state,
  and stores what it is sent.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from cablestore import Keypair, Store, decode_post, make_post, post_hash
from cablestore.authoring.author import Author
from cablestore.wire.codec import (
    ACCEPT_ROLE,
    ACCEPT_ROLE_VALUES,
    ADMIN,
    BLOCK,
    DROP_CHANNEL,
    DROP_POST,
    HIDE_POST,
    HIDE_USER,
    INFO,
    MOD,
    MODERATION,
    ROLE,
    UNBLOCK,
    UNDROP_CHANNEL,
    UNDROP_POST,
    UNHIDE_POST,
    UNHIDE_USER,
    USER,
)
from cablestore.wire.decoding import Decoder
from cablestore.wire.messages import HashResponse, ModerationStateRequest, PostRequest, PostResponse, encode

HERE = Path(__file__).resolve().parent
REASON_BYTES = 128  # cable.js 0.2.1's limit on reason, in UTF-8 bytes (REASON_MAX_CODEPOINTS checked against the buffer)
# cablestore field -> cable.js parsePost field (post/role's single recipient is `recipient` there)
FIELDS = {
    "public_key": "publicKey", "signature": "signature", "links": "links", "post_type": "postType",
    "timestamp": "timestamp", "reason": "reason", "privacy": "privacy", "channel": "channel",
    "recipients": "recipients", "role": "role", "action": "action", "drop": "drop", "notify": "notify", "undrop": "undrop",
    "info": "info",
}
TYPE_NAMES = {INFO: "post/info", ROLE: "post/role", MODERATION: "post/moderation", BLOCK: "post/block", UNBLOCK: "post/unblock"}


def cable_js_root() -> str:
    """The cable.js checkout: CABLE_JS, or the one cable-core.js links to."""
    return os.environ.get("CABLE_JS") or str(Path(os.environ["CABLE_CORE_JS"]) / "node_modules" / "cable.js")


def _keypair(name: str) -> tuple[Keypair, bytes]:
    """A deterministic keypair and its 64-byte libsodium secret key (seed + public key), as cable.js takes it."""
    seed = hashlib.blake2b(b"cablestore interop moderation " + name.encode(), digest_size=32).digest()
    kp = Keypair.from_seed(seed)
    return kp, seed + kp.public_key


def write_cases(path: Path) -> list[dict]:
    """Every kind of moderation post, written by cablestore's Author into a store at ``path``.

    Returns one dict per post: ``name``, ``buf`` (the stored bytes), ``secret`` (the author's
    64-byte secret key).  Timestamps come from a fixed clock, so the posts are the same each run.
    """
    me, me_sk = _keypair("local user")
    bob, _ = _keypair("bob")
    alice, carol = _keypair("alice")[0].public_key, _keypair("carol")[0].public_key
    many = [_keypair(f"user {i}")[0].public_key for i in range(16)]
    clock = iter(range(1_700_000_000_000, 1_700_000_001_000))
    cases: list[dict] = []
    with Store(path, local_user=me.public_key) as store:
        author, bob_author = Author(store, me, now=lambda: next(clock)), Author(store, bob, now=lambda: next(clock))
        mine = author.text("dev", "a post to hide")
        bobs = bob_author.text("dev", "a post to drop")

        def long(post_type: int, **body) -> bytes:
            """A post whose reason is over 128 bytes (at most 128 codepoints, as the spec allows): ``Author``
            writes none (deployed peers refuse them), so it is signed and stored directly."""
            return store.ingest(make_post(me, post_type, next(clock), privacy=0, **body)[0])

        def case(name: str, write) -> None:
            h = write(author)
            cases.append({"name": name, "buf": store.get(h), "secret": me_sk})

        # post/role: each role, cabal and channel, privacy, reasons up to the limits
        case("role admin, cabal", lambda a: a.role(alice, ADMIN))
        case("role mod, channel, multi-byte reason", lambda a: a.role(bob.public_key, MOD, channel="dev", reason="hilft gegen Spam ☕"))
        case("role user, channel", lambda a: a.role(bob.public_key, USER, channel="dev", reason="stepped down"))
        case("role mod, cabal, privacy=1", lambda a: a.role(carol, MOD, private=True))
        case("role, multi-byte channel name", lambda a: a.role(carol, MOD, channel="ünïcode-☕"))
        case("role, reason 128 ASCII", lambda a: a.role(alice, MOD, reason="a" * 128))
        case("role, reason 64 × ü (128 bytes)", lambda a: a.role(alice, MOD, reason="ü" * 64))
        case("role, reason 128 × ü (256 bytes)", lambda a: long(ROLE, channel="", recipients=[alice], role=MOD, reason="ü" * 128))
        # post/moderation: every action 0-7
        case("action 0 hide user, channel, 2 users", lambda a: a.moderate(HIDE_USER, [alice, carol], channel="dev", reason="spam"))
        case("action 0 hide user, cabal, 16 users", lambda a: a.moderate(HIDE_USER, many, reason="raid"))
        case("action 1 unhide user, cabal", lambda a: a.moderate(UNHIDE_USER, [alice]))
        case("action 2 hide post", lambda a: a.moderate(HIDE_POST, [mine], reason="rude"))
        case("action 3 unhide post", lambda a: a.moderate(UNHIDE_POST, [mine]))
        case("action 4 drop post", lambda a: a.moderate(DROP_POST, [bobs], reason="illegal"))
        case("action 5 undrop post", lambda a: a.moderate(UNDROP_POST, [bobs], channel="dev"))
        case("action 6 drop channel, no recipients", lambda a: a.moderate(DROP_CHANNEL, channel="junk", reason="off-topic"))
        case("action 7 undrop channel, no recipients", lambda a: a.moderate(UNDROP_CHANNEL, channel="junk"))
        case("action 0 hide user, privacy=1", lambda a: a.moderate(HIDE_USER, [carol], channel="dev", private=True))
        case("action 2 hide post, reason 32 × 😀 (128 bytes)", lambda a: a.moderate(HIDE_POST, [mine], reason="😀" * 32))
        case("action 6 drop channel, reason 128 × ☕ (384 bytes)", lambda a: long(MODERATION, channel="junk", recipients=[], action=DROP_CHANNEL, reason="☕" * 128))
        case("action 0 hide user, reason 128 × 😀 (512 bytes)", lambda a: long(MODERATION, channel="", recipients=[alice], action=HIDE_USER, reason="😀" * 128))
        # post/block and post/unblock: every flag
        case("block, drop=1 notify=1", lambda a: a.block([alice], drop=True, notify=True, reason="abuse"))
        case("block, drop=0 notify=0, multi-byte reason", lambda a: a.block([bob.public_key], reason="Belästigung"))
        case("block 3 users, drop=1 notify=0, privacy=1", lambda a: a.block([alice, bob.public_key, carol], drop=True, private=True))
        case("block, reason 128 × 日 (384 bytes)", lambda a: long(BLOCK, recipients=[carol], drop=0, notify=0, reason="日" * 128))
        case("unblock, undrop=1", lambda a: a.unblock([alice], undrop=True))
        case("unblock, undrop=0", lambda a: a.unblock([bob.public_key], reason="sorted out"))
        case("unblock 2 users, privacy=1", lambda a: a.unblock([alice, carol], undrop=True, private=True))
        case("unblock, reason 65 × ü (130 bytes)", lambda a: long(UNBLOCK, recipients=[carol], undrop=0, reason="ü" * 65))
        # post/info with accept-role (wire.md §6.2.4: a varint, 0 or 1), as cablestore writes an opt-out
        case("post/info accept-role 0", lambda a: a.info([("accept-role", 0)]))
        case("post/info name and accept-role 1", lambda a: a.info([("name", "local ☕"), ("accept-role", 1)]))
        case("post/info accept-role 0, the name kept", lambda a: a.accept_role(0))
    return cases


def _ours(buf: bytes) -> dict:
    post = decode_post(buf)
    out = {}
    for field in FIELDS:
        value = getattr(post, field)
        if value is None:
            continue
        if field == "info":
            value = [[k, ACCEPT_ROLE_VALUES.get(v, v) if k == ACCEPT_ROLE else v] for k, v in value]
        elif isinstance(value, bytes):
            value = value.hex()
        elif isinstance(value, tuple):
            value = [v.hex() for v in value]
        out[field] = value
    return out


def _theirs(post: dict) -> dict:
    back = {v: k for k, v in FIELDS.items()}
    out = {back[k]: v for k, v in post.items() if k in back}
    if "recipient" in post:  # post/role
        out["recipients"] = [post["recipient"]]
    return out


def compare_case(case: dict, answer: dict) -> dict:
    """One row: what cable.js did with the post and whether it agrees with cablestore."""
    buf = case["buf"]
    ours = _ours(buf)
    reason_bytes = len(ours.get("reason", "").encode("utf-8"))
    row = {
        "case": case["name"],
        "type": TYPE_NAMES[ours["post_type"]],
        "reason_codepoints": len(ours.get("reason", "")),
        "reason_bytes": reason_bytes,
        "cable_js_expected": "decodes" if reason_bytes <= REASON_BYTES else "refuses",
    }
    if not answer["ok"]:
        row.update(cable_js="refuses", error=answer["error"])
    else:
        theirs = _theirs(answer["post"])
        differing = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        row.update(
            cable_js="decodes",
            fields_compared=len(ours),
            differing_fields=differing,
            same_hash=answer["hash"] == post_hash(buf).hex(),
            reencoded_same=answer["reencoded"] == buf.hex(),
        )
        if answer.get("reencode_error"):
            row["reencode_error"] = answer["reencode_error"]
    row["as_expected"] = row["cable_js"] == row["cable_js_expected"] and not row.get("differing_fields") and row.get("same_hash", True) and row.get("reencoded_same", True)
    return row


def codec_step(tmp: Path) -> dict:
    """cablestore writes every moderation post kind; cable.js 0.2.1 parses each."""
    cases = write_cases(tmp / "moderation")
    lines = "".join(f"{c['buf'].hex()} {c['secret'].hex()}\n" for c in cases)
    env = dict(os.environ, CABLE_JS=cable_js_root())
    done = subprocess.run(["node", str(HERE / "moderation.js")], input=lines, capture_output=True, text=True, timeout=60, env=env)
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    if done.returncode != 0 or len(answers) != len(cases):
        raise SystemExit(f"moderation.js failed ({done.returncode}): {done.stderr[:500]}")
    rows = [compare_case(c, a) for c, a in zip(cases, answers, strict=True)]
    return {"cases": len(rows), "as_expected": sum(r["as_expected"] for r in rows), "rows": rows, "cable_js_writes": cable_js_writes(tmp)}


def cable_js_writes(tmp: Path) -> dict:
    """cable.js 0.2.1 writes an opt-out and a blocked user's post/info; a cablestore store of the local user takes them.

    The local user (cablestore's ``Author``) makes ``decliner`` a mod and blocks ``blocked`` with
    ``drop = 1``; cable.js's ``INFO_POST.create`` then writes ``decliner``'s post/info with
    ``accept-role = 0`` and ``blocked``'s post/info with a name.  moderation.md §4.2.4: the decliner is a
    normal user and their role is never answered; §4.6: a dropping block's recipient's posts are
    discarded, their post/info too.
    """
    me, _ = _keypair("local user")
    decliner, decliner_sk = _keypair("decliner")
    blocked, blocked_sk = _keypair("blocked")
    lines = (
        f"create-info {decliner_sk.hex()} 1700000002001 {json.dumps([['name', 'decliner'], ['accept-role', 0]])}\n"
        f"create-info {blocked_sk.hex()} 1700000002002 {json.dumps([['name', 'blocked']])}\n"
    )
    env = dict(os.environ, CABLE_JS=cable_js_root())
    done = subprocess.run(["node", str(HERE / "moderation.js")], input=lines, capture_output=True, text=True, timeout=60, env=env)
    made = [json.loads(line) for line in done.stdout.splitlines()]
    if done.returncode != 0 or len(made) != 2 or not all(m["ok"] for m in made):
        raise SystemExit(f"moderation.js create-info failed ({done.returncode}): {done.stdout[:300]} {done.stderr[:300]}")
    opt_out, blocked_info = (bytes.fromhex(m["buf"]) for m in made)
    clock = iter(range(1_700_000_001_000, 1_700_000_001_100))
    with Store(tmp / "cable-js-writes", local_user=me.public_key) as store:
        author = Author(store, me, now=lambda: next(clock))
        role = author.role(decliner.public_key, MOD, reason="helps")
        author.block([blocked.public_key], drop=True, notify=True)
        results = store.ingest_many([opt_out, blocked_info])
        return {
            "opt_out_accept_role_decoded": decode_post(opt_out).accept_role,
            "opt_out_stored": results[0].ok,
            "decliner_is_a_normal_user": decliner.public_key not in store.roles(),
            "decliners_role_not_answered": role not in store.moderation_state([], 0),
            "blocked_users_info": "stored" if results[1].ok and store.get(post_hash(blocked_info)) is not None
            else f"refused: {type(results[1].error).__name__}" if results[1].error is not None else "not kept",
            "blocked_users_name_known": store.name(blocked.public_key),
        }


# --- cable-core.js answers a moderation state request -------------------------


class _Client:
    """A bare Cable connection: send messages, collect responses by req_id, bounded in time and bytes."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = Decoder()
        self.responses: dict[bytes, list] = {}

    def ask(self, message, *, seconds: float = 4.0) -> list:
        """Send ``message``; return its responses until one concludes or ``seconds`` pass."""
        self.sock.sendall(encode(message))
        got = self.responses.setdefault(message.req_id, [])
        deadline = time.monotonic() + seconds
        while not (got and got[-1].concludes) and time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            for m in self.decoder.feed(data):
                if isinstance(m, (HashResponse, PostResponse)):
                    self.responses.setdefault(m.req_id, []).append(m)
        return got

    def close(self) -> None:
        self.sock.close()


def _describe(buf: bytes, names: dict) -> dict:
    post = decode_post(buf)
    out = {"type": TYPE_NAMES.get(post.post_type, post.post_type)}
    for field in ("channel", "role", "action", "drop", "notify", "undrop", "privacy", "reason", "timestamp"):
        if getattr(post, field) is not None:
            out[field] = getattr(post, field)
    out["recipients"] = [names.get(r.hex(), r.hex()[:16]) for r in post.recipients or ()]
    return out


def state_step(tmp: Path, node_cmd) -> dict:
    """cable-core.js authors moderation posts and answers moderation state requests; cablestore, holding the same posts, answers too."""
    node = node_cmd("serve", "0", seconds=8)
    line, labels = node.stdout.readline(), node.stdout.readline()
    if not line.startswith("listening on ") or not labels.startswith("moderation "):
        node.kill()
        raise SystemExit(f"peer did not start: {line!r} {labels!r}")
    authored = json.loads(labels.split(" ", 1)[1])
    label = {bytes.fromhex(v["hash"]): k for k, v in authored["posts"].items()}
    names = {v: k for k, v in authored["users"].items()}
    client = _Client(int(line.rsplit(":", 1)[1]))
    asked = []
    try:
        posts = _fetch(client, list(label))
        newest = max(v["timestamp"] for v in authored["posts"].values())
        for text, channels, oldest in (
            ("channels [interop], oldest 0", ("interop",), 0),
            ("channels [], oldest 0", (), 0),
            ("channels [interop, junk, elsewhere], oldest 0", ("interop", "junk", "elsewhere"), 0),
            ("channels [interop], oldest = the newest post's timestamp", ("interop",), newest),
            ("channels [interop], oldest 9", ("interop",), 9),
        ):
            request = ModerationStateRequest(req_id=os.urandom(4), channels=channels, future=0, oldest=oldest)
            asked.append((text, request, client.ask(request)))
    finally:
        client.close()
        node.communicate(timeout=30)
    # cablestore holding the same posts, with cable-core.js's user as its local user
    with Store(tmp / "moderation-state", local_user=bytes.fromhex(authored["local_user"])) as store:
        refused = [f"{type(r.error).__name__}: {r.error}" for r in store.ingest_many(list(posts.values())) if not r.ok]
        ours = {text: store.moderation_state(list(req.channels), req.oldest) for text, req, _ in asked}
    requests = []
    for text, _, responses in asked:
        answered = [h for r in responses for h in r.hashes]
        requests.append({
            "request": text,
            "responses": [len(r.hashes) for r in responses],
            "concluded": bool(responses) and responses[-1].concludes,
            "answered": [label.get(h, h.hex()) for h in answered],
            "not_answered": [label[h] for h in label if h not in answered],
            "cablestore_answers": [label.get(h, h.hex()) for h in ours[text]],
        })
    return {
        "authored": list(authored["posts"]),
        "served_by_post_request": len(posts),
        "not_served": [label[h] for h in label if h not in posts],
        "refused_by_cablestore": refused,
        "requests": requests,
        "posts": {label.get(h, h.hex()): _describe(b, names) for h, b in posts.items()},
    }


# --- cable-core.js receives cablestore's moderation posts ----------------------


def _answer_moderation(server: socket.socket, posts: dict[bytes, bytes], seconds: float) -> None:
    """A minimal peer for one connection: answers a moderation state request with ``posts``' hashes
    and post requests with the posts; bounded in time (``seconds``) and bytes (the Decoder's limits)."""
    server.settimeout(seconds)
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return
    decoder, deadline = Decoder(), time.monotonic() + seconds
    with conn:
        while time.monotonic() < deadline:
            conn.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = conn.recv(65536)
            except (TimeoutError, OSError):
                break
            if not data:
                break
            for m in decoder.feed(data):
                try:
                    if isinstance(m, ModerationStateRequest):
                        conn.sendall(encode(HashResponse(m.req_id, tuple(posts))) + encode(HashResponse(m.req_id, ())))
                    elif isinstance(m, PostRequest):
                        found = tuple(posts[h] for h in m.hashes if h in posts)
                        conn.sendall((encode(PostResponse(m.req_id, found)) if found else b"") + encode(PostResponse(m.req_id, ())))
                except OSError:  # the peer went away
                    return


def deliver_step(tmp: Path, node_cmd) -> dict:
    """cable-core.js asks a peer holding cablestore's moderation posts for moderation state.

    Twice: once offered the shareable posts whose reason fits cable.js's 128
    bytes, once those whose reason is longer (at most 128 codepoints, which
    the spec allows).  Records what cable-core.js stored and whether it lived.
    """
    cases = [c for c in write_cases(tmp / "deliver") if decode_post(c["buf"]).privacy == 0]
    runs = {}
    for batch, fits in (("reasons within 128 bytes", True), ("reasons over 128 bytes", False)):
        chosen = [c for c in cases if (len(decode_post(c["buf"]).reason.encode("utf-8")) <= REASON_BYTES) == fits]
        posts = {post_hash(c["buf"]): c["buf"] for c in chosen}
        with socket.create_server(("127.0.0.1", 0)) as server:
            peer = threading.Thread(target=_answer_moderation, args=(server, posts, 6.0), daemon=True)
            peer.start()
            node = node_cmd("pull-moderation", "127.0.0.1", str(server.getsockname()[1]), "dev", "junk", seconds=4)
            out, err = node.communicate(timeout=60)
            peer.join(timeout=10)
        stored = set(json.loads(out.strip().splitlines()[-1])["stored"]) if out.strip() else set()
        thrown = [line for line in err.splitlines() if line.startswith(("Error", "TypeError", "RangeError"))]
        runs[batch] = {
            "offered": len(posts),
            "stored_by_cable_core": sum(h.hex() in stored for h in posts),
            "cable_core_exit": node.returncode,
            "cable_core_error": thrown[0] if thrown else None,
            "posts": [c["name"] for c in chosen],
        }
    return runs


def _fetch(client: _Client, hashes: list[bytes]) -> dict[bytes, bytes]:
    if not hashes:
        return {}
    responses = client.ask(PostRequest(req_id=os.urandom(4), hashes=tuple(hashes)))
    return {post_hash(b): b for r in responses for b in r.posts}


if __name__ == "__main__":  # the codec step alone: python interop/moderation_steps.py
    with tempfile.TemporaryDirectory() as d:
        print(json.dumps(codec_step(Path(d)), indent=1, ensure_ascii=False))


# --- cablestore syncs a cable-core.js peer's moderation state ------------------------


def sync_step(tmp: Path, node_cmd) -> dict:
    """``cablestore sync`` from a cable-core.js peer that authored moderation posts, as that peer's local user.

    What the synced store resolves is compared with a store that ingested every post the peer serves
    (the moderation state a sync brings must resolve the same), and printed by name for a reader to check
    against the spec.
    """
    import subprocess
    import sys

    node = node_cmd("serve", "0", seconds=12)
    line, labels = node.stdout.readline(), node.stdout.readline()
    if not line.startswith("listening on ") or not labels.startswith("moderation "):
        node.kill()
        raise SystemExit(f"peer did not start: {line!r} {labels!r}")
    authored = json.loads(labels.split(" ", 1)[1])
    local = authored["local_user"]
    label = {bytes.fromhex(v["hash"]): k for k, v in authored["posts"].items()}
    names = {bytes.fromhex(v): k for k, v in authored["users"].items()}
    port = int(line.rsplit(":", 1)[1])
    try:
        client = _Client(port)
        try:
            served = _fetch(client, list(label))
        finally:
            client.close()
        done = subprocess.run(
            [sys.executable, "-m", "cablestore", "sync", str(tmp / "synced"), "--connect", f"127.0.0.1:{port}", "--local-user", local, "--json"],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        node.communicate(timeout=30)
    with Store(tmp / "synced") as synced, Store(tmp / "direct", local_user=bytes.fromhex(local)) as direct:
        direct.ingest_many(list(served.values()))

        def state(store):
            summary = store.moderation_summary()
            named = {}
            for key in ("roles", "hidden_users"):
                named[key] = {}
                for ctx, table in summary[key].items():
                    named[key][ctx] = {
                        names.get(bytes.fromhex(k), k[:8]): (v if key == "roles" else label.get(bytes.fromhex(v), v[:8])) for k, v in table.items()
                    }
            named["hidden_posts"] = sorted(label.get(bytes.fromhex(v), v[:8]) for v in summary["hidden_posts"].values())
            named["dropped_channels"] = sorted(summary["dropped_channels"])
            named["blocks"] = sorted(names.get(bytes.fromhex(k), k[:8]) for k in summary["blocks"])
            return named

        ours, expected = state(synced), state(direct)
        held = {label.get(h, h.hex()) for h in synced.moderation_posts()}
    return {
        "sync_exit": done.returncode,
        "sync_complete": bool(done.stdout.strip()) and json.loads(done.stdout).get("complete"),
        "moderation_posts_synced": sorted(held),
        # cable-core.js answers moderation state for the channels asked (those it lists) and never sends its
        # own post actions (written with channel ""): what a sync cannot bring, though a post request can.
        "served_but_not_synced": sorted(set(label.values()) - held),
        "same_state_as_every_served_post": ours == expected,
        "synced_state": ours,
        "direct_state": expected,
    }
