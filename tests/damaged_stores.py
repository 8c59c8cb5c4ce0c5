"""Stores the recovery tests damage: one that crashed with its posts in the write-ahead log, one of closed tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import generate

NOW = 1_900_000_000_000
ROOT = Path(__file__).resolve().parent.parent

# Ingest in small batches, then die without closing: the posts stay in the write-ahead log.
CRASH_AFTER_INGEST = """
import os, sys
from cablestore import Store
from cablestore.authoring.workload import generate
store = Store(sys.argv[1], now=lambda: {now}, verify_signatures=False)
posts = generate(seed=3, posts=400)
for i in range(0, 400, 4):
    store.ingest_many(posts[i : i + 4])
os._exit(0)
"""


def crashed_store(path: Path) -> Path:
    """A store killed after 400 posts (none closed into tables); its write-ahead log."""
    code = CRASH_AFTER_INGEST.format(now=NOW)
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120, cwd=ROOT)
    [log] = [f for f in path.iterdir() if f.suffix == ".log" and f.stat().st_size]
    return log


def stored(path) -> set[bytes]:
    """The post hashes a store holds."""
    with Store(path, create=False) as s:
        return {k[6:] for k, _ in s.items(b"!post!")}


def store_of_tables(path: Path, posts: int, seed: int = 8) -> set[bytes]:
    """A closed store (everything in tables); its post hashes."""
    with Store(path, now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(generate(seed=seed, posts=posts))
        return {k[len(b"!post!") :] for k, _ in s.items(b"!post!")}


def largest_table(path: Path) -> Path:
    return max(path.glob("*.ldb"), key=lambda f: f.stat().st_size)
