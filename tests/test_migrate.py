"""Migration to the current format: a format-1 store is refused until migrated, and the migration keeps every answer.

The format-1 store is tests/data/format1-store.tar.gz, written by format-1 code
(tests/format1_fixture.py), with the answers that code gave in
format1-answers.json.gz: a migrated copy must give the same, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import pytest

from cablestore import Store
from cablestore.errors import MigrationNeededError, NotAStoreError, StoreLockedError
from cablestore.keyspace.keys import FORMAT_KEY, MIGRATING, REINDEXING
from cablestore.store.lifecycle import opening

from .conftest import NOW, keypair, post, run_cli
from .format1_fixture import answers, encode, golden, unpack

PRIMARY_AND_KEPT = (b"!post!", b"!deleted!", b"!facts!", b"!local!", b"!meta!", b"!quarantine!", b"!refused!")


def raw(path) -> list[tuple[bytes, bytes]]:
    """Every key and value of the store at ``path``, whatever its format (read-only: nothing written)."""
    db, key, links = opening.open_db(path, create=False, readonly=True, migrating=True)
    try:
        return list(db.iterator())
    finally:
        opening.close_db(db, key, links)


def files(path) -> dict[str, str]:
    """Every file of the directory and a digest of its bytes (a read-only open changes none)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.fixture(scope="module")
def format1(tmp_path_factory):
    """The format-1 fixture store, unpacked once (tests copy it before changing it)."""
    return unpack(tmp_path_factory.mktemp("format1"))


@pytest.fixture(scope="module")
def migrated(format1, tmp_path_factory):
    """A copy of the fixture, migrated once: (its path, the report)."""
    path = tmp_path_factory.mktemp("migrated") / "store"
    shutil.copytree(format1, path)
    return path, Store.migrate(path)


def test_the_fixture_is_a_format_1_store(format1):
    assert dict(raw(format1))[FORMAT_KEY] == b"cablestore-1"
    assert MIGRATING not in dict(raw(format1)) and REINDEXING not in dict(raw(format1))


def test_a_new_store_is_in_the_current_format(tmp_path):
    with Store(tmp_path / "new") as s:
        assert s.db.get(FORMAT_KEY) == opening.FORMAT == b"cablestore-3"


@pytest.mark.parametrize("mode", ["writable", "create_false", "readonly"])
def test_opening_a_format_1_store_is_refused_naming_the_command_and_changes_nothing(format1, mode):
    before_files, before = files(format1), raw(format1)
    kw = {"writable": {}, "create_false": {"create": False}, "readonly": {"readonly": True}}[mode]
    with pytest.raises(MigrationNeededError, match=r"is in format cablestore-1; run `cablestore migrate .*format1-store` \(or Store.migrate\) to upgrade it"):
        Store(format1, **kw)
    assert raw(format1) == before
    if mode == "readonly":
        assert files(format1) == before_files  # not a byte of the directory written
    with _reopened(format1):  # the refused open let go of the path
        pass


def _reopened(path):
    """The raw store opened again in this process (a refused open must have released its claim)."""
    import contextlib

    @contextlib.contextmanager
    def held():
        db, key, links = opening.open_db(path, create=False, readonly=True, migrating=True)
        try:
            yield db
        finally:
            opening.close_db(db, key, links)

    return held()


def test_migration_needed_is_a_store_error_and_an_unknown_format_stays_refused(tmp_path):
    from cablestore.errors import StoreError

    assert issubclass(MigrationNeededError, StoreError)
    with Store(tmp_path / "s") as s:
        s.db.put(FORMAT_KEY, b"cablestore-9", sync=True)
    with pytest.raises(NotAStoreError, match="cablestore-9"):
        Store(tmp_path / "s")
    with pytest.raises(NotAStoreError, match="cablestore-9"):
        Store.migrate(tmp_path / "s")


