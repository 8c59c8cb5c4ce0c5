"""Salvage: every post, tombstone and local row a store's files can prove, read before LevelDB's repair.

:func:`scan` reads every LevelDB file of a store directory (the tables,
block by block when a table is cut short or its index is damaged; the
write-ahead logs, record by record; and the files earlier repairs left in
``lost/``) through :mod:`cablestore.recovery.leveldb.tables` and
:mod:`cablestore.recovery.leveldb.log`, and keeps, for
each key of the data that is not derived (``!post!``, ``!deleted!``,
``!local!``, ``!refused!``, ``!quarantine!``, ``!meta!format``), the record
with the highest sequence number: a key deleted later is not brought back.

What is taken (:func:`apply`, after LevelDB's repair, into what it kept):

* a post whose value hashes to its key, decodes strictly and whose Ed25519
  signature checks, from any file, damaged block or not: a post certifies
  itself;
* a tombstone whose fields and tag check;
* any other record only from a block or log record whose CRC32C checks;
* a deletion only from a block or log record whose CRC32C checks.

What is not proven is written to a quarantine file beside the originals,
never to the store.  The views are then recomputed (``check --repair``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import plyvel

from cablestore.errors import CableError
from cablestore.keyspace import facts
from cablestore.keyspace.keys import AUTHOR, DELETED, FACTS, FORMAT_KEY, LOCAL, POSTS, QUARANTINE, REFUSED, SEARCH_KEY
from cablestore.keyspace.records import Tombstone
from cablestore.progress import Progress
from cablestore.recovery.leveldb import log as leveldb_log
from cablestore.recovery.leveldb import manifest as leveldb_files
from cablestore.recovery.leveldb import tables as reader
from cablestore.store.lifecycle.opening import FORMAT, OLD_FORMATS
from cablestore.views import author as author_view
from cablestore.wire.codec import decode_post, post_hash
from cablestore.wire.crypto import verify_many

KEPT = (DELETED, FACTS, LOCAL, FORMAT_KEY, SEARCH_KEY, POSTS, QUARANTINE, REFUSED)  # in key order (SEARCH_KEY: a store that kept the search view keeps it)
# Derived keys read as evidence only, never written back: every indexed post has one
# ``!author!`` key, ending in its hash, so a post whose bytes are gone is still known (``lost``).
NAMING = (AUTHOR,)
_READ = KEPT + NAMING
SALVAGED = "SALVAGED"  # in a folder of lost/: its files were salvaged once; later recovers skip it
_TABLE_SUFFIXES = (".ldb", ".sst")


@dataclass
class FileReport:
    """What one file held."""

    file: str
    mode: str  # index | blocks | log
    units: int  # blocks or log records whose checksum checked
    damaged: list[str]  # "offset+length: why" of each unit that did not
    posts: int  # distinct post hashes found (proven or not)
    tombstones: int
    leftover: bool = False  # a table the MANIFEST never listed: a compaction's leftover, not the store's data


@dataclass
class Salvage:
    """The result of :func:`scan`: the latest record of each kept key, and why the store is not intact."""

    path: Path
    files: list[FileReport] = field(default_factory=list)
    latest: dict[bytes, reader.Record] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why the directory is not intact (empty: intact)
    rejected: list[dict] = field(default_factory=list)  # records no file certifies and no proof holds
    earlier: list[Path] = field(default_factory=list)  # files left in lost/ by earlier repairs, read here
    leftovers: set[str] = field(default_factory=set)  # tables a compaction left that the MANIFEST never listed
    naming: dict[bytes, reader.Record] = field(default_factory=dict)  # the latest record of each ``!author!`` key read (evidence)

    @property
    def intact(self) -> bool:
        """Every file checks: nothing for LevelDB's repair to do."""
        return not self.problems

    def posts(self) -> set[bytes]:
        """Hashes of the posts the files say the store holds (the latest write a put)."""
        return {k[len(POSTS) :] for k, r in self.latest.items() if k.startswith(POSTS) and r.kind == reader.VALUE and len(k) == len(POSTS) + 32}

    def named(self) -> set[bytes]:
        """Hashes of the posts the views' ``!author!`` keys in the files name (the latest write a put): stored once."""
        return author_view.hashes(k for k, r in self.naming.items() if r.kind == reader.VALUE)


def _wanted(low: bytes, high: bytes | None) -> bool:
    return any(high is None or high >= p for p in _READ if low < _after(p))


