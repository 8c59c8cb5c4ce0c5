"""``!user``: every post/info per user, and the user's current properties.

A post/info fully replaces the previous one (spec 6.2.4), so the current
properties are the pairs of the latest post/info; a key it omits is back to
its default.

    !user!<pubkey>p<mono>        -> ''       every post/info
    !user!<pubkey>i<key>         -> <value>  pairs of the latest post/info
    !user!<pubkey>h              -> <hash>   the latest post/info

Groups: ``<pubkey>`` (the properties) and ``h<pubkey>`` (the hash, one
point read for channel state); both rank the user's ``p`` run.
"""

from cablestore.keyspace import keys
from cablestore.keyspace.keys import escape, unescape
from cablestore.wire.codec import INFO

from .base import View

NAME = "user"
PREFIX = keys.USER
POST_ROWS, LATEST_HASH = b"p", b"h"  # !user!<pubkey>p<mono>; the group (and key) of the latest post/info's hash
PROPERTY_ROWS = b"i"  # !user!<pubkey>i<key>: the pairs of the latest post/info


def user_prefix(public_key: bytes) -> bytes:
    """Every row of one user."""
    return PREFIX + public_key


def user_of_key(key: bytes) -> bytes:
    """The user a ``!user!`` key names."""
    return key[len(PREFIX) : len(PREFIX) + 32]


def posts_prefix(public_key: bytes) -> bytes:
    return PREFIX + public_key + POST_ROWS


def properties_prefix(public_key: bytes) -> bytes:
    """The properties of a user (their latest post/info's pairs)."""
    return PREFIX + public_key + PROPERTY_ROWS


def property_key(public_key: bytes, name: str) -> bytes:
    return properties_prefix(public_key) + escape(name)


def property_name(key: bytes, public_key: bytes) -> str:
    """The property a ``!user!<pubkey>i<key>`` key names."""
    return unescape(key, len(properties_prefix(public_key)))[0]


def entries(ip):
    if ip.post.post_type == INFO:
        return [(posts_prefix(ip.post.public_key) + ip.mono, b"")]
    return []


def latest_hash_key(public_key: bytes) -> bytes:
    return PREFIX + public_key + LATEST_HASH


def groups(ip):
    pk = ip.post.public_key
    return [pk, LATEST_HASH + pk] if ip.post.post_type == INFO else []


def candidates(group):
    return posts_prefix(group[-32:])


def latest_prefix(group):
    if len(group) == 33:
        return latest_hash_key(group[1:])
    return properties_prefix(group)


def latest_keys(group):
    """The hash key is fixed; properties are found (None: the stored keys under ``latest_prefix``)."""
    if len(group) == 33:
        return [latest_hash_key(group[1:])]
    return None


def latest(group, winner):
    if winner is None:
        return []
    if len(group) == 33:
        return [(latest_hash_key(group[1:]), winner.hash)]
    current = dict(winner.post.info)  # a repeated key: the last one wins
    return sorted((property_key(group, k), v.encode("utf-8")) for k, v in current.items())


class UserView(View):
    """The ``user`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    entries = staticmethod(entries)
    groups = staticmethod(groups)
    candidates = staticmethod(candidates)
    latest = staticmethod(latest)
    latest_prefix = staticmethod(latest_prefix)
    latest_keys = staticmethod(latest_keys)


VIEW = UserView()
