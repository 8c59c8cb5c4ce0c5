"""Issue 38, step 1: the candidate keyspaces written beside today's, measured in one run.

    python -m benchmarks.keyspace2 --posts 100000,1000000

For each size, a real Store ingests the workload's posts (trusted, batches
of 1,000, as ``python -m benchmarks`` does) while every WriteBatch it
commits and every LevelDB read it makes are recorded to a file.  Then each
candidate of :mod:`benchmarks.keyspace2_rows` (today's keyspace first: the
exact replay of the store's rows) turns each batch's rows and reads into
its own, and a fresh LevelDB with the store's options gets them, batch by
batch: the reads first, then one WriteBatch.  Measured per candidate: rows
and key+value bytes a post, LevelDB's compaction bytes (``leveldb.stats``),
the CPU a post of the writing thread (its reads and writes only: the
transform is not timed) and of LevelDB's own threads, the DB work's
flatness (last 50k posts / first 50k), the disk after a full compaction,
and query p50s on the compacted DB.  The store's own figures are
"modeled": the real ingest's, with the baseline replay's DB work swapped
for the candidate's.  Compare within one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import msgpack
import plyvel

from benchmarks.keyspace2_reads import latencies, query_sample, rewrite_derived
from benchmarks.keyspace2_rows import Keyspace, candidates, combination
from cablestore.keyspace.keys import next_prefix
from cablestore.store import opening

NOW = 1_900_000_000_000
BATCH = 1000  # ``python -m benchmarks`` ingests in batches of 1,000 (run.py)


def store_options(**override) -> dict:
    """The options ``cablestore.store.opening`` opens a store with (``_plyvel_open``), for a fresh DB."""
    options = dict(
        create_if_missing=True,
        paranoid_checks=True,
        lru_cache_size=opening.DEFAULT_CACHE_MB << 20,
        write_buffer_size=64 << 20,
        bloom_filter_bits=10,
        block_size=opening.BLOCK_SIZE,
        max_file_size=opening.MAX_FILE_SIZE,
    )
    options.update(override)
    return options


def stretch_of(n: int) -> int:
    """Posts in the first and the last stretch compared for flatness: 50k, or half of a smaller run."""
    return min(50_000, max(1, n // 2))


def _flatness(marks: list, n: int) -> float:
    """Rate of the last stretch over the first, from ``marks`` = [(posts done, seconds so far)]."""
    k = stretch_of(n)
    first = next((s for p, s in marks if p >= k), marks[-1][1])
    before_last = max((s for p, s in marks if p <= n - k), default=0.0)
    last = marks[-1][1] - before_last
    return first / last if last > 0 else float("nan")


# --- recording a real store's ingest --------------------------------------------------


class _RecordingDB:
    """The DB a Txn reads, each ``get`` recorded."""

    def __init__(self, db, reads: list):
        self._db, self._reads = db, reads

    def get(self, key, *args, **kw):
        self._reads.append(("get", key))
        return self._db.get(key, *args, **kw)

    def __getattr__(self, name):
        return getattr(self._db, name)


def record(posts_file: Path, store_path: Path, stream_path: Path, n: int) -> dict:
    """Trusted ingest of the posts by a real Store; every batch's reads and writes go to ``stream_path``."""
    from cablestore import Store
    from cablestore.authoring.workload import iter_posts
    from cablestore.store import txn as txn_mod

    reads: list = []
    writes: list = []
    txn_init, txn_commit = txn_mod.Txn.__init__, txn_mod.Txn.commit
    txn_scan, txn_last = txn_mod.Txn.scan, txn_mod.Txn.last_candidate

    def init(self, db, *args, **kw):
        txn_init(self, _RecordingDB(db, reads), *args, **kw)

    def commit(self, sync=False):
        writes.extend(self.writes.items())
        txn_commit(self, sync)

    def scan(self, prefix):
        reads.append(("scan", prefix))
        return txn_scan(self, prefix)

    def last(self, prefix, skip=frozenset()):
        reads.append(("last", prefix))
        return txn_last(self, prefix, skip)

    shutil.rmtree(store_path, ignore_errors=True)
    marks, recording_cpu, done = [], 0.0, 0
    txn_mod.Txn.__init__, txn_mod.Txn.commit, txn_mod.Txn.scan, txn_mod.Txn.last_candidate = init, commit, scan, last
    try:
        with open(stream_path, "wb") as out, Store(store_path, verify_signatures=False, now=lambda: NOW) as store:
            preamble = sorted(store.db.iterator())  # what opening wrote (the format key)
            out.write(msgpack.packb([0, [], preamble]))
            start, cpu0, main0 = time.perf_counter(), time.process_time(), time.thread_time()
            for chunk in iter_posts(posts_file, BATCH):
                store.ingest_many(chunk)
                done += len(chunk)
                t0 = time.thread_time()
                out.write(msgpack.packb([len(chunk), reads, sorted(writes, key=lambda kv: kv[0])]))
                reads.clear()
                writes.clear()
                recording_cpu += time.thread_time() - t0
                marks.append((done, time.perf_counter() - start - recording_cpu))
            seconds = time.perf_counter() - start - recording_cpu
            main = time.thread_time() - main0 - recording_cpu
            leveldb = time.process_time() - cpu0 - recording_cpu - main
            stats = store.db.get_property(b"leveldb.stats").decode()
    finally:
        txn_mod.Txn.__init__, txn_mod.Txn.commit, txn_mod.Txn.scan, txn_mod.Txn.last_candidate = txn_init, txn_commit, txn_scan, txn_last
    reindexed = timed_reindex(store_path, done)
    return {
        "reindex": reindexed,
        "posts": done,
        "seconds": seconds,
        "marks": marks,
        "indexing_cpu_us": main * 1e6 / done,
        "leveldb_cpu_us": leveldb * 1e6 / done,
        "flatness": _flatness(marks, done),
        "compaction_mb": compaction_mb(stats),
    }


