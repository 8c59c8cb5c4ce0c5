"""Builders of signed moderation posts for the tests, and a small moderated cabal that uses every kind."""

from __future__ import annotations

from cablestore import make_post
from cablestore.wire.codec import (
    ADMIN,
    BLOCK,
    DROP_CHANNEL,
    DROP_POST,
    HIDE_POST,
    HIDE_USER,
    INFO,
    JOIN,
    MOD,
    MODERATION,
    ROLE,
    TEXT,
    UNBLOCK,
    UNHIDE_USER,
)

from .conftest import keypair

URSULA, ALEPH, BERT, CASHEW, XU, EVE = (keypair(n) for n in ("ursula", "aleph", "bert", "cashew", "xu", "eve"))


def role(author, recipient, r, ts, channel="", privacy=0):
    return make_post(author, ROLE, ts, reason="", privacy=privacy, channel=channel, recipients=[recipient.public_key], role=r)


def act(author, action, ts, recipients=(), channel="", reason="", privacy=0):
    return make_post(author, MODERATION, ts, reason=reason, privacy=privacy, channel=channel, recipients=list(recipients), action=action)


def hide(author, user, ts, channel=""):
    return act(author, HIDE_USER, ts, [user.public_key], channel)


def unhide(author, user, ts, channel=""):
    return act(author, UNHIDE_USER, ts, [user.public_key], channel)


def block(author, user, ts, drop=0, notify=0, privacy=0):
    return make_post(author, BLOCK, ts, reason="", privacy=privacy, recipients=[user.public_key], drop=drop, notify=notify)


def unblock(author, user, ts, undrop=0):
    return make_post(author, UNBLOCK, ts, reason="", privacy=0, recipients=[user.public_key], undrop=undrop)


def info(author, ts, **pairs):
    """A post/info; ``accept_role=0|1`` is written as the one-byte varint of wire.md §6.2.4 (as cable.js writes it)."""
    return make_post(author, INFO, ts, info=[(k.replace("_", "-"), v) for k, v in pairs.items()])


def text(author, ts, channel, words):
    return make_post(author, TEXT, ts, channel=channel, text=words)


def cabal(t0: int = 1_700_000_000_000) -> list[bytes]:
    """A moderated cabal seen by Ursula: admins, a channel mod, hides, drops, blocks, unblocks, opt-outs."""
    chat = [make_post(p, JOIN, t0 + i, channel="dev") for i, p in enumerate((URSULA, ALEPH, BERT, EVE, XU))]
    rude = text(EVE, t0 + 10, "dev", "rude words")
    spam = text(XU, t0 + 11, "dev", "buy now")
    made = chat + [
        rude,
        spam,
        text(BERT, t0 + 12, "dev", "hello"),
        role(URSULA, ALEPH, ADMIN, t0 + 20),
        role(ALEPH, BERT, MOD, t0 + 21, channel="dev"),
        role(ALEPH, CASHEW, MOD, t0 + 22),
        info(CASHEW, t0 + 23, name="cashew", accept_role=0),
        hide(BERT, EVE, t0 + 30, channel="dev"),
        hide(ALEPH, XU, t0 + 31),
        unhide(ALEPH, XU, t0 + 32, channel="dev"),
        act(BERT, HIDE_POST, t0 + 33, [_hash(rude)], "dev", reason="rude"),
        act(BERT, DROP_POST, t0 + 34, [_hash(spam)], "dev", reason="spam"),
        act(ALEPH, DROP_CHANNEL, t0 + 35, channel="junk"),
        block(ALEPH, EVE, t0 + 36, drop=0, notify=1),
        block(URSULA, XU, t0 + 37, drop=1),
        unblock(URSULA, XU, t0 + 38, undrop=1),
        block(EVE, URSULA, t0 + 39, notify=1),
        role(URSULA, BERT, ADMIN, t0 + 40, privacy=1),
        block(URSULA, CASHEW, t0 + 41, drop=1),
        unblock(URSULA, CASHEW, t0 + 42, undrop=0),
    ]
    return [buf for buf, _ in made]


def _hash(made) -> bytes:
    from cablestore import post_hash

    return post_hash(made[0])


__all__ = ["URSULA", "ALEPH", "BERT", "CASHEW", "XU", "EVE", "ADMIN", "MOD", "role", "act", "hide", "unhide", "block", "unblock", "info", "text", "cabal"]
