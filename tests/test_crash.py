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


def test_sigkill_during_an_ingest_that_drops_a_channel_of_10000_posts_leaves_a_store_that_verifies(tmp_path):
    """Moderation II: the drop, its resolved rows and the 10,000 removals are one WriteBatch, or nothing."""
    import random
    import shutil
    import signal
    import subprocess
    import time

    from cablestore import Store, make_post, post_hash
    from cablestore.wire.codec import DROP_CHANNEL, MODERATION, TEXT

    from .conftest import NOW, keypair

    me, chatty = keypair("local"), keypair("chatty")
    seed = tmp_path / "seed"
    with Store(seed, now=lambda: NOW, local_user=me.public_key, verify_signatures=False) as s:
        s.ingest_many([make_post(chatty, TEXT, 1_700_000_000_000 + i, channel="big", text=f"m{i}")[0] for i in range(10_000)])
        s.ingest(make_post(chatty, TEXT, 1_700_000_000_000, channel="small", text="stays")[0])
    drop, _ = make_post(me, MODERATION, 1_700_100_000_000, reason="", privacy=0, channel="big", recipients=[], action=DROP_CHANNEL)
    child = (
        "import sys, time\nfrom cablestore import Store\n"
        f"with Store(sys.argv[1], now=lambda: {NOW}) as s:\n"
        f"    s.ingest(bytes.fromhex({drop.hex()!r}))\n"
        "    print('done', flush=True)\n"
        "    time.sleep(60)\n"
    )
    rng = random.Random(5)
    outcomes = set()
    for trial in range(4):
        path = tmp_path / f"t{trial}"
        shutil.copytree(seed, path)
        proc = subprocess.Popen([sys.executable, "-c", child, str(path)], stdout=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.2, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with Store(path, now=lambda: NOW) as s:
            dropped = s.get(post_hash(drop)) is not None
            left = len(s.channel_time_range("big"))
            assert (dropped, left) in ((True, 0), (False, 10_000))
            assert s.channel_time_range("small") and s.check(check_signatures=False).consistent
            outcomes.add(dropped)
    assert outcomes  # every trial ended in one of the two whole states
