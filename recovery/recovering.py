"""Recovering a damaged store: salvage, LevelDB's repair, the view repair, and an account of losses.

``recover(path)`` is what ``cablestore recover STORE`` runs:

1. take LevelDB's lock (so no process has the store open) and read every
   table and log of the store, and those earlier repairs left in ``lost/``
   (:mod:`cablestore.recovery.salvage`): the latest record of every post,
   tombstone and local row, and whether every file checks;
2. a store whose files all check is not repaired: only its views are
   checked (and repaired if they differ); nothing is added to ``lost/``;
3. otherwise the damaged originals are kept in a dated folder
   ``STORE/lost/recover-<UTC time>/`` (hard links, so they cost no space
   while LevelDB keeps them too), and ``plyvel.repair_db`` rebuilds
   ``CURRENT`` and the ``MANIFEST`` from the tables, turns the logs into
   tables and keeps every block it can read;
4. every salvaged record the repair did not keep is written back: posts
   proven by hash, strict decode and signature (from any file, a damaged
   block included), tombstones whose tag checks, other rows from blocks
   whose checksum checks; what is not proven goes to ``unproven.jsonl`` in
   the dated folder, never into the store;
5. ``check --repair`` recomputes the views (a post a tombstone or the
   moderation state keeps out is removed again), and posts a stored
   post/delete of their author names are deleted again;
6. the report: what each file held, what was salvaged, posts and
   tombstones after, every post known to have been stored that is gone
   (``lost``: fetch those again from a peer) and the damaged parts of files
   (``damaged``: posts in a damaged compressed block are gone unless a copy
   survives elsewhere).

Nothing the repair keeps is dropped, nothing unproven is indexed, a key
deleted later (a higher sequence number) is not brought back.  Repair is
idempotent: run it again after an interruption.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import plyvel

from cablestore.errors import CableError, StoreCorruptError, StoreError
from cablestore.keyspace.keys import AUTHOR, DELETED, FORMAT_KEY, POSTS, REVERSE
from cablestore.progress import Progress
from cablestore.recovery import salvage
from cablestore.recovery.leveldb.records import VALUE
from cablestore.store.lifecycle import opening
from cablestore.views import author as author_view
from cablestore.wire.codec import DELETE, POST_TYPE_NAMES, decode_post, post_hash

_POST_KEY_LEN = len(POSTS) + 32
_REPAIR_LINE = re.compile(r"(Log #|Table #|Archiving|Repaired|dropping|Corruption|lost)", re.IGNORECASE)


@dataclass
class RecoveryReport:
    """What ``recover`` found and kept."""

    path: str
    intact: bool = False  # every file checked: nothing was repaired, nothing added to lost/
    originals: str | None = None  # the dated folder holding the damaged originals
    files: list[dict] = field(default_factory=list)  # each table and log read: mode, blocks, damaged parts, posts found
    posts_before: int = 0  # after LevelDB's repair, before salvage and the view repair
    tombstones_before: int = 0
    salvaged_posts: list[str] = field(default_factory=list)  # hex hashes: proven posts LevelDB's repair had lost
    salvaged_tombstones: int = 0
    salvaged_rows: int = 0  # local, refusal, quarantine and format rows
    deleted_later: list[str] = field(default_factory=list)  # keys (hex) a later deletion keeps out that LevelDB brought back
    unproven: int = 0  # records written to the quarantine file, not to the store
    quarantine: str | None = None
    posts_after: int = 0
    tombstones_after: int = 0
    known_posts: int = 0  # posts the files say the store held
    lost: list[str] = field(default_factory=list)  # hex hashes: stored once, gone now
    lost_posts: list[dict] = field(default_factory=list)  # every post still lost (this run's and earlier runs'), with what is known of it
    lost_file: str | None = None  # LOST.json in this run's lost/ folder: this run's lost posts in full
    removed_records: list[dict] = field(default_factory=list)  # damaged records the view repair removed
    view_repair: dict | None = None
    set_aside: list[str] = field(default_factory=list)  # files LevelDB's repair replaced (kept in ``originals``)
    leveldb: list[str] = field(default_factory=list)  # LevelDB's own account of the repair
    damaged: list[str] = field(default_factory=list)  # "file offset+length: why": parts of files that did not check
    format_restored: bool = False
    migrated: bool = False  # a format-1 store: migrated to the current format (a reindex) before its views were checked
    deleted_again: list[str] = field(default_factory=list)  # deleted posts that came back, deleted again
    consistent: bool = False

    @property
    def lossless(self) -> bool:
        """Nothing lost, nothing removed, no damaged part of a file."""
        return not self.lost and not self.removed_records and not self.damaged

    def to_dict(self) -> dict:
        """The report as JSON-ready data (``cablestore recover --json``)."""
        return {**asdict(self), "lossless": self.lossless}


def recover(path: str | os.PathLike, progress: Progress | None = None) -> RecoveryReport:
    """Salvage and repair the store at ``path``; report what was kept and lost."""
    path = Path(path)
    kind = opening.classify(path)
    if kind not in (opening.Kind.STORE, opening.Kind.HEADLESS):
        raise opening.refusal(path, kind, create=False) or StoreError(f"{path}: nothing to recover")
    report = RecoveryReport(str(path))
    registered = opening.claim(path)
    try:
        with _leveldb_lock(path):
            found = salvage.scan(path, progress)
    finally:
        opening.release(registered)
    report.files = [asdict(f) for f in found.files]
    report.damaged = [f"{f.file} {part}" for f in found.files if not f.leftover for part in f.damaged]
    if found.intact:
        try:
            return _views_only(path, found, report, progress)
        except StoreCorruptError:
            found = None  # the files check but LevelDB refuses them: read them again (opening wrote some), then repair
    registered = opening.claim(path)
    try:
        with _leveldb_lock(path):
            if found is None:
                found = salvage.scan(path, progress)
            named = _repair(path, found, report, progress)
    finally:
        opening.release(registered)
    _repair_views(path, report, found, named, progress)
    if progress:
        progress.done()
    return report


def _views_only(path: Path, found: salvage.Salvage, report: RecoveryReport, progress) -> RecoveryReport:
    """A store whose files all check: its views are checked, and repaired if they differ."""
    from cablestore.store.store import Store

    with Store(path, create=False, verify_signatures=False) as store, store.in_flight():
        # A write cut short at the end of a log (a crash) is no damage, but the posts
        # whose bytes it holds are proven: offered to the store as a peer's would be.
        loose = [rec for rec, why in salvage.prove(salvage.unheld_loose_posts(store.db, found), progress) if why is None]
        results = store.ingest_many([rec.value for rec in loose]) if loose else []
        report.salvaged_posts = [rec.key[len(POSTS) :].hex() for rec, res in zip(loose, results, strict=True) if res.new]
        if progress:
            progress.stage("view check")
        checked = store.check(fix=True, check_signatures=False)
        report.deleted_again = _reapply_deletes(store)
        if report.deleted_again:
            checked = store.check(fix=True, check_signatures=False)
        present, _, report.tombstones_after = _inventory(store.db)
        store.remember_lost([])  # drops the rows of lost posts held again
        report.lost_posts = store.lost_posts()
    report.intact = True
    report.view_repair = checked.repaired
    report.removed_records = [dict(f, kind=kind) for kind, items in (checked.to_dict()["faults"] if checked.repaired else {}).items() for f in items]
    report.posts_before = report.posts_after = report.known_posts = len(present)
    report.tombstones_before = report.tombstones_after
    report.consistent = checked.consistent
    if progress:
        progress.done()
    return report


def _repair(path: Path, found: salvage.Salvage, report: RecoveryReport, progress) -> set[bytes]:
    """Keep the originals, run LevelDB's repair, write back what it lost (under LevelDB's lock).

    Returns the hashes the views named after LevelDB's repair: posts known to have been stored.
    """
    folder = _originals_folder(path)
    report.originals = str(folder)
    linked = _keep_originals(path, folder, found)
    before_lost = _top_level(path / "lost")
    if progress:
        progress.stage("LevelDB repair")
    with opening.translated(path):
        plyvel.repair_db(os.fsencode(path), paranoid_checks=True)  # checksums: drop damaged blocks, keep the rest
    replaced = sorted(_top_level(path / "lost") - before_lost)
    report.set_aside = replaced
    report.leveldb = _repair_lines(path)
    _file_away(path / "lost", folder, replaced, linked)
    for f in found.earlier:  # read by this salvage: filed with its originals
        target = folder / "earlier" / f.relative_to(path / "lost")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, target)
    with opening.translated(path):
        db = plyvel.DB(os.fsencode(path), create_if_missing=False)
        try:
            kept, named, report.tombstones_before = _inventory(db)
            report.posts_before = len(kept)
            applied = salvage.apply(db, found, progress)
            report.format_restored = _restore_format(db, bool(found.posts()))
            report.migrated = db.get(FORMAT_KEY) in opening.OLD_FORMATS  # done below, once LevelDB's lock is free
        finally:
            db.close()
    report.salvaged_posts = applied.posts
    report.salvaged_tombstones, report.salvaged_rows = applied.tombstones, applied.rows
    report.deleted_later = applied.deleted
    report.unproven = len(applied.unproven)
    quarantine = salvage.write_quarantine(folder, applied.unproven)
    report.quarantine = None if quarantine is None else str(quarantine)
    (folder / salvage.SALVAGED).write_text("every file in this folder was read by `cablestore recover`\n")
    return named


def _repair_views(path: Path, report: RecoveryReport, found: salvage.Salvage, named: set[bytes], progress) -> None:
    from cablestore.store.store import Store

    if report.migrated:
        if progress:
            progress.stage("migrate")
        Store.migrate(path, progress)  # rebuilds every derived row from the primary data just salvaged
    with Store(path, create=False, verify_signatures=False) as store, store.in_flight():
        present, author_keys = _stored_posts(store.db), list(store.db.iterator(prefix=AUTHOR, include_value=False))
        indexed = author_view.hashes(author_keys)
        evidence = author_keys + [k for k, r in found.naming.items() if r.kind == VALUE]  # read before the view repair drops them
        if progress:
            progress.stage("view repair")
        checked = store.check(fix=True, check_signatures=False)  # first: no damaged record is read below
        faults = checked.to_dict()["faults"] if checked.repaired else {}
        report.view_repair = checked.repaired
        report.deleted_again = _reapply_deletes(store)
        if report.deleted_again:
            checked = store.check(fix=True, check_signatures=False)
        after, _, report.tombstones_after = _inventory(store.db)
        tombstoned = {k[len(DELETED) : len(DELETED) + 32] for k in store.db.iterator(prefix=DELETED, include_value=False)}
        known = present | indexed | named | found.posts() | found.named()
        # A post a later post/delete removed is gone on purpose: its tombstone says so.
        report.lost = sorted(h.hex() for h in known - after - tombstoned)
        lost = describe_lost(store, [bytes.fromhex(h) for h in report.lost], evidence, run=Path(report.originals).name if report.originals else None)
        if report.originals:
            report.lost_file = str(write_lost_file(Path(report.originals), lost))
        store.remember_lost(lost)
        report.lost_posts = store.lost_posts()
    report.removed_records = [dict(f, kind=kind) for kind, items in faults.items() for f in items]
    report.consistent = checked.consistent
    report.posts_after = len(after)
    report.known_posts = len(known)


LOST_FILE = "LOST.json"


def describe_lost(store, hashes: list[bytes], evidence: list[bytes], run: str | None = None) -> list[dict]:
    """Each lost post with what the surviving ``!author!`` keys (``evidence``: the store's and the damaged files') know of it."""
    wanted, known = set(hashes), {}
    for key in evidence:
        if key[-32:] in wanted and key[-32:] not in known and (row := author_view.decode_key(key)) is not None:
            known[row.hash] = row
    out = []
    for h in hashes:
        row = known.get(h)
        out.append({
            "hash": h.hex(),
            "author": row.author.hex() if row else None,
            "name": store.name(row.author) if row else None,
            "channel": row.channel if row else None,
            "timestamp": row.timestamp if row else None,
            "type": POST_TYPE_NAMES.get(row.post_type) if row else None,
            "run": run,
        })
    return out


def write_lost_file(folder: Path, lost: list[dict]) -> Path:
    """``LOST.json`` in a run's ``lost/`` folder: every post this run found gone, with what is known of it."""
    target = folder / LOST_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"lost": lost, "count": len(lost)}, indent=1) + "\n")
    os.replace(tmp, target)  # whole or not at all
    return target


