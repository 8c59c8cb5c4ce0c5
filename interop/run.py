"""Run cablestore against a real cable-core.js 0.2.1 peer over loopback TCP and compare answers.

    CABLE_CORE_JS=/path/to/cable-core.js python interop/run.py [--json]

Needs Node.js and a cable-core.js 0.2.1 checkout with its dependencies
installed (see interop/README.md).  Two directions:

* ``serve``: cable-core.js authors posts and listens; ``cablestore sync
  --live`` pulls everything, and a post cable-core.js writes while the live
  requests are open must arrive.
* ``pull``: ``cablestore serve`` answers a cable-core.js peer that asks for
  the channel list and every channel's history and state.

Each direction prints, per channel and query, whether both peers answer the
same, and what differs (with the post types involved).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from cablestore import POST_TYPE_NAMES, Store, decode_post
from cablestore.authoring.workload import generate

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

    for channel in store.channel_list():
        ours, theirs = _ours(store, channel), node.get(channel)
        if theirs is None:
            rows.append({"channel": channel, "query": "*", "same": False, "note": "cable-core.js does not list it"})
            continue
        for query, a in ours.items():
            b = theirs[query]
            if query == "time_range":
                same = a == b
                a, b = set(a), set(b)
            else:
                same = a == b
            row = {"channel": channel, "query": query, "same": same}
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    args = ap.parse_args(argv)
    if not os.environ.get("CABLE_CORE_JS"):
        print("set CABLE_CORE_JS to a cable-core.js 0.2.1 checkout with its dependencies installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = {"serve": serve_direction(Path(tmp)), "pull": pull_direction(Path(tmp))}
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False, default=sorted))
        return 0
    for direction, result in report.items():
        print(f"== cable-core.js {'serves, cablestore syncs' if direction == 'serve' else 'pulls from cablestore serve'}")
        for key, value in result.items():
            if key != "rows":
                print(f"  {key}: {value}")
        for row in result["rows"]:
            extra = {k: v for k, v in row.items() if k not in ("channel", "query", "same")}
            print(f"  {row['channel']:>12} {row['query']:<10} {'same' if row['same'] else 'DIFFERS'} {extra if extra else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
