"""Moderation II through the library: what a store keeps, removes and refuses under hide, drop and block.

One test per row of the enforcement table (docs/moderation.md "Enforcement"); the peer tests
check the same rows over TCP.
"""

from __future__ import annotations

import pytest

from cablestore import DELETE, JOIN, TOPIC, Store, make_post, post_hash
from cablestore.errors import BlockedError, DroppedError

from .conftest import NOW, dump
from .moderation_helpers import ALEPH, BERT, EVE, MOD, URSULA, XU, act, block, hide, role, text, unblock

block_post = block

T0 = 1_700_000_000_000
H = post_hash


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        s.ingest(role(URSULA, ALEPH, MOD, T0)[0])
        yield s


def ing(store, made):
    return store.ingest(made[0])


def test_hide_user_keeps_stores_and_serves_but_reading_leaves_out(store):
    old = ing(store, text(EVE, T0 + 1, "dev", "before"))
    ing(store, hide(ALEPH, EVE, T0 + 2, channel="dev"))
    new = ing(store, text(EVE, T0 + 3, "dev", "after"))
    assert store.get(old) and store.get(new)  # stored
    assert set(store.channel_time_range("dev")) >= {old, new}  # answered to peers
    assert [m.hash for m in store.messages("dev")] == []  # hidden, old and new, in that context
    shown = store.messages("dev", include_hidden=True)
    assert {m.hash for m in shown} == {old, new} and all(m.hidden_by for m in shown)
    ing(store, text(EVE, T0 + 4, "other", "elsewhere"))
    assert len(store.messages("other")) == 1  # a channel hide hides in that channel only


def test_hide_post_is_stored_and_served_and_the_reason_shown(store):
    h = ing(store, text(EVE, T0 + 1, "dev", "rude"))
    ing(store, act(ALEPH, 2, T0 + 2, [h], "dev", reason="be kind"))
    assert store.get(h) is not None and h in store.channel_time_range("dev")
    assert store.messages("dev") == []
    (m,) = store.messages("dev", include_hidden=True)
    assert m.hidden_by is not None and store.post(m.hidden_by).reason == "be kind"
    assert store.post(h).hidden_by == m.hidden_by


def test_drop_post_removes_it_and_refuses_it_while_dropped(store):
    h = ing(store, text(EVE, T0 + 1, "dev", "illegal"))
    topic = ing(store, (make_post(EVE, TOPIC, T0 + 2, channel="dev", topic="bad")))
    drop = ing(store, act(ALEPH, 4, T0 + 3, [h, topic], "dev"))
    assert store.get(h) is None and store.get(topic) is None and store.topic("dev") == ""
    with pytest.raises(DroppedError):
        store.ingest(text(EVE, T0 + 1, "dev", "illegal")[0])
    assert store.dropped_posts() == {h: drop, topic: drop}
    ing(store, act(ALEPH, 5, T0 + 4, [h], "dev"))  # undrop one
    assert store.ingest(text(EVE, T0 + 1, "dev", "illegal")[0]) == h  # stored again when offered


def test_a_drop_of_a_post_never_held_is_remembered(store):
    ghost = text(EVE, T0 + 1, "dev", "not here yet")[0]
    ing(store, act(ALEPH, 4, T0 + 2, [H(ghost)], "dev"))
    with pytest.raises(DroppedError):
        store.ingest(ghost)


def test_drop_channel_removes_every_post_of_it_and_refuses_new_ones(store):
    made = [text(EVE, T0 + i, "junk", f"m{i}")[0] for i in range(5)] + [make_post(XU, JOIN, T0, channel="Junk")[0]]
    store.ingest_many(made)
    keep = ing(store, text(EVE, T0 + 9, "dev", "elsewhere"))
    ing(store, act(ALEPH, 6, T0 + 10, channel="JUNK"))
    assert all(store.get(H(b)) is None for b in made) and store.get(keep)
    assert "junk" not in store.channel_list() and store.channel_time_range("junk") == []
    with pytest.raises(DroppedError):
        store.ingest(text(BERT, T0 + 11, "junk", "new")[0])
    ing(store, act(ALEPH, 7, T0 + 12, channel="junk"))  # undrop: new posts come in again
    assert store.ingest(text(BERT, T0 + 11, "junk", "new")[0])


def test_block_with_drop_removes_the_users_posts_and_refuses_new_ones(store):
    hs = [ing(store, text(EVE, T0 + i, "dev", f"m{i}")) for i in range(3)]
    deletes_kept = ing(store, make_post(EVE, DELETE, T0 + 4, hashes=[hs[0]]))
    ing(store, block_post(URSULA, EVE, T0 + 5, drop=1))
    assert all(store.get(h) is None for h in hs)
    assert store.get(deletes_kept) is None  # every post of theirs goes (§4.6), their deletes too
    with pytest.raises(BlockedError):
        store.ingest(text(EVE, T0 + 6, "dev", "again")[0])


