"""The rebuild on a real Spark standalone cluster, run as an operator would: a master and two workers on 127.0.0.1.

They are started from the pyspark package's own ``spark-class`` (no
download) with a bare environment: no virtualenv, no ``PYSPARK_PYTHON``, no
``PYTHONPATH``, and a PATH whose ``python3`` fails, so no worker has a
Python with cablestore.  The driver is ``cablestore rebuild`` run from a
virtualenv used by path (not activated), without ``PYSPARK_PYTHON``: it
packs its environment and ships it.  The same snapshots are verified on the
cluster and in-process and the reports must be identical, for a clean and
for a damaged store; with ``--no-ship-env`` the job fails in one line
saying why.  Every process started is stopped by its process group, also
when the test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile

import pytest

from benchmarks.cluster import LocalCluster, driver_env, group_alive, rebuild_json, unactivated_venv
from cablestore import Store
from cablestore.authoring.workload import generate

from .conftest import NOW

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # about 80 s idle


def damage(path) -> None:
    """One view entry missing, one extra, one changed, and a post whose blob no longer matches its hash."""
    with Store(path, now=lambda: NOW) as s:
        db = s.db
        chat = [k for k, _ in db.iterator(prefix=b"!chat!")]
        users = [(k, v) for k, v in db.iterator(prefix=b"!user!")]
        posts = [(k, v) for k, v in db.iterator(prefix=b"!post!")]
        db.delete(chat[3])
        db.put(b"!chat!zzz-not-a-channel\x00" + bytes(8), b"")
        db.put(users[0][0], users[0][1] + b"x")
        db.put(posts[7][0], posts[7][1][:-1] + bytes([posts[7][1][-1] ^ 1]))


def test_rebuild_on_a_bare_standalone_cluster_ships_its_environment_and_matches_the_in_process_engine(tmp_path):
    clean = tmp_path / "clean"
    with Store(clean, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=21, posts=600))
    damaged = tmp_path / "damaged"
    shutil.copytree(clean, damaged)
    damage(damaged)
    python, env = unactivated_venv(tmp_path), driver_env(tmp_path)
    assert subprocess.run(["python3", "-c", "1"], env=env, capture_output=True).returncode == 1  # no node Python
    for store in (clean, damaged):
        done = subprocess.run([str(python), "-m", "cablestore", "export", str(store), f"file://{tmp_path}/snap-{store.name}", "--partitions", "4"],
                              env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    cluster = LocalCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g")
    assert "PYSPARK_PYTHON" not in cluster.env and "VIRTUAL_ENV" not in cluster.env and "PYTHONPATH" not in cluster.env
    try:
        cluster.start()
        on_cluster = {
            name: rebuild_json(["--snapshot", f"file://{tmp_path}/snap-{name}", "--master", cluster.master], env, timeout=300, python=python)[0]
            for name in ("clean", "damaged")
        }
        unshipped = subprocess.run(
            [str(python), "-m", "cablestore", "rebuild", "--snapshot", str(tmp_path / "snap-clean"), "--master", cluster.master, "--no-ship-env"],
            env=env, capture_output=True, text=True, timeout=300,
        )
        apps = cluster.applications()
    finally:
        cluster.stop()
    assert not [p.pid for p in cluster.procs if group_alive(p.pid)]  # master, workers, executors: all gone

    # The jobs really ran on the cluster: the master lists the applications, and executors worked on both workers.
    assert len(apps) == 3 and all(a["name"] == "cablestore-rebuild" for a in apps)
    assert all(any((tmp_path / "cluster" / "work" / f"worker-{i}").iterdir()) for i in range(2))
    # They ran the environment the driver packed (once: the second run found it in the cache), unpacked as ./env.
    (archive,) = (tmp_path / "cache" / "cablestore" / "spark-env").glob("env-*.tar.gz")
    with tarfile.open(archive) as tar:
        assert tar.getmember("bin/python").issym() and tar.getmember("pyvenv.cfg").isfile()
    assert list((tmp_path / "cluster" / "work").glob("worker-*/app-*/*/env/bin/python"))

    for name in ("clean", "damaged"):
        in_process = rebuild_json(["--snapshot", str(tmp_path / f"snap-{name}"), "--engine", "local"], env, python=python)[0]
        assert on_cluster[name] == in_process
    assert on_cluster["clean"]["consistent"]
    damaged_report = on_cluster["damaged"]
    assert not damaged_report["consistent"]
    assert {kind: len(found) for kind, found in damaged_report["faults"].items() if found} == {"bad_hash": 1}
    chat, user = damaged_report["views"]["chat"], damaged_report["views"]["user"]
    assert chat["missing"] >= 1 and chat["extra"] >= 1 and user["different"] >= 1

    # Without the shipped environment the bare workers have no Python for the job: one line, exit 2.
    assert unshipped.returncode == 2, unshipped.stderr
    (line,) = unshipped.stderr.strip().splitlines()
    assert line.startswith(
        "cablestore rebuild: SparkUnavailableError: the Spark job failed: the executors' Python failed to start: no Python with cablestore on this node; "
        "do the executors' Python (python3) and cablestore exist there?"
    ), line
    assert "--no-ship-env" in line
    assert "Traceback" not in unshipped.stderr and sys.executable not in line
