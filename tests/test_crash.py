"""Crash consistency: 30 SIGKILLs of an ingesting child (the long run: python -m benchmarks.crash)."""

from __future__ import annotations

import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")


def test_sigkill_during_ingest_loses_nothing_acknowledged(tmp_path):
    from benchmarks.crash import run

    # enough posts that 30 kills land before the workload ends, even on a fast machine (20,000 ran out after 26-27)
    stats = run(kills=30, posts=40000, seed=3, workdir=tmp_path, log=lambda *_: None)
    assert stats["kills"] == 30
    assert stats["checks"] == 31
    assert stats["acked_max"] == 39999
    assert stats["identical_to_uninterrupted"] is True


def test_sigkill_during_check_repair_leaves_it_unrepaired_or_repaired(tmp_path):
    from benchmarks.crash import run_repair_kills

    stats = run_repair_kills(kills=4, posts=1500, seed=5, workdir=tmp_path, log=lambda *_: None)
    assert stats["kills"] >= 2  # a child that finishes before its kill is not counted
    assert stats["unrepaired"] + stats["repaired"] == stats["kills"]  # run_repair_kills raises on anything in between
