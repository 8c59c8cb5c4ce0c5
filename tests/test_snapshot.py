"""The Parquet snapshot: its layout, its checksums, an interrupted export, the decoded table, the packed environment.

Real LevelDB stores, real Parquet files (pyarrow), DuckDB for the data
team's query, real subprocesses and signals.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cablestore import Store, decode_post
from cablestore.authoring.workload import generate
from cablestore.errors import RebuildError
from cablestore.rebuild import export, verify
from cablestore.rebuild.recompute import partition_of
from cablestore.wire.codec import TEXT

from .conftest import NOW
from .moderation_helpers import BERT, URSULA, cabal, text

ROOT = Path(__file__).resolve().parent.parent
POSTS = b"!post!"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    """A store with deletes and a moderated cabal, whose local user is Ursula."""
    path = tmp_path_factory.mktemp("snapshot") / "store"
    with Store(path, now=lambda: NOW, local_user=URSULA.public_key) as s:
        s.ingest_many(generate(seed=31, posts=1500))
        s.ingest_many(cabal())
        day = 86_400_000  # texts on earlier days, in two spellings of one channel
        s.ingest_many([text(BERT, NOW - d * day - i, "Off-Topic" if i % 2 else "off-topic", f"day {d}")[0] for d in range(1, 4) for i in range(d)])
    return path


def _report(report) -> dict:
    data = report.to_dict()
    data.pop("seconds")
    data.pop("engine")
    return data


def test_post_ranges_are_the_partitions_of_partition_of():
    from cablestore.rebuild.exporter import post_ranges

    for parts in (1, 2, 3, 7, 16, 100, 255, 256):
        ranges = post_ranges(parts)
        assert len(ranges) == parts
        for first in range(256):
            key = POSTS + bytes([first]) + bytes(31)
            (k,) = [i for i, (start, stop) in enumerate(ranges) if start <= key < stop]
            assert k == partition_of(key[len(POSTS) :], parts)
        assert ranges[0][0] == POSTS  # a damaged empty key (b"!post!") exports with partition 0


def test_export_writes_every_post_once_in_its_partition_with_checksums(tmp_path, store_path):
    with Store(store_path, create=False) as s:
        stored = dict((k[len(POSTS) :], v) for k, v in s.items(POSTS))
        tombstones = sum(1 for _ in s.items(b"!deleted!"))
        manifest = export(s.db, tmp_path / "snap", partitions=5, source="store")
    assert manifest["counts"]["posts"] == len(stored) and manifest["counts"]["tombstones"] == tombstones
    assert manifest["local_user"] == URSULA.public_key.hex() and manifest["store"]["meta"] == {"format": "cablestore-3"}
    seen = {}
    for name, info in manifest["files"].items():
        path = tmp_path / "snap" / name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == info["sha256"] and path.stat().st_size == info["bytes"]
        table = pq.read_table(path)
        assert table.num_rows == info["rows"]
        if name.startswith("posts/"):
            for h, blob in zip(table.column("hash").to_pylist(), table.column("blob").to_pylist(), strict=True):
                assert partition_of(h, 5) == info["part"] and h not in seen
                seen[h] = blob
    assert seen == stored
    assert not list(tmp_path.glob("*.partial-*"))  # the staging directory became the snapshot


def test_a_snapshot_at_a_file_uri_verifies_like_the_store(tmp_path, store_path):
    uri = (tmp_path / "snap").as_uri()
    with Store(store_path, create=False) as s:
        export(s.db, uri, partitions=3)
        from_store = _report(s.check())
    on_snapshot = _report(verify("local", snapshot=uri))
    assert on_snapshot["consistent"] and from_store["consistent"]
    assert {k: v for k, v in on_snapshot.items() if k != "partitions"} == {k: v for k, v in from_store.items() if k != "partitions"}


def test_an_empty_store_exports_and_verifies(tmp_path):
    with Store(tmp_path / "empty", now=lambda: NOW) as s:
        manifest = export(s.db, tmp_path / "snap", partitions=4, decoded=True)
    assert manifest["counts"] == {"posts": 0, "tombstones": 0, "live": 0, "decoded": 0, "undecodable": 0}
    # Only the moderation tables, empty (a query of them still finds its columns).
    assert {name: info["rows"] for name, info in manifest["files"].items()} == {f"moderation/{t}.parquet": 0 for t in ("actions", "blocks", "roles")}
    report = verify("local", snapshot=tmp_path / "snap")
    assert report.consistent and report.posts == 0 and report.partitions == 4


@pytest.mark.parametrize(
    "damage",
    ["flip a byte", "truncate", "remove a file", "change the row count", "old format", "no manifest", "manifest not JSON", "foreign file name"],
)
def test_a_damaged_or_changed_snapshot_is_refused(tmp_path, store_path, damage):
    snap = tmp_path / "snap"
    with Store(store_path, create=False) as s:
        manifest = export(s.db, snap, partitions=2)
    name = "posts/part=0001/posts-0001-000.parquet"
    data = bytearray((snap / name).read_bytes())
    expected = "sha256 checksum does not match the manifest"
    if damage == "flip a byte":
        data[len(data) // 2] ^= 1
        (snap / name).write_bytes(bytes(data))
    elif damage == "truncate":
        (snap / name).write_bytes(bytes(data[:-10]))
    elif damage == "remove a file":
        (snap / name).unlink()
        expected = "is missing from the snapshot"
    elif damage in ("change the row count", "foreign file name", "old format"):
        if damage == "change the row count":
            manifest["files"][name]["rows"] += 1
            expected = "rows, the manifest says"
        elif damage == "foreign file name":
            manifest["files"]["../../etc/passwd"] = manifest["files"].pop(name)
            expected = "which is no file of a snapshot"
        else:
            manifest = {"format": "cablestore-snapshot-1", "partitions": 2, "counts": {}, "files": {"primary-0000.msgpack": {}}}
            expected = "old cablestore-snapshot-1 format .* export the store again: cablestore export STORE NEWDIR"
        (snap / "manifest.json").write_text(json.dumps(manifest))
    elif damage == "no manifest":
        (snap / "manifest.json").unlink()
        expected = "is not a snapshot \\(no manifest.json"
    else:
        (snap / "manifest.json").write_text("{not json")
        expected = "is not valid JSON"
    with pytest.raises(RebuildError, match=expected):
        verify("local", snapshot=snap)


def test_export_refuses_a_snapshot_a_file_and_a_non_empty_directory_and_takes_an_empty_one(tmp_path, store_path):
    with Store(store_path, create=False) as s:
        export(s.db, tmp_path / "snap", partitions=2)
        with pytest.raises(RebuildError, match="already holds a snapshot"):
            export(s.db, tmp_path / "snap", partitions=2)
        (tmp_path / "file").write_text("x")
        with pytest.raises(RebuildError, match="not a directory"):
            export(s.db, tmp_path / "file", partitions=2)
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "keep.txt").write_text("mine")
        with pytest.raises(RebuildError, match="not empty"):
            export(s.db, tmp_path / "full", partitions=2)
        assert os.listdir(tmp_path / "full") == ["keep.txt"]
        (tmp_path / "empty").mkdir()
        export(s.db, tmp_path / "empty", partitions=2)
        for bad in (0, 257, "4", True):
            with pytest.raises(RebuildError, match="partitions"):
                export(s.db, tmp_path / "never", partitions=bad)
    assert (tmp_path / "empty" / "manifest.json").is_file() and not (tmp_path / "never").exists()


def test_files_roll_over_and_a_partition_of_several_files_verifies(tmp_path, store_path, monkeypatch):
    import cablestore.rebuild.exporter as ex

    monkeypatch.setattr(ex, "FILE_ROWS", {"posts": 100, "tombstones": 50, "live": 1000})
    monkeypatch.setattr(ex, "BATCH_ROWS", {"posts": 40, "tombstones": 30, "live": 300})
    with Store(store_path, create=False) as s:
        manifest = export(s.db, tmp_path / "snap", partitions=2, workers=3)
        expected = _report(s.check(partitions=2))
    names = list(manifest["files"])
    assert "posts/part=0001/posts-0001-003.parquet" in names and "tombstones/tombstones-001.parquet" in names
    assert all(info["rows"] <= 1000 for info in manifest["files"].values())
    assert _report(verify("local", snapshot=tmp_path / "snap")) == expected


def test_an_interrupted_export_leaves_nothing_behind(tmp_path, store_path, monkeypatch):
    """Ctrl-C in the middle of the writes: no snapshot, no staging directory, and the next export works."""
    import cablestore.rebuild.exporter as ex

    calls = []
    real = ex._Files.write

    def interrupted(self, batch):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(ex._Files, "write", interrupted)
    monkeypatch.setattr(ex, "BATCH_ROWS", {"posts": 20, "tombstones": 20, "live": 200})
    with Store(store_path, create=False) as s:
        with pytest.raises(KeyboardInterrupt):
            export(s.db, tmp_path / "snap", partitions=4)
        assert os.listdir(tmp_path) == []
        monkeypatch.setattr(ex._Files, "write", real)
        export(s.db, tmp_path / "snap", partitions=4)
    assert os.listdir(tmp_path) == ["snap"]


def test_ctrl_c_during_a_cli_export_exits_130_and_leaves_no_snapshot(tmp_path):
    store = tmp_path / "store"
    with Store(store, now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(generate(seed=33, posts=30000))  # a decoded export of it takes a second or two
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cablestore", "export", str(store), str(out / "snap"), "--decoded", "--workers", "1", "--partitions", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith("snap.partial-") and any(p.rglob("*.parquet")) for p in out.iterdir()):
            assert proc.poll() is None, proc.communicate()  # still exporting when the signal comes
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip() == "cablestore export: interrupted"
    assert os.listdir(out) == []


def _documented_query() -> str:
    text = (ROOT / "docs" / "cluster.md").read_text()
    section = text.split("## Reading a snapshot with DuckDB, pandas or Spark SQL", 1)[1]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


def test_the_documented_query_counts_messages_per_channel_per_day(tmp_path, store_path):
    import duckdb

    with Store(store_path, create=False) as s:
        manifest = export(s.db, tmp_path / "snapshot", partitions=4, decoded=True)
        expected = Counter()
        for _, blob in s.items(POSTS):
            p = decode_post(blob)
            if p.post_type == TEXT:
                expected[(p.channel.casefold(), datetime.fromtimestamp(p.timestamp / 1000, UTC).date())] += 1
        stored = sum(1 for _ in s.items(POSTS))
    assert manifest["counts"]["decoded"] == stored and manifest["counts"]["undecodable"] == 0
    query = _documented_query().replace("'snapshot/", f"'{tmp_path}/snapshot/")
    got = duckdb.sql(query).fetchall()
    assert len(got) > 5
    assert {(channel, day): n for channel, day, n in got} == dict(expected)
    assert got == sorted(got)


def test_the_decoded_table_has_the_moderation_fields(tmp_path, store_path):
    """Every moderation post's fields, as the codec decodes them; null where a type has no such field."""
    import duckdb

    fields = ("reason", "privacy", "recipients", "role", "action", "drop", "notify", "undrop")
    with Store(store_path, create=False) as s:
        export(s.db, tmp_path / "snap", partitions=2, decoded=True)
        expected = {}
        for key, blob in s.items(POSTS):
            p = decode_post(blob)
            if p.post_type >= 6:
                values = [getattr(p, f) for f in fields]
                values[2] = [r.hex() for r in values[2]]
                expected[key[len(POSTS) :].hex()] = (p.post_type, p.channel, *values)
    files = f"{tmp_path}/snap/decoded/*/*.parquet"
    got = duckdb.sql(f"SELECT hash, type, channel, {', '.join(fields)} FROM read_parquet('{files}') WHERE type >= 6").fetchall()
    assert {row[0]: row[1:] for row in got} == expected
    assert {v[0] for v in expected.values()} == {6, 7, 8, 9}
    names = duckdb.sql(f"SELECT DISTINCT role_name FROM read_parquet('{files}') WHERE type = 6 ORDER BY 1").fetchall()
    assert [n for (n,) in names] == ["admin", "mod"]
    texts = duckdb.sql(f"SELECT count(*) FROM read_parquet('{files}') WHERE type = 0 AND role IS NULL AND recipients IS NULL AND reason IS NULL").fetchall()[0][0]
    assert texts > 100
    hive = duckdb.sql(f"SELECT DISTINCT part FROM read_parquet('{files}', hive_partitioning = true) ORDER BY part").fetchall()
    assert [p for (p,) in hive] == ["0000", "0001"]


