"""Opening a store's LevelDB directory: what is at the path, who holds it, what it holds.

Four rules keep an open from destroying, littering or misreading anything:

* **One opener per path per process.**  LevelDB refuses a second open of a
  directory in the same process by closing a descriptor of ``LOCK``, which
  drops the process's fcntl lock and lets another process in.  So a
  process-wide registry of open paths is checked *before* plyvel is called;
  LevelDB's own lock still keeps other processes out.
* **Look before opening.**  The path is classified first (missing, a regular
  file, an empty directory, a snapshot, a store, a store that lost its
  ``CURRENT``, someone else's directory); only a store, or with
  ``create=True`` a missing path or an empty directory, reaches plyvel.  So
  read-only commands never create a directory or drop ``LOCK``/``LOG`` into
  one, and LevelDB never creates a fresh database over a damaged one.
* **Claim nothing that is not ours.**  ``!meta!format`` is written only into a
  database that is empty; a LevelDB with data but no format key is refused
  without writing.
* **Read no older format.**  A store in format ``cablestore-1`` (derived rows
  laid out as docs/keyspace-format-1.md shows) is refused with
  :class:`cablestore.errors.MigrationNeededError`, naming ``cablestore
  migrate STORE``; only the migration (``open_db(..., migrating=True)``,
  :mod:`cablestore.rebuild.migration`) opens it.

``paranoid_checks`` is on: LevelDB then fails the open on a damaged
write-ahead log instead of silently dropping the rest of a 32 KiB block.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path

import plyvel

from cablestore.errors import (
    DiskFullError,
    MigrationNeededError,
    NotAStoreError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
)
from cablestore.keyspace.keys import FORMAT_KEY
from cablestore.recovery.leveldb import manifest as leveldb_files
from cablestore.store.lifecycle.readonly import Links

FORMAT = b"cablestore-3"
#: Formats ``cablestore migrate`` upgrades to :data:`FORMAT`: format 2 dropped format 1's per-post
#: ``!rev!<hash>`` entry and its membership candidates (docs/keyspace-format-1.md); format 3 adds the
#: ``!recon`` range sums set reconciliation reads (views/recon.py), which a format-2 store lacks.
OLD_FORMATS = (b"cablestore-1", b"cablestore-2")
RECOVER_HINT = "run `cablestore recover STORE` to salvage what is readable"

# Files LevelDB writes; LOCK and LOG alone hold no data.
_DATA_FILE = re.compile(r"^(\d+\.(ldb|sst|log)|MANIFEST-\d+)$")
_HARMLESS = {"LOCK", "LOG", "LOG.old"}


class Kind(Enum):
    """What a path holds, as far as opening a store is concerned."""

    MISSING = "missing"
    FILE = "file"
    EMPTY = "empty"  # an empty directory (or one holding only LOCK/LOG)
    STORE = "store"  # a LevelDB directory with CURRENT
    HEADLESS = "headless"  # LevelDB data files without CURRENT
    SNAPSHOT = "snapshot"  # an exported snapshot (manifest.json)
    OTHER = "other"  # a directory of something else


def classify(path: Path) -> Kind:
    """Say what is at ``path`` without changing anything."""
    try:
        if not path.exists():
            return Kind.MISSING
        if not path.is_dir():
            return Kind.FILE
        names = set(os.listdir(path))
    except OSError as exc:
        raise StoreIOError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if "CURRENT" in names:
        return Kind.STORE
    if "manifest.json" in names:
        return Kind.SNAPSHOT
    if any(_DATA_FILE.match(n) and not n.startswith("MANIFEST-") for n in names):
        return Kind.HEADLESS
    # A creation cut short (a crash between LevelDB writing its first MANIFEST
    # and CURRENT) leaves a MANIFEST and no table or log: nothing was ever
    # stored, and LevelDB creates the store anew over it.
    if names <= _HARMLESS | {n for n in names if n.startswith("MANIFEST-") or n.endswith(".dbtmp")}:
        return Kind.EMPTY
    return Kind.OTHER


def refusal(path: Path, kind: Kind, create: bool) -> StoreError | None:
    """The error opening ``path`` (holding ``kind``) must raise, or None to go ahead."""
    if kind is Kind.STORE or (create and kind in (Kind.MISSING, Kind.EMPTY)):
        return None
    if kind is Kind.MISSING:
        return StoreNotFoundError(f"{path} does not exist")
    if kind is Kind.EMPTY:
        return StoreNotFoundError(f"{path} is an empty directory, not a store")
    if kind is Kind.FILE:
        return NotAStoreError(f"{path} is a file, not a store directory")
    if kind is Kind.SNAPSHOT:
        return NotAStoreError(f"{path} is an exported snapshot, not a store (verify it as a snapshot: snapshot={path})")
    if kind is Kind.HEADLESS:
        return StoreCorruptError(f"{path} holds LevelDB files but no CURRENT file; {RECOVER_HINT}")
    return NotAStoreError(f"{path} is a non-empty directory that is not a cablestore store; nothing was changed")


# --- the process-wide registry of open stores -------------------------------
_open_paths: set[str] = set()
_registry_lock = threading.Lock()


def claim(path: Path) -> str:
    """Register ``path`` as open in this process; raise StoreLockedError if it already is."""
    key = os.path.realpath(path)
    with _registry_lock:
        if key in _open_paths:
            raise StoreLockedError(f"{path} is already open in this process (close the other Store first)")
        _open_paths.add(key)
    return key


def release(key: str) -> None:
    """Forget a path registered by :func:`claim` (after its DB is closed)."""
    with _registry_lock:
        _open_paths.discard(key)


# --- plyvel errors at the boundary ------------------------------------------
def message(exc: BaseException) -> str:
    """plyvel's message as text (it gives bytes)."""
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def translate(exc: BaseException, path: str | os.PathLike) -> StoreError:
    """The CableError for a plyvel (or closed-DB) exception raised while using ``path``.

    LevelDB names the files it read; a read-only open reads them through a
    temporary directory of links (:mod:`cablestore.store.lifecycle.readonly`),
    which the message names instead as the store's own ``path``.
    """
    text = _READONLY_DIR.sub(lambda _: str(path), message(exc))
    if isinstance(exc, plyvel.CorruptionError) or (isinstance(exc, plyvel.IOError) and "Invalid argument" in text):
        # (a table cut short reads as EINVAL)
        return StoreCorruptError(f"{path}: damaged data ({text}); {RECOVER_HINT}")
    if isinstance(exc, plyvel.IOError):
        lowered = text.lower()
        if "no space" in lowered or "file too large" in lowered or "quota" in lowered:
            return DiskFullError(f"{path}: out of space ({text}); this write may not be stored: free space and retry it (the store reopens LevelDB itself; ingest is idempotent)")
        return StoreIOError(f"{path}: I/O error ({text}); this call may not have completed: retry once the cause is fixed")
    if isinstance(exc, RuntimeError):  # plyvel: "Database is closed"
        return StoreClosedError("the store is closed")
    return StoreError(f"{path}: {text}")


