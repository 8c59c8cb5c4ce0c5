"""What search costs and how fast it answers: ``Store.search`` at 100k and 1M posts of chat text.

    python -m benchmarks.search --posts 100000,1000000

For each size, the same posts (signed once, kept in ``--dir``) are ingested
in one run, trusted (``verify_signatures=False``, batches of 1,000, so the
figure is the indexing alone), into a store without search and into one
with ``search=True``, alternating for ``--rounds`` rounds (the best of
each kept: the machine is shared).  Reported: each ingest's µs/post and
their ratio, and each store's bytes on disk after a full compaction and
their ratio.  Then queries on the searchable store, first page,
``limit=50``: two words, a phrase, a prefix and a CJK substring, each kind
over 50 different queries, one untimed round (the block cache warm, as a
serving peer's is) then four timed rounds (200 timings): p50 and p99 in ms
of wall-clock time, and of the searching thread's CPU time (what the wall
clock would read on an idle machine: the data is in the page cache, and a
busy shared machine stretches wall times by its run queue).  ``--fts5`` also feeds the
same index terms (``cablestore.search.index_terms``) to a contentless SQLite
FTS5 table (it ships with Python) and reports its µs/post, bytes and the
same queries' p50/p99, the alternative engine the design was measured
against.

The text is chat-like: a Zipf vocabulary of 30,000 words (a few hundred
common ones carry most of it), 1 to 30 words a message, fixed phrases
("deploy failed", "merge request"), words sharing prefixes (deploy,
deployed, deploying, deployment), punctuation tokens (``C++20``,
``v1.2.3``, ``#general``, URLs) in 5% of messages, and 5% Chinese or
Japanese messages (no spaces).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import time
from pathlib import Path

NOW = 1_900_000_000_000
START = 1_700_000_000_000
_SYLLABLES = "ba be bi bo bu da de di do du ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo vu".split()
_COMMON = (
    "the a to and i you it is that of in for on this be with we are have not but so just like what can do if at "
    "was it's know think will get there one all they my me about yeah ok lol no yes how up out when then now"
).split()
_PREFIXED = ("deploy", "deployed", "deploying", "deployment", "deploys", "config", "configure", "configured", "release", "released", "releases")
_PHRASES = ("deploy failed", "merge request", "build is green", "code review", "release notes")
_PUNCT = ("C++20", "v1.2.3", "#general", "https://example.com/docs/search", "node.js", "e-mail", "foo@example.org", "3.14", "c#", "v2.0.0-rc1")
_CJK = "日本語中文搜索消息部署失败发布版本服务器数据库用户频道管理员问题解决方案测试代码审查合并请求今天明天会议时间项目计划"


def vocabulary(n: int, rng: random.Random) -> list[str]:
    words, seen = list(_COMMON), set(_COMMON)
    while len(words) < n:
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class Chat:
    """Chat-like messages: Zipf words, phrases, prefixes, punctuation tokens, CJK."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(30_000, self.rng)
        weights = [1 / (i + 1) ** 1.05 for i in range(len(self.words))]
        total = sum(weights)
        self.cum = []
        acc = 0.0
        for w in weights:
            acc += w / total
            self.cum.append(acc)

    def word(self) -> str:
        import bisect

        return self.words[min(bisect.bisect(self.cum, self.rng.random()), len(self.words) - 1)]

    def message(self) -> str:
        r = self.rng.random()
        if r < 0.05:
            return "".join(self.rng.choice(_CJK) for _ in range(self.rng.randint(4, 30)))
        words = [self.word() for _ in range(self.rng.randint(1, 30))]
        if r < 0.10:
            words.insert(self.rng.randrange(len(words) + 1), self.rng.choice(_PUNCT))
        elif r < 0.13:
            words.insert(self.rng.randrange(len(words) + 1), self.rng.choice(_PHRASES))
        elif r < 0.16:
            words.insert(self.rng.randrange(len(words) + 1), self.rng.choice(_PREFIXED))
        return " ".join(words)[:1000]


