"""``recover`` (cablestore.recovery.recovering): what it refuses (a directory that is not a store, a store
another process holds), what it leaves alone (an intact or crashed store, files that are not LevelDB's),
what it repairs (a store without CURRENT, a table cut short, a deleted post that came back) and how it
reports (the text report, progress on a terminal only)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.cli import main
from cablestore.errors import StoreNotFoundError
from cablestore.recovery.recovering import recover

from .damaged_stores import NOW, crashed_store, store_of_tables
from .damaged_stores import stored as stored_posts


def test_store_without_current_is_recovered_whole(tmp_path, capsys):
    path = tmp_path / "s"
    with Store(path, now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(generate(seed=4, posts=300))
        s.db.compact_range()
        expected = {k for k, _ in s.items(b"!post!")}
    (path / "CURRENT").unlink()
    assert main(["recover", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["consistent"] and out["lossless"] and out["posts_after"] == len(expected)
    with Store(path, create=False) as s:
        assert {k for k, _ in s.items(b"!post!")} == expected


def test_recover_refuses_what_is_not_a_store(tmp_path, capsys):
    assert main(["recover", str(tmp_path / "missing")]) == 2
    assert "StoreNotFoundError" in capsys.readouterr().err
    with pytest.raises(StoreNotFoundError):
        recover(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_recover_reads_only_leveldbs_logs_not_other_files_named_log(tmp_path, capsys):
    """Regression: a stray notes.log made recover fail with a ValueError traceback."""
    path = tmp_path / "s.ldb"
    with Store(path, verify_signatures=False) as s:
        s.ingest_many(generate(seed=4, posts=50))
        before = sorted(s.items(b"!post!"))
    (path / "notes.log").write_text("operator's notes\n")
    assert main(["recover", str(path)]) == 0, capsys.readouterr().err
    with Store(path) as s:
        assert sorted(s.items(b"!post!")) == before
    assert (path / "notes.log").read_text() == "operator's notes\n"


def test_recover_refuses_a_store_that_is_open(tmp_path):
    from cablestore.errors import StoreLockedError

    with Store(tmp_path / "s") as s:
        with pytest.raises(StoreLockedError):
            recover(tmp_path / "s")
        code = "import sys\nfrom cablestore.recovery.recovering import recover\nrecover(sys.argv[1])\n"
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
        assert "StoreLockedError" in out.stderr  # another process: LevelDB's lock
        assert s.get(bytes(32)) is None  # and the open store is unharmed
    assert not (tmp_path / "s" / "lost").exists()


def test_recover_deletes_again_a_deleted_post_that_came_back(tmp_path):
    """A damaged block can hold a post's deletion and its tombstone while the post survives elsewhere."""
    from cablestore import DELETE, TEXT, Keypair, make_post, post_hash

    kp = Keypair.from_seed(bytes(32))
    t, _ = make_post(kp, TEXT, 1000, channel="c", text="hi")
    th = post_hash(t)
    d, _ = make_post(kp, DELETE, 2000, hashes=[th])
    path = tmp_path / "s"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many([t, d])
        want = list(s.items())
        with s.in_flight():  # what a lost block leaves: the post back, its tombstone gone
            s.db.put(b"!post!" + th, t)
            for key, _ in s.items(b"!deleted!" + th):
                s.db.delete(key)
    report = recover(path)
    assert report.deleted_again == [th.hex()]
    assert report.consistent
    with Store(path, create=False) as s:
        assert list(s.items()) == want


def test_a_store_of_one_table_cut_short_is_recovered_not_called_foreign(tmp_path, capsys):
    """Regression: all posts left and recover said "not a cablestore store" (exit 2), never naming lost/."""
    path = tmp_path / "s"
    expected = store_of_tables(path, 400)
    [table] = path.glob("*.ldb")
    data = table.read_bytes()
    table.write_bytes(data[: len(data) * 3 // 4])  # its last quarter: posts' bytes, the index and the footer
    code = main(["recover", str(path)])
    out, err = capsys.readouterr()
    assert code == 1, err  # recovered, with a damaged part named (exit 2 would be an error)
    assert "lost/recover-" in out and "originals kept in" in out and "result: consistent" in out
    stored = stored_posts(path)
    gone = expected - stored
    assert stored <= expected and len(stored) > len(expected) // 2
    # The cut took the last posts' bytes; the table's intact blocks still name them (``!author!`` keys): lost, by hash.
    assert gone and f"LOST {len(gone)} posts" in out
    assert sum(h.hex() in out for h in gone) == min(20, len(gone))  # the first 20 named; LOST.json has them all
    [lost_file] = path.glob("lost/recover-*/LOST.json")
    assert all(h.hex() in lost_file.read_text() for h in gone)


def test_recover_of_an_intact_store_changes_nothing_and_adds_nothing_to_lost(tmp_path, capsys):
    """Regression: every recover moved two files into lost/, even on an intact store."""
    path = tmp_path / "s"
    store_of_tables(path, 300)
    with Store(path, create=False) as s:
        before = list(s.items())
    for _ in range(2):
        assert main(["recover", str(path)]) == 0
        out = capsys.readouterr().out
        assert "nothing repaired, nothing moved" in out
        assert not (path / "lost").exists()
    with Store(path, create=False) as s:
        assert list(s.items()) == before


def test_recover_shows_its_progress_on_a_terminal_only(tmp_path):
    import io

    from cablestore.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    path = tmp_path / "s"
    store_of_tables(path, 300)
    [table] = path.glob("*.ldb")
    table.write_bytes(table.read_bytes()[:-5000])
    shown = Terminal()
    recover(path, progress=Progress(stream=shown))
    for stage in ("salvage: MiB read", "LevelDB repair", "salvage: posts proven", "view repair"):
        assert stage in shown.getvalue()
    quiet = Terminal()
    recover(path, progress=Progress(quiet=True, stream=quiet))
    assert quiet.getvalue() == ""


def test_a_crashed_store_is_intact_its_log_replayed_and_nothing_set_aside(tmp_path):
    """A writer killed without closing leaves its posts in the log: not damage, nothing to repair."""
    path = tmp_path / "s"
    log = crashed_store(path)
    data = log.read_bytes()
    log.write_bytes(data + data[:27])  # and a last record cut short by the crash (a header and 20 bytes): LevelDB ignores it
    reference = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(path), str(reference)], check=True)
    expected = stored_posts(reference)
    report = recover(path)
    assert report.intact and report.consistent and report.lossless
    assert not (path / "lost").exists()
    assert stored_posts(path) == expected