PLYVEL_ERRORS = (plyvel.Error, RuntimeError)
_READONLY_DIR = re.compile(r"/\S*?cablestore-readonly-[^/\s]+")  # a read-only open's directory of links (readonly.Links)


@contextmanager
def translated(path: str | os.PathLike) -> Iterator[None]:
    """Turn plyvel errors raised inside the block into CableErrors."""
    try:
        yield
    except plyvel.Error as exc:
        raise translate(exc, path) from exc
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise DiskFullError(f"{path}: {exc.strerror}") from exc
        raise StoreIOError(f"{path}: {exc.strerror or exc}") from exc


# --- opening ------------------------------------------------------------------
# The block cache (Store's default ``cache_mb``): 128 MB instead of 32 MB.  At
# the end of a 1M-post ingest a post reads ~1.3 stored posts and seeks ~0.2
# times, and a block that misses the cache is 32 KB to decompress: trusted
# ingest of 1M posts ran at 16.8k and 17.7k /s against 15.3k-16.6k /s with
# 32 MB, in alternating runs (docs/performance.md, "fourth pass").  LevelDB
# fills it only with blocks read, so a small store never holds 128 MB.
DEFAULT_CACHE_MB = 128


def open_db(
    path: Path,
    *,
    create: bool,
    readonly: bool = False,
    cache_mb: int = DEFAULT_CACHE_MB,
    write_buffer_mb: int = 64,
    migrating: bool = False,
) -> tuple[plyvel.DB, str, Links | None]:
    """Open the store at ``path``; return ``(db, registry key, links)``: :func:`close_db` closes them.

    ``create=True`` creates a store at a missing path or in an empty
    directory; anything else that is not a store is refused, untouched.
    ``readonly=True`` opens LevelDB on a directory of links to the store's
    files (:mod:`cablestore.store.lifecycle.readonly`): nothing in ``path`` is created
    or written, and ``links`` is that directory (else None).
    ``migrating=True`` (the migration only) opens a store of an older format
    (:data:`OLD_FORMATS`) too, which anything else refuses.
    """
    key = claim(path)
    links = None
    try:
        kind = classify(path)
        refused = refusal(path, kind, create and not readonly)
        if refused is not None:
            raise refused
        if kind is Kind.MISSING:
            _make_dirs(path)
        elif kind is Kind.STORE and (unlisted := leveldb_files.unlisted_tables(path)):
            raise StoreCorruptError(f"{path}: the MANIFEST does not list {', '.join(unlisted)} (LevelDB would delete them); {RECOVER_HINT}")
        if readonly:
            links = Links(path)
        try:
            db = _plyvel_open(links.dir if links else path, create and not readonly, cache_mb, write_buffer_mb)
        except StoreError as exc:
            raise (links.in_words(exc) if links else exc) from exc.__cause__
        try:
            _check_format(db, path, create and not readonly, readonly, migrating)
        except BaseException:
            db.close()
            raise
        return db, key, links
    except BaseException:
        if links is not None:
            links.remove()
        release(key)
        raise


