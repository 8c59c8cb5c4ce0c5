"""The moderation state kept by a real store: the local user, the queries, moderation state requests, deletes, rebuilds."""

from __future__ import annotations

import pytest

from cablestore import DELETE, Store, post_hash
from cablestore.errors import DroppedError, LocalUserError, QueryError
from cablestore.rebuild.reindex import reindex

from .conftest import NOW, dump, post
from .moderation_helpers import ADMIN, ALEPH, BERT, CASHEW, EVE, MOD, URSULA, XU, block, cabal, hide, info, role

T0 = 1_700_000_000_000


@pytest.fixture
def moderated(tmp_path):
    with Store(tmp_path / "m", now=lambda: NOW, local_user=URSULA.public_key) as s:
        assert all(r.ok or isinstance(r.error, DroppedError) for r in s.ingest_many(cabal(T0)))
        yield s


def by_name(table: dict) -> dict:
    names = {k.public_key: n for n, k in (("ursula", URSULA), ("aleph", ALEPH), ("bert", BERT), ("cashew", CASHEW), ("xu", XU), ("eve", EVE))}
    return {names[k]: v for k, v in table.items()}


def test_the_local_user_is_kept_and_a_different_one_refused(tmp_path):
    path = tmp_path / "s"
    with Store(path, local_user=URSULA.public_key.hex()) as s:
        assert s.local_user == URSULA.public_key
    with Store(path) as s:
        assert s.local_user == URSULA.public_key  # kept
    with Store(path, local_user=URSULA.public_key):
        pass
    with pytest.raises(LocalUserError, match="belongs to local user"):
        Store(path, local_user=ALEPH.public_key)
    with Store(path) as s:  # the refusal closed what it opened
        assert s.local_user == URSULA.public_key
    with pytest.raises(LocalUserError):
        Store(tmp_path / "t", local_user="not a key")


