"""Run cablestore against a real cable-core.js 0.2.1 peer over loopback TCP and compare answers.

    CABLE_CORE_JS=/path/to/cable-core.js python interop/run.py [--json] [STEP ...]

Needs Node.js and a cable-core.js 0.2.1 checkout with its dependencies
installed, and cable.js linked into it (see interop/README.md; ``interop/setup.sh``
does all of it).  Steps (all by default):

* ``serve``: cable-core.js authors posts and listens; ``cablestore sync
  --live`` pulls everything, and a post cable-core.js writes while the live
  requests are open must arrive.
* ``pull``: ``cablestore serve`` answers a cable-core.js peer that asks for
  the channel list and every channel's history and state.
* ``moderation``: cablestore writes every kind of moderation post and
  accept-role opt-outs; cable.js 0.2.1's own parser decodes each
  (``moderation.js``) and every field, the hash and cable.js's re-encoding
  are compared; then cable.js writes an opt-out and a post/info of a user the
  local user blocked with ``drop = 1``, and a cablestore store takes them.
* ``moderation-state``: cable-core.js authors moderation posts and answers
  moderation state requests (message type 8); the answers are listed beside
  cablestore's for the same posts.
* ``moderation-deliver``: cable-core.js asks for moderation state and is sent
  cablestore's moderation posts; what it stores, and whether it survives.
* ``client``: cable-client.js 0.1.1 (``client.js``; CABLE_CLIENT_JS, default
  beside CABLE_CORE_JS) connects to ``cablestore serve`` over its own
  tcp-network.js; its channels, messages, topics and members are compared
  with the store's, and the messages it posts must reach the served store
  and a second ``cablestore sync`` from that serve.
* ``handshake`` (only when named; needs CABLE_HANDSHAKE_TS, a built
  cable-handshake.ts 1.0.0 checkout, instead of CABLE_CORE_JS): the Cable
  Handshake of ``cablestore.wire.handshake`` against cable-handshake.ts's
  (``handshake.mjs``), both directions, both prologues, a wrong key,
  fragmented messages and end of stream (``handshake_steps.py``); then real
  cablestore processes (``handshake_peers.py``) and moderation over
  authenticated connections (``handshake_moderation.py``).

Each direction prints, per channel and query, whether both peers answer the
same, and what differs (with the post types involved).  Exit status 1 when a
moderation post decodes differently from what is expected (cable.js refuses
a reason of more than 128 bytes, see the README) or cable-core.js does not
store every post whose reason fits, or a ``handshake`` case goes otherwise than
expected, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from handshake_steps import handshake_step, print_handshake
from moderation_steps import codec_step, deliver_step, state_step, sync_step

from cablestore import POST_TYPE_NAMES, Store, decode_post
from cablestore.authoring.workload import Workload, generate
from cablestore.wire.codec import DELETE, JOIN, TEXT

HERE = Path(__file__).resolve().parent
PY = sys.executable


def _node(*args: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(["node", str(HERE / "harness.js"), *args, str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _port(proc: subprocess.Popen) -> int:
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"peer did not start: {line!r} {proc.stderr.read()[:500]}")
    return int(line.rsplit(":", 1)[1])


def _node_snapshot(text: str) -> dict:
    """cable-core's answers, channels merged by casefold (names are case-insensitive, spec 5.4.1)."""
    merged: dict[str, dict] = {}
    for name, v in json.loads(text.strip().splitlines()[-1])["channels"].items():
        m = merged.setdefault(name.casefold(), {"time_range": [], "state": set(), "topic": "", "members": set()})
        m["time_range"] += v["time_range"]
        m["state"] |= set(v["state"])
        m["members"] |= set(v["members"])
        m["topic"] = v["topic"] or m["topic"]
    return merged


def _ours(store: Store, channel: str) -> dict:
    return {
        "time_range": [h.hex() for h in store.channel_time_range(channel)],
        "state": {h.hex() for h in store.channel_state(channel)},
        "topic": store.topic(channel) or "",
        "members": {m.hex() for m in store.members(channel)},
    }


