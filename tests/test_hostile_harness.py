"""The short run of the hostile-peer harness (`python -m benchmarks.hostile --short`), as CI runs it.

Every attack of docs/hostile-peers.md against a `cablestore serve` process while a good
client measures, then `cablestore sync` against each hostile server; the
bounds that page sets are checked by the harness itself (``failures``) and
again here.  About 45 s on a 2-core machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.hostile_private import PRIVATE_ATTACKS
from benchmarks.hostile_serve import SERVE_ATTACKS
from benchmarks.hostile_sync import SYNC_ATTACKS


def test_the_short_hostile_run_holds_every_bound(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.hostile", "--short", "--out", str(out)], capture_output=True, text=True, timeout=240)
    report = json.loads(out.read_text())
    assert report["failures"] == [] and proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["attack"] for r in report["serve"]] == ["baseline"] + [a[0] for a in SERVE_ATTACKS + PRIVATE_ATTACKS]
    for row in report["serve"]:
        assert row["wrong"] == 0 and row["answers"] > 10 and row["gap_s"] <= 2.0 and row["p99_ms"] <= 100, row
        assert row["rss_mb"] <= report["memory_mb"], row
    assert report["store_identical"] and report["serve_exit"] == 0
    assert report["checks"] == {
        "huge limit answered whole": True,
        "relay: only the good post passed on, duplicate concluded": True,
        "handshake garbage: closed, nothing sent": True,
        "after the handshake: over-bound length, bad MAC, garbage length closed": True,
    }
    assert report["serve_counts"]["handshakes"] > 0 and report["serve_counts"]["handshakes_failed"] > 0
    assert report["serve_counts"]["requests_refused"] > 0 and report["serve_counts"]["connections_refused"] > 0
    assert [r["attack"] for r in report["sync"]] == [a[0] for a in SYNC_ATTACKS]
    for row in report["sync"]:
        assert row["exit"] == 1 and row["reason"] and row["sync_s"] <= row["deadline_s"] + 2.0 and row["rss_mb"] <= report["memory_mb"], row
