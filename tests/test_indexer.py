"""The indexer (cablestore.store.write.indexer) on a real LevelDB: a post and its view rows in, the same rows out, delete cascades and refusals.

Each test drives ``apply``/``unindex``/``commit`` on an :class:`IndexState` over a :class:`Txn` of a
store's LevelDB (the store closed), then reopens the store to read what the indexer wrote.
"""

from __future__ import annotations

import plyvel
import pytest

from cablestore import DELETE, JOIN, TEXT, TOPIC, Store, decode_post, make_post, post_hash
from cablestore.errors import DeletedPostError, UnauthorizedDeleteError
from cablestore.keyspace.keys import DELETED, POSTS, REFUSED
from cablestore.store.write import indexer
from cablestore.store.write.batch import IndexState
from cablestore.store.write.txn import Txn

from .conftest import NOW, keypair

ALICE, BOB = keypair("alice"), keypair("bob")


@pytest.fixture
def path(tmp_path):
    """A new, empty store's directory (the store closed)."""
    Store(tmp_path / "s", now=lambda: NOW).close()
    return tmp_path / "s"


def rows(path) -> list[tuple[bytes, bytes]]:
    db = plyvel.DB(str(path))
    try:
        return list(db.iterator())
    finally:
        db.close()


def batch(path, *steps, local_user=None):
    """Run ``step(state)`` for each step in one IndexState over the DB at ``path``, commit it, and return the state and each step's result."""
    db = plyvel.DB(str(path))
    try:
        state = IndexState(Txn(db))
        results = [step(state) for step in steps]
        indexer.commit(state, local_user)
        return state, results
    finally:
        db.close()


def applying(buf):
    return lambda state: indexer.apply(state, buf, post_hash(buf), decode_post(buf))


def unindexing(buf, forget_tombstones=True):
    return lambda state: indexer.unindex(state, post_hash(buf), state.get(POSTS + post_hash(buf)), forget_tombstones=forget_tombstones)


def post(kp, post_type, ts, **body):
    return make_post(kp, post_type, ts, **body)[0]


def test_apply_writes_the_post_and_its_view_rows_as_ingest_does(path, tmp_path):
    bufs = [post(ALICE, JOIN, NOW - 30, channel="dev"), post(ALICE, TEXT, NOW - 20, channel="dev", text="hi"),
            post(BOB, TOPIC, NOW - 10, channel="dev", topic="news")]
    state, results = batch(path, *map(applying, bufs))
    assert results == [True, True, True]
    assert set(state.added) == {post_hash(b) for b in bufs} and not state.deleted
    with Store(tmp_path / "by-ingest", now=lambda: NOW) as s:
        s.ingest_many(bufs)
    assert rows(path) == rows(tmp_path / "by-ingest")  # byte for byte the store's own ingest
    with Store(path, now=lambda: NOW) as s:
        assert s.topic("dev") == "news" and sorted(s.members("dev")) == sorted([ALICE.public_key, BOB.public_key])
        assert s.check().consistent


def test_apply_of_a_stored_post_is_false_and_writes_nothing(path):
    buf = post(ALICE, TEXT, NOW - 5, channel="dev", text="once")
    batch(path, applying(buf))
    before = rows(path)
    state, results = batch(path, applying(buf))
    assert results == [False] and not state.added and rows(path) == before


def test_apply_then_unindex_leaves_no_derived_row(path):
    before = rows(path)
    bufs = [post(ALICE, JOIN, NOW - 30, channel="dev"), post(ALICE, TEXT, NOW - 20, channel="dev", text="hi"),
            post(ALICE, TOPIC, NOW - 10, channel="dev", topic="t")]
    batch(path, *map(applying, bufs))
    assert len(rows(path)) > len(before) + len(bufs)  # the posts and their view rows
    state, _ = batch(path, *map(unindexing, reversed(bufs)))
    assert state.deleted == {post_hash(b) for b in bufs}
    assert rows(path) == before


def test_a_delete_by_its_author_removes_the_target_and_keeps_a_tombstone(path):
    target = post(ALICE, TEXT, NOW - 20, channel="dev", text="oops")
    delete = post(ALICE, DELETE, NOW - 10, hashes=[post_hash(target)])
    batch(path, applying(target))
    state, results = batch(path, applying(delete))
    assert results == [True] and post_hash(target) in state.deleted
    keys = [k for k, _ in rows(path)]
    assert POSTS + post_hash(target) not in keys and DELETED + post_hash(target) + post_hash(delete) in keys
    _, results = batch(path, applying(target))  # the deleted post offered again
    assert isinstance(results[0], DeletedPostError)
    with Store(path, now=lambda: NOW) as s:
        assert s.get(post_hash(target)) is None and s.is_deleted(post_hash(target)) and s.check().consistent


def test_a_delete_of_only_another_authors_posts_is_refused_and_remembered(path):
    target = post(ALICE, TEXT, NOW - 20, channel="dev", text="mine")
    delete = post(BOB, DELETE, NOW - 10, hashes=[post_hash(target)])
    batch(path, applying(target))
    _, results = batch(path, applying(delete))
    assert isinstance(results[0], UnauthorizedDeleteError)
    kept = dict(rows(path))
    assert kept[REFUSED + post_hash(delete)] == BOB.public_key  # who wrote it, for deletes that name it later
    assert POSTS + post_hash(target) in kept and POSTS + post_hash(delete) not in kept


def test_unindex_keeping_tombstones_then_apply_restores_the_rows(path):
    target = post(ALICE, TEXT, NOW - 20, channel="dev", text="gone")
    delete = post(ALICE, DELETE, NOW - 10, hashes=[post_hash(target)])
    batch(path, applying(target), applying(delete))
    stored = rows(path)
    batch(path, unindexing(delete, forget_tombstones=False))
    assert any(k.startswith(DELETED) for k, _ in rows(path))  # the tombstone stays
    batch(path, applying(delete))
    assert rows(path) == stored
