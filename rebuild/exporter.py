"""Export a store to a Parquet snapshot (``rebuild/parquet.py``): streamed, in parallel, all or nothing.

The export reads one LevelDB snapshot.  Its work is cut into LevelDB key
ranges (each partition's posts, the tombstones, each view's entries) that
threads write at the same time, each holding one batch of rows: LevelDB
and Parquet's encoding and compression release the GIL, so two threads keep
two cores busy.  Files go to a directory beside the target
(``TARGET.partial-XXXX``), ``manifest.json`` is written last and the
directory is renamed into place, so an interrupted export leaves nothing
that looks like a snapshot (on object stores, which cannot rename a
directory, the files are written in place and the manifest still comes
last).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cablestore.errors import RebuildError
from cablestore.keyspace import facts
from cablestore.keyspace.keys import DELETED, LOCAL_USER_KEY, META, POSTS, SEARCH_KEY
from cablestore.moderation import Seed, format_seed, parse_seed
from cablestore.store.read.moderation import snapshot_moderation
from cablestore.store.write.resolving import held_facts, stored_seed

from . import decoded as decoded_table
from .moderation_tables import Moderation
from .parquet import FORMAT, MANIFEST, SCHEMAS, file_name, filesystem, renames_directories
from .recompute import PRIMARY_PREFIXES, VIEW_PREFIXES

if TYPE_CHECKING:
    from cablestore.progress import Progress

BATCH_ROWS = {"posts": 16_384, "tombstones": 65_536, "live": 131_072}  # one row group each
FILE_ROWS = {"posts": 196_608, "tombstones": 1_048_576, "live": 1_048_576}  # then the next file: files stay under ~45 MB
COMPRESSION = "zstd"
_TO_END = 1 << 30  # binary_slice's stop for "to the end" (its default fails on pyarrow 26)


def default_workers() -> int:
    """Threads an export uses: one per core, at most four."""
    return max(1, min(4, os.cpu_count() or 1))


def _end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix``."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def post_ranges(partitions: int) -> list[tuple[bytes, bytes]]:
    """``(start, stop)`` of each partition's posts: keys whose hash's first byte maps to it (``partition_of``)."""
    lows = [-(-k * 256 // partitions) for k in range(partitions)] + [256]
    starts = [POSTS] + [POSTS + bytes([lo]) for lo in lows[1:partitions]]  # partition 0 also takes a damaged empty key
    stops = starts[1:] + [_end(POSTS)]
    return list(zip(starts, stops, strict=True))


def derived_ranges() -> list[tuple[bytes | None, bytes | None]]:
    """The key ranges outside the primary prefixes, cut at each view's prefix (so a view's entries are one range)."""
    cuts = sorted({*VIEW_PREFIXES.values(), *PRIMARY_PREFIXES, *map(_end, PRIMARY_PREFIXES), *map(_end, VIEW_PREFIXES.values())})
    bounds = [None, *cuts, None]
    out = []
    for start, stop in zip(bounds, bounds[1:], strict=False):
        if start is not None and any(p <= start < _end(p) for p in PRIMARY_PREFIXES):
            continue
        out.append((start, stop))
    return out


class _HashingFile:
    """A write-only file that passes bytes on and keeps their sha256 and count (Parquet writes through it)."""

    def __init__(self, raw):
        self.raw, self.sha, self.size, self.closed = raw, hashlib.sha256(), 0, False

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.raw.write(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
            self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


class _Files:
    """One table's files for one partition or range: a new file every ``FILE_ROWS`` rows."""

    def __init__(self, fs, staging: str, table: str, part: int, schema: pa.Schema):
        self.fs, self.staging, self.table, self.part, self.schema = fs, staging, table, part, schema
        self.limit = FILE_ROWS.get(table, FILE_ROWS["posts"])
        self.done: dict[str, dict] = {}
        self._writer = self._sink = self._name = None
        self._rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is not None and self._rows + batch.num_rows > self.limit:
            self.close()
        if self._writer is None:
            self._name = file_name(self.table, self.part, len(self.done))
            self.fs.create_dir(os.path.dirname(f"{self.staging}/{self._name}"), recursive=True)
            self._sink = _HashingFile(self.fs.open_output_stream(f"{self.staging}/{self._name}"))
            self._writer = pq.ParquetWriter(
                self._sink, self.schema, compression=COMPRESSION, use_dictionary=False, write_statistics=False, store_schema=False
            )
            self._rows = 0
        self._writer.write_batch(batch)
        self._rows += batch.num_rows

    def close(self) -> dict[str, dict]:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            part = self.part if self.table in ("posts", "decoded") else None
            self.done[self._name] = {"sha256": self._sink.sha.hexdigest(), "bytes": self._sink.size, "rows": self._rows, "part": part}
            self._writer = None
        return self.done