def close_db(db: plyvel.DB, key: str, links: Links | None) -> None:
    """Close what :func:`open_db` opened: flush and close LevelDB (a store opened read-only is not flushed), remove the links."""
    try:
        if links is None:
            flush(db)
        db.close()
    finally:
        try:
            if links is not None:
                links.remove()
        finally:
            release(key)


def reopen_db(path: Path, links: Links | None = None, *, cache_mb: int = DEFAULT_CACHE_MB, write_buffer_mb: int = 64) -> plyvel.DB:
    """Open again a store this process has registered and just closed (read-only: its directory of links again)."""
    return _plyvel_open(links.dir if links else path, False, cache_mb, write_buffer_mb)


def _make_dirs(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreIOError(f"cannot create {path}: {exc.strerror or exc}") from exc


# Table blocks of 32 KB instead of LevelDB's 4 KB: fewer index entries and
# block-cache slots a table; chosen when tables were Snappy-compressed (Snappy
# then found the keys and hashes a block's posts repeat).  Only new tables use
# it: a store written with another size opens and reads as before.
BLOCK_SIZE = 32 << 10
# No compression: at 1M posts, trusted ingest spends 25-30% less CPU a post
# (LevelDB's compactions no longer compress and decompress every block), holds
# ~145 MB less memory and stays flatter (last / first 5%: 0.58-0.78 against
# 0.48-0.71 with Snappy), for 2.04x the raw post bytes on disk against 1.85x
# (docs/performance.md, "LevelDB compression at 1M"; benchmarks/compression.py).
# Every table records each block's compression: tables written with Snappy by
# earlier releases read as before and are rewritten uncompressed as they compact.
COMPRESSION: str | None = None
# Table files of 16 MB instead of LevelDB's 2 MB: fewer files to open, seek and
# compact as a store grows (measured with the write buffer below; on its own
# the effect is within noise).
MAX_FILE_SIZE = 16 << 20


def _plyvel_open(path: Path, create: bool, cache_mb: int, write_buffer_mb: int) -> plyvel.DB:
    try:
        # A larger write buffer and block cache than LevelDB's 4 MB / 8 MB
        # keep ingest from slowing as the store grows.  The write buffer is
        # 64 MB (Store's default): LevelDB's own work (flushes, compactions,
        # on its background thread) over a 300k-post trusted ingest was
        # 15-19 µs of CPU per post against 40-43 µs with 16 MB, in two runs
        # (docs/performance.md, "Compiled hot path"), for up to ~100 MB more
        # memory during an ingest (a memtable and the one being flushed).
        return plyvel.DB(
            os.fsencode(path),  # bytes: plyvel refuses a str that is not UTF-8 (a name made of other bytes)
            create_if_missing=create,
            paranoid_checks=True,
            lru_cache_size=cache_mb << 20,
            write_buffer_size=write_buffer_mb << 20,
            # Point reads of absent keys (is this post stored?) skip every table
            # but the memtable instead of reading a block from each level.
            bloom_filter_bits=10,
            block_size=BLOCK_SIZE,
            compression=COMPRESSION,
            max_file_size=MAX_FILE_SIZE,
        )
    except plyvel.IOError as exc:
        # LevelDB: "lock <dir>/LOCK: already held by process" (this process) or the lock call's
        # error (another process).  A LOCK file it cannot open at all ("<dir>/LOCK: Permission
        # denied", a read-only directory) is an I/O error, not a lock: the path may say "lock" too.
        text = message(exc)
        if "IO error: lock " in text and ("already held" in text or "temporarily unavailable" in text):
            raise locked(path) from exc
        for reason in _UNWRITABLE:  # refused before anything was written: no write was in flight
            if reason in text:
                raise unwritable(path, reason) from exc
        raise translate(exc, path) from exc
    except plyvel.Error as exc:
        raise translate(exc, path) from exc


_UNWRITABLE = (os.strerror(errno.EROFS), os.strerror(errno.EACCES), os.strerror(errno.EPERM))


def locked(path: str | os.PathLike) -> StoreLockedError:
    """The error of every command and open that finds ``path`` held by another process or Store (the same words each)."""
    return StoreLockedError(f"{path} is open in another process or Store")


def unwritable(path: str | os.PathLike, reason: str) -> StoreIOError:
    """The error of every writing open refused by the file system (read-only, no permission): nothing was written, so nothing to retry."""
    return StoreIOError(f"{path} cannot be written ({reason}); nothing was changed")


def migrate_hint(path: Path) -> str:
    """The command that upgrades the store at ``path``, as every refusal of an older format names it."""
    return f"run `cablestore migrate {shlex.quote(str(path))}` (or Store.migrate) to upgrade it"


def _check_format(db: plyvel.DB, path: Path, create: bool, readonly: bool = False, migrating: bool = False) -> None:
    with translated(path):
        # Checksums verified: a block read here stays in the block cache, where
        # a later check (which verifies what it reads from disk) would trust it.
        stored = db.get(FORMAT_KEY, verify_checksums=True)
        if stored == FORMAT or (migrating and stored in OLD_FORMATS):
            return
        if stored in OLD_FORMATS:
            raise MigrationNeededError(f"{path} is in format {stored.decode()}; {migrate_hint(path)}")
        if stored is not None:
            raise NotAStoreError(f"{path} holds format {stored!r}, expected {FORMAT!r}")
        with db.iterator(include_value=False, verify_checksums=True) as it:
            empty = next(it, None) is None
        if not empty:
            raise NotAStoreError(
                f"{path} is a LevelDB database without {FORMAT_KEY!r}: not a cablestore store; its data was not changed"
                + (" (opened read-only: nothing was written)" if readonly else " (LevelDB rewrote its own MANIFEST and log when it was opened)")
            )
        if not create:
            raise StoreNotFoundError(f"{path} is an empty LevelDB database, not a cablestore store")
        db.put(FORMAT_KEY, FORMAT, sync=True)


def flush(db: plyvel.DB) -> None:
    """Move the memtable into a table, leaving the write-ahead log empty.

    A closed store then holds everything in checksummed tables the MANIFEST
    lists, and a damaged or truncated log cannot lose acknowledged posts.
    LevelDB flushes the memtable before any manual compaction; the range is
    past every key, so nothing else is compacted.  A failed flush loses
    nothing (the log still holds the data), so it is not an error.
    """
    if db.closed:  # a reopen after an I/O error failed
        return
    try:
        db.compact_range(start=b"\xff" * 8, stop=b"\xff" * 9)
    except plyvel.Error:
        pass
