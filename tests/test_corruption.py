"""Damaged files and full disks: a clear CableError or a recovered store, never a silent loss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.cli import main
from cablestore.errors import StoreCorruptError
from cablestore.recovery.recovering import recover

from .damaged_stores import NOW, ROOT, crashed_store, stored


def test_bit_flip_in_the_log_is_detected_and_recover_reports_what_it_kept(tmp_path):
    path = tmp_path / "s"
    log = crashed_store(path)
    reference = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(path), str(reference)], check=True)
    expected = stored(reference)  # the undamaged store, reopened after the crash
    data = bytearray(log.read_bytes())
    data[len(data) // 3] ^= 0x10  # a block in the middle of history
    log.write_bytes(bytes(data))
    with pytest.raises(StoreCorruptError, match="cablestore recover"):
        Store(path)
    assert main(["check", str(path), "--quiet"]) == 2  # not "consistent"
    report = recover(path)
    assert report.consistent
    after = stored(path)
    lost = {bytes.fromhex(h) for h in report.lost} | {bytes.fromhex(r["hash"]) for r in report.removed_records}
    assert expected - after <= lost  # every post that is gone is named
    assert report.posts_after == len(after) and report.known_posts >= len(expected)
    assert (Path(report.originals) / log.name).read_bytes() == bytes(data)  # the damaged log, kept as it was


def test_truncated_manifest_is_refused_not_wiped(tmp_path):
    path = tmp_path / "s"
    with Store(path, now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(generate(seed=4, posts=300))
        expected = {k for k, _ in s.items(b"!post!")}
    [manifest] = path.glob("MANIFEST-*")
    manifest.write_bytes(manifest.read_bytes()[:60])  # loses the edit that lists the table
    with pytest.raises(StoreCorruptError, match="does not list"):
        Store(path)
    assert [f.name for f in path.glob("*.ldb")]  # the table is still there
    report = recover(path)
    assert report.consistent and report.lossless
    with Store(path, create=False) as s:
        assert {k for k, _ in s.items(b"!post!")} == expected


def test_damaged_table_is_a_store_corrupt_error_and_recover_names_it(tmp_path):
    path = tmp_path / "s"
    with Store(path, now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(generate(seed=4, posts=300))
    [table] = path.glob("*.ldb")
    data = bytearray(table.read_bytes())
    for at in range(1000, 1040):
        data[at] ^= 0xFF
    table.write_bytes(bytes(data))
    with Store(path, create=False) as s, pytest.raises(StoreCorruptError, match="recover"):
        s.check(check_signatures=False)
    report = recover(path)
    assert report.consistent and report.damaged and not report.lossless


def _flip_a_stored_signature(path: Path, buf: bytes) -> None:
    """Flip one byte of ``buf``'s signature where a table file holds it (Snappy keeps it verbatim)."""
    for table in sorted(path.glob("*.ldb")):
        data = bytearray(table.read_bytes())
        at = data.find(buf[32:96])
        if at >= 0:
            data[at + 10] ^= 0x40
            table.write_bytes(bytes(data))
            return
    raise AssertionError("signature not found in any table")


@pytest.mark.parametrize("command", [["dump"], ["dump", "--json"]])
def test_dump_of_a_damaged_post_fails_and_its_json_stays_one_document(tmp_path, capsys, command):
    """Regression: dump printed a damaged post (its raw bytes not hashing to its hash) and exited 0,
    and a failure part-way left --json output that was not JSON."""
    path = tmp_path / "s.ldb"
    posts = generate(seed=5, posts=400)
    with Store(path, verify_signatures=False) as s:
        s.ingest_many(posts)
        stored = [buf for _, buf in s.items(b"!post!")]
    _flip_a_stored_signature(path, stored[len(stored) // 2])
    assert main([command[0], str(path), *command[1:]]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and "StoreCorruptError" in err
    if "--json" in command:
        doc = json.loads(out)
        assert doc["error"] == "StoreCorruptError" and doc["count"] == len(doc["posts"]) < len(stored)


DISK_FULL = """
import json, os, resource, signal, sys
from cablestore import Store
from cablestore.errors import CableError
from cablestore.authoring.workload import generate
posts = generate(seed=6, posts=500)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
store = Store(sys.argv[1], now=lambda: {now}, verify_signatures=False)
resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, hard))  # a small file-size limit: the "disk" is full
done, errors = [], []
for i in range(0, 400, 10):
    try:
        store.ingest_many(posts[i : i + 10])
        done.append(i)
    except CableError as e:
        errors.append(type(e).__name__ + ": " + str(e))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space is free again
store.ingest_many(posts[400:])  # works without the caller reopening anything
done.append(400)
print(json.dumps({{"done": done, "errors": errors}}), flush=True)
os._exit(0)  # and a crash on top: the next open must read everything back
"""


def test_disk_full_is_a_clear_error_and_the_store_works_again_once_space_is_freed(tmp_path):
    code = DISK_FULL.format(now=NOW)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["errors"] and all(e.startswith("DiskFullError") for e in result["errors"])
    posts = generate(seed=6, posts=500)
    with Store(tmp_path / "clean", now=lambda: NOW, verify_signatures=False) as clean:
        for i in result["done"]:
            clean.ingest_many(posts[i : i + 10] if i < 400 else posts[400:])
        want = list(clean.items())
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        assert list(s.items()) == want  # every acknowledged batch, nothing of the refused ones
        assert s.check(check_signatures=False).consistent


def test_short_corruption_harness_finds_no_silent_loss_and_no_raw_exception(tmp_path):
    from benchmarks.corrupt import run

    result = run(trials=60, posts=300, seed=7, workdir=tmp_path, log=lambda *_: None)
    assert result["failure_count"] == 0, result["failures"]
    outcomes = result["outcomes"]
    assert sum(n for o, n in outcomes.items() if "recover" in o) > 10  # damage was found and recovered
    assert sum(outcomes.values()) == 60


def test_a_closed_store_keeps_nothing_in_its_log(tmp_path):
    """close() moves the memtable into a table: a damaged log cannot lose acknowledged posts."""
    with Store(tmp_path / "s", now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(generate(seed=4, posts=100))
    assert [f.stat().st_size for f in (tmp_path / "s").glob("*.log")] == [0]
