"""The moderation rules (moderation.md 1.0-draft8 §4.2, §4.4, §4.6) on the pure resolver, one test per rule.

Each test builds real signed posts and asks :func:`cablestore.moderation.resolve` for the state; the
store tests check that a store holds the same state whatever order the posts arrive in.
"""

from __future__ import annotations

import itertools
import random

import pytest

from cablestore import make_post, post_hash
from cablestore.moderation import resolve
from cablestore.wire.codec import (
    ADMIN,
    BLOCK,
    DROP_CHANNEL,
    DROP_POST,
    HIDE_POST,
    HIDE_USER,
    MOD,
    MODERATION,
    ROLE,
    UNBLOCK,
    UNDROP_CHANNEL,
    UNHIDE_POST,
    UNHIDE_USER,
    USER,
)

from .conftest import keypair
from .moderation_helpers import info

URSULA, ALEPH, BERT, CASHEW, XU, EVE = (keypair(n) for n in ("ursula", "aleph", "bert", "cashew", "xu", "eve"))
POST_ONE = bytes.fromhex("11" * 32)


def role(author, recipient, r, ts, channel=""):
    return make_post(author, ROLE, ts, reason="", privacy=0, channel=channel, recipients=[recipient.public_key], role=r)


def act(author, action, ts, recipients=(), channel="", reason=""):
    return make_post(author, MODERATION, ts, reason=reason, privacy=0, channel=channel, recipients=list(recipients), action=action)


def hide(author, user, ts, channel=""):
    return act(author, HIDE_USER, ts, [user.public_key], channel)


def unhide(author, user, ts, channel=""):
    return act(author, UNHIDE_USER, ts, [user.public_key], channel)


def block(author, user, ts, drop=0, notify=0):
    return make_post(author, BLOCK, ts, reason="", privacy=0, recipients=[user.public_key], drop=drop, notify=notify)


def unblock(author, user, ts, undrop=0):
    return make_post(author, UNBLOCK, ts, reason="", privacy=0, recipients=[user.public_key], undrop=undrop)


def state(local, *made, shuffle=None):
    posts = [(post_hash(buf), post) for buf, post in made]
    if shuffle is not None:
        random.Random(shuffle).shuffle(posts)
    return resolve(local.public_key if local else None, posts)


def roles(st, channel=""):
    """{name: role name} of the admins and mods in a context."""
    names = {k.public_key: n for n, k in zip(("ursula", "aleph", "bert", "cashew", "xu", "eve"), (URSULA, ALEPH, BERT, CASHEW, XU, EVE), strict=True)}
    return {names[u]: {ADMIN: "admin", MOD: "mod"}[r] for u, r in _table(st, channel).items()}


def _table(st, channel):
    table = st.roles.roles.get(channel, st.roles.roles.get("", {}))
    return {u: r for u, (r, _) in table.items()}


def hidden(st, user, channel=""):
    table = st.effects.hidden_users.get(channel, st.effects.hidden_users.get("", {}))
    return user.public_key in table


# --- roles (§4.2) --------------------------------------------------------------------------------


def test_without_a_local_user_no_role_applies():
    assert roles(state(None, role(URSULA, ALEPH, ADMIN, 1))) == {}


def test_the_local_users_admin_is_admin_and_their_admins_roles_apply():
    st = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), role(ALEPH, BERT, MOD, 2))
    assert roles(st) == {"aleph": "admin", "bert": "mod"}


def test_a_mods_role_posts_are_not_applied():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), role(ALEPH, BERT, ADMIN, 2))
    assert roles(st) == {"aleph": "mod"}


def test_roles_from_strangers_are_not_applied():
    assert roles(state(URSULA, role(EVE, BERT, ADMIN, 1))) == {}


def test_an_admins_roles_count_only_from_when_they_became_admin():
    """§4.2.5: roles issued before the admin assignment are not inherited (equal timestamps: not after)."""
    st = state(URSULA, role(ALEPH, BERT, MOD, 5), role(URSULA, ALEPH, ADMIN, 10), role(ALEPH, XU, MOD, 10), role(ALEPH, CASHEW, MOD, 11))
    assert roles(st) == {"aleph": "admin", "cashew": "mod"}


def test_revoking_an_admin_revokes_the_roles_they_issued():
    st = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), role(ALEPH, BERT, MOD, 2), role(URSULA, ALEPH, USER, 3))
    assert roles(st) == {}


def test_a_cabal_revocation_keeps_an_admins_roles_where_they_are_still_admin():
    """§4.2.5: revoked for the cabal, their roles stay in the channels where they retain admin."""
    st = state(
        URSULA,
        role(URSULA, ALEPH, ADMIN, 1),
        role(URSULA, ALEPH, ADMIN, 2, channel="dev"),
        role(ALEPH, BERT, MOD, 3),
        role(URSULA, ALEPH, USER, 4),
    )
    assert roles(st) == {}
    assert roles(st, "dev") == {"aleph": "admin", "bert": "mod"}


