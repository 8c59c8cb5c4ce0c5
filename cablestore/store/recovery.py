"""Recovering a damaged store: LevelDB's repair, then a view repair, and an account of losses.

``recover(path)`` is what ``cablestore recover STORE`` runs:

1. take LevelDB's lock (so no process has the store open) and read the
   evidence of what the store held: every ``!post!`` write and delete in
   its write-ahead logs (read leniently, damaged or not);
2. ``plyvel.repair_db``: LevelDB rebuilds ``CURRENT`` and the ``MANIFEST``
   from the table files, turns the logs into tables, keeps every record it
   can read and moves the files it replaced to ``STORE/lost/``;
3. more evidence from the repaired database: the reverse entry
   (``!rev!<hash>``) each stored post has, in another part of the key space
   than the post itself;
4. ``check --repair``: damaged records (a post whose bytes no longer hash to
   its key, a damaged tombstone) are removed and the views recomputed;
5. posts a stored post/delete of their author names (back because the
   blocks recording their deletion were damaged) are deleted again;
6. the report: posts and tombstones before the view repair and after,
   every post the evidence says was stored but is not any more (``lost``:
   fetch those again from a peer), and LevelDB's lines about data it could
   not read (``damaged``: a table or log block whose posts cannot be named,
   because the evidence of them was in the same block).

What recovery keeps: every record LevelDB's repair can read whose bytes
still match their hash; nothing damaged is indexed, nothing intact is
dropped.  Repair is idempotent: run it again after an interruption.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import plyvel

from cablestore.errors import CableError, StoreError, StoreLockedError
from cablestore.keyspace import reverse
from cablestore.keyspace.keys import DELETED, FORMAT_KEY, POSTS
from cablestore.progress import Progress
from cablestore.store import leveldb_files, opening
from cablestore.wire.codec import DELETE, decode_post, post_hash

_POST_KEY_LEN = len(POSTS) + 32
# In a WriteBatch a record is: tag (1 put, 0 delete), varint key length, key[, varint value length, value].
_POST_OP = re.compile(rb"([\x00\x01])" + bytes([_POST_KEY_LEN]) + re.escape(POSTS) + rb"(.{32})", re.DOTALL)
_DAMAGE = re.compile(r"(Corruption|ignoring|dropping|IO error|Invalid argument|unparsable)")
_REPAIR_LINE = re.compile(r"(Log #|Table #|Archiving|Repaired|dropping|Corruption|lost)", re.IGNORECASE)


@dataclass
class RecoveryReport:
    """What ``recover`` found and kept."""

    path: str
    posts_before: int = 0  # after LevelDB's repair, before the view repair
    tombstones_before: int = 0
    posts_after: int = 0
    tombstones_after: int = 0
    known_posts: int = 0  # posts the evidence says the store held
    lost: list[str] = field(default_factory=list)  # hex hashes: stored once, gone now
    removed_records: list[dict] = field(default_factory=list)  # damaged records the view repair removed
    view_repair: dict | None = None
    set_aside: list[str] = field(default_factory=list)  # files LevelDB moved to lost/
    leveldb: list[str] = field(default_factory=list)  # LevelDB's own account of the repair
    damaged: list[str] = field(default_factory=list)  # LevelDB lines naming data it could not read
    format_restored: bool = False
    deleted_again: list[str] = field(default_factory=list)  # deleted posts that came back, deleted again
    consistent: bool = False

    @property
    def lossless(self) -> bool:
        """Nothing lost, nothing removed, nothing LevelDB could not read."""
        return not self.lost and not self.removed_records and not self.damaged

    def to_dict(self) -> dict:
        """The report as JSON-ready data (``cablestore recover --json``)."""
        return {**asdict(self), "lossless": self.lossless}


def recover(path: str | os.PathLike, progress: Progress | None = None) -> RecoveryReport:
    """Repair the LevelDB at ``path``, then its views; report what was kept and lost."""
    from cablestore.store.store import Store

    path = Path(path)
    kind = opening.classify(path)
    if kind not in (opening.Kind.STORE, opening.Kind.HEADLESS):
        raise opening.refusal(path, kind, create=False) or StoreError(f"{path}: nothing to recover")
    report = RecoveryReport(str(path))
    registered = opening.claim(path)
    try:
        if progress:
            progress.stage("LevelDB repair")
        before_lost = set(os.listdir(path / "lost")) if (path / "lost").is_dir() else set()
        with _leveldb_lock(path):
            logged = _log_evidence(path)
            with opening.translated(path):
                plyvel.repair_db(os.fsencode(path), paranoid_checks=True)  # checksums: drop damaged blocks, keep the rest
        report.set_aside = sorted(set(os.listdir(path / "lost")) - before_lost) if (path / "lost").is_dir() else []
        report.leveldb = _repair_lines(path)
        report.damaged = [line for line in report.leveldb if _DAMAGE.search(line)]
        report.format_restored = _restore_format(path)
    finally:
        opening.release(registered)
    with Store(path, create=False, verify_signatures=False) as store, store.in_flight():
        present, rev, report.tombstones_before = _inventory(store.db)
        report.posts_before = len(present)
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
    report.removed_records = [dict(f, kind=kind) for kind, items in faults.items() for f in items]
    report.consistent = checked.consistent
    report.posts_after, report.tombstones_after = len(after), report.tombstones_after
    known = present | rev | logged
    report.known_posts = len(known)
    # A post a later post/delete removed is gone on purpose: its tombstone says so.
    report.lost = sorted(h.hex() for h in known - after - tombstoned)
    if progress:
        progress.done()
    return report


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
        except OSError as exc:
            raise StoreError(f"cannot lock {self.path}: {exc.strerror}") from exc
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            raise StoreLockedError(f"{self.path.parent} is open in another process; close it first") from exc
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing drops the lock


def _log_evidence(path: Path) -> set[bytes]:
    """Hashes whose last ``!post!`` write in the logs is a put (damaged records included)."""
    last: dict[bytes, bool] = {}
    # LevelDB's logs only (NNNNNN.log files): anything else an operator left there is not read.
    logs = [p for p in path.glob("*.log") if p.stem.isdigit() and p.is_file()]
    for log in sorted(logs, key=lambda p: int(p.stem)):
        data = log.read_bytes()
        for payload in leveldb_files.records(data):
            for m in _POST_OP.finditer(payload):
                last[m.group(2)] = m.group(1) == b"\x01"
        # A damaged header can hide a record from the reassembly; its puts still count.
        for m in _POST_OP.finditer(data):
            last.setdefault(m.group(2), m.group(1) == b"\x01")
    return {h for h, put in last.items() if put}


def _repair_lines(path: Path) -> list[str]:
    try:
        text = (path / "LOG").read_text(errors="replace")
    except OSError:
        return []
    return [line.split(" ", 2)[-1] for line in text.splitlines() if _REPAIR_LINE.search(line)]


def _restore_format(path: Path) -> bool:
    """Put ``!meta!format`` back if repair lost it but the data is a cablestore store's."""
    with opening.translated(path):
        db = plyvel.DB(os.fsencode(path), create_if_missing=False)
        try:
            if db.get(FORMAT_KEY) is not None:
                return False
            if not any(True for _ in db.iterator(prefix=POSTS, include_value=False)) and not any(
                True for _ in db.iterator(prefix=reverse.PREFIX, include_value=False)
            ):
                return False  # not ours: opening will refuse it
            db.put(FORMAT_KEY, opening.FORMAT, sync=True)
            return True
        finally:
            db.close()


def _inventory(db) -> tuple[set[bytes], set[bytes], int]:
    """Stored post hashes, hashes with a reverse entry, and the tombstone count."""
    posts = {k[len(POSTS) :] for k in db.iterator(prefix=POSTS, include_value=False) if len(k) == _POST_KEY_LEN}
    rev = {k[len(reverse.PREFIX) :] for k in db.iterator(prefix=reverse.PREFIX, include_value=False) if len(k) == len(reverse.PREFIX) + 32}
    tombstones = sum(1 for _ in db.iterator(prefix=DELETED, include_value=False))
    return posts, rev, tombstones
