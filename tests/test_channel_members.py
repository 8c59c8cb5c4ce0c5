"""Channel members: the register ``!channel!<ch>m<pubkey>`` holds each member's winning post.

No row per channel post: the register's value names the member's
latest join/text/topic/leave in the channel, and when that post is removed
its successor is the greatest of four bounded reverse seeks under the
author's rows of that channel (``!author!<pubkey><type><ch>``).
"""

from __future__ import annotations

import pytest

from cablestore import DELETE, JOIN, LEAVE, TEXT, TOPIC, Store, decode_post, post_hash, views
from cablestore.keyspace.keys import AUTHOR, CHANNEL, canonical_channel, channel_key, escape, mono
from cablestore.keyspace.records import Indexed
from cablestore.rebuild.reindex import reindex
from cablestore.store.write import txn as txn_mod
from cablestore.views import channel as channel_view
from cablestore.wire.codec import DROP_POST

from . import moderation_helpers as mh
from .conftest import NOW, dump, keypair, post

H = post_hash
ALICE, BOB = keypair("alice"), keypair("bob")


def cpost(kp, post_type, ts, channel):
    body = {TEXT: {"text": f"t{ts}"}, TOPIC: {"topic": f"topic {ts}"}}.get(post_type, {})
    return post(kp, post_type, ts, channel=channel, **body)


def delete(kp, ts, *targets):
    return post(kp, DELETE, ts, hashes=tuple(H(t) for t in targets))


def register(store, channel, kp):
    value = store.db.get(CHANNEL + channel_key(channel) + b"m" + kp.public_key)
    return None if value is None else channel_view.membership(value)


def expect(buf, post_type):
    """The register a post decides: member unless a leave, its type, its mono."""
    return channel_view.Membership(post_type != LEAVE, post_type, mono(_ts(buf), H(buf)))


def _ts(buf) -> int:
    return decode_post(buf).timestamp


def fresh(path, bufs) -> list:
    """The store the same posts give offered newest first (a store is a function of its set of posts)."""
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(list(reversed(bufs)))  # a post arriving after its delete is refused
        return dump(s)


def test_the_register_holds_the_winner_and_no_candidate_rows_are_written(tmp_path):
    posts = [cpost(ALICE, JOIN, 1000, "a"), cpost(ALICE, TEXT, 2000, "a"), cpost(ALICE, TOPIC, 1500, "a")]
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(posts)
        assert register(s, "a", ALICE) == expect(posts[1], TEXT)
        assert not [k for k, _ in s.items() if k.startswith(CHANNEL + channel_key("a") + b"a")]
        author_keys = sorted(k for k, _ in s.items() if k.startswith(AUTHOR))
        assert author_keys == sorted(AUTHOR + ALICE.public_key + bytes([t]) + escape("a") + mono(_ts(b), H(b)) for b, t in zip(posts, (JOIN, TEXT, TOPIC), strict=True))
        assert s.members("a") == [ALICE.public_key]


def test_removing_the_winner_picks_the_successor_of_each_type(tmp_path):
    """Texts in another channel between and after them never count; each of the four types succeeds once."""
    oldest_text = cpost(ALICE, TEXT, 500, "a")
    join, topic, leave, text = (cpost(ALICE, t, ts, "a") for t, ts in ((JOIN, 1000), (TOPIC, 2000), (LEAVE, 3000), (TEXT, 4000)))
    elsewhere = [cpost(ALICE, TEXT, 3500, "b"), cpost(ALICE, TEXT, 5000, "b"), cpost(ALICE, TOPIC, 4500, "b")]
    offered = [oldest_text, join, topic, leave, text, *elsewhere]
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(offered)
        assert register(s, "a", ALICE) == expect(text, TEXT)
        b_register = register(s, "b", ALICE)
        steps = [(text, leave, LEAVE), (leave, topic, TOPIC), (topic, join, JOIN), (join, oldest_text, TEXT), (oldest_text, None, None)]
        for i, (gone, successor, t) in enumerate(steps):
            d = delete(ALICE, 9000 + i, gone)
            s.ingest(d)
            offered.append(d)
            assert register(s, "a", ALICE) == (None if successor is None else expect(successor, t)), i
            assert (ALICE.public_key in s.members("a")) == (t not in (LEAVE, None))
            assert register(s, "b", ALICE) == b_register  # the other channel's register is untouched
            assert s.check().consistent
        assert dump(s) == fresh(tmp_path / "fresh", offered)
        before = dump(s)
        reindex(s)  # the bulk reindex writes each register from its group's winner: the same rows
        assert dump(s) == before


def test_a_tie_is_broken_by_hash_and_the_other_post_of_the_tie_succeeds(tmp_path):
    join, leave = cpost(ALICE, JOIN, 6000, "a"), cpost(ALICE, LEAVE, 6000, "a")
    older = cpost(ALICE, TEXT, 4000, "a")
    beside = cpost(ALICE, TEXT, 6000, "b")  # the same timestamp, another channel
    win, lose = sorted([(join, JOIN), (leave, LEAVE)], key=lambda p: H(p[0]), reverse=True)
    offered = [older, join, leave, beside]
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(offered)
        assert register(s, "a", ALICE) == expect(*win)
        d = delete(ALICE, 7000, win[0])
        s.ingest(d)
        assert register(s, "a", ALICE) == expect(*lose)
        assert s.check().consistent
        assert dump(s) == fresh(tmp_path / "fresh", [*offered, d])


