"""The relevant set of moderation.md §4.2.3 and §4.4.2, as a moderation state answer (§5.2.1.1) lists it.

A role is relevant when it is its author's latest for its recipient and
context and its recipient accepts roles; an action when it is its author's
latest for its target, context and kind.  Neither reads authority nor blocks:
a block takes authority away (the effective roles), never relevance.
"""

from __future__ import annotations

from cablestore import Store, post_hash
from cablestore.keyspace.keys import mono
from cablestore.rebuild.reindex import reindex
from cablestore.views import roles as roles_view

from .conftest import NOW, dump
from .moderation_helpers import ADMIN, ALEPH, BERT, CASHEW, MOD, URSULA, XU, block, hide, info, role

T0 = 1_700_000_000_000
H = post_hash
USER = 2


def build(path, made) -> Store:
    s = Store(path, now=lambda: NOW, local_user=URSULA.public_key)
    s.ingest_many([buf for buf, _ in made])
    return s


def answer(store, channels=("dev",)) -> set:
    return set(store.moderation_state(list(channels)))


def test_a_role_naming_a_blocked_user_is_listed(tmp_path):
    """L makes U a mod, then L blocks U (notify=1): the answer holds the block and the role."""
    made = [role(URSULA, ALEPH, MOD, T0), block(URSULA, ALEPH, T0 + 1, drop=0, notify=1)]
    with build(tmp_path / "s", made) as s:
        assert s.moderation_state([]) == [H(made[0][0]), H(made[1][0])]
        assert ALEPH.public_key not in s.roles()  # listed, yet no authority
        assert s.check().consistent


def test_a_role_naming_a_user_blocked_with_drop_is_listed_too(tmp_path):
    """The role is Ursula's post, not the blocked user's: a dropping block removes only what they wrote."""
    made = [role(URSULA, ALEPH, ADMIN, T0), role(URSULA, ALEPH, MOD, T0, channel="dev"), block(URSULA, ALEPH, T0 + 1, drop=1, notify=1)]
    with build(tmp_path / "s", made) as s:
        assert answer(s) == {H(buf) for buf, _ in made}
        assert answer(s, ()) == {H(made[0][0]), H(made[2][0])}  # the channel role only for `dev`
        assert ALEPH.public_key not in s.roles("dev")


def test_a_held_role_and_action_by_a_blocked_user_are_listed(tmp_path):
    """§4.2.3 and §4.4.2 read the posts, not their author's standing; §4.6 lets the held posts of a
    user blocked with drop = 0 stay stored and shown. Listed, and they decide nothing."""
    made = [
        role(URSULA, ALEPH, ADMIN, T0),
        role(ALEPH, BERT, ADMIN, T0 + 1),
        hide(ALEPH, XU, T0 + 2, channel="dev"),
        block(URSULA, ALEPH, T0 + 3, drop=0, notify=1),
    ]
    with build(tmp_path / "s", made) as s:
        assert answer(s) == {H(buf) for buf, _ in made}
        assert not {ALEPH.public_key, BERT.public_key} & set(s.roles("dev"))  # no authority from a blocked admin
        assert XU.public_key not in s.hidden_users("dev")
        assert s.check().consistent


def test_a_role_by_a_blocked_user_is_left_out_when_the_block_drops_it(tmp_path):
    """drop = 1 removes the blocked user's posts (kept as facts): there is nothing to send."""
    made = [role(URSULA, ALEPH, ADMIN, T0), role(ALEPH, BERT, ADMIN, T0 + 1), block(URSULA, ALEPH, T0 + 3, drop=1, notify=1)]
    with build(tmp_path / "s", made) as s:
        assert answer(s) == {H(made[0][0]), H(made[2][0])}


def test_a_blocked_users_role_made_obsolete_by_their_later_one_is_left_out(tmp_path):
    """A block with drop = 0 keeps the blocked user's moderation posts (it keeps out channel content only):
    Aleph's later role for Bert makes the earlier one obsolete, in either arrival order."""
    made = [role(URSULA, ALEPH, ADMIN, T0), role(ALEPH, BERT, ADMIN, T0 + 1), block(URSULA, ALEPH, T0 + 3, drop=0, notify=1), role(ALEPH, BERT, MOD, T0 + 4)]
    dumps = set()
    for name, order in (("a", made), ("b", made[::-1])):
        with build(tmp_path / name, order) as s:
            assert answer(s) == {H(made[0][0]), H(made[2][0]), H(made[3][0])}
            assert BERT.public_key not in s.roles()
            dumps.add(tuple(dump(s)))
    assert len(dumps) == 1


def test_an_opted_out_users_role_is_still_left_out(tmp_path):
    made = [role(URSULA, CASHEW, MOD, T0), info(CASHEW, T0 + 1, name="cashew", accept_role=0), block(URSULA, CASHEW, T0 + 2, drop=0, notify=1)]
    with build(tmp_path / "s", made) as s:
        assert answer(s) == {H(made[2][0])}  # §5.2.1.1: MUST NOT list roles of users who opted out


def test_an_obsolete_role_is_still_left_out(tmp_path):
    made = [role(URSULA, ALEPH, MOD, T0), role(URSULA, ALEPH, ADMIN, T0 + 1), block(URSULA, ALEPH, T0 + 2, drop=0, notify=1)]
    with build(tmp_path / "s", made) as s:
        assert answer(s) == {H(made[1][0]), H(made[2][0])}  # the mod role is obsolete (§4.2.2-3)


def test_a_blocked_users_roles_give_them_no_authority(tmp_path):
    """Listed roles naming a blocked user, by the local user and by an admin: still no authority, anywhere."""
    made = [
        role(URSULA, ALEPH, ADMIN, T0),
        role(URSULA, BERT, ADMIN, T0 + 1, channel="dev"),
        role(ALEPH, BERT, MOD, T0 + 2),
        block(URSULA, BERT, T0 + 3, drop=0, notify=1),
        hide(BERT, XU, T0 + 4, channel="dev"),
    ]
    with build(tmp_path / "s", made) as s:
        assert {H(buf) for buf, _ in made[:4]} <= answer(s)
        for context in (None, "dev", "other"):
            assert BERT.public_key not in s.roles(context)
        assert s.roles(None).get(ALEPH.public_key) == "admin"
        assert XU.public_key not in s.hidden_users("dev")


def test_a_store_written_before_lists_them_after_check_repair_or_reindex(tmp_path):
    """A store resolved when roles naming blocked users were left out: `check` reports it, `--repair` and `reindex` fix it."""
    made = [role(URSULA, ALEPH, MOD, T0), block(URSULA, ALEPH, T0 + 1, drop=0, notify=1)]
    old_row = roles_view.relevant_prefix("") + mono(T0, H(made[0][0]))
    for repair in ("check", "reindex"):
        with build(tmp_path / repair, made) as s:
            s.db.delete(old_row)  # the row an older cablestore did not write
            assert answer(s) == {H(made[1][0])}
            report = s.check()
            assert not report.consistent and old_row in report.missing
            if repair == "check":
                assert s.check(fix=True).consistent
            else:
                reindex(s)
            assert s.db.get(old_row) == b"" and answer(s) == {H(buf) for buf, _ in made}
            assert s.check().consistent
