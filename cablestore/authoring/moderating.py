"""Moderation from the command line: one post/role, post/moderation, post/block or post/unblock as the key file's owner.

The key file's owner is the store's local user (moderation.md §4.2.5: the
root of authority): a store without one takes it; a store of another local
user refuses (:class:`cablestore.errors.LocalUserError`) before anything is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence

from cablestore.authoring.author import Author, _check_local_user, _checked_draft, _key, check_reason
from cablestore.authoring.keyfile import read_keyfile
from cablestore.errors import PostFieldError
from cablestore.store.store import Store
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
    UNDROP_POST,
    UNHIDE_POST,
    UNHIDE_USER,
    USER,
)

ROLE_WORDS = {"admin": ADMIN, "mod": MOD, "user": USER}
# command -> (action on users, action on posts, action on a channel); None: not that kind
ACTIONS = {
    "hide": (HIDE_USER, HIDE_POST, None),
    "unhide": (UNHIDE_USER, UNHIDE_POST, None),
    "drop": (None, DROP_POST, DROP_CHANNEL),
    "undrop": (None, UNDROP_POST, UNDROP_CHANNEL),
}
COMMANDS = ("role", *ACTIONS, "block", "unblock")


def moderate_with_keyfile(
    store_path: str | os.PathLike | Store,
    key_path: str | os.PathLike,
    command: str,
    targets: Sequence[str],
    *,
    role: str | None = None,
    posts: bool = False,
    channel: str = "",
    reason: str = "",
    private: bool = False,
    drop: bool = False,
    notify: bool = False,
    undrop: bool = False,
    now: Callable[[], int] | None = None,
) -> bytes:
    """Write one moderation post of ``command`` (see :data:`COMMANDS`); return its bytes.

    ``targets``: public keys (users), or post hashes with ``posts=True``; a
    ``drop``/``undrop`` with no targets acts on ``channel``.  ``store_path``
    may be a :class:`cablestore.Store` held open (by ``serve``): left open.
    """
    if command not in COMMANDS:
        raise PostFieldError(f"unknown moderation command {command!r}; one of {', '.join(COMMANDS)}")
    keypair = read_keyfile(key_path)
    _check_arguments(keypair.public_key, command, targets, role, posts, channel, reason, private, drop, notify, undrop)
    if isinstance(store_path, Store):  # a store held open already (by `serve`): used, not closed
        _check_local_user(store_path, keypair.public_key)
        opened = contextlib.nullcontext(store_path)
    else:
        opened = Store(store_path, local_user=keypair.public_key, now=now)
    with opened as store:
        author = Author(store, keypair, now=now)
        common = {"reason": reason, "private": private}
        if command == "role":
            if role not in ROLE_WORDS or len(targets) != 1:
                raise PostFieldError("role takes one USER and a ROLE: admin, mod or user")
            h = author.role(targets[0], ROLE_WORDS[role], channel=channel, **common)
        elif command == "block":
            h = author.block(_some(targets, "block"), drop=drop, notify=notify, **common)
        elif command == "unblock":
            h = author.unblock(_some(targets, "unblock"), undrop=undrop, **common)
        else:
            on_users, on_posts, on_channel = ACTIONS[command]
            if not targets:
                if on_channel is None or not channel:
                    raise _needs_targets(command)
                h = author.moderate(on_channel, channel=channel, **common)
            else:
                action = on_posts if posts or on_users is None else on_users
                h = author.moderate(action, targets, channel=channel, **common)
        return store.get(h)


def _check_arguments(public_key, command, targets, role, posts, channel, reason, private, drop, notify, undrop) -> None:
    """Refuse bad arguments before the store is opened, so a refusal creates and changes nothing.

    The post is built as the command would build it and checked as it will be encoded (the
    channel of a post action, taken from the stored post when not given, is checked after).
    """
    keys = [_key(t) for t in targets]
    head = {"reason": reason, "privacy": int(private)}
    if command == "role":
        if role not in ROLE_WORDS or len(keys) != 1:
            raise PostFieldError("role takes one USER and a ROLE: admin, mod or user")
        post_type, body = ROLE, {**head, "channel": channel, "recipients": keys, "role": ROLE_WORDS[role]}
    elif command in ("block", "unblock"):
        if channel:
            raise PostFieldError(f"{command} has no channel: a block acts in the whole cabal (moderation.md §4.6); give no channel")
        _some(targets, command)
        flags = {"drop": int(drop), "notify": int(notify)} if command == "block" else {"undrop": int(undrop)}
        post_type, body = (BLOCK if command == "block" else UNBLOCK), {**head, "recipients": keys, **flags}
    else:
        on_users, on_posts, on_channel = ACTIONS[command]
        if not keys and (on_channel is None or not channel):
            raise _needs_targets(command)
        action = on_channel if not keys else (on_posts if posts or on_users is None else on_users)
        post_type, body = MODERATION, {**head, "channel": channel, "recipients": keys, "action": action}
    check_reason(reason)
    _checked_draft(public_key, post_type, body)


def _needs_targets(command: str) -> PostFieldError:
    """The refusal of a moderation action given nothing to act on: what it can act on, by argument."""
    on_users, _, on_channel = ACTIONS[command]
    users = "user keys, " if on_users is not None else ""
    return PostFieldError(f"{command} needs {users}post hashes{' or a channel' if on_channel is not None else ''}")


def _some(targets: Sequence[str], command: str) -> Sequence[str]:
    if not targets:
        raise PostFieldError(f"{command} needs at least one USER (a public key in hex)")
    return targets
