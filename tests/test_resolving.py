"""Keeping the resolved moderation rows current (cablestore.store.write.resolving) on a real store: when to resolve, what is read, what is written."""

from __future__ import annotations

import plyvel

from cablestore import Store, decode_post, make_post, post_hash
from cablestore.keyspace.keys import POSTS
from cablestore.moderation import Seed, format_seed, resolve
from cablestore.store.write import indexer, resolving
from cablestore.store.write.batch import IndexState
from cablestore.store.write.txn import Txn
from cablestore.views import resolved_entries
from cablestore.wire.codec import BLOCK, INFO, JOIN, ROLE, TEXT, USER

from .conftest import NOW
from .moderation_helpers import ADMIN, ALEPH, BERT, URSULA, XU, block, info, role, text

T0 = 1_700_000_000_000


def open_store(path) -> Store:
    return Store(path, now=lambda: NOW, local_user=URSULA.public_key)


def batch_of(db, *bufs) -> IndexState:
    state = IndexState(Txn(db))
    for buf in bufs:
        assert indexer.apply(state, buf, post_hash(buf), decode_post(buf)) is True
    return state


def test_only_moderation_posts_and_post_infos_can_change_the_state():
    assert resolving.needed({ROLE}) and resolving.needed({BLOCK}) and resolving.needed({INFO})
    assert not resolving.needed({TEXT, JOIN}) and not resolving.needed(set())


def test_a_post_info_is_worth_resolving_only_for_a_role_recipient(tmp_path):
    with open_store(tmp_path / "s") as s:
        s.ingest(role(URSULA, ALEPH, ADMIN, T0)[0])
        assert not resolving.worth_resolving(batch_of(s.db, info(BERT, T0 + 1, name="bert")[0]))  # nobody gave BERT a role
        assert resolving.worth_resolving(batch_of(s.db, info(ALEPH, T0 + 1, name="aleph", accept_role=0)[0]))
        assert resolving.worth_resolving(batch_of(s.db, role(URSULA, BERT, ADMIN, T0 + 2)[0]))


def test_moderation_posts_are_every_moderation_post_and_the_infos_of_role_recipients(tmp_path):
    posts = [role(URSULA, ALEPH, ADMIN, T0)[0], info(ALEPH, T0 + 1, name="aleph")[0], info(BERT, T0 + 2, name="bert")[0],
             block(URSULA, XU, T0 + 3)[0], text(BERT, T0 + 4, "dev", "chat")[0]]
    with open_store(tmp_path / "s") as s:
        s.ingest_many(posts)
        state = IndexState(Txn(s.db))
        found = resolving.moderation_posts(state.current, lambda h: s.db.get(POSTS + h))
    assert sorted(h for h, _ in found) == sorted(post_hash(b) for b in posts[:2] + posts[3:4])  # not BERT's info, not chat


def test_refresh_writes_the_rows_resolve_gives_and_nothing_when_they_stand(tmp_path):
    with open_store(tmp_path / "s") as s:
        s.ingest(role(URSULA, ALEPH, ADMIN, T0)[0])
    db = plyvel.DB(str(tmp_path / "s"))
    try:
        standing = IndexState(Txn(db))
        assert resolving.refresh(standing, URSULA.public_key) == set() and standing.writes == {}
        state = batch_of(db, role(ALEPH, BERT, ADMIN, T0 + 1)[0])
        changed = resolving.refresh(state, URSULA.public_key)
        assert changed
        posts = resolving.moderation_posts(state.current, lambda h: state.get(POSTS + h))
        expected = dict(resolved_entries(resolve(URSULA.public_key, posts, Seed())))
        assert all(state.writes[k] == expected[k] for k in changed)  # every key written is the pure resolver's
        state.commit()
    finally:
        db.close()
    with open_store(tmp_path / "s") as s:
        assert s.roles()[BERT.public_key] == "admin"


def test_the_latest_role_post_wins_whatever_order_the_batch_holds_them_in(tmp_path):
    given, taken = role(URSULA, ALEPH, ADMIN, T0)[0], role(URSULA, ALEPH, USER, T0 + 5)[0]
    answers = []
    for i, order in enumerate(([given, taken], [taken, given], [given])):
        Store(tmp_path / str(i), now=lambda: NOW, local_user=URSULA.public_key).close()
        db = plyvel.DB(str(tmp_path / str(i)))
        try:
            state = batch_of(db, *order)
            indexer.commit(state, URSULA.public_key)
            answers.append(sorted(db.iterator()))
        finally:
            db.close()
        with open_store(tmp_path / str(i)) as s:
            assert (ALEPH.public_key in s.roles()) == (order == [given])  # the later post/role (back to user) wins
    assert answers[0] == answers[1] != answers[2]


def test_stored_seed_reads_the_seed_and_what_it_kept(tmp_path):
    with open_store(tmp_path / "s") as s:
        assert resolving.stored_seed(s.db.get) == Seed()
        s.set_seed(format_seed({ALEPH.public_key: ADMIN}))
        assert resolving.stored_seed(s.db.get).roles == {ALEPH.public_key: ADMIN}


def test_a_fact_of_a_removed_post_info_still_counts(tmp_path):
    kept = info(XU, T0 + 1, name="xu", accept_role=0)[0]
    with open_store(tmp_path / "s") as s:
        s.ingest_many([make_post(XU, JOIN, T0, channel="dev")[0], kept, role(URSULA, XU, ADMIN, T0 + 2)[0]])
        s.ingest(block(URSULA, XU, T0 + 3, drop=1)[0])  # removes XU's post/info, keeps its fact
        assert s.get(post_hash(kept)) is None
        state = IndexState(Txn(s.db))
        facts = resolving.held_facts(state.current)
        assert [h for h, _ in facts] == [post_hash(kept)]
        assert post_hash(kept) in {h for h, _ in resolving.moderation_posts(state.current, lambda h: s.db.get(POSTS + h))}