def make_posts(n: int, path: Path, seed: int = 1) -> None:
    """``n`` signed post/texts (50 authors, 8 channels, increasing timestamps) in the posts-file format."""
    from cablestore.authoring.workload import write_posts
    from cablestore.wire.codec import TEXT
    from cablestore.wire.crypto import Keypair, make_post

    chat = Chat(seed)
    keys = [Keypair.from_seed(bytes([i + 1]) * 32) for i in range(50)]
    channels = ("general", "dev", "random", "help", "news", "ops", "日本", "café")

    def gen():
        for i in range(n):
            buf, _ = make_post(keys[chat.rng.randrange(50)], TEXT, START + i * 50, channel=chat.rng.choice(channels), text=chat.message())
            yield buf

    write_posts(path, gen())


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ingest(posts_file: Path, store_path: Path, search: bool) -> tuple[float, int]:
    """``(µs per post, bytes after compaction)`` of a trusted ingest into a fresh store."""
    from cablestore import Store
    from cablestore.authoring.workload import iter_posts

    shutil.rmtree(store_path, ignore_errors=True)
    chunks = list(iter_posts(posts_file, 1000))
    n = sum(map(len, chunks))
    with Store(store_path, verify_signatures=False, now=lambda: NOW, search=search) as store:
        start = time.perf_counter()
        for chunk in chunks:
            store.ingest_many(chunk, now=NOW)
        took = time.perf_counter() - start
        store.db.compact_range()
    return took / n * 1e6, _bytes(store_path)


def queries(store_path: Path, seed: int = 2) -> dict[str, list[str]]:
    """50 queries of each kind, from words the store holds."""
    chat = Chat(1)  # the same vocabulary as the posts
    rng = random.Random(seed)
    mid = chat.words[20:400]
    out = {
        "two words": [f"{rng.choice(mid)} {rng.choice(chat.words[:60])}" for _ in range(50)],
        "phrase": [f'"{rng.choice(_PHRASES)}"' if i % 2 else f'"{rng.choice(chat.words[:40])} {rng.choice(chat.words[:40])}"' for i in range(50)],
        "prefix": [rng.choice(("depl*", "config*", "relea*")) if i % 2 else rng.choice(mid)[:3] + "*" for i in range(50)],
        "CJK substring": [_CJK[j : j + 2] for j in (rng.randrange(len(_CJK) - 1) for _ in range(50))],
    }
    return out


def _pct(times: list[float], p: float) -> float:
    times = sorted(times)
    return times[min(len(times) - 1, int(p * len(times)))] * 1000


def time_queries(store_path: Path, kinds: dict[str, list[str]], rounds: int = 4) -> dict[str, dict]:
    from cablestore import Store
    from cablestore.errors import QueryError

    out = {}
    with Store(store_path, create=False, readonly=True) as store:
        for kind, qs in kinds.items():
            times, cpu, hits, refused = [], [], [], 0
            for q in qs:  # untimed: a warm block cache
                try:
                    store.search(q, limit=50)
                except QueryError:
                    pass
            for _ in range(rounds):
                for q in qs:
                    start, start_cpu = time.perf_counter(), time.thread_time()
                    try:
                        page = store.search(q, limit=50)
                    except QueryError:
                        refused += 1
                        continue
                    cpu.append(time.thread_time() - start_cpu)
                    times.append(time.perf_counter() - start)
                    hits.append(len(page))
            out[kind] = {
                "p50_ms": round(_pct(times, 0.5), 3),
                "p99_ms": round(_pct(times, 0.99), 3),
                "cpu_p50_ms": round(_pct(cpu, 0.5), 3),
                "cpu_p99_ms": round(_pct(cpu, 0.99), 3),
                "mean_hits": round(statistics.mean(hits or [0]), 1),
                "refused": refused,
            }
    return out


