"""Network simulation: N `cablestore serve` processes on loopback converge to identical stores through churn and a partition.

    python -m benchmarks.network --peers 8,16,32 --topologies line,ring,random [--json]

For each N and topology: N stores, each served by ``serve STORE --listen
127.0.0.1:P --peer ...`` dialling its neighbours (each edge by one side,
through :class:`benchmarks.netwire.Relay`, which counts the wire).  Every
store has the same local user (the admin), so moderation resolves the same
everywhere.  Then:

1. wait until every store's digest is equal (the joins each store began with);
2. the write phase: text posts by three users, a spammer's posts, and the
   admin's moderation (a role, a hide, a block with ``--drop --notify``),
   each at a random running peer through its control socket (as the CLI
   does on a served store), while random peers are SIGKILLed and restarted
   on their ports; then the time from the last write (and the last restart)
   until every digest is equal;
3. the partition: the peers between two halves are stopped, posts and one
   moderation post are written on each side, the stopped peers are started
   again (the heal), and the time from the heal until every digest is equal.

A store's digest is SHA-256 over its sorted post hashes (``dump``) and its
resolved moderation state (``moderation --json``), read through the serving
process.  Convergence times are upper bounds: the end of the first poll round
(every peer read once) that found every digest equal.  The wire: bytes and
Cable messages both ways over every edge, per post delivered (a post a peer
received that it had not written); duplicate deliveries: posts a peer
received that it already held (received before, or written there).  Peak RSS:
VmHWM of /proc/PID/status, sampled each poll round and before each stop, the
largest over a peer's incarnations.  Progress goes to stderr on a TTY
(``--quiet`` silences it); every process is stopped in ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.netwire import TOPOLOGIES, Relay, edges_of, partition
from cablestore.peer.control import call

CLI = [sys.executable, "-m", "cablestore"]
FIELDS = (
    "peers", "topology", "edges", "cut", "posts_written", "moderation_written", "kills", "start_converge_s", "converge_after_last_write_s",
    "converge_after_heal_s", "poll_round_s", "posts_held", "moderation_held", "digest", "delivered_posts", "wire_bytes", "wire_messages", "mean_post_bytes",
    "bytes_per_delivered_post", "bytes_per_post_size", "wire_bytes_by_type", "messages_per_delivered_post", "duplicate_deliveries", "duplicates_per_delivered_post",
    "peak_rss_mb_max", "peak_rss_mb_mean", "peak_rss_mb", "not_converged",
)


class NotConverged(RuntimeError):
    """The stores' digests were still not all equal at the deadline."""


