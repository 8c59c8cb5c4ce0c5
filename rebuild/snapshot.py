"""Snapshots: a store exported to partitioned msgpack segments a cluster can read.

A Spark job cannot open a live LevelDB from many executors, so ``export``
copies a consistent LevelDB snapshot into plain files on shared storage::

    DIR/manifest.json            format, partition count, counts, per-file blake3
    DIR/primary-0007.msgpack     posts and tombstones whose hash (tombstones:
                                 target hash) falls in partition 7 by prefix
    DIR/live-0007.msgpack        the store's derived entries in digest bucket 7

Each segment is a stream of msgpack arrays: ``["p", hash, blob]`` (a post),
``["t", target, by, value]`` (a tombstone) or ``[key, value]`` (a derived
entry).  ``manifest.json`` is written last, so a directory with a manifest is
a complete snapshot.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import blake3
import msgpack

from cablestore.errors import RebuildError
from cablestore.store.txn import DELETED, POSTS

from .recompute import LOCAL_USER_KEY, PRIMARY_PREFIXES, bucket, partition_of

if TYPE_CHECKING:
    from cablestore.progress import Progress

FORMAT = "cablestore-snapshot-1"


def _segment_names(partitions: int):
    return [f"primary-{i:04d}.msgpack" for i in range(partitions)], [f"live-{i:04d}.msgpack" for i in range(partitions)]


class StoreSource:
    """Reads primary and derived data straight from a LevelDB snapshot."""

    def __init__(self, db):
        self._snap = db.snapshot()

    def primary(self):
        for h, blob in self.posts():
            yield ("p", h, blob)
        yield from self.tombstones()

    def posts(self):
        """``(hash, blob)`` of every stored post."""
        n = len(POSTS)
        for key, value in self._snap.iterator(prefix=POSTS, verify_checksums=True):
            yield key[n:], value

    def tombstones(self):
        """``("t", target, by, value)`` of every tombstone."""
        for key, value in self._snap.iterator(prefix=DELETED, verify_checksums=True):
            rest = key[len(DELETED) :]
            yield ("t", rest[:32], rest[32:], value)

    def live(self):
        """Every derived entry: the key ranges between the primary prefixes (posts are not read)."""
        start = None
        for prefix in sorted(PRIMARY_PREFIXES):  # damaged tables fail loudly (verify_checksums)
            yield from self._snap.iterator(start=start, stop=prefix, verify_checksums=True)
            start = prefix[:-1] + bytes([prefix[-1] + 1])
        yield from self._snap.iterator(start=start, verify_checksums=True)

    def close(self):
        self._snap.close()


def export(db: Any, directory: str | os.PathLike, partitions: int = 16, progress: Progress | None = None) -> dict[str, Any]:
    """Write a snapshot of ``db`` (a plyvel DB) to ``directory``; return the manifest."""
    if not 1 <= partitions <= 256:
        raise RebuildError("partitions must be between 1 and 256")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "manifest.json").exists():
        raise RebuildError(f"{out} already holds a snapshot")
    primary_names, live_names = _segment_names(partitions)
    files = {n: open(out / n, "wb") for n in primary_names + live_names}
    counts = {"posts": 0, "tombstones": 0, "live": 0}
    packer = msgpack.Packer()
    source = StoreSource(db)
    try:
        for rec in source.primary():
            files[primary_names[partition_of(rec[1], partitions)]].write(packer.pack(list(rec)))
            counts["posts" if rec[0] == "p" else "tombstones"] += 1
            if progress:
                progress.advance()
        for key, value in source.live():
            files[live_names[bucket(key, partitions)]].write(packer.pack([key, value]))
            counts["live"] += 1
    finally:
        source.close()
        for f in files.values():
            f.close()
    manifest = {
        "format": FORMAT,
        "partitions": partitions,
        "counts": counts,
        "files": {n: _file_info(out / n) for n in primary_names + live_names},
    }
    local_user = db.get(LOCAL_USER_KEY)
    if local_user is not None:  # whose moderation state the live views hold
        manifest["local_user"] = local_user.hex()
    tmp = out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(tmp, out / "manifest.json")
    return manifest


def _file_info(path: Path) -> dict:
    data = path.read_bytes()
    return {"blake3": blake3.blake3(data).hexdigest(), "bytes": len(data)}


def load_manifest(directory) -> dict:
    path = Path(directory) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise RebuildError(f"{directory} is not a snapshot (no manifest.json)") from exc
    except ValueError as exc:
        raise RebuildError(f"{path} is not valid JSON") from exc
    if manifest.get("format") != FORMAT:
        raise RebuildError(f"{path}: unknown snapshot format {manifest.get('format')!r}")
    return manifest


class SnapshotSource:
    """Reads a snapshot directory with the same interface as StoreSource."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.manifest = load_manifest(directory)
        self.partitions = self.manifest["partitions"]

    def local_user(self) -> bytes | None:
        """The store's local user, as the export recorded it (None: none, or an older snapshot)."""
        found = self.manifest.get("local_user")
        return bytes.fromhex(found) if found else None

    def _records(self, kind: str):
        for name, info in sorted(self.manifest["files"].items()):
            if name.startswith(kind):
                yield from iter_segment(self.directory, name, info["blake3"])

    def primary(self):
        for rec in self._records("primary"):
            yield tuple(rec)

    def posts(self):
        for rec in self._records("primary"):
            if rec[0] == "p":
                yield rec[1], rec[2]

    def tombstones(self):
        for rec in self._records("primary"):
            if rec[0] == "t":
                yield tuple(rec)

    def live(self):
        yield from self._records("live")

    def close(self):
        pass


def iter_segment(directory, name: str, expected_blake3: str):
    data = (Path(directory) / name).read_bytes()
    if blake3.blake3(data).hexdigest() != expected_blake3:
        raise RebuildError(f"{name}: blake3 checksum does not match the manifest")
    unpacker = msgpack.Unpacker(raw=False, use_list=True, max_buffer_size=max(len(data), 1024))
    unpacker.feed(data)
    yield from unpacker
