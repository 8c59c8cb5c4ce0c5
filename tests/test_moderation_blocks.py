"""Blocks as moderation.md §4.6 has them: a blocked user's posts are discarded, their moderation included.

* a block (any ``drop``) discards the blocked user's post/role, post/moderation,
  post/block and post/unblock from the state, and ends the roles they hold;
* a block with ``drop = 1`` removes and refuses every post of theirs, post/info
  and post/delete included, keeping only the facts the state needs;
* whose block stands is one answer for the set of posts, whatever order they came in.
"""

from __future__ import annotations

import itertools

import pytest

from cablestore import DELETE, JOIN, Store, make_post, post_hash
from cablestore.errors import BlockedError

from .conftest import NOW, dump
from .moderation_helpers import ADMIN, ALEPH, BERT, CASHEW, EVE, MOD, URSULA, XU, block, hide, info, role, text, unblock

T0 = 1_700_000_000_000
H = post_hash
USER = 2


def build(path, made, resync=True) -> Store:
    s = Store(path, now=lambda: NOW, local_user=URSULA.public_key)
    for _ in range(len(made) if resync else 1):  # re-offer until nothing changes (what a re-sync does)
        before = dump(s)
        s.ingest_many([buf for buf, _ in made])
        if dump(s) == before:
            break
    return s


def admins(store, channel=None) -> set:
    return {user for user, role in store.roles(channel).items() if role == "admin"}


def test_a_blocked_admin_stops_moderating(tmp_path):
    """The issue's case: the local user blocks admin A; A then makes C an admin and hides U: neither takes effect."""
    for drop in (0, 1):
        made = [
            role(URSULA, ALEPH, ADMIN, T0 + 1),
            block(URSULA, ALEPH, T0 + 2, drop=drop),
            role(ALEPH, BERT, ADMIN, T0 + 3),
            hide(ALEPH, XU, T0 + 4),
        ]
        with build(tmp_path / f"d{drop}", made) as s:
            assert BERT.public_key not in admins(s), drop
            assert ALEPH.public_key not in s.roles(), drop  # a blocked user's roles end with the block
            assert XU.public_key not in s.hidden_users(), drop
            assert s.check().consistent


def test_an_unblock_gives_back_roles_and_actions(tmp_path):
    made = [role(URSULA, ALEPH, ADMIN, T0 + 1), block(URSULA, ALEPH, T0 + 2, drop=0), role(ALEPH, BERT, ADMIN, T0 + 3), hide(ALEPH, XU, T0 + 4)]
    with build(tmp_path / "s", made) as s:
        assert BERT.public_key not in admins(s)
        s.ingest(unblock(URSULA, ALEPH, T0 + 5, undrop=1)[0])
        assert {ALEPH.public_key, BERT.public_key} <= admins(s)  # drop = 0 kept the posts: they count again
        assert XU.public_key in s.hidden_users()
        assert s.check().consistent


def test_a_dropping_block_removes_every_post_of_the_user(tmp_path):
    said = text(EVE, T0 + 1, "dev", "hello")
    gone = text(EVE, T0 + 2, "dev", "oops")
    theirs = [
        make_post(EVE, JOIN, T0, channel="dev"),
        info(EVE, T0 + 1, name="eve"),
        said,
        gone,
        make_post(EVE, DELETE, T0 + 3, hashes=[H(gone[0])]),
        role(EVE, CASHEW, MOD, T0 + 4),
        block(EVE, CASHEW, T0 + 5),
        unblock(EVE, CASHEW, T0 + 6),
        hide(EVE, CASHEW, T0 + 7),
    ]
    with build(tmp_path / "s", [role(URSULA, ALEPH, ADMIN, T0), *theirs]) as s:
        assert s.name(EVE.public_key) == "eve"
        s.ingest(block(ALEPH, EVE, T0 + 10, drop=1)[0])
        assert all(s.get(H(buf)) is None for buf, _ in theirs)  # post/info, post/delete and types 6-9 too
        assert s.name(EVE.public_key) is None and s.author_posts(EVE.public_key) == []
        assert s.get(H(gone[0])) is None and not s.tombstones(H(gone[0]))  # their delete went with what it deleted
        for buf, _ in theirs:
            with pytest.raises(BlockedError):  # refused while the block stands, and answered to nobody
                s.ingest(buf)
        assert s.check().consistent


