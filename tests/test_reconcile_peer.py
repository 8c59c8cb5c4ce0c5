"""Set reconciliation as sync and serve speak it (docs/reconcile.md): the probe, each channel's history and state
settled in a few bytes, the fallback to native requests, a lying or greedy peer, live changes afterwards."""

from __future__ import annotations

import random

import pytest

from cablestore import JOIN, TEXT, post_hash
from cablestore.authoring.workload import generate
from cablestore.errors import LimitError, MessageError
from cablestore.peer import Node, PeerLimits, Sync, limits
from cablestore.wire import decoding as D
from cablestore.wire import messages as M
from cablestore.wire.codec import decode_post

from .conftest import keypair, post
from .peer_helpers import WALL, answers, link

NATIVE = PeerLimits(reconcile=0)


def counted_pump(x, y, polls=(), rounds: int = 2000, tamper=None) -> dict:
    """``pump`` that counts the bytes each way (``up``: from ``y``, the syncing side) and can rewrite what ``x`` sends."""
    moved = {"up": 0, "down": 0}
    for _ in range(rounds):
        for sync in polls:
            sync.poll(WALL)
        busy = False
        for src, dst, way in ((y, x, "up"), (x, y, "down")):
            data = src.data_to_send()
            if data:
                if tamper is not None and way == "down":
                    data = b"".join(M.encode(tamper(m)) for m in D.Decoder().feed(data))
                moved[way] += len(data)
                dst.receive_data(data, WALL)
                busy = True
        for sync in polls:
            sync.poll(WALL)
        if not busy and all(s.done for s in polls):
            return moved
    raise AssertionError("still talking")


@pytest.fixture
def pair(stores):
    """A store of a workload's posts and a copy lacking 12 of them at random: (source, copy, maker of more such copies)."""
    bufs = generate(seed=3, posts=600)
    a = stores("a")
    a.ingest_many(bufs)
    # Texts only: a missing join, role or delete changes what the copy makes of other posts (a different store).
    texts = [i for i, buf in enumerate(bufs) if decode_post(buf).post_type == TEXT]
    skipped = set(random.Random(5).sample(texts, 12))

    def partial(name):
        s = stores(name)
        s.ingest_many([buf for i, buf in enumerate(bufs) if i not in skipped])
        return s

    return a, partial("b"), partial


def sync_over(a, b, policy_a=None, policy_b=None, tamper=None, **kw):
    x, y = link(Node(a, **({"policy": policy_a} if policy_a else {})), Node(b, **({"policy": policy_b} if policy_b else {})))
    sync = Sync(y, "peer-a", **kw)
    moved = counted_pump(x, y, polls=[sync], tamper=tamper)
    return sync, sync.summary(), moved


def test_messages_of_the_extension_round_trip_and_refuse_what_is_malformed():
    for m in (
        M.ReconcileRequest(b"abcd", "general", M.SCOPE_STATE, b"\x01\x00\x00\x00"),
        M.ReconcileRequest(b"abcd"),  # the probe
        M.ReconcileResponse(b"abcd", b"\x01"),
        M.ReconcileResponse(b"abcd"),
        M.StateChangesRequest(b"abcd", "general"),
        M.ChatChangesRequest(b"abcd", "general", 17),
    ):
        assert D.decode(M.encode(m)) == m
    assert M.ReconcileRequest(b"abcd").is_probe and not M.ReconcileRequest(b"abcd", "c", 0, b"\x01").is_probe
    with pytest.raises(LimitError):
        M.encode(M.ReconcileRequest(b"abcd", "general", 2, b"\x01"))  # no such scope
    with pytest.raises(LimitError):
        M.encode(M.ReconcileRequest(b"abcd", "general", 0, b""))  # a channel without a message
    body = M.encode(M.ReconcileRequest(b"abcd", "general", 0, b"\x01"))
    with pytest.raises(MessageError):
        D.decode(body[:-1])  # the message cut short
    bad_scope = bytearray(body)
    bad_scope[-3] = 9
    with pytest.raises(LimitError):
        D.decode(bytes(bad_scope))


def test_a_resync_of_stores_that_differ_in_a_few_posts_reconciles_every_channel_in_few_bytes(pair):
    a, b, partial = pair
    native = answers(a)
    sync, summary, moved = sync_over(a, b)
    assert summary["complete"] and summary["reconciles"]
    assert summary["channels_reconciled"] == len(summary["channels"]) and summary["reconcile_fallbacks"] == {}
    assert answers(b) == native  # every post it lacked came
    assert summary["posts_requested"] <= 12
    # The same sync by native requests lists every hash.
    c = partial("c")
    _, by_hashes, moved_natively = sync_over(a, c, NATIVE, NATIVE)
    assert by_hashes["complete"] and not by_hashes["reconciles"] and by_hashes["channels_reconciled"] == 0
    assert answers(c) == native
    assert sum(moved.values()) < sum(moved_natively.values()) / 2
    _, again, moved_again = sync_over(a, b)  # nothing differs now
    assert again["complete"] and again["posts_requested"] == 0
    assert sum(moved_again.values()) < 200 + 120 * len(again["channels"])  # the list and probe; about 25 bytes a scope each way