def test_a_store_without_a_local_user_stores_moderation_but_applies_nothing(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        assert all(r.ok or isinstance(r.error, DroppedError) for r in s.ingest_many(cabal(T0)))
        assert s.roles() == {} and s.hidden_users("dev") == {} and s.blocks() == {}
        assert len(s.moderation_posts()) == 16
        assert s.check().consistent


def test_setting_the_local_user_later_resolves_what_is_already_held(tmp_path):
    path = tmp_path / "s"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(cabal(T0))
    with Store(path, now=lambda: NOW, local_user=URSULA.public_key) as s:
        assert by_name(s.roles()) == {"ursula": "admin", "aleph": "admin", "bert": "admin"}
        assert s.check().consistent
    with Store(tmp_path / "direct", now=lambda: NOW, local_user=URSULA.public_key) as d, Store(path, now=lambda: NOW) as later:
        d.ingest_many(cabal(T0))
        assert dump(d) == dump(later)  # the same store as when the local user came first


def test_roles_resolved_for_the_cabal_and_a_channel(moderated):
    # Bert: mod in dev by Aleph, admin everywhere by Ursula's private role; Cashew opted out.
    assert by_name(moderated.roles()) == {"ursula": "admin", "aleph": "admin", "bert": "admin"}
    assert by_name(moderated.roles("DEV")) == {"ursula": "admin", "aleph": "admin", "bert": "admin"}


def test_hidden_users_posts_drops_and_blocks(moderated):
    assert by_name(moderated.hidden_users()) .keys() == {"xu"}
    assert set(by_name(moderated.hidden_users("dev"))) == {"eve"}  # Xu unhidden in dev, Eve hidden there
    assert len(moderated.hidden_posts()) == 1 and len(moderated.dropped_posts()) == 1
    assert moderated.dropped_channels().keys() == {"junk"}
    blocks = by_name(moderated.blocks())
    assert blocks == {"eve": {"by": blocks["eve"]["by"], "drop": 0, "notify": 1}}
    assert by_name(moderated.unblocks())["xu"]["undrop"] == 1
    # Eve's notified block of Ursula is one of Eve's moderation posts: Aleph's block of Eve discards it (§4.6).
    assert set(by_name(moderated.blocked_by())) == set()


def test_moderation_state_answers_as_message_type_8_asks(moderated):
    everything = set(moderated.moderation_posts())
    private = next(post_hash(b) for b in cabal(T0) if moderated.post(post_hash(b)) and moderated.post(post_hash(b)).privacy == 1)
    answer = moderated.moderation_state(["dev"])
    assert private in everything and private not in answer  # privacy=1 never leaves
    opted_out = post_hash(cabal(T0)[10])  # Aleph's role for Cashew, who set accept-role=0
    assert opted_out in everything and opted_out not in answer
    blocks_only = moderated.moderation_state([], oldest=T0 + 10**6)
    assert len(blocks_only) == 4  # every block and unblock whatever `oldest`, but the two with notify=0
    assert moderated.moderation_state(["dev"], oldest=T0 + 35) == sorted(
        moderated.moderation_state(["dev"], oldest=T0 + 35), key=lambda h: (moderated.post(h).timestamp, h)
    )
    cabal_only = set(moderated.moderation_state([]))
    assert cabal_only < set(answer)  # the dev mod role and dev actions come only with dev
    with pytest.raises(QueryError):
        moderated.moderation_state("dev")
    with pytest.raises(QueryError):
        moderated.moderation_state([], oldest=-1)


def test_oldest_is_compared_as_a_number(tmp_path):
    """cable-core.js compares ``oldest`` as a string: 9 > 10 there."""
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        early, late = role(URSULA, ALEPH, MOD, 9), role(URSULA, BERT, MOD, 10)
        s.ingest_many([early[0], late[0]])
        assert s.moderation_state([], oldest=10) == [post_hash(late[0])]
        assert s.moderation_state([], oldest=9) == [post_hash(early[0]), post_hash(late[0])]


def test_deleting_an_action_undoes_it_and_the_store_verifies(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        h = s.ingest(hide(URSULA, EVE, T0)[0])
        assert EVE.public_key in s.hidden_users()
        s.ingest(post(URSULA, DELETE, T0 + 1, hashes=(h,)))
        assert s.hidden_users() == {} and s.get(h) is None
        assert s.check().consistent  # the tombstone of a moderation post is sound (it once was not)


def test_a_role_by_a_mod_is_stored_but_not_applied(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        s.ingest_many([role(URSULA, ALEPH, MOD, T0)[0], role(ALEPH, BERT, ADMIN, T0 + 1)[0]])
        assert by_name(s.roles()) == {"ursula": "admin", "aleph": "mod"}
        assert len(s.moderation_posts()) == 2


def test_rebuild_and_reindex_reproduce_the_resolved_state(moderated):
    before = dump(moderated)
    assert moderated.check().consistent
    moderated.db.delete(b"!roles!r\x00\x01" + ALEPH.public_key)  # damage a resolved entry
    moderated.db.put(b"!blocks!b" + XU.public_key, bytes(34))  # and invent one
    report = moderated.check()
    views = report.to_dict()["views"]
    assert not report.consistent and views["roles"]["missing"] == 1 and views["blocks"]["extra"] == 1
    assert moderated.check(fix=True).consistent and dump(moderated) == before
    reindex(moderated)
    assert dump(moderated) == before


def test_stored_posts_decode_moderation_fields(moderated):
    h = post_hash(block(ALEPH, EVE, T0 + 36, notify=1)[0])
    p = moderated.post(h)
    assert p.type_name == "post/block" and p.recipients == (EVE.public_key,) and p.notify == 1
    d = p.to_dict()
    assert d["type"] == "post/block" and d["recipients"] == [EVE.public_key.hex()] and d["notify"] == 1
    r = moderated.post(post_hash(role(URSULA, ALEPH, ADMIN, T0 + 20)[0])).to_dict()
    assert r["role"] == "admin" and r["channel"] == ""
    stats = moderated.stats().to_dict()["by_type"]
    assert stats["post/role"] == 4 and stats["post/moderation"] == 6 and stats["post/block"] == 4 and stats["post/unblock"] == 2


@pytest.mark.parametrize("alone", [True, False], ids=["info-alone", "info-with-a-text"])
def test_a_role_recipients_info_in_a_later_write_resolves_the_roles_again(tmp_path, alone):
    """A write holding no moderation post still re-resolves when it stores a post/info of a role recipient.

    The role is already in the DB: only its recipient's accept-role changes,
    in a write of its own (the shortcut that skips resolving must read the
    roles' candidates from the DB).
    """
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        s.ingest(role(URSULA, CASHEW, MOD, NOW - 100)[0])
        assert CASHEW.public_key in s.roles()
        later = [info(CASHEW, NOW - 50, accept_role=0)[0]]
        if not alone:
            later.append(post(BERT, 0, NOW - 40, channel="dev", text="hi"))
        assert all(r.ok for r in s.ingest_many(later))
        assert CASHEW.public_key not in s.roles()  # opted out: a normal user
        s.ingest(info(CASHEW, NOW - 10, accept_role=1)[0])
        assert s.roles()[CASHEW.public_key] == "mod"
        assert s.check().consistent
