"""Opening a store read-only: LevelDB opens a directory of links, never the store's own.

LevelDB has no read-only open (nor has plyvel): every open writes a new
MANIFEST, a new log, ``CURRENT``, ``LOCK`` and ``LOG``, and deletes the old
MANIFEST and log.  On read-only media that fails, and anywhere else it
changes the store.  So a read-only open:

1. takes a **shared** fcntl lock on the store's own ``LOCK``, opened for
   reading only.  A writer (LevelDB holds an exclusive fcntl lock on
   ``LOCK`` while a store is open: ``serve``, a ``Store`` in another
   process) makes this fail: :class:`StoreLockedError`, as for a normal
   open.  While readers hold it, a writer cannot open the store either, so
   no compaction deletes a table under a reader.  A store without ``LOCK``
   (a copy that left it out) is read without a lock: ``LOCK`` is not
   created, and a writer that starts later is not detected.
2. makes a temporary directory (in ``TMPDIR``, never inside the store)
   holding a symbolic link to each of the store's data files: ``CURRENT``,
   the MANIFESTs, the tables and the write-ahead logs;
3. opens LevelDB on that directory.  LevelDB reads the tables and logs
   through the links and writes its bookkeeping (a new MANIFEST, a log,
   ``CURRENT``, ``LOCK``, ``LOG``, and a table for what a log held) beside
   them.  It replaces ``CURRENT`` by a rename and removes obsolete files
   (the old MANIFEST and log, a compaction's inputs) by unlinking them: a
   rename or an unlink acts on the link, never on the file it points to,
   and LevelDB opens for writing only the files it creates.  A compaction
   LevelDB starts on its own (a store left with many level-0 tables) writes
   its output into the temporary directory.

Closing removes the temporary directory (links and LevelDB's files, never
what a link points to); so does the end of a process that never closed the
store, unless it was killed (``cablestore-readonly-*`` in ``TMPDIR`` is
then left: links and bookkeeping, safe to delete).  The cost is measured in docs/operations.md
("Opening a store read-only").

A reader that must not keep a writer out (the web archive of a store that
``post``, ``ingest`` or ``serve`` may write meanwhile) takes no lock at all:
:func:`copy_state` puts a consistent state of the store's files in a
directory of its own, which is then opened read-only as above, and
:func:`state` says when the store has changed since.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import struct
import tempfile
import time
import weakref
from pathlib import Path

from cablestore.errors import StoreError, StoreIOError, StoreLockedError
from cablestore.recovery.leveldb.manifest import manifest_tables

# What LevelDB reads: the pointer to the MANIFEST, the MANIFESTs, tables and logs.
# (LOCK, LOG, LOG.old, *.dbtmp and anything else stay out.)
_LINKED = re.compile(r"^(CURRENT|MANIFEST-\d+|\d+\.(ldb|sst|log))$")


class Links:
    """A store's shared lock and the temporary directory of links LevelDB opens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd = _lock_shared(path)
        try:
            self.dir = Path(tempfile.mkdtemp(prefix="cablestore-readonly-"))
        except OSError as exc:
            self._unlock()
            raise StoreIOError(f"cannot make a temporary directory to read {path} without writing to it: {exc.strerror or exc} (set TMPDIR)") from exc
        # Removed on close, or when the Store is collected or the interpreter exits without a close.
        # (rmtree unlinks a symbolic link, never follows it.)
        self._removal = weakref.finalize(self, shutil.rmtree, self.dir, ignore_errors=True)
        try:
            _link_files(path, self.dir)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove the directory of links (what LevelDB wrote, never the store's files) and release the lock."""
        try:
            self._removal()
        finally:
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops its lock
            self._lock_fd = None

    def in_words(self, error: StoreError) -> StoreError:
        """``error`` (raised by LevelDB in the directory of links) naming the store's directory instead."""
        text = str(error).replace(os.fspath(self.dir), os.fspath(self.path))
        return error if text == str(error) else type(error)(text)


def _lock_shared(path: Path) -> int | None:
    """A descriptor of ``path/LOCK`` holding a shared fcntl lock; None when the store has no LOCK file."""
    try:
        fd = os.open(path / "LOCK", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreIOError(f"cannot read {path / 'LOCK'}: {exc.strerror or exc}") from exc
    try:
        _share(fd)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            raise StoreLockedError(f"{path} is open in another process or Store") from exc  # (as opening.locked words it)
        raise StoreIOError(f"cannot lock {path / 'LOCK'}: {exc.strerror or exc}") from exc
    return fd


def _share(fd: int) -> None:
    """A shared lock on all of ``fd``'s file, failing at once if a writer holds it.

    An open-file-description lock (Linux) where there is one: it belongs to
    this descriptor alone, so this process opening and closing ``LOCK``
    elsewhere cannot drop it, as it drops a classic fcntl lock.  Both kinds
    conflict with LevelDB's classic exclusive lock.
    """
    ofd = getattr(fcntl, "F_OFD_SETLK", None)
    if ofd is None or struct.calcsize("P") != 8:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return
    # struct flock on 64-bit Linux: l_type, l_whence, l_start, l_len, l_pid (0 for these locks), padding.
    fcntl.fcntl(fd, ofd, struct.pack("hhqqixxxx", fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0))


def _link_files(path: Path, into: Path) -> None:
    source = path.resolve()
    try:
        names = os.listdir(source)
        for name in names:
            if _LINKED.match(name):
                os.symlink(source / name, into / name)
    except OSError as exc:
        raise StoreIOError(f"cannot link {path}'s files into {into}: {exc.strerror or exc}") from exc


# --- a consistent state of a store another process writes, without its lock ---
_TABLE = re.compile(r"^(\d+)\.(ldb|sst)$")
_LOG = re.compile(r"^(\d+)\.log$")
COPY_ATTEMPTS = 50  # states begun again when a writer changed the MANIFEST meanwhile


def state(path: Path) -> tuple | None:
    """What changes whenever a writer changes the store: the MANIFEST CURRENT names, its size, and each log's size.

    LevelDB appends every write to a log and every change of its files (a
    flush, a compaction) to the MANIFEST, so an equal state means the same
    data.  None when the store cannot be read (a writer replacing CURRENT at
    that moment reads as a change).
    """
    try:
        manifest = (path / "CURRENT").read_text().strip()
        logs = sorted((name, os.stat(path / name).st_size) for name in os.listdir(path) if _LOG.match(name))
        return manifest, os.stat(path / manifest).st_size, tuple(logs)
    except (OSError, UnicodeDecodeError):
        return None


def copy_state(path: Path, into: Path, *, reuse: Path | None = None, link: bool = True) -> tuple | None:
    """Put in the empty directory ``into`` the files of one consistent state of the store at ``path``; return its :func:`state`.

    Nothing in ``path`` is locked, created or written: a writer may work on
    meanwhile.  The MANIFEST and ``CURRENT`` are copied, the tables the
    MANIFEST lists and the logs it still needs are hard links (a writer that
    deletes one after a compaction then deletes its name, not the data
    here), or copies where a hard link cannot be made (``TMPDIR`` on another
    file system; ``link=False``).  A copied table is taken from ``reuse`` (a
    previous state's directory) when it is there with the same size: tables
    never change once written.  The state holds if the MANIFEST is the same
    after the files were taken as before (a writer appends an edit before it
    deletes any file); else it is begun again.  A log taken while a writer
    appends to it ends with a write cut short, which LevelDB reads as the
    end of the log.  A MANIFEST that does not read (a damaged store) is
    copied with every table, for LevelDB to judge.
    """
    for attempt in range(COPY_ATTEMPTS):
        try:
            before = _manifest(path)
            data = (path / before[0]).read_bytes()[: before[1]]
            parsed = manifest_tables(data)
            if parsed is None and attempt < 2:  # a record being appended: read again
                raise _Changed
            live, log_number = parsed if parsed is not None else (None, 0)
            for name in os.listdir(path):
                table, log = _TABLE.match(name), _LOG.match(name)
                if (table and (live is None or int(table[1]) in live)) or (log and int(log[1]) >= log_number):
                    _take(path / name, into / name, reuse, link)
            (into / before[0]).write_bytes(data)
            (into / "CURRENT").write_text(before[0] + "\n")
            if _manifest(path) == before:
                return state(into)
        except (_Changed, FileNotFoundError):
            pass
        except OSError as exc:
            raise StoreIOError(f"cannot copy {path}'s files into {into}: {exc.strerror or exc}") from exc
        _empty(into)
        time.sleep(min(0.01 * (attempt + 1), 0.2))
    raise StoreIOError(f"cannot read a steady state of {path}: a writer changed its files during each of {COPY_ATTEMPTS} attempts")


class _Changed(Exception):
    """The store changed while its state was being read: begin again."""


def _manifest(path: Path) -> tuple[str, int]:
    try:
        name = (path / "CURRENT").read_text().strip()
    except UnicodeDecodeError:
        raise _Changed from None
    if not re.fullmatch(r"MANIFEST-\d+", name):
        raise _Changed
    return name, os.stat(path / name).st_size


def _take(source: Path, target: Path, reuse: Path | None, link: bool) -> None:
    if link:
        try:
            os.link(source, target)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
    if reuse is not None and _TABLE.match(source.name):
        kept = reuse / source.name
        try:
            if os.stat(kept).st_size == os.stat(source).st_size:
                os.link(kept, target)
                return
        except FileNotFoundError:
            pass
    shutil.copyfile(source, target)


def _empty(directory: Path) -> None:
    for name in os.listdir(directory):
        os.unlink(directory / name)