def test_block_without_drop_keeps_old_posts_and_refuses_new_ones(store):
    old = ing(store, text(EVE, T0 + 1, "dev", "old"))
    ing(store, block_post(ALEPH, EVE, T0 + 5, drop=0))
    assert store.get(old) is not None
    with pytest.raises(BlockedError):
        store.ingest(text(EVE, T0 + 6, "dev", "new")[0])
    assert store.ingest(text(EVE, T0 + 2, "dev", "old too")[0])  # from before the block: not new


def test_posts_of_users_who_block_the_local_user_are_refused(store):
    ing(store, block_post(EVE, URSULA, T0 + 5, notify=1))
    with pytest.raises(BlockedError):
        store.ingest(text(EVE, T0 + 6, "dev", "hi")[0])
    ing(store, block_post(XU, URSULA, T0 + 5, notify=0))  # not notified: not known to us as a block of us
    assert store.ingest(text(XU, T0 + 6, "dev", "hi")[0])


def test_unblock_undrop_lets_posts_back_undrop_0_keeps_them_out(store):
    h = ing(store, text(EVE, T0 + 1, "dev", "m"))
    ing(store, block_post(URSULA, EVE, T0 + 5, drop=1))
    ing(store, unblock(URSULA, EVE, T0 + 6, undrop=0))
    with pytest.raises(BlockedError):
        store.ingest(text(EVE, T0 + 1, "dev", "m")[0])
    assert store.ingest(text(EVE, T0 + 7, "dev", "after the unblock")[0])
    ing(store, unblock(URSULA, EVE, T0 + 8, undrop=1))
    assert store.ingest(text(EVE, T0 + 1, "dev", "m")[0]) == h


def test_private_posts_are_stored_and_shown_to_the_local_user_but_never_answered(store):
    h = ing(store, block(URSULA, EVE, T0 + 5, privacy=1))
    assert store.get(h) is not None and store.post(h).privacy == 1
    assert h not in store.moderation_state(["dev"]) and store.blocks()  # applied locally
    assert store.shareable([h]) == [None]


def test_a_drop_later_in_the_same_batch_is_reported_per_post(store):
    spam = text(EVE, T0 + 1, "dev", "spam")[0]
    results = store.ingest_many([spam, act(ALEPH, 4, T0 + 2, [H(spam)], "dev")[0]])
    assert isinstance(results[0].error, DroppedError) and results[1].ok
    assert store.get(H(spam)) is None and store.check().consistent


def test_a_refused_post_changes_nothing(store):
    ing(store, text(EVE, T0 + 1, "dev", "a"))
    ing(store, block_post(URSULA, EVE, T0 + 2, drop=0))
    before = dump(store)
    with pytest.raises(BlockedError):
        store.ingest(text(EVE, T0 + 3, "dev", "b")[0])
    assert dump(store) == before and store.check().consistent


def test_check_reports_a_post_the_state_keeps_out_and_repair_removes_it(store):
    spam = text(EVE, T0 + 1, "dev", "spam")[0]
    h = store.ingest(spam)
    ing(store, block_post(URSULA, EVE, T0 + 5, drop=1))
    assert store.get(h) is None and store.check().consistent
    store.db.put(b"!post!" + h, spam)  # put back under the store: damage a check must see
    report = store.check()
    assert not report.consistent and [f.kind for f in report.faults] == ["kept_out"]
    assert store.check(fix=True).consistent and store.get(h) is None
    # without a local user nothing is kept out, so nothing is a fault
    with Store(store.path.parent / "plain", now=lambda: NOW) as plain:
        plain.ingest_many([spam, block_post(URSULA, EVE, T0 + 5, drop=1)[0]])
        assert plain.get(h) is not None and plain.check().consistent


@pytest.mark.spark
def test_spark_check_reports_and_repairs_a_post_the_state_keeps_out_like_the_local_engine(store, spark_session):
    spam = text(EVE, T0 + 1, "dev", "spam")[0]
    h = store.ingest(spam)
    ing(store, block_post(URSULA, EVE, T0 + 5, drop=1))
    store.db.put(b"!post!" + h, spam)
    local, spark = store.check(), store.check(engine="spark")
    assert [f.kind for f in spark.faults] == [f.kind for f in local.faults] == ["kept_out"]
    assert spark.to_dict()["views"] == local.to_dict()["views"]
    assert store.check(engine="spark", fix=True).consistent and store.get(h) is None