def test_check_with_a_store_and_a_snapshot_labels_the_report_with_the_snapshot(tmp_path, capsys):
    from cablestore.cli import main

    store = tmp_path / "store"
    with Store(store, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=34, posts=300))
        export(s.db, tmp_path / "snap", partitions=2)
        s.ingest_many(generate(seed=35, posts=300))
        grown = sum(1 for _ in s.items(POSTS))
    assert main(["check", str(store), "--snapshot", str(tmp_path / "snap")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"cablestore check --verify: {tmp_path / 'snap'} (local engine, 2 partitions)")
    manifest = json.loads((tmp_path / "snap" / "manifest.json").read_text())
    assert lines[1] == f"  primary data: {manifest['counts']['posts']} posts, {manifest['counts']['tombstones']} tombstones"
    assert manifest["counts"]["posts"] < grown


def test_cli_export_json_and_decoded(tmp_path, store_path, capsys):
    from cablestore.cli import main

    assert main(["export", str(store_path), str(tmp_path / "snap"), "--partitions", "3", "--decoded", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["partitions"] == 3 and out["decoded"] == out["posts"] > 1000 and out["bytes"] > 0
    assert main(["check", "--snapshot", str(tmp_path / "snap"), "--quiet"]) == 0
    assert main(["export", str(store_path), str(tmp_path / "snap")]) == 2
    assert "already holds a snapshot" in capsys.readouterr().err


# --- the environment shipped to executors -------------------------------------


def test_the_packed_environment_runs_cablestore_with_nothing_else_installed(tmp_path):
    """Unpacked as an executor would, its bin/python imports cablestore and every dependency from the archive only."""
    from cablestore.rebuild.shipenv import pack

    archive = pack(tmp_path / "cache")
    again = pack(tmp_path / "cache")
    assert again == archive and len(list((tmp_path / "cache").iterdir())) == 1  # cached, not packed twice
    work = tmp_path / "executor"
    work.mkdir()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(work / "env", filter="tar")
    assert not any(n.startswith("lib/python3") and "/pyspark/" in n for n in names)  # Spark brings its own
    code = "import cablestore, cablestore.rebuild.spark_engine, plyvel, blake3, nacl, msgpack, pyarrow.parquet, sys; print(cablestore.__file__); print(sys.prefix)"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no venv, no PYTHONPATH, no PYSPARK_PYTHON
    done = subprocess.run(["./env/bin/python", "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    module, prefix = done.stdout.split()
    assert Path(module).resolve().is_relative_to((work / "env").resolve()) and Path(prefix).resolve() == (work / "env").resolve()
    bare = subprocess.run(["./env/bin/python", "-c", "import pytest"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 1 and "No module named 'pytest'" in bare.stderr  # the driver's other packages stay home


# --- the Spark engine reads the same files ----------------------------------------


@pytest.mark.spark
def test_spark_reads_a_file_uri_snapshot_and_agrees_with_the_local_engine(tmp_path, store_path, spark_session, monkeypatch):
    import cablestore.rebuild.exporter as ex
    from cablestore.rebuild import spark_engine

    monkeypatch.setattr(ex, "FILE_ROWS", {"posts": 150, "tombstones": 40, "live": 2000})  # several files per partition
    uri = (tmp_path / "snap").as_uri()
    with Store(store_path, create=False) as s:
        s.db.delete(next(k for k, _ in s.items(b"!chat!")))
        export(s.db, uri, partitions=3)
    local = _report(verify("local", snapshot=uri))
    on_spark = _report(verify("spark", snapshot=uri))
    assert on_spark == local and local["views"]["chat"]["missing"] == 1
    with pytest.raises(RebuildError, match="cannot read a snapshot whose location holds ,"):
        spark_engine.run(str(tmp_path / "a,b"), spark=spark_session)
    with Store(tmp_path / "empty", now=lambda: NOW) as s:
        export(s.db, tmp_path / "empty-snap", partitions=2)
    assert _report(verify("spark", snapshot=tmp_path / "empty-snap")) == _report(verify("local", snapshot=tmp_path / "empty-snap"))
    with pytest.raises(RebuildError, match=r"nowhere is not a snapshot \(no manifest.json"):
        spark_engine.run(str(tmp_path / "nowhere"), spark=spark_session)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "manifest.json").write_text(json.dumps({"format": "cablestore-snapshot-1", "partitions": 2, "files": {}}))
    with pytest.raises(RebuildError, match="export the store again: cablestore export STORE NEWDIR"):
        spark_engine.run(str(tmp_path / "old"), spark=spark_session)
