"""The set reconciliation algorithm against native listing, on the items of a real store: bytes, round trips, time.

    python -m benchmarks.reconcile_items --posts 100000,1000000

For each size: the deterministic workload is ingested (trusted) into a real
store, and each channel's items are read from it as docs/reconcile.md
defines them (its ``!chat!`` keys, no post decoded, and its channel state
answer; the time this takes is reported: it is what fingerprints kept by
the store would save).  Then for each number of differences k (0, 1, 100,
1,000 and 10 % of the items) k items are taken out at random, half from
each side, and every channel is reconciled in process through
:mod:`cablestore.wire.reconcile` (the initiator against the answering side,
message by message): bytes each way, round trips (the most any channel
needed: channels run side by side), wall time and each side's CPU, and
whether both sides' differences were found exactly.  Beside it, what native
Cable requests list for the same channels: 32 bytes a hash the other side
holds.  The algorithm alone, in process; ``python -m benchmarks.reconcile``
measures sync and serve speaking it over TCP.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import iter_posts
from cablestore.keyspace.keys import mono_hash, mono_timestamp
from cablestore.wire import reconcile as R
from cablestore.wire.codec import decode_post

from .reconcile import each_size
from .sync import _posts

PAGE = 50_000


def channel_items(store: Store, channel: str) -> list[tuple[int, bytes]]:
    """A channel's scope: its time range keys, whole, and its channel state answer, as (timestamp, hash)."""
    out, below = [], None
    while True:
        keys = store.time_range_page(channel, 0, 1 << 63, below, PAGE)
        out += [(mono_timestamp(k), mono_hash(k)) for k in keys]
        if len(keys) < PAGE:
            break
        below = keys[-1]
    for h in store.channel_state_answer(channel):
        buf = store.get(h)
        if buf is not None:
            out.append((decode_post(buf).timestamp, h))
    return out


def _take(items: list, picked: set) -> list:
    return [x for x in items if x[1] not in picked]


def measure(scopes: dict[str, list], k: int, seed: int) -> dict:
    rng = random.Random(seed)
    every = sorted({x[1] for items in scopes.values() for x in items})  # a post/info can be in several scopes
    picked = rng.sample(every, min(k, len(every)))
    only_a, only_b = set(picked[: len(picked) // 2]), set(picked[len(picked) // 2 :])  # A lacks only_b's, B lacks only_a's
    sent = received = rounds = listed = 0
    cpu_a = cpu_b = 0.0
    exact = True
    start = time.perf_counter()
    for items in scopes.values():
        t = time.process_time()
        ini = R.Initiator(R.Items(_take(items, only_b)))
        msg = ini.start()
        cpu_a += time.process_time() - t
        t = time.process_time()
        other = R.Items(_take(items, only_a))
        listed += len(other)
        cpu_b += time.process_time() - t
        while msg is not None:
            t = time.process_time()
            answer = R.respond(other, msg)
            cpu_b += time.process_time() - t
            t = time.process_time()
            msg = ini.receive(answer)
            cpu_a += time.process_time() - t
        hashes = {x[1] for x in items}
        exact = exact and ini.have == only_a & hashes and ini.need == only_b & hashes
        sent, received, rounds = sent + ini.sent, received + ini.received, max(rounds, ini.rounds)
    native = 32 * listed  # native requests list every hash the answering side holds, channel by channel
    return {
        "differences": len(picked), "round_trips": rounds, "bytes_sent": sent, "bytes_received": received,
        "native_listing_bytes": native, "over_native": round((sent + received) / native, 5) if native else None,
        "wall_s": round(time.perf_counter() - start, 2), "initiator_cpu_s": round(cpu_a, 2), "answering_cpu_s": round(cpu_b, 2),
        "exact": exact,
    }


def run(size: int, out: Path, seed: int) -> dict:
    posts_file = _posts(out, size, seed)
    work = Path(tempfile.mkdtemp(prefix="cablestore-reconcile-", dir=out))
    try:
        with Store(work / "store", verify_signatures=False) as store:
            for batch in iter_posts(posts_file, 1000):
                store.ingest_many(batch)
            start = time.perf_counter()
            scopes = {ch: channel_items(store, ch) for ch in store.channel_list()}
            read_s = time.perf_counter() - start
        n = sum(len(v) for v in scopes.values())
        rows = [measure(scopes, k, seed) for k in (0, 1, 100, 1000, n // 10)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"posts": size, "channels": len(scopes), "items": n, "items_read_s": round(read_s, 2), "rows": rows}


def main(argv=None) -> int:
    results = each_size(__doc__, run, "reconcile_items", argv)  # (its own file: benchmarks.reconcile writes reconcile.json)
    return 0 if all(r["exact"] for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