def _originals_folder(path: Path) -> Path:
    stamp = time.strftime("%Y-%m-%dT%H-%M-%SZ", time.gmtime())
    folder = path / "lost" / f"recover-{stamp}"
    n = 1
    while folder.exists():
        n += 1
        folder = path / "lost" / f"recover-{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder


def _keep_originals(path: Path, folder: Path, found: salvage.Salvage) -> dict[tuple[int, int], str]:
    """Hard-link (or copy) every LevelDB file but the tables that check whole; return ``(dev, inode) -> name``."""
    whole = {f.file for f in found.files if f.mode == "index" and not f.damaged}
    linked = {}
    for f in sorted(path.iterdir()):
        if not f.is_file() or f.name == "LOCK" or f.name in whole:
            continue
        try:
            os.link(f, folder / f.name)
        except OSError:
            shutil.copy2(f, folder / f.name)
        st = os.stat(folder / f.name)
        linked[(st.st_dev, st.st_ino)] = f.name
    return linked


def _top_level(lost: Path) -> set[str]:
    return {f.name for f in lost.iterdir() if f.is_file()} if lost.is_dir() else set()


def _file_away(lost: Path, folder: Path, names: list[str], linked: dict) -> None:
    """Files LevelDB's repair put in ``lost/``: dropped where the folder holds the same file (a hard link), else moved in."""
    for name in names:
        f = lost / name
        st = os.stat(f)
        if (st.st_dev, st.st_ino) in linked:
            f.unlink()  # its other name, in the dated folder, keeps it
        else:
            target = folder / "leveldb-repair" / name
            target.parent.mkdir(exist_ok=True)
            os.replace(f, target)


