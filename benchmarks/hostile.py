"""Hostile-peer harness: every attack of issue 20 against `cablestore serve` while a good client measures, then `cablestore sync` against hostile servers.

    python -m benchmarks.hostile                 # the full run (about 3 minutes on 2 cores)
    python -m benchmarks.hostile --short         # the CI version (about 40 s)

Serving: a store of 4,000 generated posts is served by `cablestore serve`
(its default limits) in its own process, on a private listener (a cabal key)
and a plain one beside it; a good client, in another process,
asks in a loop for the channel list, a 50-hash time range, 8 posts and a
channel state, and checks every answer against what the store holds.  Each
attack runs for a phase of its own; per phase the report gives the good
client's answers, wrong answers, longest gap without a correct answer, p50
and p99 latency, and the server's largest RSS.  The good client and the
attacks of issue 20 use the plain listener; the handshake attacks of issue 39
(:mod:`benchmarks.hostile_private`: half-open and slow handshakes, garbage,
bad frames after the handshake) the private one.  The store is compared
key by key before and after.

Syncing: one small hostile server per misbehaviour (silent, garbage, a channel
list over the cap, wrong response types, a request flood, endless hash
responses, pushed hash floods to a live sync, a trickle of new hashes), each
met by `cablestore sync` in its own process; the report gives its exit
status, reason, time and largest RSS.

Attack sizes are scaled to a 2-core machine (``--short`` scales them down
further); each is named with its size in the report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.hostile_client import FAR, RssSampler, expectations, phase_figures, store_digest
from benchmarks.hostile_private import PRIVATE_ATTACKS
from benchmarks.hostile_serve import SERVE_ATTACKS, size_text, unwrap_size
from benchmarks.hostile_sync import SYNC_ATTACKS, run_sync_attack
from cablestore import Store
from cablestore.authoring.keyfile import read_cabal_key, write_cabal_key
from cablestore.authoring.workload import generate

PY = sys.executable
SLACK_S = 2.0  # a sync may pass its deadline by a tick and the message it is handling (longer on a loaded machine)


# --- the run ------------------------------------------------------------------------------


def _info(path: Path) -> dict:
    from cablestore import Keypair, make_post

    with Store(path, create=False) as store:
        channel = store.channel_list()[0]
        whole = store.channel_time_range(channel, 0, FAR, 0)
        all_hashes = [h for h in whole if store.get(h) is not None]
    kp = Keypair.from_seed(bytes(32))
    now = int(time.time() * 1000)
    foreign = [make_post(kp, 0, now - 1000 - i, channel=channel, text=f"not on the server {i}")[0] for i in range(2)]
    future = make_post(kp, 0, now + 30 * 24 * 3600 * 1000, channel=channel, text="from the future")[0]
    return {
        "channel": channel,
        "whole_range": [h.hex() for h in whole],
        "all_hashes": [h.hex() for h in all_hashes],
        "foreign_posts": [p.hex() for p in foreign],
        "future_post": future.hex(),
        "checks": {},
    }


def run(work: Path, short: bool, posts: int, memory_mb: int, only: list[str] | None = None) -> dict:
    """Run every attack; return the figures (see the module docstring)."""
    store = work / "served"
    key_file = work / "cabal.key"
    with Store(store) as s:
        s.ingest_many(generate(seed=20, posts=posts))
        s.join_cabal(write_cabal_key(key_file))  # serve --cabal-key records the cabal: before the digest
    before = store_digest(store)
    info = _info(store)
    info["cabal_key"] = read_cabal_key(key_file)
    expect = work / "expect.json"
    expect.write_text(json.dumps(expectations(store)))
    phase_s = 2.5 if short else 10.0
    report = {"posts": posts, "memory_mb": memory_mb, "short": short, "phase_seconds": phase_s, "serve": [], "sync": []}

    serve = subprocess.Popen(  # a private listener (the handshake attacks) and the plain one beside it (the good client, the other attacks)
        [PY, "-m", "cablestore", "serve", str(store), "--listen", "127.0.0.1:0", "--cabal-key", str(key_file), "--plain-listen", "127.0.0.1:0",
         "--json", "--memory-mb", str(memory_mb)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    sampler = RssSampler(serve.pid)
    client = None
    try:
        info["private_address"] = json.loads(serve.stdout.readline())["listening"]
        address = json.loads(serve.stdout.readline())["listening"]
        sampler.start()
        samples, stop_file = work / "samples.txt", work / "stop"
        client = subprocess.Popen([PY, "-m", "benchmarks.hostile_client", address, str(expect), str(samples), str(stop_file)])
        time.sleep(1.0)
        t0 = time.time()
        sampler.reset()
        time.sleep(phase_s / 2)
        phases = [("baseline", None, None, None, t0, time.time(), sampler.peak())]
        for name, fn, full, small, item in SERVE_ATTACKS + PRIVATE_ATTACKS:
            if only and name not in only:
                continue
            size = small if short else full
            stop = threading.Event()
            sampler.reset()
            start = time.time()

            def attack(fn=fn, size=size, stop=stop, name=name):
                try:
                    fn(address, unwrap_size(size), stop, info)
                except Exception as exc:  # noqa: BLE001 - reported as a failed check, the run goes on
                    info["checks"][f"{name}: the attack ran"] = f"{type(exc).__name__}: {exc}"

            attacker = threading.Thread(target=attack, daemon=True)
            attacker.start()
            time.sleep(phase_s)
            stop.set()
            attacker.join(30)
            phases.append((name, item, size, fn, start, time.time(), sampler.peak()))
            time.sleep(0.5)
        stop_file.write_text("")
        client.wait(timeout=30)
        lines = [ln.split() for ln in samples.read_text().splitlines()]
        points = [(float(a), float(b), k, int(c)) for a, b, k, c in lines]
        for name, item, size, _fn, start, end, peak in phases:
            row = {"attack": name, "item": item, "size": size_text(size) if size else "", **phase_figures(points, start, end), "rss_mb": round(peak, 1)}
            report["serve"].append(row)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        sampler.stop()
        serve.terminate()
        try:
            out, err = serve.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            out, err = serve.communicate()
    summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    report["serve_exit"] = serve.returncode
    counted = ("connections", "handshakes", "handshakes_failed", "channel_failed", "connections_refused", "requests_refused", "forwards_refused",
               "relayed_refused", "duplicates_concluded", "peak_buffered_bytes", "closed")
    report["serve_counts"] = {k: summary.get(k) for k in counted}
    report["store_identical"] = store_digest(store) == before
    report["checks"] = info["checks"]

    progress_timeout = 1.5 if short else 5.0
    threads, results = [], {}
    for kind, item, live in SYNC_ATTACKS:
        if only and kind not in only:
            continue

        def one(kind=kind, live=live, item=item):
            results[kind] = {"item": item, **run_sync_attack(kind, live, work, progress_timeout, memory_mb, 0.5 if short else 2.0)}

        t = threading.Thread(target=one)
        t.start()
        threads.append(t)
        if not short:
            t.join()  # one at a time: each its own figures
    for t in threads:
        t.join()
    report["sync"] = [results[k] for k, _, _ in SYNC_ATTACKS if k in results]
    report["sync_deadline_s"] = progress_timeout
    return report


def verdict(report: dict) -> list[str]:
    """What failed the issue's bounds (empty when everything held)."""
    bad = []
    for row in report["serve"]:
        if row["wrong"]:
            bad.append(f"{row['attack']}: {row['wrong']} wrong or missing answers")
        if row["gap_s"] > 2.0 or row["answers"] - row["wrong"] < 1:
            bad.append(f"{row['attack']}: {row['gap_s']} s without a correct answer")
        if row["p99_ms"] is None or row["p99_ms"] > 100:
            bad.append(f"{row['attack']}: p99 {row['p99_ms']} ms")
        if row["rss_mb"] > report["memory_mb"]:
            bad.append(f"{row['attack']}: RSS {row['rss_mb']} MB over {report['memory_mb']}")
    if not report["store_identical"]:
        bad.append("the store changed")
    if report["serve_exit"] != 0:
        bad.append(f"serve exited {report['serve_exit']}")
    bad += [f"check failed: {name}: {ok}" for name, ok in report["checks"].items() if ok is not True]
    ran = {row["attack"] for row in report["serve"]}
    for attack, check in (("limit >= 2^63", "huge limit answered whole"), ("relay: bad posts, duplicate", "relay: only the good post passed on, duplicate concluded"),
                          ("handshake garbage", "handshake garbage: closed, nothing sent"),
                          ("bad frames after the handshake", "after the handshake: over-bound length, bad MAC, garbage length closed")):
        if attack in ran and check not in report["checks"]:
            bad.append(f"check missing: {check}")
    for row in report["sync"]:
        if row["exit"] == 0 or not row["reason"]:
            bad.append(f"sync against {row['attack']}: exit {row['exit']}, reason {row['reason']!r}")
        if row["rss_mb"] > report["memory_mb"]:
            bad.append(f"sync against {row['attack']}: RSS {row['rss_mb']} MB")
        if row["sync_s"] is None or row["sync_s"] > row["deadline_s"] + SLACK_S:
            bad.append(f"sync against {row['attack']}: ended after {row['sync_s']} s, deadline {row['deadline_s']} s")
    return bad


