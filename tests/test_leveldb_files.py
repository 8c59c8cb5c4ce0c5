"""LevelDB's own file formats read by cablestore.recovery.leveldb, on directories plyvel wrote: tables as
LevelDB reads them, a damaged table block and a damaged log block read leniently, tables cut short, log
records whose key is damaged, the MANIFEST's table list (strict and lenient), a compaction's leftovers."""

from __future__ import annotations

from pathlib import Path

from cablestore.authoring.workload import generate
from cablestore.recovery.recovering import recover

from .damaged_stores import largest_table, store_of_tables, stored


def test_the_reader_reads_a_table_as_leveldb_does(tmp_path):
    """Through its index, and block by block without it: the latest record of each key is LevelDB's."""
    import plyvel

    from cablestore.recovery.leveldb import tables as leveldb_reader

    path = tmp_path / "s"
    store_of_tables(path, 1000)
    [table] = path.glob("*.ldb")
    db = plyvel.DB(str(path))
    want = dict(db.iterator(prefix=b"!deleted!")) | dict(db.iterator(prefix=b"!post!"))
    db.close()
    data = table.read_bytes()
    for scan in (leveldb_reader.read_table(data, "t", (b"!post!", b"!deleted!")), leveldb_reader.read_table(data[:-60], "t", (b"!post!", b"!deleted!"))):
        latest = {}
        for r in scan.records:
            if r.key not in latest or r.seq > latest[r.key].seq:
                latest[r.key] = r
        assert {k: r.value for k, r in latest.items() if r.kind == leveldb_reader.VALUE} == want
        assert all(r.certified for r in scan.records)
    assert scan.mode == "blocks" and len(scan.damaged) == 1  # the cut footer


def test_a_table_cut_in_the_middle_keeps_the_posts_before_the_cut(tmp_path):
    from cablestore.recovery.leveldb import tables as leveldb_reader

    path = tmp_path / "s"
    expected = store_of_tables(path, 3000)
    table = largest_table(path)
    data = table.read_bytes()
    cut = len(data) // 2
    whole = leveldb_reader.read_table(data, table.name, (b"!post!",))
    ends = {start: start + size + 5 for _, start, size in leveldb_reader.index(data)}
    before_cut = {r.key[6:] for r in whole.records if ends[int(r.source.split("@")[1])] <= cut} & expected
    assert len(before_cut) > 100
    table.write_bytes(data[:cut])
    report = recover(path)
    assert report.consistent
    after = stored(path)
    assert before_cut <= after <= expected  # every post of an intact block, no phantom
    assert report.salvaged_posts  # LevelDB's repair drops the whole table: these came from its blocks
    assert any(table.name in part for part in report.damaged)


def test_a_log_put_whose_key_hash_is_damaged_keeps_its_post_under_the_post_s_own_hash():
    """Regression: a flipped bit in a ``!post!`` key's hash lost the (intact, self-certifying) post after it."""
    from cablestore.recovery.leveldb.tables import loose_posts
    from cablestore.wire.codec import post_hash

    buf = generate(seed=3, posts=1)[0]
    h = post_hash(buf)
    damaged = bytes([h[0] ^ 0x10]) + h[1:]

    def put(key_hash: bytes, value: bytes) -> bytes:
        return b"\x01" + bytes([38]) + b"!post!" + key_hash + bytes([len(value)]) + value  # one WriteBatch put (a value < 128 B)

    assert len(buf) < 128
    found = loose_posts(b"junk" + put(damaged, buf) + put(damaged, b"\x00" * 100), "log@0")
    assert [(r.key, r.value) for r in found] == [(b"!post!" + h, buf)]  # the undecodable value stays out


