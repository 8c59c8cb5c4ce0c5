"""Peers that compare channel names exactly and only answer (as cable-core.js 0.2.1 does):
sync asks for every spelling, channel state answers end on the latest topic, channel lists use a
spelling the posts use, and ``serve`` pulls from whoever connects (issues 21 and 24)."""

from __future__ import annotations

import pytest

from cablestore import JOIN, TEXT, TOPIC, Store, post_hash
from cablestore.peer.answering import channel_state_answer, listed_spellings
from cablestore.peer.protocol import Node
from cablestore.peer.sync import Sync
from cablestore.wire.codec import decode_post

from .conftest import keypair, post
from .exact_peer import ExactPeer
from .peer_helpers import WALL

T0 = WALL - 3_600_000


@pytest.fixture
def stores(tmp_path):
    opened = []

    def make(name):
        s = Store(tmp_path / name)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def mixed_case_posts():
    """``Dev-Talk``: a join, a topic, 20 texts; ``dev-talk``: 3 texts by someone else (one channel here, two there)."""
    alice, bob = keypair("alice"), keypair("bob")
    posts = [post(alice, JOIN, T0, channel="Dev-Talk"), post(alice, TOPIC, T0 + 1, channel="Dev-Talk", topic="talk")]
    posts += [post(alice, TEXT, T0 + 10 + i, channel="Dev-Talk", text=f"dev {i}") for i in range(20)]
    posts += [post(bob, TEXT, T0 + 100 + i, channel="dev-talk", text=f"lower {i}") for i in range(3)]
    return posts


def drive(conn, peer: ExactPeer, sync: Sync, rounds: int = 200) -> None:
    """Move bytes between a connection and an exact peer until quiet (bounded)."""
    for _ in range(rounds):
        sync.poll(WALL)
        out = conn.data_to_send()
        back = peer.receive(out) if out else b""
        if back:
            conn.receive_data(back, WALL)
        sync.poll(WALL)
        if not out and not back and sync.done:
            return
    raise AssertionError("still talking")


def test_sync_asks_for_every_spelling_a_case_sensitive_peer_lists(stores):
    posts = mixed_case_posts()
    peer = ExactPeer(posts)
    mine = stores("mine")
    conn = Node(mine).connect("exact")
    sync = Sync(conn, "exact")
    drive(conn, peer, sync)
    summary = sync.summary()
    assert summary["complete"], summary
    assert summary["channels"] == ["dev-talk"]  # merged under the casefolded key
    assert all(mine.get(post_hash(p)) == p for p in posts)  # all 25, under both spellings
    assert len(mine.channel_time_range("dev-talk")) == 23 and mine.topic("DEV-TALK") == "talk"
    spelled = summary["spellings"]
    assert set(spelled) == {"Dev-Talk", "dev-talk"}
    assert spelled["Dev-Talk"]["posts"] == 22 and spelled["dev-talk"]["posts"] == 3
    assert all(v["asked"] >= 2 for v in spelled.values())


def test_sync_of_a_named_channel_asks_for_the_spellings_listed(stores):
    posts = mixed_case_posts()
    peer = ExactPeer(posts)
    mine = stores("mine")
    conn = Node(mine).connect("exact")
    sync = Sync(conn, "exact", channels=["DEV-TALK"])
    drive(conn, peer, sync)
    assert sync.summary()["complete"]
    assert all(mine.get(post_hash(p)) == p for p in posts)


def apply_in_arrival_order(store: Store, hashes) -> str:
    """The topic a peer ends on that keeps the last post/topic to arrive (cable-core.js)."""
    topic = None
    for h in hashes:
        p = decode_post(store.get(h))
        if p.post_type == TOPIC:
            topic = p.topic
    return topic


def test_channel_state_answer_ends_on_the_latest_topic(stores):
    s = stores("s")
    a, b = keypair("alice"), keypair("bob")
    for p in (
        post(a, JOIN, T0, channel="general"),
        post(b, JOIN, T0 + 1, channel="general"),
        post(a, TOPIC, T0 + 2, channel="general", topic="old"),
        post(b, TOPIC, T0 + 3, channel="general", topic="new"),
    ):
        s.ingest(p)
    answer = channel_state_answer(s, "general")
    topics = [decode_post(s.get(h)).topic for h in answer if decode_post(s.get(h)).post_type == TOPIC]
    assert sorted(topics) == ["new", "old"]  # the superseded topic still makes alice a member
    assert apply_in_arrival_order(s, answer) == "new" == s.topic("general")


def test_channel_list_uses_the_spelling_of_the_newest_post(stores):
    s = stores("s")
    a = keypair("alice")
    s.ingest(post(a, JOIN, T0, channel="dev-talk"))
    s.ingest(post(a, TEXT, T0 + 5, channel="Dev-Talk", text="newest"))
    s.ingest(post(a, JOIN, T0, channel="plain"))
    assert listed_spellings(s, ["dev-talk", "plain"]) == ["Dev-Talk", "plain"]
    s.ingest(post(a, TOPIC, T0 + 9, channel="DEV-talk", topic="t"))
    assert listed_spellings(s, ["dev-talk"]) == ["DEV-talk"]
    assert s.channel_list() == ["dev-talk", "plain"]  # the store's keys stay casefolded