def test_a_dropping_block_gives_one_store_in_every_arrival_order(tmp_path):
    made = [
        role(URSULA, ALEPH, ADMIN, T0),
        info(EVE, T0 + 1, name="eve", accept_role=0),
        role(ALEPH, EVE, MOD, T0 + 2),
        hide(EVE, XU, T0 + 3),
        block(ALEPH, EVE, T0 + 4, drop=1),
        text(EVE, T0 + 5, "dev", "hi"),
    ]
    stores = []
    for i, order in enumerate(itertools.permutations(made)):
        if i % 37:  # 720 orders: every 37th is enough to mix every position
            continue
        with build(tmp_path / str(i), list(order)) as s:
            assert s.check().consistent
            stores.append(dump(s))
    assert len(stores) > 10 and all(d == stores[0] for d in stores)


def test_admins_who_block_each_other_decide_nothing_whatever_the_order(tmp_path):
    """§4.4.5: a block of a user who holds authority applies only if the local user issued it."""
    made = [role(URSULA, ALEPH, ADMIN, T0), role(URSULA, BERT, ADMIN, T0 + 1), block(ALEPH, BERT, T0 + 2, drop=1), block(BERT, ALEPH, T0 + 3, drop=1)]
    dumps = set()
    for i, order in enumerate(itertools.permutations(made)):
        with build(tmp_path / str(i), list(order)) as s:
            assert s.blocks() == {}
            assert {ALEPH.public_key, BERT.public_key} <= admins(s)
            dumps.add(tuple(dump(s)))
    assert len(dumps) == 1


def test_former_mods_who_block_each_other_give_one_answer_in_every_order(tmp_path):
    """Each block stands only while the other does not: the least fixed point blocks neither, in every order."""
    made = [
        role(URSULA, ALEPH, MOD, T0),
        role(URSULA, BERT, MOD, T0 + 1),
        block(ALEPH, BERT, T0 + 2, drop=1),
        block(BERT, ALEPH, T0 + 3, drop=1),
        role(URSULA, ALEPH, USER, T0 + 4),
        role(URSULA, BERT, USER, T0 + 5),
        text(ALEPH, T0 + 6, "dev", "a"),
        text(BERT, T0 + 7, "dev", "b"),
    ]
    dumps = set()
    for i, order in enumerate(itertools.permutations(made)):
        if i % 401:
            continue
        with build(tmp_path / str(i), list(order)) as s:
            assert not s.blocks()
            assert s.get(H(made[6][0])) is not None and s.get(H(made[7][0])) is not None
            assert s.check().consistent
            dumps.add(tuple(dump(s)))
    assert len(dumps) == 1


def test_a_block_cannot_stand_on_authority_its_target_gave(tmp_path):
    """Aleph (then an admin) made Bert an admin, Bert blocked Aleph, then Ursula took Aleph's admin away:
    without Aleph's posts Bert never held authority, so his block of Aleph does not stand."""
    made = [
        role(URSULA, ALEPH, ADMIN, T0),
        role(ALEPH, BERT, ADMIN, T0 + 1),
        block(BERT, ALEPH, T0 + 2, drop=1),
        role(URSULA, ALEPH, USER, T0 + 3),
        text(ALEPH, T0 + 4, "dev", "still here"),
    ]
    with build(tmp_path / "s", made) as s:
        assert not s.blocks()
        assert s.get(H(made[4][0])) is not None
        assert s.check().consistent


def test_a_block_by_the_local_user_always_stands(tmp_path):
    made = [role(URSULA, ALEPH, ADMIN, T0), block(ALEPH, URSULA, T0 + 1, drop=1, notify=1), block(URSULA, ALEPH, T0 + 2, drop=1)]
    with build(tmp_path / "s", made) as s:
        assert list(s.blocks()) == [ALEPH.public_key]
        assert not s.blocked_by()  # Aleph's notified block of Ursula is one of his posts: discarded


def test_check_reports_a_kept_out_post_info_and_repair_removes_it(tmp_path):
    named = info(EVE, T0 + 1, name="eve")[0]
    with build(tmp_path / "s", [role(URSULA, ALEPH, ADMIN, T0), block(ALEPH, EVE, T0 + 2, drop=1)]) as s:
        with pytest.raises(BlockedError):
            s.ingest(named)
        assert s.check().consistent
        s.db.put(b"!post!" + H(named), named)  # put back under the store: what a check must see
        report = s.check()
        assert not report.consistent and "kept_out" in [f.kind for f in report.faults]
        assert s.check(fix=True).consistent and s.get(H(named)) is None