def timed_reindex(store_path: Path, posts: int) -> dict:
    """``cablestore reindex`` of the compacted store (as docs/performance.md measures it): seconds and CPU a post."""
    from cablestore import Store
    from cablestore.rebuild.reindex import reindex

    with Store(store_path, now=lambda: NOW) as store:
        store.db.compact_range()
        start, cpu0, main0 = time.perf_counter(), time.process_time(), time.thread_time()
        report = reindex(store)
        wall, main, cpu = time.perf_counter() - start, time.thread_time() - main0, time.process_time() - cpu0
    per = 1e6 / report.posts
    return {"posts": report.posts, "rate": report.posts / wall, "seconds_per_post": wall / report.posts, "cpu_us": cpu * per, "main_cpu_us": main * per}


def stream(stream_path: Path):
    """``(posts, reads, writes)`` of each recorded batch; the first is the preamble (0 posts)."""
    with open(stream_path, "rb") as f:
        yield from msgpack.Unpacker(f, use_list=False, raw=False)


def compaction_mb(stats: str) -> tuple[float, float]:
    """(read MB, written MB) of LevelDB's compactions, summed over its levels (``leveldb.stats``)."""
    read = written = 0.0
    for line in stats.splitlines():
        cells = line.split()
        if len(cells) == 6 and cells[0].isdigit():
            read += float(cells[4])
            written += float(cells[5])
    return read, written


# --- replaying a candidate -----------------------------------------------------------


def _do_reads(db, it, reads) -> None:
    for op, key, *more in reads:
        if op == "get":
            db.get(key)
        elif op == "last":
            it.seek(next_prefix(key))
            try:
                it.prev()
            except StopIteration:
                pass
        elif op == "scan":
            it.seek(key)
            for k, _ in it:
                if not k.startswith(key):
                    break
        else:  # "walk": back through the rows under ``key`` until one whose value is ``more[0]``
            it.seek(next_prefix(key))
            while True:
                try:
                    k, v = it.prev()
                except StopIteration:
                    break
                if not k.startswith(key) or v == more[0]:
                    break


