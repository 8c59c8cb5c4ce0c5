"""Salvage (cablestore.recovery.salvage): every record a store's files can prove is kept, nothing deleted
later comes back, damaged log blocks and writes cut short give up their posts one proven post at a time."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cablestore import Store
from cablestore.recovery.recovering import recover

from .damaged_stores import crashed_store, largest_table, store_of_tables, stored


def _files_under(folder: Path) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*")) if f.is_file()} if folder.exists() else {}


def test_a_table_cut_short_keeps_every_post_of_its_intact_blocks(tmp_path):
    """Regression: 5 KB cut off a table sent the whole table to lost/ (its posts gone, "lost posts: none known").

    The last 5 KB of a table are its index, metaindex, footer and part of its
    filter: every data block survives, so every post must come back.
    """
    path = tmp_path / "s"
    expected = store_of_tables(path, 3000)
    table = largest_table(path)
    original = table.read_bytes()
    table.write_bytes(original[:-5000])
    report = recover(path)
    assert report.consistent
    assert stored(path) == expected  # every post kept, none that was not stored
    assert len(report.salvaged_posts) > 0 and not report.lost
    kept = Path(report.originals) / table.name
    assert kept.read_bytes() == original[:-5000]  # the damaged original, kept as it was
    with Store(path, create=False) as s:
        assert s.check().consistent  # signatures too


def test_posts_of_a_damaged_log_block_are_proven_one_by_one(tmp_path):
    """A flipped byte makes LevelDB drop the rest of a 32 KiB log block; the posts in it are still proven and kept."""
    path = tmp_path / "s"
    log = crashed_store(path)
    reference = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(path), str(reference)], check=True)
    expected = stored(reference)
    data = bytearray(log.read_bytes())
    at = len(data) // 3
    data[at] ^= 0x10
    log.write_bytes(bytes(data))
    with Store(reference, create=False) as s:
        bufs = {k[6:]: v for k, v in s.items(b"!post!")}
    whole = {h for h, buf in bufs.items() if (i := bytes(data).find(buf)) >= 0 and not i <= at < i + len(buf)}
    report = recover(path)
    assert report.consistent
    after = stored(path)
    assert whole <= after <= expected
    assert len(whole) > len(expected) * 0.9


def test_salvage_does_not_bring_back_a_post_deleted_later(tmp_path):
    """A copy of a post in lost/ (an earlier repair's leftover) loses to the later deletion of its key."""
    import shutil

    path = tmp_path / "s"
    expected = store_of_tables(path, 300)
    gone = sorted(expected)[0]
    (path / "lost").mkdir()
    for table in path.glob("*.ldb"):
        shutil.copy(table, path / "lost" / table.name)  # holds the post
    with Store(path, create=False) as s:
        assert s.delete(gone)  # a local removal: no tombstone, only LevelDB's deletion
    report = recover(path)
    assert not report.intact  # the lost/ files were read
    assert report.consistent
    after = stored(path)
    assert after == expected - {gone}
    assert all(f.parent != path / "lost" for f in (path / "lost").rglob("*.ldb"))  # filed in the dated folder


def test_the_posts_of_a_write_cut_short_at_the_end_of_the_log_are_kept(tmp_path):
    """A log cut in the middle of its last batch (no damage: what a crash leaves): LevelDB drops the whole batch, salvage keeps its posts."""
    path = tmp_path / "s"
    log = crashed_store(path)
    reference = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(path), str(reference)], check=True)
    with Store(reference, create=False) as s:
        bufs = {k[6:]: v for k, v in s.items(b"!post!")}
    data = log.read_bytes()
    placed = sorted((data.find(buf), h, buf) for h, buf in bufs.items() if data.find(buf) >= 0)
    (_, kept, _), (last_at, last, last_buf) = placed[-2], placed[-1]
    log.write_bytes(data[: last_at + len(last_buf) - 1])  # the last post's last byte never written
    report = recover(path)
    assert report.intact and report.consistent
    after = stored(path)
    assert kept in after and kept.hex() in report.salvaged_posts  # from the batch LevelDB dropped
    assert last not in after
    assert after <= set(bufs)


def test_a_second_recover_after_a_salvage_adds_nothing(tmp_path):
    path = tmp_path / "s"
    store_of_tables(path, 400)
    [table] = path.glob("*.ldb")
    table.write_bytes(table.read_bytes()[:-5000])
    first = recover(path)
    assert not first.intact and Path(first.originals).is_dir()
    lost_before = _files_under(path / "lost")
    with Store(path, create=False) as s:
        items = list(s.items())
    second = recover(path)
    assert second.intact and second.consistent and second.originals is None
    assert _files_under(path / "lost") == lost_before
    with Store(path, create=False) as s:
        assert list(s.items()) == items