class _Job:
    """One key range written to one table's files (posts also to the decoded table)."""

    def __init__(self, table: str, part: int, start, stop, decoded: Moderation | None = None):
        self.table, self.part, self.start, self.stop, self.decoded = table, part, start, stop, decoded  # decoded: the state its rows carry
        self.count = 0  # posts and tombstones written so far (read by the main thread for progress)

    def run(self, snap, fs, staging: str, halt: threading.Event) -> tuple[dict, dict]:
        out = _Files(fs, staging, self.table, self.part, SCHEMAS[self.table])
        dec = _Files(fs, staging, "decoded", self.part, decoded_table.SCHEMA) if self.decoded is not None else None
        rows = {self.table: 0, "decoded": 0, "undecodable": 0}
        it = snap.iterator(start=self.start, stop=self.stop, verify_checksums=True)
        size = BATCH_ROWS[self.table]
        try:
            while not halt.is_set():
                chunk = list(islice(it, size))
                if not chunk:
                    break
                keys, values = [kv[0] for kv in chunk], [kv[1] for kv in chunk]
                batch = self._batch(keys, values)
                out.write(batch)
                if dec is not None:
                    table, skipped = decoded_table.batch(batch.column(0).to_pylist(), values, self.decoded)
                    dec.write(table)
                    rows["decoded"] += table.num_rows
                    rows["undecodable"] += skipped
                rows[self.table] += len(keys)
                self.count += len(keys) if self.table != "live" else 0
        finally:
            it.close()
            files = out.close()
            if dec is not None:
                files.update(dec.close())
        return files, rows

    def _batch(self, keys, values) -> pa.RecordBatch:
        key = pa.array(keys, pa.binary())
        if self.table == "live":
            return pa.record_batch([key, pa.array(values, pa.binary())], schema=SCHEMAS["live"])
        if self.table == "posts":
            return pa.record_batch([pc.binary_slice(key, len(POSTS), _TO_END), pa.array(values, pa.binary())], schema=SCHEMAS["posts"])
        n = len(DELETED)  # a tombstone's key: DELETED, target (32 bytes), by
        target, by = pc.binary_slice(key, n, n + 32), pc.binary_slice(key, n + 32, _TO_END)
        return pa.record_batch([target, by, pa.array(values, pa.binary())], schema=SCHEMAS["tombstones"])


def _jobs(partitions: int, decoded: Moderation | None) -> list[_Job]:
    jobs = [_Job("posts", k, start, stop, decoded) for k, (start, stop) in enumerate(post_ranges(partitions))]
    jobs.append(_Job("tombstones", 0, DELETED, _end(DELETED)))
    jobs += [_Job("live", i, start, stop) for i, (start, stop) in enumerate(derived_ranges())]
    return jobs


def _target_state(fs, root: str, location) -> None:
    """Refuse a target that is a file, holds a snapshot, or holds anything else."""
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type != pafs.FileType.Directory:
        raise RebuildError(f"{location} exists and is not a directory")
    if fs.get_file_info(f"{root}/{MANIFEST}").type != pafs.FileType.NotFound:
        raise RebuildError(f"{location} already holds a snapshot")
    if fs.get_file_info(pafs.FileSelector(root)):
        raise RebuildError(f"{location} is not empty: export to a new or empty directory")


def _store_meta(snap) -> dict[str, str]:
    return {k[len(META) :].decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in snap.iterator(prefix=META)}


def _await(futures, jobs: list[_Job], progress) -> None:
    """Wait for every job (the main thread stays interruptible), drawing progress; the first failure is raised."""
    shown = 0
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
        for f in done:
            f.result()
        count = sum(job.count for job in jobs)
        if progress is not None and count > shown:
            progress.advance(count - shown)
            shown = count