def test_a_compactions_leftover_is_no_damage(tmp_path):
    """A table a killed compaction left half-written, which the MANIFEST never listed: LevelDB deletes it, recover repairs nothing."""
    path = tmp_path / "s"
    expected = store_of_tables(path, 300)
    [table] = path.glob("*.ldb")
    (path / "000099.ldb").write_bytes(table.read_bytes()[: table.stat().st_size // 2])
    report = recover(path)
    assert report.intact and report.consistent and report.lossless
    assert not (path / "lost").exists()
    assert stored(path) == expected


def test_the_log_reader_finds_every_put_of_a_live_store(tmp_path):
    """A write-ahead log read record by record, each with its CRC's verdict: every post put is there, certified."""
    import plyvel

    from cablestore.recovery.leveldb.log import read_log

    path = tmp_path / "db"
    db = plyvel.DB(str(path), create_if_missing=True)
    puts = {b"!post!" + bytes([i]) * 32: bytes([i]) * 100 for i in range(50)}
    for key, value in puts.items():
        db.put(key, value)
    db.delete(b"!post!" + bytes([3]) * 32)
    [log] = [f for f in path.iterdir() if f.suffix == ".log" and f.stat().st_size]
    scan = read_log(log.read_bytes(), log.name)
    db.close()
    found = {(r.key, r.value) for r in scan.records if r.certified and r.kind == 1}
    assert set(puts.items()) <= found
    assert any(r.key == b"!post!" + bytes([3]) * 32 and r.kind == 0 for r in scan.records)  # the deletion too


def test_an_unlisted_table_counts_only_when_the_manifest_lost_edits(tmp_path):
    from cablestore.recovery.leveldb.manifest import mentioned_tables, unlisted_tables

    path = tmp_path / "s"
    store_of_tables(path, 300)
    assert unlisted_tables(path) == []
    stray = path / "999999.ldb"
    stray.write_bytes(largest_table(path).read_bytes())  # a whole table no manifest names
    assert unlisted_tables(path) == []  # a compaction's leftover while the manifest is whole
    _, log_number = mentioned_tables((path / (path / "CURRENT").read_text().strip()).read_bytes())
    (path / f"{log_number:06d}.log").unlink()  # the log the manifest names last is gone: it lost an edit
    assert unlisted_tables(path) == [stray.name]


def _plyvel_db(path: Path, keys: int, value_size: int):
    """A LevelDB written by plyvel alone (no cablestore): ``keys`` puts of incompressible values; the db and what it holds."""
    import random

    import plyvel

    rng = random.Random(11)
    db = plyvel.DB(str(path), create_if_missing=True)
    puts = {b"k%06d" % i: rng.randbytes(value_size) for i in range(keys)}
    for key, value in puts.items():
        db.put(key, value)
    return db, puts


def test_a_damaged_table_block_is_named_and_every_other_block_read_certified(tmp_path):
    """A flipped byte in one data block: that block is reported damaged, nothing of it is trusted, every other block's records are LevelDB's."""
    from cablestore.recovery.leveldb import tables

    path = tmp_path / "db"
    db, puts = _plyvel_db(path, 400, 500)
    db.compact_range()
    db.close()
    [table] = path.glob("*.ldb")
    data = table.read_bytes()
    whole = tables.read_table(data, table.name)
    assert whole.intact and {r.key: r.value for r in whole.records} == puts
    handles = tables.index(data)
    assert len(handles) > 3
    _, start, size = handles[2]
    damaged = bytearray(data)
    damaged[start + size // 2] ^= 0x01
    scan = tables.read_table(bytes(damaged), table.name)
    assert not scan.intact and scan.mode == "index"
    assert scan.damaged == [f"{start}+{size}: checksum mismatch"]
    assert scan.units == len(handles) - 1
    in_block = {r.key for r in whole.records if r.source == f"{table.name}@{start}"}
    assert in_block and all(r.certified for r in scan.records)  # the damaged block gives nothing (no post in it proves itself)
    assert {r.key: r.value for r in scan.records} == {k: v for k, v in puts.items() if k not in in_block}


def test_a_damaged_log_block_loses_only_the_records_it_holds(tmp_path):
    """A write-ahead log of many 32 KiB blocks with one byte flipped in the second: the records of the other blocks are read, certified, as written."""
    from cablestore.recovery.leveldb.log import LOG_BLOCK, read_log

    path = tmp_path / "db"
    db, puts = _plyvel_db(path, 300, 1000)  # ~300 KB: in the log still (the write buffer is 4 MiB)
    [log] = [f for f in path.iterdir() if f.suffix == ".log" and f.stat().st_size > 4 * LOG_BLOCK]
    data = log.read_bytes()
    db.close()
    whole = read_log(data, log.name)
    assert whole.intact and {r.key: r.value for r in whole.records} == puts
    damaged = bytearray(data)
    damaged[LOG_BLOCK + LOG_BLOCK // 2] ^= 0x01
    scan = read_log(bytes(damaged), log.name)
    # the damaged record and the rest of its block (its length fields untrusted), and the tail of a record crossing out of it
    assert not scan.intact and 1 <= len(scan.damaged) <= 2 and all(d.endswith("checksum mismatch") for d in scan.damaged)
    assert all(LOG_BLOCK <= int(d.split("+")[0]) <= 2 * LOG_BLOCK for d in scan.damaged)
    found = {r.key: r.value for r in scan.records}
    assert all(r.certified for r in scan.records) and found.items() <= puts.items()  # no phantom, no altered value
    lost = puts.keys() - found.keys()
    assert 0 < len(lost) <= LOG_BLOCK // 1000 + 2  # at most the records of the damaged block and the one crossing into it
    assert sorted(lost) == sorted(lost, key=lambda k: int(k[1:]))  # one run of neighbouring writes
    assert max(int(k[1:]) for k in lost) - min(int(k[1:]) for k in lost) == len(lost) - 1


def test_the_manifest_lists_the_tables_leveldb_keeps_and_the_log_it_writes(tmp_path):
    """Both readings of a live MANIFEST: the strict one (the live tables) and the lenient one (every table an edit mentions)."""
    from cablestore.recovery.leveldb.manifest import manifest_tables, mentioned_tables, records

    path = tmp_path / "db"
    db, _ = _plyvel_db(path, 400, 500)
    db.compact_range()
    for i in range(50):  # a second table, then a compaction that replaces both
        db.put(b"z%03d" % i, b"v")
    db.compact_range()
    manifest = (path / (path / "CURRENT").read_text().strip()).read_bytes()
    on_disk = {int(f.stem) for f in path.glob("*.ldb")}
    live_log = max(int(f.stem) for f in path.glob("*.log"))
    live, log_number = manifest_tables(manifest)
    assert live == on_disk and log_number == live_log
    mentioned, log_again = mentioned_tables(manifest)
    assert on_disk <= mentioned and log_again == live_log
    assert len(list(records(manifest))) >= 2  # the edits, one record each
    db.close()
    assert manifest_tables(manifest[:-3]) is None  # cut short: the strict reading gives nothing rather than a wrong list