def compare(store: Store, node: dict) -> list[dict]:
    """One row per channel and query: same, or what only one side has."""
    rows = []

    def kind(hx: str) -> str:
        buf = store.get(bytes.fromhex(hx))
        return POST_TYPE_NAMES[decode_post(buf).post_type] if buf else "not held here"

    def stamp(hx: str) -> int | None:
        buf = store.get(bytes.fromhex(hx))
        return decode_post(buf).timestamp if buf else None

    for channel in store.channel_list():
        ours, theirs = _ours(store, channel), node.get(channel)
        if theirs is None:
            rows.append({"channel": channel, "query": "*", "same": False, "note": "cable-core.js does not list it"})
            continue
        for query, a in ours.items():
            b = theirs[query]
            ties = False
            if query == "time_range":
                same = a == b
                # the same posts, in the same timestamp order, differing only among equal timestamps
                ties = not same and set(a) == set(b) and [stamp(x) for x in a] == [stamp(x) for x in b]
                same = same or ties
                a, b = set(a), set(b)
            else:
                same = a == b
            row = {"channel": channel, "query": query, "same": same}
            if ties:
                row["note"] = "posts with equal timestamps in another order"
            if not same and query == "members":
                row["only_cablestore"], row["only_cable_core"] = len(a - b), len(b - a)
            elif not same and isinstance(a, set):
                row["only_cablestore"] = dict(Counter(kind(x) for x in a - b))
                row["only_cable_core"] = dict(Counter(kind(x) for x in b - a))
            elif not same:
                row["cablestore"], row["cable_core"] = a, b
            rows.append(row)
    return rows