class Network:
    """N served stores on loopback joined by ``edges`` through a counting relay; :meth:`close` stops every process."""

    def __init__(self, root: Path, n: int, edges: list[tuple[int, int]], relay: Relay, say) -> None:
        self.root, self.n, self.edges, self.relay, self.say = root, n, edges, relay, say
        self.stores = [root / f"p{i}.ldb" for i in range(n)]
        self.ports = [0] * n
        self.procs: list[subprocess.Popen | None] = [None] * n
        self.rss_kb = [0] * n
        self.local: list[set[str]] = [set() for _ in range(n)]  # hashes written at each peer
        self.keys = {name: root / f"{name}.key" for name in ("admin", "alice", "bob", "carol", "spammer")}
        self.users = {name: self._keygen(path) for name, path in self.keys.items()}
        # Every store begins as a copy of one holding the admin's join (the admin is its local user): joins of one user
        # written in several stores would supersede each other in the channel state, and only the newest would ever travel.
        joined = self._run_here(["post", str(self.stores[0]), "--key", str(self.keys["admin"]), "join", "general"]).split()[-1]
        for i, store in enumerate(self.stores):
            if i:
                shutil.copytree(self.stores[0], store)
            self.local[i].add(joined)

    @staticmethod
    def _keygen(path: Path) -> str:
        return json.loads(Network._run_here(["keygen", str(path), "--json"]))["public_key"]

    @staticmethod
    def _run_here(argv: list[str]) -> str:
        from cablestore.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(argv)
        if status:
            raise RuntimeError(f"cablestore {' '.join(argv)} exited {status}")
        return out.getvalue()

    # --- processes ---------------------------------------------------------

    def start(self, peers: list[int]) -> None:
        """Start ``serve`` for ``peers`` (on their old ports once they had one) and wait until each listens."""
        for i in peers:
            port_file = self.root / f"port{i}"
            port_file.unlink(missing_ok=True)
            dials = [a for e in self.edges if e[0] == i for a in ("--peer", f"127.0.0.1:{self.relay.ports[e]}")]
            with open(self.root / f"serve{i}.log", "a") as log:
                self.procs[i] = subprocess.Popen(
                    [*CLI, "serve", str(self.stores[i]), "--listen", f"127.0.0.1:{self.ports[i]}", "--port-file", str(port_file), "--quiet",
                     "--local-user", self.users["admin"], *dials],
                    stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        for i in peers:
            port_file = self.root / f"port{i}"
            while not port_file.exists():
                proc = self.procs[i]
                if proc.poll() is not None:
                    raise RuntimeError(f"serve of peer {i} exited {proc.returncode}: {(self.root / f'serve{i}.log').read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"serve of peer {i} did not listen within 60 s")
                time.sleep(0.05)
            self.ports[i] = self.relay.target_ports[i] = int(port_file.read_text())

    def stop(self, i: int, sig: int = signal.SIGTERM) -> None:
        """Stop peer ``i`` with ``sig`` (SIGKILL: no goodbye) and wait for it."""
        proc = self.procs[i]
        if proc is None:
            return
        self._sample(i)
        self.procs[i] = None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def running(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None]

    def close(self) -> None:
        for i in range(self.n):
            with contextlib.suppress(Exception):
                self.stop(i)

    def _sample(self, i: int) -> None:
        proc = self.procs[i]
        if proc is None:
            return
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.rss_kb[i] = max(self.rss_kb[i], int(line.split()[1]))

    # --- the served stores ---------------------------------------------------

    def command(self, i: int, argv: list[str]) -> str:
        """Run a ``cablestore`` command line on peer ``i``'s served store (through its control socket); its stdout."""
        out, err = io.StringIO(), io.StringIO()
        status = call(self.stores[i], argv, stdout=out, stderr=err, cwd=str(self.root), timeout=60)
        if status != 0:
            raise RuntimeError(f"peer {i}: cablestore {' '.join(argv)}: {'not served' if status is None else err.getvalue().strip()}")
        return out.getvalue()

    def write(self, i: int, argv: list[str]) -> str:
        """Write at peer ``i``: ``argv`` after the store (a command that prints the new post's hash or its JSON)."""
        out = self.command(i, [argv[0], str(self.stores[i]), *argv[1:]])
        h = json.loads(out)["hash"] if out.lstrip().startswith("{") else out.split()[-1]
        self.local[i].add(h)
        return h

    def digest(self, i: int) -> tuple[str, int]:
        """Peer ``i``'s store digest (its sorted post hashes and resolved moderation) and how many posts it holds."""
        dumped = json.loads(self.command(i, ["dump", str(self.stores[i]), "--json"]))
        hashes = sorted(p["hash"] for p in dumped["posts"])
        moderation = self.command(i, ["moderation", str(self.stores[i]), "--json"])
        canon = json.dumps(json.loads(moderation), sort_keys=True)
        return hashlib.sha256("\n".join(hashes).encode() + b"\0" + canon.encode()).hexdigest(), len(hashes)

    def _differences(self) -> str:
        """What each peer holds that another lacks (type, author, text), for a failure's message."""
        held = {i: {p["hash"]: p for p in json.loads(self.command(i, ["dump", str(self.stores[i]), "--json"]))["posts"]} for i in range(self.n)}
        every = set().union(*held.values())
        lines = []
        for h in sorted(every):
            where = [i for i in range(self.n) if h in held[i]]
            if len(where) < self.n:
                p = next(held[i][h] for i in where)
                lines.append(f"{h[:12]} {p['type']} by {p['author'][:8]} {p.get('text', '')!r}: held by {where}")
        moderation = {i: self.command(i, ["moderation", str(self.stores[i]), "--json"]) for i in range(self.n)}
        if len(set(moderation.values())) > 1:
            lines.append("resolved moderation differs: " + "; ".join(f"peer {i}: {' '.join(m.split())}" for i, m in moderation.items()))
        return "\n".join(lines)

    def converge(self, since: float, timeout: float) -> tuple[float, str, int, float]:
        """Poll every peer until all digests are equal: (seconds from ``since``, the digest, posts held, the last round's length)."""
        while True:
            began = time.monotonic()
            seen = set()
            for i in range(self.n):
                self._sample(i)
                seen.add(self.digest(i))
                if len(seen) > 1:
                    break
            ended = time.monotonic()
            if len(seen) == 1:
                digest, held = seen.pop()
                return ended - since, digest, held, ended - began
            if ended - since > timeout:
                raise NotConverged(f"digests still differ {ended - since:.1f} s after the reference point: {self._differences()}")
            time.sleep(0.1)


def run_one(n: int, topology: str, *, posts: int, churn: int, apart: float, down: float, seed: int, timeout: float, say) -> dict:
    """One simulation (see the module docstring); its report, every field of :data:`FIELDS`."""
    rng = random.Random(seed)
    edges = edges_of(topology, n, seed)
    side_a, cut, side_b = partition(n, edges)
    with tempfile.TemporaryDirectory(prefix="cablestore-net-") as tmp, Relay(edges) as relay:
        net = Network(Path(tmp), n, edges, relay, say)
        try:
            say(f"{topology} of {n}: starting {n} peers ({len(edges)} edges)")
            started = time.monotonic()
            net.start(list(range(n)))
            start_s, *_ = net.converge(started, timeout)
            say(f"  joined: every digest equal {start_s:.1f} s after the first start")

            plan = _write_plan(net, posts, rng)
            kills_at = set(rng.sample(range(1, len(plan)), min(churn, len(plan) - 1))) if churn else set()
            back: list[tuple[float, int]] = []  # (when, peer) to restart
            kills = moderation = 0
            last_event = time.monotonic()
            for step, argv in enumerate(plan):
                for when, i in [b for b in back if b[0] <= time.monotonic()]:
                    back.remove((when, i))
                    net.start([i])
                    last_event = time.monotonic()
                if step in kills_at and len(net.running()) > 1:
                    victim = rng.choice(net.running())
                    net.stop(victim, signal.SIGKILL)
                    back.append((time.monotonic() + down, victim))
                    kills += 1
                    say(f"  SIGKILL peer {victim}")
                net.write(rng.choice(net.running()), argv)
                moderation += argv[0] != "post"
                last_event = time.monotonic()
                time.sleep(0.1)
            for when, i in sorted(back):
                time.sleep(max(0.0, when - time.monotonic()))
                net.start([i])
                last_event = time.monotonic()
            written = len(plan)
            failures = []
            try:
                after_write, *_ = net.converge(last_event, timeout)
            except NotConverged as exc:  # reported (and the partition still run): what differs is the finding
                after_write = None
                failures.append(f"after the last write: {exc}")
            converged = "NOT converged" if after_write is None else f"every digest equal {after_write:.1f} s after the last write or restart"
            say(f"  {written} writes, {kills} kills: {converged}")

            for i in cut:
                net.stop(i)
            say(f"  partition: peers {cut} stopped between {len(side_a)} and {len(side_b)} peers")
            for side, (name, words) in ((side_a, ("carol", "a")), (side_b, ("alice", "b"))):
                for k in range(max(1, posts // 4)):
                    net.write(rng.choice(side), ["post", "--key", str(net.keys[name]), "text", "general", f"side {words} {k}"])
                    written += 1
            net.write(rng.choice(side_a), ["hide", "--key", str(net.keys["admin"]), net.users["carol"], "--json"])
            net.write(rng.choice(side_b), ["role", "--key", str(net.keys["admin"]), net.users["carol"], "mod", "--json"])
            written, moderation = written + 2, moderation + 2
            time.sleep(apart)
            net.start(cut)
            healed = time.monotonic()
            try:
                after_heal, digest, held, poll = net.converge(healed, timeout)
            except NotConverged as exc:
                after_heal, digest, held, poll = None, None, None, None
                failures.append(f"after the heal: {exc}")
            say(f"  healed: every digest equal {after_heal:.1f} s after the heal" if after_heal is not None else "  healed: NOT converged")
            for i in range(n):
                net._sample(i)
            state = json.loads(net.command(0, ["moderation", str(net.stores[0]), "--json"]))
            mod = {"roles": sum(len(r) for r in state["roles"].values()), "hidden_users": sum(len(h) for h in state["hidden_users"].values()),
                   "blocks": len(state["blocks"]), "dropped_posts": len(state["dropped_posts"])}
            return _report(net, relay.snapshot(), topology=topology, edges=len(edges), cut=len(cut), posts_written=written - moderation,
                           moderation_written=moderation, kills=kills, start_converge_s=start_s, converge_after_last_write_s=after_write,
                           converge_after_heal_s=after_heal, poll_round_s=poll, posts_held=held, moderation_held=mod,
                           digest=digest, not_converged=failures)
        finally:
            net.close()


def _write_plan(net: Network, posts: int, rng: random.Random) -> list[list[str]]:
    """The write phase: ``posts`` text posts by alice, bob and carol, two of the spammer's, and the admin's role, hide and block."""
    key = {name: str(path) for name, path in net.keys.items()}
    plan = [["post", "--key", key[rng.choice(("alice", "bob", "carol"))], "text", "general", f"hello {k}"] for k in range(posts)]
    plan.insert(min(1, len(plan)), ["post", "--key", key["spammer"], "text", "general", "buy now"])
    plan.insert(min(2, len(plan)), ["post", "--key", key["spammer"], "text", "general", "cheap pills"])
    plan.insert(len(plan) // 3, ["role", "--key", key["admin"], net.users["alice"], "mod", "--json"])
    plan.insert(len(plan) // 2, ["hide", "--key", key["admin"], net.users["bob"], "--json"])
    # notify: a block without it is never sent to a plain peer (moderation.md §5.1.4), so it could not travel
    plan.insert(2 * len(plan) // 3, ["block", "--key", key["admin"], "--drop", "--notify", net.users["spammer"], "--json"])
    return plan


def _report(net: Network, wire: dict, **fields) -> dict:
    arrivals = wire["arrivals"]
    delivered = sum(len(set(arrivals.get(i, {})) - net.local[i]) for i in range(net.n))
    received = sum(sum(c.values()) for c in arrivals.values())
    rss = [round(kb / 1024, 1) for kb in net.rss_kb]
    mean_post = wire["post_bytes"] / received if received else 0.0
    per_post = wire["bytes"] / delivered if delivered else 0.0
    out = {
        "peers": net.n, **fields, "delivered_posts": delivered, "wire_bytes": wire["bytes"], "wire_messages": wire["messages"],
        "mean_post_bytes": round(mean_post, 1), "bytes_per_delivered_post": round(per_post, 1),
        "bytes_per_post_size": round(per_post / mean_post, 2) if mean_post else 0.0, "wire_bytes_by_type": wire["by_type"],
        "messages_per_delivered_post": round(wire["messages"] / delivered, 2) if delivered else 0.0,
        "duplicate_deliveries": received - delivered, "duplicates_per_delivered_post": round((received - delivered) / delivered, 3) if delivered else 0.0,
        "peak_rss_mb_max": max(rss), "peak_rss_mb_mean": round(sum(rss) / len(rss), 1), "peak_rss_mb": rss,
    }
    for k in ("start_converge_s", "converge_after_last_write_s", "converge_after_heal_s", "poll_round_s"):
        out[k] = None if out[k] is None else round(out[k], 2)
    return {k: out[k] for k in FIELDS}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.network", description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", default="8,16,32", help="comma-separated network sizes (default: 8,16,32)")
    ap.add_argument("--topologies", default=",".join(TOPOLOGIES), help="comma-separated: line, ring, random (default: all)")
    ap.add_argument("--posts", type=int, default=30, help="text posts in the write phase (default: 30)")
    ap.add_argument("--churn", type=int, default=3, help="peers SIGKILLed (and restarted) during the write phase (default: 3)")
    ap.add_argument("--down", type=float, default=2.0, help="seconds a killed peer stays down (default: 2)")
    ap.add_argument("--apart", type=float, default=3.0, help="seconds the partition lasts after its writes (default: 3)")
    ap.add_argument("--timeout", type=float, default=120.0, help="give up waiting for equal digests after S seconds (default: 120)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the reports as one JSON document")
    ap.add_argument("--chart", type=Path, help="draw convergence time against N to this PNG (needs matplotlib)")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    loud = not args.quiet and sys.stderr.isatty()

    def say(text: str) -> None:
        if loud:
            print(text, file=sys.stderr, flush=True)

    reports = []
    for n in (int(x) for x in args.peers.split(",")):
        for topology in args.topologies.split(","):
            reports.append(run_one(n, topology, posts=args.posts, churn=args.churn, apart=args.apart, down=args.down, seed=args.seed,
                                   timeout=args.timeout, say=say))
            if not args.json:
                print(_row(reports[-1]), flush=True)
    if args.json:
        print(json.dumps({"reports": reports, "cpus": os.cpu_count()}, indent=1))
    if args.chart:
        draw(reports, args.chart)
    return 0


def _row(r: dict) -> str:
    def sec(v):
        return "  not" if v is None else f"{v:5.1f}"

    return (f"{r['topology']:>6} N={r['peers']:<3} cut {r['cut']:<2} after last write {sec(r['converge_after_last_write_s'])} s, "
            f"after heal {sec(r['converge_after_heal_s'])} s; {r['bytes_per_delivered_post']:7.0f} B/post "
            f"({r['bytes_per_post_size']:.2f}x its size), {r['messages_per_delivered_post']:.1f} msgs/post, "
            f"{r['duplicate_deliveries']} duplicates, peak RSS {r['peak_rss_mb_max']:.0f} MB")


def draw(reports: list[dict], path: Path) -> None:
    """Convergence time (from the last write, from the heal) against N, one line per topology."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, 2, figsize=(9, 3.4), dpi=80)
    for panel, key, title in zip(panels, ("converge_after_last_write_s", "converge_after_heal_s"), ("from the last write (churn)", "from the heal"),
                                 strict=True):
        for topology in TOPOLOGIES:
            rows = sorted((r["peers"], r[key]) for r in reports if r["topology"] == topology and r[key] is not None)
            if rows:
                panel.plot([x for x, _ in rows], [y for _, y in rows], marker="o", label=topology)
        panel.set(title=f"every digest equal, {title}", xlabel="peers (N)", ylabel="seconds")
        panel.set_ylim(bottom=0)
        panel.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