def _after(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _tables_and_logs(folder: Path) -> list[Path]:
    out = []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return out
    for f in entries:
        stem, suffix = os.path.splitext(f.name)
        if stem.isdigit() and suffix in (*_TABLE_SUFFIXES, ".log") and f.is_file():
            out.append(f)
    return out


def earlier_files(path: Path) -> list[Path]:
    """Tables and logs in ``lost/`` that no salvage has read: LevelDB's own leftovers, or a recover cut short."""
    lost = path / "lost"
    out = _tables_and_logs(lost)
    if lost.is_dir():
        for sub in sorted(lost.iterdir()):
            if sub.is_dir() and not (sub / SALVAGED).exists():
                out += _tables_and_logs(sub)
    return out


def scan(path: Path, progress: Progress | None = None) -> Salvage:
    """Read every table and log of ``path`` (and the unsalvaged ones in ``lost/``) before anything changes."""
    result = Salvage(path)
    live = _tables_and_logs(path)
    result.earlier = earlier_files(path)
    _check_bookkeeping(path, live, result)
    if result.earlier:
        result.problems.append(f"{len(result.earlier)} files in lost/ not salvaged yet")
    if progress:
        progress.stage("salvage: MiB read", sum(_size(f) for f in live + result.earlier) >> 20 or 1)
    for f in live + result.earlier:
        name = str(f.relative_to(path))
        try:
            data = f.read_bytes()
        except OSError as exc:
            result.problems.append(f"{name}: cannot read ({exc.strerror})")
            continue
        if f.suffix == ".log":
            found = leveldb_log.read_log(data, name, _READ)
        else:
            found = reader.read_table(data, name, _READ, _wanted)
        del data
        _take(result, [r for r in found.records if not r.key.startswith(NAMING)])
        _note_naming(result.naming, (r for r in found.records if r.key.startswith(NAMING)))
        posts = {r.key for r in found.records if r.key.startswith(POSTS) and r.kind == reader.VALUE}
        tombs = {r.key for r in found.records if r.key.startswith(DELETED) and r.kind == reader.VALUE}
        leftover = f.parent == path and f.name in result.leftovers
        result.files.append(FileReport(name, found.mode, found.units, found.damaged, len(posts), len(tombs), leftover))
        if f.parent == path and not found.intact and not leftover:
            what = "read block by block (footer or index gone)" if found.mode == "blocks" else ""
            result.problems.append(f"{name}: {len(found.damaged)} damaged parts {what}".strip())
        if progress:
            progress.advance(found.size >> 20)
    return result


def _size(f: Path) -> int:
    try:
        return f.stat().st_size
    except OSError:
        return 0


def _check_bookkeeping(path: Path, live: list[Path], result: Salvage) -> None:
    """CURRENT names a MANIFEST whose records all check, listing exactly the tables on disk."""
    try:
        manifest = (path / "CURRENT").read_text().strip()
        parsed = leveldb_files.manifest_tables((path / manifest).read_bytes()) if manifest.startswith("MANIFEST-") else None
    except (OSError, UnicodeDecodeError):
        result.problems.append("CURRENT or the MANIFEST it names is missing or unreadable")
        return
    if parsed is None:
        result.problems.append(f"{manifest} is damaged")
        return
    listed, _ = parsed
    on_disk = {int(f.stem) for f in live if f.suffix in _TABLE_SUFFIXES}
    if listed - on_disk:
        result.problems.append(f"{manifest} lists {len(listed - on_disk)} tables that are missing")
    # A table the MANIFEST does not list is a compaction's leftover (LevelDB deletes it
    # when it opens the store), unless the MANIFEST lost the edits that listed it.
    if on_disk - listed and leveldb_files.unlisted_tables(path):
        result.problems.append(f"{len(on_disk - listed)} tables the {manifest} does not list")
    else:
        result.leftovers = {f.name for f in live if f.suffix in _TABLE_SUFFIXES and int(f.stem) not in listed}


def _take(result: Salvage, records: Iterable[reader.Record]) -> None:
    """Keep each record that passes its cheap check if it is the latest of its key so far."""
    latest = result.latest
    for rec in records:
        why = _flaw(rec)
        if why is not None:
            result.rejected.append({"key": rec.key.hex(), "value": rec.value.hex(), "source": rec.source, "why": why})
            continue
        held = latest.get(rec.key)
        if held is None or rec.seq > held.seq or (rec.seq == held.seq and rec.certified and not held.certified):
            latest[rec.key] = rec


def _note_naming(naming: dict, records: Iterable[reader.Record]) -> None:
    """Keep the latest record of each evidence key (checksummed or not: it only names a hash)."""
    for rec in records:
        held = naming.get(rec.key)
        if held is None or rec.seq > held.seq:
            naming[rec.key] = rec


def _flaw(rec: reader.Record) -> str | None:
    """Why a record cannot be taken, before signatures (checked only for posts the repair did not keep)."""
    key = rec.key
    if rec.kind == reader.DELETION:
        return None if rec.certified else "a deletion in a damaged block"
    if key.startswith(POSTS):
        if len(key) != len(POSTS) + 32 or post_hash(rec.value) != key[len(POSTS) :]:
            return "post bytes do not hash to the key"
        return None
    if key.startswith(DELETED):
        rest = key[len(DELETED) :]
        try:
            Tombstone.unpack(rest[:32], rest[32:], rec.value)
        except CableError as exc:
            return str(exc)
        return None if len(rest) == 64 else "tombstone key of the wrong length"
    if key.startswith(FACTS):  # tagged like a tombstone: a flipped bit is caught
        try:
            facts.unpack(key[len(FACTS) :], rec.value)
        except CableError as exc:
            return str(exc)
        return None if len(key) == len(FACTS) + 32 else "fact key of the wrong length"
    if not rec.certified:
        return "in a damaged block (nothing but a checksum certifies it)"
    if key == FORMAT_KEY and rec.value != FORMAT and rec.value not in OLD_FORMATS:  # an older store is migrated, not recovered into a new format
        return "unknown format"
    return None


@dataclass
class Applied:
    """What :func:`apply` wrote beyond LevelDB's repair."""

    posts: list[str] = field(default_factory=list)  # hex hashes of posts brought back
    tombstones: int = 0
    rows: int = 0  # local, refusal, quarantine and format rows
    deleted: list[str] = field(default_factory=list)  # keys LevelDB's repair brought back that a later deletion removed
    unproven: list[dict] = field(default_factory=list)


def apply(db: plyvel.DB, salvage: Salvage, progress: Progress | None = None) -> Applied:
    """Write into the repaired ``db`` every salvaged record it lacks, in one WriteBatch."""
    done = Applied(unproven=list(salvage.rejected))
    missing_posts: list[tuple[bytes, reader.Record]] = []
    with db.write_batch(sync=True) as wb:
        for key, rec in sorted(salvage.latest.items()):
            current = db.get(key)
            if rec.kind == reader.DELETION:
                if current is not None:
                    wb.delete(key)
                    done.deleted.append(key.hex())
                continue
            if current == rec.value:
                continue
            if key.startswith(POSTS):
                missing_posts.append((key, rec))
            else:
                wb.put(key, rec.value)
                if key.startswith(DELETED):
                    done.tombstones += 1
                else:
                    done.rows += 1
        for rec, why in prove([r for _, r in missing_posts], progress):
            if why is None:
                wb.put(rec.key, rec.value)
                done.posts.append(rec.key[len(POSTS) :].hex())
            else:
                done.unproven.append({"key": rec.key.hex(), "value": rec.value.hex(), "source": rec.source, "why": why})
    return done


def prove(records: list[reader.Record], progress: Progress | None = None) -> Iterator[tuple[reader.Record, str | None]]:
    """Each post record with None if it is proven (its hash was checked when found: its signature and a strict decode), else why not."""
    if progress:
        progress.stage("salvage: posts proven", len(records))
    for i in range(0, len(records), 4096):
        chunk = records[i : i + 4096]
        for rec, signed in zip(chunk, verify_many([r.value for r in chunk]), strict=True):
            why = None if signed else "bad signature"
            if why is None:
                try:
                    decode_post(rec.value)
                except CableError as exc:
                    why = f"does not decode: {exc}"
            yield rec, why
        if progress:
            progress.advance(len(chunk))


def unheld_loose_posts(db: plyvel.DB, found: Salvage) -> list[reader.Record]:
    """Posts found only outside a checked block or log record (a write cut short) that ``db`` does not hold."""
    return [r for k, r in found.latest.items() if k.startswith(POSTS) and r.kind == reader.VALUE and not r.certified and db.get(k) is None]


def write_quarantine(folder: Path, unproven: list[dict]) -> Path | None:
    """The unproven records, one JSON object a line (key, value, source, why), or None if there are none."""
    if not unproven:
        return None
    out = folder / "unproven.jsonl"
    with open(out, "w") as fh:
        for item in unproven:
            fh.write(json.dumps(item) + "\n")
    return out