def serve_direction(tmp: Path) -> dict:
    """cable-core.js serves; cablestore syncs live and must receive the post written meanwhile."""
    node = _node("serve", "0", seconds=12)
    port = _port(node)
    sync = subprocess.Popen(
        [PY, "-m", "cablestore", "sync", str(tmp / "synced"), "--connect", f"127.0.0.1:{port}", "--live", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = sync.communicate(timeout=9)
    except subprocess.TimeoutExpired:
        sync.send_signal(signal.SIGTERM)
        out, err = sync.communicate(timeout=30)
    node_out, node_err = node.communicate(timeout=30)
    with Store(tmp / "synced") as store:
        late = [h for h in store.channel_time_range("interop") if decode_post(store.get(h)).text == "written while you were listening"]
        summary = json.loads(out) if out.strip() else err.strip()
        return {"sync_exit": sync.returncode, "summary": summary, "live_post_received": bool(late), "rows": compare(store, _node_snapshot(node_out))}


def pull_direction(tmp: Path) -> dict:
    """cablestore serves a generated workload; cable-core.js pulls it."""
    with Store(tmp / "full") as store:
        store.ingest_many(generate(seed=4, posts=800))
    serve = subprocess.Popen([PY, "-m", "cablestore", "serve", str(tmp / "full"), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = _port(serve)
        node = _node("pull", "127.0.0.1", str(port), seconds=8)
        node_out, _ = node.communicate(timeout=60)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve_exit = serve.wait(timeout=30)
    with Store(tmp / "full") as store:
        return {"serve_exit": serve_exit, "rows": compare(store, _node_snapshot(node_out))}


DAYS_140_MS = 140 * 24 * 60 * 60 * 1000  # cable-client.js's JoinedPolicy/UnjoinedPolicy window (2 * 10 weeks)


def _client_path() -> Path:
    """cable-client.js: CABLE_CLIENT_JS, else beside CABLE_CORE_JS (where setup.sh puts it)."""
    return Path(os.environ.get("CABLE_CLIENT_JS") or Path(os.environ["CABLE_CORE_JS"]).parent / "cable-client.js")


def _client_rows(store: Store, snap: dict, asked_from: int) -> list[dict]:
    """What cable-client.js shows against what the store answers, one row per channel and view."""
    rows = []
    shown: dict[str, dict] = {}
    for name, v in snap["channels"].items():
        shown.setdefault(name.casefold(), {"spellings": [], "views": []})
        shown[name.casefold()]["spellings"].append(name)
        shown[name.casefold()]["views"].append(v)
    ours = store.channel_list()
    for key in sorted(set(shown) - set(ours)):
        v = shown[key]["views"][0]
        rows.append({"channel": key, "view": "listed", "same": False, "only_client": shown[key]["spellings"],
                     "client_messages": len(v["messages"]), "client_members": len(v["members"]), "client_topic": v["topic"]})
    for channel in ours:
        if channel not in shown:
            rows.append({"channel": channel, "view": "listed", "same": False, "only_cablestore": True})
            continue
        spellings, views = shown[channel]["spellings"], shown[channel]["views"]
        if spellings != [channel]:
            rows.append({"channel": channel, "view": "spelling", "same": len(spellings) == 1, "client": spellings})
        msgs = list(reversed(store.messages(channel)))  # oldest first, as the client shows them
        texts = [m for m in msgs if m.post_type == TEXT]
        client = [m for v in views for m in v["messages"]]
        a, b = [m.hash.hex() for m in texts], [m["hash"] for m in client]
        only_a, only_b = set(a) - set(b), set(b) - set(a)
        row = {"channel": channel, "view": "messages", "same": not only_a and not only_b, "cablestore": len(a), "client": len(b)}
        if only_a:
            old = sum(1 for m in texts if m.hash.hex() in only_a and m.timestamp < asked_from)
            row["only_cablestore"] = {"older than 140 days": old, "newer": len(only_a) - old}
        if only_b:
            row["only_client"] = len(only_b)
        deletes = sum(1 for m in msgs if m.post_type == DELETE)
        if deletes:
            row["note"] = f"{deletes} post/delete in cablestore's time range, not shown by the client (getChat lists post/text)"
        rows.append(row)
        common = set(a) & set(b)
        a_order, b_order = [h for h in a if h in common], [h for h in b if h in common]
        order = {"channel": channel, "view": "order", "same": a_order == b_order}
        if a_order != b_order:
            stamp = {m.hash.hex(): m.timestamp for m in texts}
            order["differs_only_on_equal_timestamps"] = [stamp[h] for h in a_order] == [stamp[h] for h in b_order]
            pos = {h: i for i, h in enumerate(b_order)}
            pairs = [(h, ln.hex()) for h in common for ln in store.links(bytes.fromhex(h))
                     if ln.hex() in common and stamp[ln.hex()] == stamp[h]]
            order["equal_timestamp_link_pairs"] = len(pairs)
            order["client_shows_linking_post_first"] = sum(1 for h, ln in pairs if pos[h] < pos[ln])
        rows.append(order)
        topic = {"channel": channel, "view": "topic", "same": store.topic(channel) == views[-1]["topic"]}
        if not topic["same"]:
            topic["cablestore"], topic["client"] = store.topic(channel), [v["topic"] for v in views]
        rows.append(topic)
        ma, mb = {k.hex() for k in store.members(channel)}, {k for v in views for k in v["members"]}
        members = {"channel": channel, "view": "members", "same": ma == mb, "cablestore": len(ma), "client": len(mb)}
        if ma != mb:
            def joined(key: str, channel: str = channel) -> bool:
                return any(store.post(h).channel.casefold() == channel for h in store.author_posts(bytes.fromhex(key), JOIN))
            members["only_cablestore"] = {"with a post/join here": sum(map(joined, ma - mb)),
                                          "joined only by text/topic": sum(not joined(k) for k in ma - mb)}
            members["only_client"] = len(mb - ma)
        rows.append(members)
    return rows


def client_direction(tmp: Path) -> dict:
    """cable-client.js 0.1.1 connects to ``cablestore serve``: what it shows, and whether its posts come back."""
    now = int(time.time() * 1000)
    old, recent = Workload(seed=5, posts=200), Workload(seed=4, posts=800)  # old: 2023; recent: the last hour
    recent.clock = now - 3_600_000
    with Store(tmp / "client-full") as store:
        store.ingest_many([*old, *recent])
    serve = subprocess.Popen([PY, "-m", "cablestore", "serve", str(tmp / "client-full"), "--listen", "127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    texts = {"general": f"from cable-client.js to general {now}", "default": f"from cable-client.js to default {now}",
             "del:general": f"deleted on cable-client.js {now}"}  # del: the client deletes it again (post/delete)
    sync = None
    try:
        port = _port(serve)
        client = subprocess.Popen(["node", str(HERE / "client.js"), "127.0.0.1", str(port), "16", *(f"{c}={t}" for c, t in texts.items())],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "CABLE_CLIENT_JS": str(_client_path())})
        try:
            client_out, client_err = client.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            client.kill()
            client_out, client_err = client.communicate(timeout=30)
        sync = subprocess.run([PY, "-m", "cablestore", "sync", str(tmp / "client-second"), "--connect", f"127.0.0.1:{port}", "--json", "--quiet", "--timeout", "60"],
                              capture_output=True, text=True, timeout=120)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve_exit = serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve_exit = serve.wait(timeout=30)
    result = {"serve_exit": serve_exit, "client_exit": client.returncode, "client_stderr": client_err.strip()[-800:]}
    if client.returncode != 0 or not client_out.strip():
        return {**result, "rows": []}
    snap = json.loads(client_out.strip().splitlines()[-1])
    with Store(tmp / "client-second") as second:
        reached_second = {w["text"]: second.get(bytes.fromhex(w["hash"])) is not None for w in snap["written"]}
    with Store(tmp / "client-full") as store:
        reached = {w["text"]: store.get(bytes.fromhex(w["hash"])) is not None for w in snap["written"]}
        mine = [store.post(h) for h in store.author_posts(bytes.fromhex(snap["local_user"]))]
        result["client_posts_stored_by_serve"] = sorted(f"{p.type_name} {p.channel or ''} {p.text or ''}".strip() for p in mine)
        result.update({
            "client_posts_reached_serve": reached,
            "second_sync_exit": sync.returncode if sync else None,
            "client_posts_reached_second_peer": reached_second,
            "client_joined_default_stored": any(store.post(h).channel == "default" for h in store.author_posts(bytes.fromhex(snap["local_user"]), JOIN)),
            "rows": _client_rows(store, snap, now - DAYS_140_MS),
        })
    return result


STEPS = {
    "serve": serve_direction,
    "pull": pull_direction,
    "moderation": codec_step,
    "moderation-state": lambda tmp: state_step(tmp, _node),
    "moderation-deliver": lambda tmp: deliver_step(tmp, _node),
    "moderation-sync": lambda tmp: sync_step(tmp, _node),
    "client": client_direction,
    "handshake": handshake_step,
}
DEFAULT_STEPS = [s for s in STEPS if s != "handshake"]  # the handshake step needs another checkout: run it by name


def _print_moderation(result: dict) -> None:
    print(f"== cablestore writes moderation posts, cable.js 0.2.1 parses them: {result['as_expected']}/{result['cases']} as expected")
    for row in result["rows"]:
        if row["cable_js"] == "decodes":
            what = f"decodes, {row['fields_compared']} fields same" if not row["differing_fields"] else f"decodes, DIFFERS in {row['differing_fields']}"
            what += ", hash same" if row["same_hash"] else ", HASH DIFFERS"
            what += ", re-encodes byte-exact" if row["reencoded_same"] else ", RE-ENCODES DIFFERENTLY"
        else:
            what = f"refused: {row['error']}"
        print(f"  {'ok ' if row['as_expected'] else 'UNEXPECTED '}{row['case']}: {what}")
    w = result["cable_js_writes"]
    print("== cable.js 0.2.1 writes an opt-out and a dropping-blocked user's post/info, cablestore stores them")
    print(f"  opt-out: accept-role decoded as {w['opt_out_accept_role_decoded']}, stored: {w['opt_out_stored']}; "
          f"the decliner a normal user: {w['decliner_is_a_normal_user']}; their role not answered: {w['decliners_role_not_answered']}")
    print(f"  blocked user's post/info: {w['blocked_users_info']}; their name known: {w['blocked_users_name_known']!r}")


def _print_state(result: dict) -> None:
    print("== cable-core.js answers moderation state requests (cablestore, holding the same posts, beside it)")
    print(f"  authored by cable-core.js's local user: {', '.join(result['authored'])}")
    print(f"  served by a post request: {result['served_by_post_request']}; not served: {', '.join(result['not_served']) or '-'}")
    print(f"  refused by cablestore: {', '.join(result['refused_by_cablestore']) or '-'}")
    for req in result["requests"]:
        print(f"  {req['request']}: responses of {req['responses']} hashes, concluded: {req['concluded']}")
        for i, label in enumerate(req["answered"], 1):
            print(f"    {i:2}. {label}")
        print(f"    not answered: {', '.join(req['not_answered']) or '-'}")
        print(f"    cablestore answers (oldest first): {', '.join(req['cablestore_answers']) or '-'}")


def _print_deliver(result: dict) -> None:
    print("== cable-core.js asks for moderation state and is sent cablestore's moderation posts")
    for batch, run in result.items():
        error = f", error: {run['cable_core_error']}" if run["cable_core_error"] else ""
        print(f"  {batch}: {run['stored_by_cable_core']}/{run['offered']} stored, cable-core.js exit {run['cable_core_exit']}{error}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ap.add_argument("steps", nargs="*", choices=[*STEPS, []], metavar="STEP", help=f"steps to run ({', '.join(STEPS)}; default: all but handshake)")
    args = ap.parse_args(argv)
    steps = args.steps or DEFAULT_STEPS
    if any(s != "handshake" for s in steps) and not os.environ.get("CABLE_CORE_JS"):
        print("set CABLE_CORE_JS to a cable-core.js 0.2.1 checkout with its dependencies installed", file=sys.stderr)
        return 2
    if "handshake" in steps and not os.environ.get("CABLE_HANDSHAKE_TS"):
        print("set CABLE_HANDSHAKE_TS to a cable-handshake.ts 1.0.0 checkout, built (see interop/README.md)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = {step: STEPS[step](Path(tmp)) for step in steps}
    failed = "moderation" in report and report["moderation"]["as_expected"] != report["moderation"]["cases"]
    fits = report.get("moderation-deliver", {}).get("reasons within 128 bytes")
    failed = failed or bool(fits and (fits["cable_core_exit"] != 0 or fits["stored_by_cable_core"] != fits["offered"]))
    failed = failed or ("handshake" in report and report["handshake"]["as_expected"] != report["handshake"]["total"])
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False, default=sorted))
        return int(failed)
    for direction, result in report.items():
        if direction == "moderation":
            _print_moderation(result)
            continue
        if direction == "moderation-state":
            _print_state(result)
            continue
        if direction == "moderation-deliver":
            _print_deliver(result)
            continue
        if direction == "handshake":
            print_handshake(result)
            continue
        if direction == "client":
            print("== cable-client.js 0.1.1 connects to cablestore serve")
            for key, value in result.items():
                if key != "rows":
                    print(f"  {key}: {value}")
            for row in result["rows"]:
                extra = {k: v for k, v in row.items() if k not in ("channel", "view", "same")}
                print(f"  {row['channel']:>12} {row['view']:<9} {'same' if row['same'] else 'DIFFERS'} {extra if extra else ''}")
            continue
        if direction == "moderation-sync":
            print("== cablestore syncs a cable-core.js peer's moderation state, as its local user")
            for key, value in result.items():
                print(f"  {key}: {value}")
            continue
        print(f"== cable-core.js {'serves, cablestore syncs' if direction == 'serve' else 'pulls from cablestore serve'}")
        for key, value in result.items():
            if key != "rows":
                print(f"  {key}: {value}")
        for row in result["rows"]:
            extra = {k: v for k, v in row.items() if k not in ("channel", "query", "same")}
            print(f"  {row['channel']:>12} {row['query']:<10} {'same' if row['same'] else 'DIFFERS'} {extra if extra else ''}")
    return int(failed)


if __name__ == "__main__":
    raise SystemExit(main())