def test_every_command_on_a_format_1_store_prints_one_line_and_exits_2(format1, tmp_path, capsys):
    import socket

    from cablestore.authoring.workload import write_posts

    posts = tmp_path / "posts.bin"
    write_posts(posts, [post(keypair("x"), 0, NOW, channel="c", text="t")])
    listener = socket.create_server(("127.0.0.1", 0))  # sync connects before it opens the store: a peer that never answers
    listener_port = listener.getsockname()[1]
    before = raw(format1)
    commands = [
        ["stats", format1],
        ["show", format1, "general"],
        ["check", format1],
        ["export", format1, tmp_path / "snap"],
        ["reindex", format1],
        ["ingest", format1, posts],
        ["search", format1, "hello"],
        ["serve", format1, "--listen", "127.0.0.1:0", "--quiet"],
        ["sync", format1, "--connect", f"127.0.0.1:{listener_port}", "--quiet", "--timeout", "5"],
        ["web", format1, "--listen", "127.0.0.1:0"],
    ]
    with listener:
        results = [(argv, run_cli(capsys, argv)) for argv in commands]
    for argv, (code, out, err) in results:
        assert code == 2, (argv, out, err)
        assert err.count("\n") == 1 and f"cablestore {argv[0]}: MigrationNeededError: " in err, (argv, err)
        assert f"run `cablestore migrate {format1}` to upgrade it" in err  # the CLI's words: no Store.migrate
    assert not (tmp_path / "snap").exists()
    code, out, _ = run_cli(capsys, ["stats", format1, "--json"])
    assert code == 2 and json.loads(out)["error"] == "MigrationNeededError"
    assert raw(format1) == before


def test_migration_keeps_every_answer_byte_for_byte(migrated):
    path, report = migrated
    with Store(path, readonly=True) as s:
        assert encode(answers(s)) == golden()


def test_migration_flips_the_format_keeps_the_primary_and_local_rows_and_checks_consistent(format1, migrated):
    path, report = migrated
    assert report.migrated and not report.resumed and report.from_format == "cablestore-1" and report.to_format == "cablestore-3"
    assert report.posts == 539 and report.written > 0 and report.dropped > 0 and report.faults == []
    after = dict(raw(path))
    assert after[FORMAT_KEY] == b"cablestore-3" and MIGRATING not in after and REINDEXING not in after
    kept = lambda rows: {k: v for k, v in rows if k.startswith(PRIMARY_AND_KEPT) and k != FORMAT_KEY}  # noqa: E731
    assert kept(raw(format1)) == kept(after.items())  # posts, tombstones, facts, local rows, search flag, quarantine, refusals
    assert b"!meta!search" in after and any(k.startswith(b"!quarantine!") for k in after)
    with Store(path, readonly=True) as s:
        assert s.check(check_signatures=False).consistent


def test_migration_writes_what_a_reindex_of_the_same_posts_writes(migrated, tmp_path):
    from cablestore.rebuild.reindex import reindex

    path, _ = migrated
    again = tmp_path / "again"
    shutil.copytree(path, again)
    with Store(again) as s:
        reindex(s)
    assert raw(again) == raw(path)


def test_migration_leaves_only_linker_rows_under_rev_so_the_link_filter_counts_targets_only(format1, migrated):
    """Format 1's ``!rev!<hash>`` of every post is gone after the migration: the link filter, which counts every
    ``!rev!`` key's hash, holds exactly the linked targets (a leftover row would add every post's hash to it)."""
    from cablestore.keyspace.keys import REVERSE
    from cablestore.store.write.hashfilter import HashFilter

    own_rows = lambda rows: [k for k, _ in rows if k.startswith(REVERSE) and len(k) == len(REVERSE) + 32]  # noqa: E731
    assert len(own_rows(raw(format1))) > 0  # the format-1 store has them: the check below means something
    path, _ = migrated
    rows = raw(path)
    assert own_rows(rows) == []
    targets = {k[len(REVERSE) : len(REVERSE) + 32] for k, _ in rows if k.startswith(REVERSE)}
    assert targets
    with Store(path, readonly=True) as s:
        built = HashFilter(s.db, REVERSE)
    assert built._count == len(targets) and all(built.might_have(t) for t in targets)


def test_migrating_a_current_format_store_is_a_no_op_that_says_so(migrated, capsys):
    path, _ = migrated
    before = raw(path)
    report = Store.migrate(path)
    assert not report.migrated and report.from_format == report.to_format == "cablestore-3"
    code, out, err = run_cli(capsys, ["migrate", path])
    assert code == 0 and "is in format cablestore-3 already: nothing to migrate" in out and err == ""
    code, out, _ = run_cli(capsys, ["migrate", path, "--json"])
    assert code == 0 and json.loads(out)["migrated"] is False
    assert raw(path) == before


