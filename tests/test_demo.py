"""The quick start's demo as a user meets it: with Java it verifies on Spark, without it on the local engine.

Real subprocesses with PATH and JAVA_HOME arranged: no java at all, a java
too old (a script that answers ``-version`` as Java 11 does), or the
machine's own Java (the ``spark`` tests).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def no_java_env(tmp_path: Path) -> dict:
    """PATH holds only a directory with this python (as python and python3), and no JAVA_HOME: no java to find."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = str(bin_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    assert shutil.which("java", path=env["PATH"]) is None  # the arrangement is real
    return env


def fake_java_home(tmp_path: Path, version_line: str) -> Path:
    """A JAVA_HOME whose bin/java answers ``-version`` with ``version_line`` on stderr, as a JDK does."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return home


def demo(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cablestore", "demo", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _consistent_with_what_was_stored(out: str) -> None:
    """The verification's figures are the stored posts and tombstones the demo printed before it."""
    stored = re.search(r"^  (\d+) posts are stored: ", out, re.M)
    tombstones = re.search(r"^  the rebuild below checks those \d+ posts and the (\d+) tombstones the deletes left$", out, re.M)
    verified = re.search(r"^rebuild verify: consistent: (\d+) stored posts and (\d+) tombstones recompute to (\d+) view entries", out, re.M)
    assert stored and tombstones and verified, out
    assert (verified.group(1), verified.group(2)) == (stored.group(1), tombstones.group(1))
    assert int(verified.group(3)) > int(verified.group(1)) > 0


NOTE = re.compile(r"^Spark needs Java 17 or newer \((.+)\): verifying on the local engine instead", re.M)


def test_without_java_the_demo_verifies_on_the_local_engine_and_says_so_in_one_line(tmp_path):
    env = no_java_env(tmp_path)
    done = demo(["--posts", "300", "--dir", str(tmp_path / "demo.ldb")], env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    notes = [line for line in lines if "Java" in line or "Spark" in line]
    assert len(notes) == 1 and NOTE.match(notes[0]), done.stdout  # exactly one line says so
    assert NOTE.match(lines[0]).group(1) == "no java on PATH and no JAVA_HOME"  # first: decided before the work
    assert "rebuild verify (local engine)..." in lines and "rebuild verify (spark engine)..." not in done.stdout
    _consistent_with_what_was_stored(done.stdout)
    assert (tmp_path / "demo.ldb" / "CURRENT").exists()


def test_without_java_the_json_report_names_the_engine_and_why(tmp_path):
    env = no_java_env(tmp_path)
    done = demo(["--posts", "200", "--json"], env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # --json: the document alone, the note inside it
    assert report["ok"] and report["engine"] == "local"
    assert "no java on PATH" in report["engine_note"]
    assert report["rebuild"]["consistent"] and report["rebuild"]["engine"] == "local"
    assert report["rebuild"]["posts"] == report["stored"]["posts"] and report["rebuild"]["tombstones"] == report["stored"]["tombstones"]


def test_a_java_older_than_17_is_no_java_for_spark(tmp_path):
    env = no_java_env(tmp_path)
    env["JAVA_HOME"] = str(fake_java_home(tmp_path, 'openjdk version "11.0.2" 2019-01-15'))
    done = demo(["--posts", "100"], env)
    assert done.returncode == 0, done.stderr
    assert NOTE.match(done.stdout).group(1) == f"{env['JAVA_HOME']}/bin/java is Java 11"
    _consistent_with_what_was_stored(done.stdout)


def test_asked_for_spark_by_name_without_java_it_refuses_before_any_work(tmp_path):
    env = no_java_env(tmp_path)
    done = demo(["--engine", "spark", "--posts", "100", "--dir", str(tmp_path / "demo.ldb")], env, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""  # not a post generated, not a line printed
    assert done.stderr.strip().splitlines() == [
        "cablestore demo: RebuildError: Java 17 or newer is required for --engine spark: "
        "no java on PATH and no JAVA_HOME (install a JDK, or use --engine local)"
    ]
    assert not (tmp_path / "demo.ldb").exists()


@pytest.mark.parametrize(
    ("version_line", "problem"),
    [
        ('openjdk version "17.0.15" 2025-04-15', None),
        ('openjdk version "21" 2023-09-19', None),
        ('java version "1.8.0_292"', "is Java 8"),
        ('openjdk version "11.0.2" 2019-01-15', "is Java 11"),
        ("no version here", "-version names no version"),
    ],
)
def test_java_problem_reads_the_version_of_the_java_spark_would_run(tmp_path, monkeypatch, version_line, problem):
    from cablestore.rebuild.spark_runtime import java_problem

    home = fake_java_home(tmp_path, version_line)
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("PATH", str(tmp_path))  # JAVA_HOME wins, as in Spark's launcher
    found = java_problem()
    assert found == (None if problem is None else f"{home}/bin/java {problem}")


def test_java_problem_names_a_java_home_without_java(tmp_path, monkeypatch):
    from cablestore.rebuild.spark_runtime import java_problem

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    assert java_problem() == f"JAVA_HOME names no Java ({tmp_path / 'nowhere'})"
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert java_problem() == "no java on PATH and no JAVA_HOME"


@pytest.mark.spark
def test_with_java_the_demo_verifies_on_spark_and_says_nothing_about_engines(tmp_path):
    from cablestore.rebuild.spark_runtime import java_problem

    assert java_problem() is None  # the spark tests need Java 17+ (setup.cfg's marker)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["TMPDIR"] = str(tmp_path)  # Spark's log and the snapshot land here and must be gone afterwards
    done = demo(["--posts", "300"], env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no Java, log4j or executor lines
    assert not NOTE.search(done.stdout) and "Java" not in done.stdout
    assert "rebuild verify (spark engine)..." in done.stdout.splitlines()
    _consistent_with_what_was_stored(done.stdout)
    assert [p for p in tmp_path.iterdir() if p.name.startswith("cablestore-")] == []