def test_a_newer_role_from_the_same_author_replaces_the_older_whatever_arrives_last():
    made = [role(URSULA, ALEPH, MOD, 1), role(URSULA, ALEPH, ADMIN, 2)]
    for order in itertools.permutations(made):
        assert roles(state(URSULA, *order)) == {"aleph": "admin"}


def test_accept_role_zero_makes_a_normal_user():
    st = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), info(ALEPH, 2, name="aleph", accept_role=0))
    assert roles(st) == {}
    later = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), info(ALEPH, 2, accept_role=0), info(ALEPH, 3, name="aleph"))
    assert roles(later) == {"aleph": "admin"}  # the latest post/info does not set it: the default, 1


def test_self_assignments_are_ignored():
    assert roles(state(URSULA, role(ALEPH, ALEPH, ADMIN, 1))) == {}
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), role(ALEPH, ALEPH, ADMIN, 2))
    assert roles(st) == {"aleph": "mod"}


def test_a_channel_role_applies_in_that_channel_only():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1, channel="Dev"))
    assert roles(st) == {} and roles(st, "dev") == {"aleph": "mod"}


def test_local_user_rules_example_4_2_5_1_1():
    one = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), role(URSULA, BERT, ADMIN, 2), role(ALEPH, BERT, USER, 3))
    assert roles(one) == {"aleph": "admin", "bert": "admin"}
    two = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), role(URSULA, XU, USER, 2), role(ALEPH, XU, MOD, 3))
    assert roles(two) == {"aleph": "admin"}


def test_most_capable_relevant_role_example_4_2_5_1_2():
    st = state(URSULA, role(URSULA, BERT, ADMIN, 1), role(URSULA, ALEPH, ADMIN, 2), role(ALEPH, CASHEW, MOD, 3), role(BERT, CASHEW, ADMIN, 4))
    assert roles(st)["cashew"] == "admin"


def test_default_role_example_4_2_5_1_3():
    assert roles(state(URSULA, role(URSULA, ALEPH, ADMIN, 1))).get("bert") is None


def test_combined_example_4_2_5_1_4():
    """Step 3 is Bert's (the spec's text reads "Bert sets Aleph as an admin")."""
    steps = [
        role(URSULA, BERT, ADMIN, 1),
        role(URSULA, ALEPH, MOD, 2, channel="test"),
        role(BERT, ALEPH, ADMIN, 3),
        role(URSULA, ALEPH, USER, 4),
    ]
    after3 = state(URSULA, *steps[:3])
    assert roles(after3, "test")["aleph"] == "mod" and roles(after3)["aleph"] == "admin" and roles(after3, "other")["aleph"] == "admin"
    after4 = state(URSULA, *steps)
    assert roles(after4, "test")["aleph"] == "mod" and "aleph" not in roles(after4) and "aleph" not in roles(after4, "other")


def test_admin_chains_reach_through_several_admins():
    st = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), role(ALEPH, BERT, ADMIN, 2), role(BERT, CASHEW, ADMIN, 3), role(CASHEW, XU, MOD, 4))
    assert roles(st) == {"aleph": "admin", "bert": "admin", "cashew": "admin", "xu": "mod"}


def test_an_admin_appointed_by_a_non_local_admin_may_assign_channel_roles():
    """cable-core.js 0.2.1 crashes (TypeError in analyze) on exactly this."""
    st = state(URSULA, role(URSULA, ALEPH, ADMIN, 1), role(ALEPH, BERT, ADMIN, 2), role(BERT, CASHEW, MOD, 3, channel="dev"))
    assert roles(st, "dev")["cashew"] == "mod" and "cashew" not in roles(st)


def test_mutual_admins_without_the_local_user_get_nothing():
    st = state(URSULA, role(ALEPH, BERT, ADMIN, 1), role(BERT, ALEPH, ADMIN, 2))
    assert roles(st) == {}


# --- actions (§4.4) -------------------------------------------------------------------------------


def test_the_local_users_hide_applies():
    assert hidden(state(URSULA, hide(URSULA, EVE, 1)), EVE)


def test_a_mods_hide_applies_only_after_they_became_mod():
    before = state(URSULA, hide(ALEPH, EVE, 1), role(URSULA, ALEPH, MOD, 2))
    assert not hidden(before, EVE)
    after = state(URSULA, role(URSULA, ALEPH, MOD, 1), hide(ALEPH, EVE, 2))
    assert hidden(after, EVE)


def test_an_action_stays_applied_after_its_author_is_revoked():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), hide(ALEPH, EVE, 2), role(URSULA, ALEPH, USER, 3))
    assert hidden(st, EVE) and roles(st) == {}


def test_an_unhide_from_the_same_author_makes_the_hide_obsolete():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), hide(ALEPH, EVE, 2), unhide(ALEPH, EVE, 3))
    assert not hidden(st, EVE)
    assert [a.action for a in st.effects.relevant] == [UNHIDE_USER]


def test_the_local_users_action_wins_over_a_newer_one():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), hide(URSULA, EVE, 2), unhide(ALEPH, EVE, 3))
    assert hidden(st, EVE)


