"""The command line: each subcommand end to end, exit codes, --json."""

from __future__ import annotations

import json
import subprocess
import sys

import plyvel
import pytest

from cablestore import __version__
from cablestore.authoring.workload import read_posts
from cablestore.cli import main


@pytest.fixture
def posts_file(tmp_path):
    out = tmp_path / "posts.bin"
    assert main(["generate", "--seed", "5", "--posts", "300", str(out), "--quiet"]) == 0
    return out


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_generate_is_deterministic(tmp_path, posts_file):
    again = tmp_path / "again.bin"
    main(["generate", "--seed", "5", "--posts", "300", str(again), "--quiet"])
    assert again.read_bytes() == posts_file.read_bytes()
    assert len(read_posts(again)) == 300


def test_ingest_check_damage_repair_exit_codes(tmp_path, posts_file, capsys):
    store = str(tmp_path / "s.ldb")
    assert main(["ingest", store, str(posts_file), "--json"]) == 0
    summary = _json(capsys)
    assert summary["read"] == 300 and summary["accepted"] == 300 and summary["refused"] == {}

    assert main(["check", store, "--json"]) == 0
    assert _json(capsys)["consistent"] is True

    db = plyvel.DB(store)
    key = next(db.iterator(prefix=b"!state!", include_value=False))
    db.delete(key)
    db.close()
    assert main(["check", store]) == 1
    out = capsys.readouterr().out
    assert "missing: " + key.hex() in out and "--repair" in out

    assert main(["check", store, "--repair", "--json"]) == 0
    report = _json(capsys)
    assert report["repaired"]["written"] == 1 and report["before"]["views"]["state"]["missing"] == 1
    assert main(["rebuild", store, "--engine", "local", "--quiet"]) == 0


def test_export_then_verify_snapshot(tmp_path, posts_file, capsys):
    store, snap = str(tmp_path / "s.ldb"), str(tmp_path / "snap")
    main(["ingest", store, str(posts_file), "--quiet"])
    capsys.readouterr()
    assert main(["export", store, snap, "--partitions", "4", "--json"]) == 0
    from cablestore import Store

    with Store(store) as s:
        stored = sum(1 for _ in s.items(b"!post!"))
    assert _json(capsys)["posts"] == stored > 250
    assert main(["check", "--snapshot", snap, "--json"]) == 0
    assert _json(capsys)["partitions"] == 4


def test_usage_and_environment_errors_exit_2(tmp_path, capsys, monkeypatch):
    assert main(["check", str(tmp_path / "missing.ldb")]) == 2
    assert "StoreNotFoundError" in capsys.readouterr().err
    assert main(["rebuild"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["rebuild", "x", "--verify", "--repair"])
    assert exc.value.code == 2
    # no Java: a plain message, not a JVM traceback
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    store = str(tmp_path / "s.ldb")
    from cablestore import Store

    Store(store).close()
    assert main(["rebuild", store, "--engine", "spark"]) == 2
    assert "Java 17" in capsys.readouterr().err


def test_version_and_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "cablestore", "--version"], capture_output=True, text=True, check=True)
    from cablestore.compiled import HOT_PATH

    assert out.stdout.strip() == f"cablestore {__version__} (hot path: {HOT_PATH})"
    helptext = subprocess.run([sys.executable, "-m", "cablestore", "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("demo", "generate", "ingest", "export", "rebuild", "check"):
        assert command in helptext
