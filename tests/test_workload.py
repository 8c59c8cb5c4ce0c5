"""Thousands of generated posts from many users over many channels: the store
answers every request as the oracle of test_cablejs_fixture does, however it is fed."""

from __future__ import annotations

import pytest

from cablestore import POST_TYPE_NAMES, Store, decode_post, post_hash
from cablestore.authoring.workload import generate

from .conftest import NOW, dump
from .test_cablejs_fixture import Oracle

SEED, POSTS = 21, 4000


def as_meta(buf: bytes) -> dict:
    p = decode_post(buf)
    m = {"hash": post_hash(buf).hex(), "type": POST_TYPE_NAMES[p.post_type], "author": p.public_key.hex(), "timestamp": p.timestamp}
    if p.channel is not None:
        m["channel"] = p.channel
    if p.topic is not None:
        m["topic"] = p.topic
    if p.hashes is not None:
        m["deletes"] = [h.hex() for h in p.hashes]
    if p.info is not None and p.info_value("name") is not None:
        m["name"] = p.info_value("name")
    return m


@pytest.fixture(scope="module")
def posts():
    return generate(seed=SEED, posts=POSTS)


@pytest.fixture(scope="module")
def fed(tmp_path_factory, posts):
    """The same posts fed one by one and in batches of 300."""
    base = tmp_path_factory.mktemp("workload")
    with Store(base / "one", now=lambda: NOW) as one, Store(base / "batched", now=lambda: NOW) as batched:
        for buf in posts:
            one.ingest(buf)
        for i in range(0, len(posts), 300):
            assert all(r.ok for r in batched.ingest_many(posts[i : i + 300]))
        yield one, batched


@pytest.fixture(scope="module")
def oracle(posts):
    metas = [as_meta(b) for b in posts]
    o = Oracle({m["hash"]: m for m in metas})
    for m in metas:
        assert o.ingest(m) == "stored"
    return o


def test_workload_is_varied(posts):
    types = {decode_post(b).post_type for b in posts}
    # every chat type (0-5); moderation posts (6-9) come from tests/moderation_helpers.py, not the workload
    assert types == {t for t in POST_TYPE_NAMES if t < 6}
    assert len({decode_post(b).public_key for b in posts}) >= 10


def test_batched_and_single_ingest_give_identical_stores(fed):
    one, batched = fed
    assert dump(one) == dump(batched)


def test_store_answers_like_the_oracle(fed, oracle, posts):
    store, _ = fed
    assert store.channel_list() == oracle.channel_list()
    for ch in oracle.channel_list():
        assert [h.hex() for h in store.channel_time_range(ch)] == oracle.channel_time_range(ch)
        assert [h.hex() for h in store.channel_time_range(ch, 1_700_000_500_000, 1_700_001_500_000, 25)] == \
            oracle.channel_time_range(ch, 1_700_000_500_000, 1_700_001_500_000, 25)
        assert sorted(h.hex() for h in store.channel_state(ch)) == sorted(oracle.channel_state(ch))
        assert sorted(h.hex() for h in store.channel_state(ch, historic=True)) == sorted(oracle.channel_state(ch, True))
        assert store.topic(ch) == oracle.topic(ch)
        assert [m.hex() for m in store.members(ch)] == oracle.members(ch)
    for pk in {decode_post(b).public_key.hex() for b in posts}:
        assert store.name(pk) == oracle.name(pk)
        assert [h.hex() for h in store.author_posts(pk)] == oracle.author_posts(pk)
    for buf in posts:
        h = post_hash(buf).hex()
        assert (store.get(h) is not None) == (oracle.get(h) is not None)
        assert store.is_deleted(h) == oracle.is_deleted(h)


def test_rebuild_finds_the_live_store_consistent(fed):
    store, _ = fed
    report = store.check()
    assert report.consistent and report.posts == sum(1 for _ in store.items(b"!post!"))
