"""Syncing from hostile servers: against each one (real sockets on 127.0.0.1) a sync ends incomplete, with the reason, in time and in bounded memory."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from benchmarks.hostile_sync import HostileServer
from cablestore import Store
from cablestore.peer import PeerLimits, run_sync

PY = sys.executable


def sync_against(tmp_path, kind: str, *, live: bool = False, policy: PeerLimits | None = None, progress_timeout: float = 0.6, scale: float = 0.2):
    server = HostileServer(kind, scale)
    server.start()
    try:
        with Store(tmp_path / kind) as store:
            start = time.monotonic()
            kw = {"live": live, "duration": 10 if live else None, "progress_timeout": progress_timeout, "policy": policy or PeerLimits(), "timeout": 20}
            summary = asyncio.run(asyncio.wait_for(run_sync(store, f"127.0.0.1:{server.port}", **kw), 30))
            return summary, time.monotonic() - start
    finally:
        server.done.set()
        server.join(10)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("silent", "no progress for 0.6 s: 1 requests unanswered; the peer sent 0 messages"),
        ("garbage", "no progress for 0.6 s"),
        ("over-cap-list", "channel list: malformed answer: LimitError: more than 4096 channels in one message"),
        ("wrong-types", "channel list: wrong answer type: PostResponse does not answer a ChannelListRequest"),
        ("request-flood", "no progress for 0.6 s: 1 requests unanswered"),
    ],
)
def test_a_peer_that_never_answers_properly_fails_the_sync_with_the_reason(tmp_path, kind, reason):
    summary, seconds = sync_against(tmp_path, kind)
    assert not summary["complete"] and summary["reason"].startswith(reason), summary
    assert seconds < 5  # the progress deadline, not the 600 s --timeout
    if kind == "garbage":
        assert summary["messages_dropped"] > 0
    if kind == "request-flood":
        assert summary["requests_from_peer"] > 100 and summary["requests_answered"] == 0


def test_endless_hash_responses_are_bounded_by_the_pending_hash_limit(tmp_path):
    summary, seconds = sync_against(tmp_path, "endless-hashes", policy=PeerLimits(pending_hashes=20_000), progress_timeout=1.0)
    assert not summary["complete"] and "overflow: the peer listed more than 20000 posts to fetch at once" in summary["reason"], summary
    assert summary["hashes_received"] >= 65_536 and summary["posts_requested"] <= 20_000
    assert seconds < 8


def test_a_live_sync_under_a_pushed_hash_flood_ends_with_the_reason(tmp_path):
    summary, seconds = sync_against(tmp_path, "live-push-flood", live=True, policy=PeerLimits(pending_hashes=20_000))
    assert not summary["complete"] and summary["reason"].startswith("live general: overflow"), summary
    assert summary["posts_requested"] <= 20_000 and seconds < 8


def test_a_trickle_of_new_hashes_does_not_keep_a_sync_alive(tmp_path):
    summary, seconds = sync_against(tmp_path, "trickle", progress_timeout=1.0, scale=0.2)
    assert not summary["complete"] and summary["reason"].startswith("no progress for 1 s"), summary
    assert summary["hashes_received"] >= 3  # hashes kept coming; no post did
    assert seconds < 4


def test_the_sync_command_prints_the_reason_and_exits_1(tmp_path):
    server = HostileServer("silent", 0.2)
    server.start()
    try:
        out = subprocess.run(
            [PY, "-m", "cablestore", "sync", str(tmp_path / "s"), "--connect", f"127.0.0.1:{server.port}", "--progress-timeout", "0.5"],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        server.done.set()
    assert out.returncode == 1, out.stderr
    assert out.stdout.startswith("synced 0 channels from 127.0.0.1:") and "; INCOMPLETE: no progress for 0.5 s" in out.stdout
    assert out.stderr == ""


def test_sync_json_says_what_was_asked_received_and_refused(tmp_path):
    server = HostileServer("wrong-types", 0.2)
    server.start()
    try:
        out = subprocess.run(
            [PY, "-m", "cablestore", "sync", str(tmp_path / "s"), "--connect", f"127.0.0.1:{server.port}", "--progress-timeout", "1", "--json"],
            capture_output=True, text=True, timeout=60,
        )
    finally:
        server.done.set()
    summary = json.loads(out.stdout)
    assert out.returncode == 1 and summary["complete"] is False and summary["reason"].startswith("channel list: wrong answer type")
    assert summary["requests_sent"] == 1 and summary["requests_answered"] == 0
    assert summary["dropped_by_error"] == {"UnknownRequestError": summary["messages_dropped"]} and summary["messages_dropped"] >= 1