def test_cli_migrate_reports_and_a_held_store_is_refused(format1, tmp_path, capsys):
    path = tmp_path / "s"
    shutil.copytree(format1, path)
    db, key, links = opening.open_db(path, create=False, migrating=True)  # someone holds it
    try:
        code, _, err = run_cli(capsys, ["migrate", path, "--quiet"])
        assert code == 2 and "StoreLockedError" in err and err.count("\n") == 1
        with pytest.raises(StoreLockedError):
            Store.migrate(path)
    finally:
        opening.close_db(db, key, links)
    assert dict(raw(path))[FORMAT_KEY] == b"cablestore-1"
    code, out, err = run_cli(capsys, ["migrate", path, "--json"])
    data = json.loads(out)
    assert code == 0 and data["migrated"] and data["posts"] == 539 and data["written"] > 0 and data["dropped"] > 0 and data["seconds"] >= 0
    assert err == ""  # --json: no progress line


def test_a_format_2_store_lacking_range_sums_is_refused_then_migrated_with_them(migrated, tmp_path):
    """Format 2 had no !recon rows: opened as is, its fingerprints would be wrong, so it is refused until migrated."""
    from cablestore.keyspace.keys import RECON

    path = tmp_path / "f2"
    shutil.copytree(migrated[0], path)
    db, key, links = opening.open_db(path, create=False, migrating=True)
    try:  # what format-2 code left: the same rows but the range sums
        sums = [k for k, _ in db.iterator(prefix=RECON)]
        assert sums
        with db.write_batch() as wb:
            for k in sums:
                wb.delete(k)
            wb.put(FORMAT_KEY, b"cablestore-2")
    finally:
        opening.close_db(db, key, links)
    with pytest.raises(MigrationNeededError, match="format cablestore-2"):
        Store(path)
    report = Store.migrate(path)
    assert report.migrated and report.from_format == "cablestore-2"
    assert [k for k, _ in raw(path) if k.startswith(RECON)] == sums
    with Store(path, readonly=True) as s:
        assert s.check().consistent


def test_a_snapshot_exported_from_a_format_1_store_is_refused():
    from cablestore.errors import RebuildError
    from cablestore.rebuild.parquet import FORMAT, parse_manifest

    manifest = {"format": FORMAT, "partitions": 2, "counts": {}, "files": {}, "store": {"name": "s", "meta": {"format": "cablestore-1"}}}
    with pytest.raises(RebuildError, match=r"exported from a store in format cablestore-1; migrate the store \(`cablestore migrate STORE`\)"):
        parse_manifest(json.dumps(manifest), "snap")
    manifest["store"]["meta"]["format"] = "cablestore-2"  # no !recon range sums
    with pytest.raises(RebuildError, match=r"exported from a store in format cablestore-2"):
        parse_manifest(json.dumps(manifest), "snap")
    manifest["store"]["meta"]["format"] = "cablestore-3"
    assert parse_manifest(json.dumps(manifest), "snap")["partitions"] == 2


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_during_migrate_at_every_phase_resumes_to_the_uninterrupted_store(format1, migrated, tmp_path):
    from benchmarks.crash import run_migrate_kills

    path, _ = migrated
    stats = run_migrate_kills(format1, tmp_path, expected=raw(path), log=lambda *_: None)
    assert stats["kills"] == stats["points"] >= 5  # every phase: the marker, the drop, the index, the latest rows, before the flip
    assert stats["resumed"] == stats["kills"]


def test_recover_of_a_damaged_format_1_store_migrates_it_and_names_what_is_gone(format1, migrated, tmp_path):
    """A damaged table in a format-1 store: recover salvages, migrates (no second command), then repairs the views."""
    from cablestore.recovery.recovering import recover

    path = tmp_path / "store"
    shutil.copytree(format1, path)
    table = max(path.glob("*.ldb"), key=lambda f: f.stat().st_size)
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0x40  # one data block's checksum fails
    table.write_bytes(bytes(data))
    report = recover(path)
    assert report.migrated and report.consistent and not report.intact
    from cablestore.cli.maintenance import format_recovery

    assert "migrated: a format-1 store" in format_recovery(report)
    assert dict(raw(path))[FORMAT_KEY] == b"cablestore-3" and MIGRATING not in dict(raw(path))
    with Store(migrated[0], create=False) as s:
        expected = {k for k, _ in s.items(b"!post!")}
    with Store(path, create=False) as s:
        after = {k for k, _ in s.items(b"!post!")}
        assert s.check().consistent
    gone = {b"!post!" + bytes.fromhex(h) for h in report.lost} | {b"!post!" + bytes.fromhex(r["hash"]) for r in report.removed_records}
    assert after <= expected and expected - after <= gone  # every post that is gone is named