def replay(ks: Keyspace, stream_path: Path, db_path: Path, queries: int, sample: dict | None, keep: bool = False) -> dict:
    """Write the candidate's rows of every recorded batch to a fresh LevelDB at ``db_path``, measured.

    ``sample`` None: no queries; ``keep``: leave the DB (compacted) at ``db_path``.
    """
    from .profile import _write_family

    shutil.rmtree(db_path, ignore_errors=True)
    families: Counter = Counter()
    options = store_options(**ks.options)
    db = plyvel.DB(str(db_path), **options)
    rows = nbytes = posts = 0
    writer = 0.0
    marks = []
    cpu0, main0 = time.process_time(), time.thread_time()
    for count, reads, writes in stream(stream_path):
        mine_reads = ks.reads(reads)
        mine = ks.rows(writes)
        rows += len(mine) if count else 0
        if ks.name == "today" and count:
            families.update(_write_family(k) + (" delete" if v is None else "") for k, v in mine)
        nbytes += sum(len(k) + (len(v) if v is not None else 0) for k, v in mine) if count else 0
        t0, w0 = time.thread_time(), time.perf_counter()
        it = db.iterator()
        _do_reads(db, it, mine_reads)
        it.close()
        with db.write_batch() as wb:
            for k, v in mine:
                if v is None:
                    wb.delete(k)
                else:
                    wb.put(k, v)
        writer += time.thread_time() - t0
        posts += count
        wall = time.perf_counter() - w0
        marks.append((posts, (marks[-1][1] if marks else 0.0) + wall))
    leveldb = time.process_time() - cpu0 - (time.thread_time() - main0)
    stats = db.get_property(b"leveldb.stats").decode()
    db.close()
    disk = compacted_bytes(db_path, options)
    rewrite = rewrite_derived(db_path, options, posts) if sample is not None else {}
    lat = {}
    if sample is not None:
        db = plyvel.DB(str(db_path), **dict(options, create_if_missing=False))
        try:
            lat = latencies(db, ks, sample, queries)
        finally:
            db.close()
    if not keep:
        shutil.rmtree(db_path, ignore_errors=True)
    marks = [m for m in marks if m[0] > 0]
    return {
        "name": ks.name,
        "what": ks.what,
        "rows_per_post": rows / posts,
        "bytes_per_post": nbytes / posts,
        "writer_cpu_us": writer * 1e6 / posts,
        "leveldb_cpu_us": leveldb * 1e6 / posts,
        "db_flatness": _flatness(marks, posts),
        "db_marks": marks,
        "compaction_mb": compaction_mb(stats),
        "disk_per_post": disk / posts,
        "latency_p50_us": lat,
        "reindex_proxy": rewrite,
        "families_per_post": {f: c / posts for f, c in families.most_common()},
    }


def compacted_bytes(path: Path, options: dict) -> int:
    db = plyvel.DB(str(path), **dict(options, create_if_missing=False))  # a reopen turns the log into a table
    db.compact_range()
    db.close()
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file() and f.suffix in (".ldb", ".sst", ".log"))


# --- one size, and the table ------------------------------------------------------------


def modeled(real: dict, base: dict, cand: dict) -> dict:
    """The store's figures with the baseline replay's DB work swapped for the candidate's."""
    indexing = real["indexing_cpu_us"] - base["writer_cpu_us"] + cand["writer_cpu_us"]
    leveldb = real["leveldb_cpu_us"] * (cand["leveldb_cpu_us"] / base["leveldb_cpu_us"] if base["leveldb_cpu_us"] > 0 else 1.0)
    n = real["posts"]
    k = stretch_of(n)

    def stretch_seconds(marks, first: bool) -> float:
        if first:
            return next((s for p, s in marks if p >= k), marks[-1][1])
        return marks[-1][1] - max((s for p, s in marks if p <= n - k), default=0.0)

    flat = []
    for first in (True, False):
        flat.append(stretch_seconds(real["marks"], first) - stretch_seconds(base["db_marks"], first) + stretch_seconds(cand["db_marks"], first))
    out = {"indexing_cpu_us": indexing, "leveldb_cpu_us": leveldb, "cpu_us": indexing + leveldb, "flatness": flat[0] / flat[1]}
    rb, rc, ri = base.get("reindex_proxy"), cand.get("reindex_proxy"), real["reindex"]
    if rb and rc:
        # The reindex's CPU a stored post with the baseline's rewrite swapped for the candidate's, and its rate
        # scaled by that CPU (the wall time of one reindex on a loaded machine says less than its CPU).
        def rewrite(r):
            return (r["main_cpu_us"] + r["leveldb_cpu_us"]) * n / ri["posts"]

        out["reindex_cpu_us"] = ri["cpu_us"] - rewrite(rb) + rewrite(rc)
        out["reindex_rate"] = ri["rate"] * ri["cpu_us"] / out["reindex_cpu_us"]
    return out


def run_size(n: int, out: Path, queries: int, only: set | None = None) -> dict:
    from .profile import _posts_file

    posts_file = _posts_file(out, n, 1)
    store_path, stream_path = out / f"ks2-store-{n}.ldb", out / f"ks2-stream-{n}.bin"
    real = record(posts_file, store_path, stream_path, n)
    real["load"] = os.getloadavg()
    sample = query_sample(store_path, n)
    results = []

    def measure(ks):
        result = replay(ks, stream_path, out / "ks2-replay.ldb", queries, sample)
        result["load"] = os.getloadavg()
        results.append(result)
        result["modeled"] = modeled(real, results[0], result)
        print(f"  {n:,}: {ks.name}: {_brief(result)}", flush=True)
        # Kept as it goes: a 1M run takes an hour on a loaded machine, and a stopped one keeps what it measured.
        (out / f"keyspace2-{n}-partial.json").write_text(json.dumps({"posts": n, "real": real, "candidates": results}, default=str))

    singles = candidates()
    for ks in singles:
        if only is None or ks.name.split(":")[0] in only | {"today"}:
            measure(ks)
    letter = {r["name"].split(":")[0]: r for r in results}
    if only is None or "g" in only:
        cost = {k: r["modeled"]["cpu_us"] for k, r in letter.items()}
        options = {ks.name.split(":")[0]: ks.options for ks in singles if ks.options}
        measure(combination(cost, options))
    stream_path.unlink()
    (out / f"keyspace2-{n}-partial.json").unlink()
    shutil.rmtree(store_path, ignore_errors=True)
    return {"posts": n, "real": real, "candidates": results}