def test_between_mods_the_later_action_wins_and_equal_times_go_to_the_higher_hash():
    base = [role(URSULA, ALEPH, MOD, 1), role(URSULA, BERT, MOD, 1)]
    assert not hidden(state(URSULA, *base, hide(ALEPH, EVE, 2), unhide(BERT, EVE, 3)), EVE)
    assert hidden(state(URSULA, *base, unhide(BERT, EVE, 2), hide(ALEPH, EVE, 3)), EVE)
    a, b = hide(ALEPH, EVE, 5), unhide(BERT, EVE, 5)
    winner_hides = post_hash(a[0]) > post_hash(b[0])
    assert hidden(state(URSULA, *base, a, b), EVE) is winner_hides


def test_actions_on_users_holding_authority_apply_only_from_the_local_user():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), role(URSULA, BERT, MOD, 1), hide(ALEPH, BERT, 2), block(ALEPH, BERT, 3))
    assert not hidden(st, BERT) and BERT.public_key not in st.effects.blocked
    assert hidden(state(URSULA, role(URSULA, BERT, MOD, 1), hide(URSULA, BERT, 2)), BERT)


def test_cabal_hide_with_a_channel_unhide():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), hide(ALEPH, EVE, 2), unhide(ALEPH, EVE, 3, channel="Dev"))
    assert hidden(st, EVE) and hidden(st, EVE, "other") and not hidden(st, EVE, "dev")


def test_a_channel_mod_acts_in_their_channel_only():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1, channel="dev"), hide(ALEPH, EVE, 2, channel="dev"), hide(ALEPH, XU, 2))
    assert hidden(st, EVE, "dev") and not hidden(st, EVE) and not hidden(st, XU)


def test_deleting_an_action_undoes_it():
    """A post/delete removes the action from the store: the set no longer holds it."""
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), hide(ALEPH, EVE, 2))
    assert hidden(st, EVE)
    assert not hidden(state(URSULA, role(URSULA, ALEPH, MOD, 1)), EVE)


def test_post_and_channel_actions():
    st = state(
        URSULA,
        role(URSULA, ALEPH, MOD, 1),
        act(ALEPH, HIDE_POST, 2, [POST_ONE], "dev", reason="rude"),
        act(ALEPH, DROP_POST, 3, [bytes(32)], "dev"),
        act(ALEPH, DROP_CHANNEL, 4, channel="Spam"),
        act(ALEPH, DROP_CHANNEL, 5, channel="old"),
        act(ALEPH, UNDROP_CHANNEL, 6, channel="OLD"),
    )
    assert st.effects.hidden_posts[POST_ONE].timestamp == 2
    assert bytes(32) in st.effects.dropped_posts
    assert set(st.effects.dropped_channels) == {"spam"}
    undone = state(URSULA, role(URSULA, ALEPH, MOD, 1), act(ALEPH, HIDE_POST, 2, [POST_ONE], "dev"), act(ALEPH, UNHIDE_POST, 3, [POST_ONE], "dev"))
    assert undone.effects.hidden_posts == {}


# --- blocks (§4.6) --------------------------------------------------------------------------------


def test_blocks_from_the_local_user_and_authorities_apply_with_their_flags():
    st = state(URSULA, role(URSULA, ALEPH, MOD, 1), block(URSULA, EVE, 2, drop=1), block(ALEPH, XU, 3, notify=1), block(CASHEW, BERT, 4))
    assert st.effects.blocked[EVE.public_key].flags == (1, 0)
    assert st.effects.blocked[XU.public_key].flags == (0, 1)
    assert BERT.public_key not in st.effects.blocked  # Cashew holds no authority


def test_unblock_undoes_the_block_and_carries_undrop():
    st = state(URSULA, block(URSULA, EVE, 1, drop=1), unblock(URSULA, EVE, 2, undrop=1))
    assert EVE.public_key not in st.effects.blocked and st.effects.unblocked[EVE.public_key].flags == (1,)


def test_notified_blocks_of_the_local_user_are_known_from_anyone():
    st = state(URSULA, block(EVE, URSULA, 1, notify=1), block(XU, URSULA, 2, notify=0))
    assert set(st.effects.blocks_of_local) == {EVE.public_key}


# --- the state is a function of the set ------------------------------------------------------------


def test_any_order_gives_the_same_state():
    made = [
        role(URSULA, ALEPH, ADMIN, 1),
        role(ALEPH, BERT, ADMIN, 2),
        role(BERT, CASHEW, MOD, 3, channel="dev"),
        role(URSULA, ALEPH, USER, 6),
        hide(CASHEW, EVE, 4, channel="dev"),
        hide(BERT, XU, 5),
        block(ALEPH, EVE, 3, drop=1),
        info(CASHEW, 2, accept_role=1),
    ]
    first = state(URSULA, *made)
    for seed in range(20):
        again = state(URSULA, *made, shuffle=seed)
        assert again.roles.roles == first.roles.roles
        assert again.effects == first.effects


@pytest.mark.parametrize("local", [None, URSULA])
def test_no_posts_no_state(local):
    st = state(local)
    assert not any(st.effects.hidden_users.values()) and st.effects.blocked == {} and roles(st) == {}