def test_a_dropped_winner_is_succeeded_and_a_purge_removes_the_register(tmp_path):
    local = mh.URSULA
    join, text = cpost(ALICE, JOIN, 1000, "a"), cpost(ALICE, TEXT, 2000, "a")
    with Store(tmp_path / "s", now=lambda: NOW, local_user=local.public_key) as s:
        s.ingest_many([join, text, cpost(BOB, TEXT, 2500, "a")])
        s.ingest(mh.act(local, DROP_POST, 3000, [H(text)], "a")[0])
        assert register(s, "a", ALICE) == expect(join, JOIN)
        assert s.check().consistent
        assert s.purge_author(ALICE.public_key) == 1
        assert register(s, "a", ALICE) is None and s.members("a") == [BOB.public_key]
        assert s.check().consistent


@pytest.fixture
def seeks(monkeypatch):
    """The prefixes ``Txn.last_candidate`` (the store's one reverse seek for a group's candidates) is asked for."""
    asked: list[bytes] = []
    original = txn_mod.Txn.last_candidate

    def counted(self, prefix, skip=frozenset()):
        asked.append(prefix)
        return original(self, prefix, skip)

    monkeypatch.setattr(txn_mod.Txn, "last_candidate", counted)
    return asked


def test_a_removal_seeks_four_bounded_prefixes_however_much_the_author_wrote_elsewhere(tmp_path, seeks):
    """A hostile author with many posts in other channels (and of every type) does not make a removal expensive."""
    spam = [cpost(ALICE, t, 10_000 + i, f"spam{i % 40}") for i, t in enumerate([TEXT, TOPIC, JOIN, LEAVE] * 150)]
    older, winner = cpost(ALICE, JOIN, 1000, "a"), cpost(ALICE, TEXT, 2000, "a")
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many([*spam, older, winner])
        seeks.clear()
        s.writer._winners.clear()  # no cached winner: the register is read
        s.ingest(cpost(ALICE, TEXT, 1500, "a"))  # an older candidate: the register answers, no seek at all
        assert [p for p in seeks if p.startswith(AUTHOR)] == []
        s.writer._winners.clear()  # the cache knew the winner: the removal reads the register, then seeks
        s.ingest(delete(ALICE, 20_000, winner))
        author_seeks = [p for p in seeks if p.startswith(AUTHOR)]
        assert sorted(author_seeks) == sorted(AUTHOR + ALICE.public_key + bytes([t]) + escape("a") for t in (TEXT, TOPIC, JOIN, LEAVE))
        assert register(s, "a", ALICE).post_type == TEXT and register(s, "a", ALICE).mono[:8] == (1500).to_bytes(8, "big")


def test_readers_decode_the_register(tmp_path):
    """Members, channel summaries, the post count of a channel and a channel state answer read the register's value."""
    posts = [
        cpost(ALICE, JOIN, 1000, "a"), cpost(ALICE, TOPIC, 1100, "a"),  # Alice's membership is decided by a topic
        cpost(BOB, TEXT, 1200, "a"), cpost(BOB, TOPIC, 1300, "a"), cpost(BOB, LEAVE, 1400, "a"),  # Bob left
        cpost(ALICE, TEXT, 1500, "b"),
    ]
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(posts)
        assert s.members("a") == [ALICE.public_key]
        assert [(c.name, c.members) for c in s.channels()] == [("a", 1), ("b", 1)]
        assert s.channel_post_count("a") == 5 and s.channel_post_count("b") == 1 and s.channel_post_count("c") == 0
        answer = s.channel_state_answer("a")
        assert H(posts[1]) in answer and answer.index(H(posts[1])) < answer.index(H(posts[3]))  # a superseded topic first
        assert s.newest_timestamp(ALICE.public_key) == 1500 and s.newest_timestamp(BOB.public_key) == 1400
        assert s.author_posts(ALICE.public_key, TEXT) == [H(posts[5])]
        assert s.author_posts(ALICE.public_key) == [H(posts[5]), H(posts[1]), H(posts[0])]
        before = dump(s)
        reindex(s)
        assert dump(s) == before and s.members("a") == [ALICE.public_key]


@pytest.mark.parametrize("channel", ["a", "Dev-Talk", "a\x00b", "ünï"])
def test_compiled_and_pure_entries_name_the_channel_in_the_author_row_and_write_no_channel_row(channel):
    """The compiled ``views.entries`` (when built) gives the pure view's bytes: the author row carries the escaped, terminated channel."""
    for t in (TEXT, TOPIC, JOIN, LEAVE):
        buf = cpost(ALICE, t, 1000 + t, channel)
        ip = Indexed.of(buf, decode_post(buf), H(buf))
        author_key = AUTHOR + ALICE.public_key + bytes([t]) + escape(canonical_channel(channel)) + ip.mono
        got = views.entries(ip)
        assert got == views.entries_py(ip)
        assert (author_key, b"") in got and not [k for k, _ in got if k.startswith(CHANNEL)]