def test_a_peer_that_ignores_the_probe_is_synced_natively_without_waiting(pair):
    a, b, _ = pair
    sync, summary, _ = sync_over(a, b, policy_a=NATIVE)
    assert summary["complete"] and not summary["reconciles"] and summary["channels_reconciled"] == 0
    assert sync.probe.result is False  # decided when its channel list came, not after PROBE_WAIT (the clock never moved)
    assert answers(b) == answers(a)
    assert summary["messages_dropped"] == 0


def test_a_peer_whose_fingerprints_lie_makes_the_sync_fall_back_never_wrong(pair):
    a, b, _ = pair

    def lie(m):
        if isinstance(m, M.ReconcileResponse) and len(m.message) > 1:
            return M.ReconcileResponse(m.req_id, m.message[:-1] + bytes([m.message[-1] ^ 0xFF]), circuit_id=m.circuit_id)
        return m

    sync, summary, _ = sync_over(a, b, tamper=lie)
    assert summary["complete"], summary["reason"]
    assert answers(b) == answers(a)


def test_a_peer_that_answers_garbage_falls_back_to_native_requests_per_channel(pair):
    a, b, _ = pair

    def garbage(m):
        if isinstance(m, M.ReconcileResponse) and len(m.message) > 1:
            return M.ReconcileResponse(m.req_id, b"\x01\xff\xff", circuit_id=m.circuit_id)
        return m

    sync, summary, _ = sync_over(a, b, tamper=garbage)
    assert summary["complete"] and summary["channels_reconciled"] == 0
    assert set(summary["reconcile_fallbacks"]) == set(summary["channels"])
    assert answers(b) == answers(a)


def test_past_its_budget_a_connection_s_reconciliations_are_refused_and_the_sync_still_completes(pair, monkeypatch):
    a, b, _ = pair
    monkeypatch.setattr(limits, "RECONCILE_RANGES_PER_CONNECTION", 1)
    sync, summary, _ = sync_over(a, b)
    assert summary["complete"] and summary["reconcile_fallbacks"]
    assert all("refused" in why for why in summary["reconcile_fallbacks"].values())
    assert answers(b) == answers(a)


def test_after_a_reconciled_live_sync_new_chat_and_state_posts_are_pushed(pair):
    a, b, _ = pair
    x, y = link(Node(a), Node(b))
    sync = Sync(y, "peer-a", live=True)
    counted_pump(x, y, polls=[], rounds=1)
    for _ in range(200):
        sync.poll(WALL)
        x.receive_data(y.data_to_send(), WALL)
        y.receive_data(x.data_to_send(), WALL)
        if sync.finite_done:
            break
    assert sync.finite_done and sync.summary()["channels_reconciled"]
    channel = sync.summary()["channels"][0]
    newcomer = keypair("newcomer")
    joined, said = post(newcomer, JOIN, WALL - 10, channel=channel), post(newcomer, TEXT, WALL - 5, channel=channel, text="hello")
    # Written offline two days ago, stored now: a live time range from "now less a margin" would never push it.
    late = post(newcomer, TEXT, WALL - 2 * 86_400_000, channel=channel, text="written offline")
    a.ingest(joined)
    a.ingest(said)
    a.ingest(late)
    for _ in range(50):
        sync.poll(WALL)
        y.receive_data(x.data_to_send(), WALL)
        x.receive_data(y.data_to_send(), WALL)
    assert post_hash(joined) in b and post_hash(said) in b and post_hash(late) in b
    assert answers(b) == answers(a)


def test_dense_differences_are_reconciled_with_sketches_in_tens_of_bytes_a_missing_post(stores):
    """A copy lacking 600 of 6,000 posts' texts: each channel is sketched whole and every missing post arrives
    (splitting ranges alone spent about 190 bytes a difference in reconciliation messages)."""
    bufs = generate(seed=4, posts=6000)
    a, b = stores("a"), stores("b")
    a.ingest_many(bufs)
    texts = [i for i, buf in enumerate(bufs) if decode_post(buf).post_type == TEXT]
    skipped = set(random.Random(6).sample(texts, 600))
    b.ingest_many([buf for i, buf in enumerate(bufs) if i not in skipped])
    missing = sum(1 for i in skipped if post_hash(bufs[i]) in a)  # a text deleted later is held by neither
    sync, summary, moved = sync_over(a, b)
    assert summary["complete"] and summary["reconcile_fallbacks"] == {}
    assert answers(b) == answers(a)
    assert summary["posts_requested"] == missing
    assert summary["reconcile_bytes"] < 100 * missing, (summary["reconcile_bytes"], missing)