def _reapply_deletes(store) -> list[str]:
    """Delete again the posts a stored post/delete of their author deletes.

    LevelDB's repair can drop a block holding the deletion of a post (and
    another holding its tombstone) while the post itself survives in an
    older table: the post comes back.  Its author's post/delete, if stored,
    still names it; discarding and re-ingesting that delete applies it again
    (tombstones included), through the ingest path itself.
    """
    deletes = []
    for key, blob in store.db.iterator(prefix=POSTS):
        try:
            post = decode_post(blob)
        except CableError:
            continue  # the view repair removes it
        if post.post_type == DELETE:
            deletes.append((key[len(POSTS) :], blob, post))
    back = set()
    for h, blob, post in deletes:
        targets = [t for t in post.hashes if (stored := store.db.get(POSTS + t)) is not None and stored[:32] == post.public_key]
        if not targets or post_hash(blob) != h:
            continue
        store.delete(h)
        try:
            store.ingest(blob)
        except CableError:
            continue  # the delete is refused now: the post stays, as the check left it
        back.update(targets)
    return sorted(t.hex() for t in back)


class _leveldb_lock:
    """LevelDB's fcntl lock on STORE/LOCK, so no other process has the store open."""

    def __init__(self, path: Path):
        self.path = path / "LOCK"

    def __enter__(self):
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a read-only medium, no permission: worded as every other writing open words it
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise opening.unwritable(self.path.parent, exc.strerror) from exc
            raise StoreError(f"cannot lock {self.path}: {exc.strerror}") from exc
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            raise opening.locked(self.path.parent) from exc
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing drops the lock