def fts5(posts_file: Path, db_path: Path, kinds: dict[str, list[str]], rounds: int = 4) -> dict:
    """The same index terms in a contentless SQLite FTS5 table: µs/post, bytes, query p50/p99."""
    from cablestore.authoring.workload import iter_posts
    from cablestore.search import index_terms, normalize, parse
    from cablestore.wire.codec import decode_post

    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(db_path) + suffix).unlink(missing_ok=True)
    con = sqlite3.connect(db_path)
    # Each term one token: the terms are fed as they are and separated by spaces only.
    con.execute("CREATE VIRTUAL TABLE fts USING fts5(terms, content='', tokenize=\"unicode61 separators ' ' tokenchars '+.#/:@-_!?'\")")
    chunks = list(iter_posts(posts_file, 1000))
    texts = [[" ".join(sorted(index_terms(decode_post(b).text))) for b in chunk] for chunk in chunks]
    n, row = sum(map(len, chunks)), 0
    start = time.perf_counter()
    for chunk in texts:
        with con:
            con.executemany("INSERT INTO fts(rowid, terms) VALUES (?, ?)", ((row + i, t) for i, t in enumerate(chunk)))
        row += len(chunk)
    took = time.perf_counter() - start
    size = sum(Path(str(db_path) + s).stat().st_size for s in ("", "-wal") if Path(str(db_path) + s).exists())

    def match_of(q: str) -> str:
        parsed = parse(q)
        parts = []
        for alternatives in parsed.lookups:
            alts = ['"' + lk.term.replace('"', '""') + '"' + ("*" if lk.prefix else "") for lk in alternatives]
            parts.append("(" + " OR ".join(alts) + ")")
        if q.startswith('"'):
            return '"' + normalize(q.strip('"')).replace('"', '""') + '"'
        return " AND ".join(parts)

    out = {"us_per_post": round(took / n * 1e6, 1), "bytes": size}
    for kind, qs in kinds.items():
        times = []
        for _ in range(rounds):
            for q in qs:
                m = match_of(q)
                t = time.perf_counter()
                con.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT 50", (m,)).fetchall()
                times.append(time.perf_counter() - t)
        out[kind] = {"p50_ms": round(_pct(times, 0.5), 3), "p99_ms": round(_pct(times, 0.99), 3)}
    con.close()
    return out


def run(n: int, work: Path, with_fts5: bool, rounds: int = 2, queries_only: bool = False) -> dict:
    if queries_only:  # the searchable store an earlier run left: time the queries again
        return {"posts": n, "queries": time_queries(work / f"search-{n}.ldb", queries(work / f"search-{n}.ldb"))}
    posts_file = work / f"search-{n}.posts"
    if not posts_file.exists():
        make_posts(n, posts_file)
    best: dict = {}
    for i in range(rounds):
        for search in (False, True) if i % 2 == 0 else (True, False):
            us, size = ingest(posts_file, work / f"{'search' if search else 'plain'}-{n}.ldb", search=search)
            best[search] = min(best.get(search, (us, size)), (us, size))
    shutil.rmtree(work / f"plain-{n}.ldb", ignore_errors=True)
    (plain_us, plain_bytes), (search_us, search_bytes) = best[False], best[True]
    kinds = queries(work / f"search-{n}.ldb")
    result = {
        "posts": n,
        "ingest_us_per_post": {"without search": round(plain_us, 1), "with search": round(search_us, 1)},
        "ingest_ratio": round(plain_us / search_us, 3),  # ingest rate with search / without
        "bytes": {"without search": plain_bytes, "with search": search_bytes},
        "disk_ratio": round(search_bytes / plain_bytes, 3),
        "queries": time_queries(work / f"search-{n}.ldb", kinds),
    }
    if with_fts5:
        result["fts5"] = fts5(posts_file, work / f"fts5-{n}.sqlite", kinds)
        result["fts5"]["disk_ratio_with_store"] = round((plain_bytes + result["fts5"]["bytes"]) / plain_bytes, 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", default="100000,1000000", help="comma-separated store sizes (default: 100000,1000000)")
    parser.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp") + "/cablestore-bench-search", help="where posts files and stores go")
    parser.add_argument("--fts5", action="store_true", help="also measure a contentless SQLite FTS5 table fed the same terms")
    parser.add_argument("--rounds", type=int, default=2, help="alternating ingest rounds, with and without search (default: 2; the best of each)")
    parser.add_argument("--queries-only", action="store_true", help="only time the queries, on the searchable stores an earlier run left in --dir")
    args = parser.parse_args(argv)
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    for n in (int(x) for x in args.posts.split(",")):
        print(json.dumps(run(n, work, args.fts5, args.rounds, args.queries_only), ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