def export(
    db: Any,
    location: str | os.PathLike,
    partitions: int = 16,
    progress: Progress | None = None,
    *,
    decoded: bool = False,
    workers: int | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """Write a snapshot of ``db`` (a plyvel DB) to ``location`` (a new or empty directory, or a URI); return the manifest.

    ``decoded`` adds the decoded table for data teams, with the moderation
    state tables (``rebuild/moderation_tables.py``); ``workers``: threads
    (default: one per core, at most four; 0 as 1: one thread writes); ``source``: the store's name,
    kept in the manifest.  Nothing is left at ``location`` unless the export
    completes.
    """
    if not isinstance(partitions, int) or isinstance(partitions, bool) or not 1 <= partitions <= 256:
        raise RebuildError(f"partitions must be an integer from 1 to 256, got {partitions!r}")
    workers = default_workers() if workers is None else workers
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise RebuildError(f"workers must be an integer of at least 0, got {workers!r}")
    fs, root = filesystem(location)
    _target_state(fs, root, location)
    staging = f"{root}.partial-{uuid.uuid4().hex[:8]}" if renames_directories(fs) else root
    started = time.perf_counter()
    snap = db.snapshot()
    halt = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="cablestore-export")
    try:
        fs.create_dir(staging, recursive=True)
        moderation = Moderation(snapshot_moderation(snap, snap.get(LOCAL_USER_KEY))) if decoded else None
        jobs = _jobs(partitions, moderation)
        futures = [pool.submit(job.run, snap, fs, staging, halt) for job in jobs]
        _await(futures, jobs, progress)
        files: dict[str, dict] = {}
        counts = {"posts": 0, "tombstones": 0, "live": 0}
        if decoded:
            counts.update(decoded=0, undecodable=0)
        for f in futures:
            done, rows = f.result()
            files.update(done)
            for k in counts:
                counts[k] += rows.get(k, 0)
        for name, table in moderation.tables().items() if moderation is not None else ():  # the state, beside the posts
            out = _Files(fs, staging, name, 0, table.schema)
            out.write(table)
            files.update(out.close())
        manifest = {
            "format": FORMAT,
            "partitions": partitions,
            "counts": counts,
            "files": dict(sorted(files.items())),
            "store": {"name": source, "meta": _store_meta(snap)},
            "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "compression": COMPRESSION,
            "seconds": round(time.perf_counter() - started, 3),
        }
        local_user = snap.get(LOCAL_USER_KEY)
        if local_user is not None:  # whose moderation state the live views hold
            manifest["local_user"] = local_user.hex()
            manifest["facts"] = export_facts(snap)  # what the state needs of posts a block removed (few)
            seed = stored_seed(snap.get)
            manifest["seed"] = {"roles": format_seed(seed.roles).hex() if seed.roles else "", "kept": b"".join(sorted(seed.kept)).hex()}
        with fs.open_output_stream(f"{staging}/{MANIFEST}") as out:
            out.write(json.dumps(manifest, indent=2, sort_keys=True).encode())
        if staging != root:
            _move_into_place(fs, staging, root, location)
        return manifest
    except BaseException:
        halt.set()
        pool.shutdown(wait=True, cancel_futures=True)
        _remove(fs, staging)
        raise
    finally:
        pool.shutdown(wait=True)
        snap.close()


def _move_into_place(fs, staging: str, root: str, location) -> None:
    if fs.get_file_info(root).type == pafs.FileType.Directory:  # empty, checked at the start
        fs.delete_dir(root)
    try:
        fs.move(staging, root)
    except (pa.ArrowException, OSError) as exc:
        raise RebuildError(f"cannot move the finished snapshot to {location}: {exc}") from None


def _remove(fs, staging: str) -> None:
    """Best effort: an interrupted export leaves no files (and never a manifest)."""
    try:
        fs.delete_dir(staging)
    except (pa.ArrowException, OSError):
        pass


def manifest_search(manifest: dict) -> bool:
    """Whether the exported store kept the search view: its ``!meta!search`` row, recorded with the store's meta."""
    return SEARCH_KEY[len(META) :].decode() in manifest.get("store", {}).get("meta", {})


def manifest_facts(manifest: dict) -> list:
    """``(hash, fact)`` of the facts an export recorded in its manifest (``[[hash hex, record hex], ...]``)."""
    out = []
    for h, record in manifest.get("facts", ()):
        h = bytes.fromhex(h)
        out.append((h, facts.unpack(h, bytes.fromhex(record))))
    return out


def export_facts(snap) -> list:
    """What :func:`manifest_facts` reads back: the store's held facts, for an export's manifest."""
    return [[h.hex(), facts.pack(h, fact).hex()] for h, fact in held_facts(lambda prefix: list(snap.iterator(prefix=prefix)))]


def manifest_seed(manifest: dict) -> Seed:
    """The moderation seed an export recorded (none: an empty :class:`Seed`)."""
    found = manifest.get("seed") or {}
    roles, kept = bytes.fromhex(found.get("roles", "")), bytes.fromhex(found.get("kept", ""))
    return Seed(parse_seed(roles) if roles else {}, frozenset(kept[i : i + 32] for i in range(0, len(kept) - 31, 32)))