def _repair_lines(path: Path) -> list[str]:
    try:
        text = (path / "LOG").read_text(errors="replace")
    except OSError:
        return []
    return [line.split(" ", 2)[-1] for line in text.splitlines() if _REPAIR_LINE.search(line)]


def _restore_format(db, ours: bool) -> bool:
    """Put ``!meta!format`` back if repair lost it but the data is a cablestore store's."""
    if db.get(FORMAT_KEY) is not None:
        return False
    if not ours and not any(True for _ in db.iterator(prefix=POSTS, include_value=False)) and not any(True for _ in db.iterator(prefix=AUTHOR, include_value=False)):
        return False  # not ours: opening will refuse it
    # Format 1 kept a reverse entry ``!rev!<hash>`` (37 bytes) per post: its rows say which format they are.
    old = any(len(k) == len(REVERSE) + 32 for k in db.iterator(prefix=REVERSE, include_value=False))
    db.put(FORMAT_KEY, opening.OLD_FORMATS[0] if old else opening.FORMAT, sync=True)
    return True


def _stored_posts(db) -> set[bytes]:
    """The hashes of the posts a store holds."""
    return {k[len(POSTS) :] for k in db.iterator(prefix=POSTS, include_value=False) if len(k) == _POST_KEY_LEN}


def _inventory(db) -> tuple[set[bytes], set[bytes], int]:
    """Stored post hashes, hashes the views name (every indexed post has one ``!author!`` entry, ending in its hash), and the tombstone count."""
    indexed = author_view.hashes(db.iterator(prefix=AUTHOR, include_value=False))
    tombstones = sum(1 for _ in db.iterator(prefix=DELETED, include_value=False))
    return _stored_posts(db), indexed, tombstones