def _brief(r: dict) -> str:
    return (
        f"{r['rows_per_post']:.2f} rows {r['bytes_per_post']:.0f} B, writer {r['writer_cpu_us']:.1f} µs, "
        f"leveldb {r['leveldb_cpu_us']:.1f} µs, compaction r/w {r['compaction_mb'][0]:.0f}/{r['compaction_mb'][1]:.0f} MB, "
        f"disk {r['disk_per_post']:.0f} B, load {r['load'][0]:.1f}"
    )


def markdown(size: dict) -> str:
    real, rows = size["real"], size["candidates"]
    base = rows[0]
    lines = [
        f"{size['posts']:,} posts. Real store, trusted ingest: indexing thread {real['indexing_cpu_us']:.1f} µs a post, "
        f"LevelDB's threads {real['leveldb_cpu_us']:.1f} µs, last / first {stretch_of(size['posts']) // 1000}k {real['flatness']:.2f}, "
        f"compaction read / written {real['compaction_mb'][0]:.0f} / {real['compaction_mb'][1]:.0f} MB; "
        f"reindex of the compacted store {real['reindex']['rate']:,.0f} posts/s, {real['reindex']['cpu_us']:.1f} µs of CPU a post; load {real['load'][0]:.2f}",
        "",
        "| candidate | rows / post | key+value B / post | writer CPU µs / post | LevelDB CPU µs / post | compaction read / written MB "
        "| DB-work last / first | disk B / post | reindex rewrite CPU µs / post | modeled store CPU µs / post (gain) "
        "| modeled last / first (gain) | modeled reindex CPU µs / post, rate /s (gain) | p50 µs: time range, state, author, rev lookup, head check | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, mb = r["modeled"], base["modeled"]
        lat = ", ".join(f"{v:.0f}" for v in r["latency_p50_us"].values())
        rw = r["reindex_proxy"]
        rewrite = f"{rw['main_cpu_us'] + rw['leveldb_cpu_us']:.1f}" if rw else "-"
        reindex = "-"
        if "reindex_rate" in m:
            reindex = f"{m['reindex_cpu_us']:.1f}, {m['reindex_rate']:,.0f} ({m['reindex_rate'] / mb['reindex_rate'] - 1:+.0%})"
        lines.append(
            f"| {r['name']} | {r['rows_per_post']:.2f} | {r['bytes_per_post']:.0f} | {r['writer_cpu_us']:.1f} | {r['leveldb_cpu_us']:.1f} "
            f"| {r['compaction_mb'][0]:.0f} / {r['compaction_mb'][1]:.0f} | {r['db_flatness']:.2f} | {r['disk_per_post']:.0f} | {rewrite} "
            f"| {m['cpu_us']:.1f} ({1 - m['cpu_us'] / mb['cpu_us']:+.0%}) | {m['flatness']:.2f} ({m['flatness'] / mb['flatness'] - 1:+.0%}) "
            f"| {reindex} | {lat} | {r['load'][0]:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.keyspace2", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", default="100000", help="comma-separated sizes")
    parser.add_argument("--out", default="bench-results", help="directory for posts, stores and results")
    parser.add_argument("--queries", type=int, default=1000, help="calls a query is timed over")
    parser.add_argument("--table", default="", help="print the tables of a keyspace2.json again (modeled anew), run nothing")
    parser.add_argument("--only", default="", help="comma-separated candidate letters (a,b,...,g); today's always runs")
    args = parser.parse_args(argv)
    if args.table:
        for size in json.loads(Path(args.table).read_text()):
            for r in size["candidates"]:
                r["modeled"] = modeled(size["real"], size["candidates"][0], r)
            print(markdown(size) + "\n")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    sizes = []
    for n in (int(s) for s in args.posts.split(",")):
        print(f"{n:,} posts (load {os.getloadavg()[0]:.2f})", flush=True)
        sizes.append(run_size(n, out, args.queries, only))
        print(markdown(sizes[-1]), flush=True)
    (out / "keyspace2.json").write_text(json.dumps(sizes, indent=1, default=str))
    (out / "keyspace2.md").write_text("\n\n".join(markdown(s) for s in sizes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
