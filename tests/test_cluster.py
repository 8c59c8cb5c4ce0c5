"""The rebuild on a real Spark standalone cluster: a master and two workers on 127.0.0.1.

They are started from the pyspark package's own ``spark-class`` (no
download); the same snapshots are verified on the cluster and in-process and
the reports must be identical, for a clean and for a damaged store.  Every
process started is stopped by its process group, also when the test fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from benchmarks.cluster import LocalCluster, group_alive, rebuild_json
from cablestore import Store
from cablestore.authoring.workload import generate

from .conftest import NOW

pytestmark = [pytest.mark.spark, pytest.mark.slow]  # about a minute idle, three under load


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


def export(store, snap) -> None:
    subprocess.run([sys.executable, "-m", "cablestore", "export", str(store), str(snap), "--partitions", "4", "--quiet"], check=True)


def test_rebuild_on_a_standalone_cluster_matches_the_in_process_engine(tmp_path):
    clean = tmp_path / "clean"
    with Store(clean, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=21, posts=600))
    damaged = tmp_path / "damaged"
    shutil.copytree(clean, damaged)
    damage(damaged)
    for store in (clean, damaged):
        export(store, tmp_path / f"snap-{store.name}")

    cluster = LocalCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g")
    try:
        cluster.start()
        on_cluster = {
            name: rebuild_json(["--snapshot", str(tmp_path / f"snap-{name}"), "--master", cluster.master], cluster.env, timeout=300)[0]
            for name in ("clean", "damaged")
        }
        apps = cluster.applications()
    finally:
        cluster.stop()
    assert not [p.pid for p in cluster.procs if group_alive(p.pid)]  # master, workers, executors: all gone

    # The jobs really ran on the cluster: the master lists both applications, and executors worked on both workers.
    assert len(apps) == 2 and all(a["name"] == "cablestore-rebuild" for a in apps)
    assert all(any((tmp_path / "cluster" / "work" / f"worker-{i}").iterdir()) for i in range(2))

    for name in ("clean", "damaged"):
        in_process = rebuild_json(["--snapshot", str(tmp_path / f"snap-{name}"), "--engine", "local"], cluster.env)[0]
        assert on_cluster[name] == in_process
    assert on_cluster["clean"]["consistent"]
    damaged_report = on_cluster["damaged"]
    assert not damaged_report["consistent"]
    assert {kind: len(found) for kind, found in damaged_report["faults"].items() if found} == {"bad_hash": 1}
    chat, user = damaged_report["views"]["chat"], damaged_report["views"]["user"]
    assert chat["missing"] >= 1 and chat["extra"] >= 1 and user["different"] >= 1
