"""What a candidate keyspace costs beside its writes: a reindex's rewrite, and the main queries (benchmarks.keyspace2)."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import plyvel

from benchmarks.keyspace2_rows import Keyspace
from cablestore.keyspace.keys import AUTHOR, CHAT, DELETED, FACTS, LOCAL, META, POSTS, QUARANTINE, REFUSED, STATE, next_prefix

PRIMARY = (POSTS, DELETED, FACTS, META, LOCAL, REFUSED, QUARANTINE)
REINDEX_BATCH = 200_000  # keys a WriteBatch of the bulk reindex holds (rebuild/reindex.py)


def rewrite_derived(path: Path, options: dict, posts: int) -> dict:
    """A reindex's LevelDB work on the compacted DB: delete every derived row, then write them all again.

    The bulk reindex (``cablestore reindex``) drops the old entries and
    writes the new ones in sorted WriteBatches of 200k keys; this does the
    same with the rows the candidate holds, so its cost follows the
    candidate's rows and bytes (the view computation is not in it).
    """
    db = plyvel.DB(str(path), **dict(options, create_if_missing=False))
    try:
        snap = db.snapshot()
        start, cpu0, main0 = time.perf_counter(), time.process_time(), time.thread_time()
        for put in (False, True):
            wb, count = db.write_batch(), 0
            for key, value in snap.iterator():
                if key.startswith(PRIMARY):
                    continue
                if put:
                    wb.put(key, value)
                else:
                    wb.delete(key)
                count += 1
                if count == REINDEX_BATCH:
                    wb.write()
                    wb, count = db.write_batch(), 0
            wb.write()
        wall, main = time.perf_counter() - start, time.thread_time() - main0
        cpu = time.process_time() - cpu0
        snap.close()
    finally:
        db.close()
    return {"seconds_per_post": wall / posts, "main_cpu_us": main * 1e6 / posts, "leveldb_cpu_us": (cpu - main) * 1e6 / posts}


# --- the read paths a candidate changes --------------------------------------------------


def _p50(fn, args_list) -> float:
    times = []
    for args in args_list:
        start = time.perf_counter_ns()
        fn(*args)
        times.append((time.perf_counter_ns() - start) / 1000)
    return statistics.median(times) if times else float("nan")


def latencies(db, ks: Keyspace, sample: dict, calls: int) -> dict:
    """p50 µs of simplified main queries, each spelled in the candidate's keys."""
    rng = random.Random(7)
    channels, authors, hashes = sample["channels"], sample["authors"], sample["hashes"]

    def time_range(ch, start, end):  # newest 50 posts of a channel in [start, end): a reverse scan, a get each
        prefix = ks.key(CHAT + ch)
        lo, hi = prefix + start.to_bytes(8, "big"), prefix + end.to_bytes(8, "big")
        it = db.iterator(start=lo, stop=hi, reverse=True, include_value=False)
        got = [db.get(POSTS + k[-32:]) for _, k in zip(range(50), it, strict=False)]
        it.close()
        return got

    def state(ch):  # members' latest join/leave (a scan, a get each) and the latest topic (a reverse seek)
        prefix = ks.key(STATE + ch + b"l")
        got = [db.get(POSTS + v) for _, v in db.iterator(prefix=prefix)]
        topic = ks.key(STATE + ch + b"t")
        it = db.iterator(start=topic, stop=next_prefix(topic), reverse=True, include_value=False)
        got.append(next(it, None))
        it.close()
        return got

    def author(pk):  # an author's newest 50 text posts
        it = db.iterator(prefix=AUTHOR + pk + b"\x00", reverse=True, include_value=False)
        got = [db.get(POSTS + k[-32:]) for _, k in zip(range(50), it, strict=False)]
        it.close()
        return got

    lo, hi = sample["time"]
    windows = [(rng.choice(channels), t, t + 3_600_000 * 24) for t in (rng.randint(lo, hi) for _ in range(calls))]
    return {
        "chat time range": _p50(time_range, windows),
        "state": _p50(state, [(rng.choice(channels),) for _ in range(calls // 4)]),
        "author": _p50(author, [(rng.choice(authors),) for _ in range(calls // 4)]),
        "rev lookup": _p50(lambda h: ks.rev_fields(db, h), [(h,) for h in hashes[:calls]]),
        "head check": _p50(lambda h: ks.is_head(db, h), [(h,) for h in hashes[:calls]]),
    }


def query_sample(store_path: Path, n: int) -> dict:
    """Channels, authors, stored hashes and the time span to query, from the real store."""
    db = plyvel.DB(str(store_path))
    try:
        rng = random.Random(3)
        hashes = [k[len(POSTS) :] for k in db.iterator(prefix=POSTS, include_value=False)]
        channels = sorted({k[len(STATE) : k.find(b"\x00\x01", len(STATE)) + 2] for k in db.iterator(prefix=STATE, include_value=False)})
        authors = sorted({k[len(AUTHOR) : len(AUTHOR) + 32] for k in db.iterator(prefix=AUTHOR, include_value=False)})
        first = db.iterator(prefix=CHAT + channels[0], include_value=False)
        start = int.from_bytes(next(first)[-40:-32], "big")
        first.close()
    finally:
        db.close()
    return {"hashes": rng.sample(hashes, min(1000, len(hashes))), "channels": channels, "authors": authors, "time": (start, start + n * 2500)}
