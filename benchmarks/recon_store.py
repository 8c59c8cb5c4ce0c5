"""Set reconciliation between two real stores, each side answered from its range sums (``Store.range_items``).

    python -m benchmarks.recon_store --posts 100000 --ks 0,1,100,1000

One store of the deterministic workload is ingested (trusted); for each k,
two copies of it lose k posts at random, half from each (``Store.delete``,
which takes them out of the sums too), and every channel is reconciled in
process through :mod:`cablestore.wire.reconcile`, both sides reading
:class:`cablestore.store.read.ranges.StoreItems` (LevelDB rows, no item
list in memory).  Reported: round trips (the most any channel needed),
reconciliation bytes both ways, LevelDB rows read on each side, wall time
and CPU, whether every difference was found; beside it, the wall time of
reading every channel's items whole (what an in-memory side reads first).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import Workload, iter_posts, write_posts
from cablestore.keyspace.keys import CHAT, channel_key
from cablestore.wire import reconcile as R


def _items(store: Store, channel: str) -> set[bytes]:
    return {k[-32:] for k, _ in store.items(CHAT + channel_key(channel))}


def measure(a: Store, b: Store, channels: list[str]) -> dict:
    out = {"rounds": 0, "bytes": 0, "rows_initiator": 0, "rows_responder": 0, "exact": True, "wall_s": 0.0, "cpu_s": 0.0}
    for channel in channels:
        wall, cpu = time.perf_counter(), time.process_time()
        with a.range_items(channel) as mine, b.range_items(channel) as theirs:
            side = R.Initiator(mine)
            message = side.start()
            while message is not None:
                message = side.receive(R.respond(theirs, message))
            out["rounds"] = max(out["rounds"], side.rounds)
            out["bytes"] += side.sent + side.received
            out["rows_initiator"] += mine.reads
            out["rows_responder"] += theirs.reads
        out["wall_s"] += time.perf_counter() - wall
        out["cpu_s"] += time.process_time() - cpu
        ours, others = _items(a, channel), _items(b, channel)
        out["exact"] &= (side.have, side.need) == (ours - others, others - ours)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=100000)
    parser.add_argument("--ks", default="0,1,100,1000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recon-store-"))
    results = {"posts": args.posts, "runs": {}}
    try:
        posts_file = work / "posts.bin"
        write_posts(posts_file, Workload(args.seed, args.posts))
        with Store(work / "base", verify_signatures=False) as base:
            for batch in iter_posts(posts_file, 5000):
                base.ingest_many(batch)
            channels = base.channel_list()
            hashes = [k[-32:] for k, _ in base.items(CHAT)]
            start = time.perf_counter()
            for channel in channels:
                _items(base, channel)
            results["read_every_item_s"] = time.perf_counter() - start
            results["items"] = len(hashes)
        rng = random.Random(args.seed)
        for k in [int(x) for x in args.ks.split(",")]:
            for name in ("a", "b"):
                shutil.rmtree(work / name, ignore_errors=True)
                shutil.copytree(work / "base", work / name)
            picked = rng.sample(hashes, k)
            with Store(work / "a") as a, Store(work / "b") as b:
                for i, h in enumerate(picked):
                    (a if i % 2 else b).delete(h)
                results["runs"][k] = measure(a, b, channels)
            r = results["runs"][k]
            print(
                f"{args.posts:,} posts, k={k}: {r['rounds']} round trips, {r['bytes']:,} bytes, rows read {r['rows_initiator']:,} / {r['rows_responder']:,}, "
                f"{r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, exact: {r['exact']}",
                flush=True,
            )
        print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