def markdown(report: dict) -> str:
    """The report as two Markdown tables."""
    lines = [
        "| attack (issue item) | size | good client answers | wrong | longest gap (s) | p50 (ms) | p99 (ms) | server RSS (MB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["serve"]:
        item = f" ({r['item']})" if r["item"] else ""
        lines.append(f"| {r['attack']}{item} | {r['size']} | {r['answers']} | {r['wrong']} | {r['gap_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['rss_mb']} |")
    lines += ["", "| hostile server (issue item) | sync exit | reason | sync s (deadline) | process s | sync RSS (MB) |", "|---|---|---|---|---|---|"]
    for r in report["sync"]:
        reason = str(r["reason"]).replace("|", "/")
        lines.append(f"| {r['attack']} ({r['item']}) | {r['exit']} | {reason} | {r['sync_s']} ({r['deadline_s']:g}) | {r['process_s']} | {r['rss_mb']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--short", action="store_true", help="smaller attacks and 3 s phases (the CI version)")
    p.add_argument("--posts", type=int, default=4000, help="posts in the served store (default: 4000)")
    p.add_argument("--memory-mb", type=int, default=256, help="the memory budget given to serve and sync (default: 256)")
    p.add_argument("--only", action="append", metavar="ATTACK", help="run only this attack (repeatable)")
    p.add_argument("--out", help="write the report as JSON here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        report = run(Path(tmp), args.short, args.posts, args.memory_mb, args.only)
    report["failures"] = verdict(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    print(markdown(report))
    print(f"\nstore byte-identical afterwards: {report['store_identical']}; serve counts: {json.dumps(report['serve_counts'])}")
    print("checks: " + ", ".join(f"{k}: {v}" for k, v in report["checks"].items()))
    print("FAILED: " + "; ".join(report["failures"]) if report["failures"] else "every bound held")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
