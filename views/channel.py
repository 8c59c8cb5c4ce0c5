"""``!channel``: current membership and topic of each channel.

A user is a member of a channel while their latest post/join, post/text or
post/topic there is newer than their latest post/leave (spec 5.4.3), so every
such post is a candidate; the latest topic is the newest post/topic.
"Latest" is the highest timestamp, ties broken by the higher hash.

    !channel!<channel>m<pubkey> -> <01 member|00 left><post_type:u8><mono>   the member's latest post there
    !channel!<channel>t         -> <topic>                                   latest topic (UTF-8)

Groups are ``b"m" + <channel> + <pubkey>`` and ``b"t" + <channel>``.

The membership row is a register: it holds its group's winner (type and
``<mono>``, whose last 32 bytes are the hash), so ingest reads it with one
point read (:meth:`View.winner_key`) and no candidate row per post is kept.
The candidates are the member's author rows of the four channel types in
that channel (``!author!<pubkey><type><ch>``, :mod:`views.author`): when the
winner is removed, its successor is the greatest of one bounded reverse
seek under each.  Every reader decodes the value with :func:`membership`.
"""

from typing import NamedTuple

from cablestore.keyspace import keys
from cablestore.wire.codec import CHANNEL_TYPES, LEAVE, TOPIC

from . import author, state
from .base import View

NAME = "channel"
PREFIX = keys.CHANNEL
MEMBER_GROUP, TOPIC_GROUP = b"m", b"t"  # a member's register (its group, and its key after the channel); a channel's topic
_MEMBERSHIP_TYPES = tuple(sorted(CHANNEL_TYPES))  # every post to a channel: text, topic, join, leave
MEMBER, LEFT = b"\x01", b"\x00"


class Membership(NamedTuple):
    """A decoded ``!channel!<ch>m<pubkey>`` value: member or not, and the post that decides it."""

    member: bool
    post_type: int
    mono: bytes

    @property
    def hash(self) -> bytes:
        return self.mono[-32:]


def encode_membership(row: Membership) -> bytes:
    """A membership row's value: member or left, the deciding post's type, its ``<mono>``."""
    return (MEMBER if row.member else LEFT) + bytes([row.post_type]) + row.mono


def membership(value: bytes) -> Membership | None:
    """Decode a membership row's value (None: not one, a damaged row: ``check`` reports it)."""
    if len(value) != 2 + keys.MONO_SIZE or value[:1] not in (MEMBER, LEFT):
        return None
    return Membership(value[:1] == MEMBER, value[1], value[2:])


def is_member(value: bytes | None) -> bool:
    """True if a membership row's value says "member" (its first byte)."""
    return value is not None and value[:1] == MEMBER


def member_group(channel_escaped: bytes, public_key: bytes) -> bytes:
    """The membership group of a member of a channel (its register: ``latest_prefix``)."""
    return MEMBER_GROUP + channel_escaped + public_key


def member_key(channel_escaped: bytes, public_key: bytes) -> bytes:
    """``!channel!<ch>m<pubkey>``: the membership row (register) of a member of a channel."""
    return members_prefix(channel_escaped) + public_key


def members_prefix(channel_escaped: bytes) -> bytes:
    """``!channel!<ch>m``: the registers of a channel's members and ex-members, every author of a post there."""
    return PREFIX + channel_escaped + MEMBER_GROUP


def channel_of_key(key: bytes) -> tuple[str, int]:
    """The channel a ``!channel!`` key names, and where its escaped name ends in the key."""
    return keys.unescape(key, len(PREFIX))


def member_of_key(key: bytes, channel_escaped: bytes) -> bytes:
    """The member a ``!channel!<ch>m<pubkey>`` key of channel ``<ch>`` names."""
    return key[len(PREFIX) + len(channel_escaped) + len(MEMBER_GROUP) :]


def topic_key(channel_escaped: bytes) -> bytes:
    """``!channel!<ch>t``: a channel's current topic (UTF-8)."""
    return PREFIX + channel_escaped + TOPIC_GROUP


def post_prefixes(channel_escaped: bytes, public_keys):
    """The key prefixes under which every post of ``channel_escaped`` by ``public_keys`` has its one author row."""
    for public_key in public_keys:
        yield from candidates(member_group(channel_escaped, public_key))


def groups(ip):
    t = ip.post.post_type
    if t not in CHANNEL_TYPES:
        return []
    channel = keys.escape(ip.channel)
    out = [member_group(channel, ip.post.public_key)]
    if t == TOPIC:
        out.append(TOPIC_GROUP + channel)
    return out


def candidates(group):
    if group[:1] == MEMBER_GROUP:
        channel, public_key = group[1:-32], group[-32:]
        return tuple(author.channel_prefix(public_key, t, channel) for t in _MEMBERSHIP_TYPES)
    return state.topic_prefix(group[1:])


def winner_key(group):
    """The membership row is its group's register; a topic group has none."""
    return latest_prefix(group) if group[:1] == MEMBER_GROUP else None


def register_rank(group, value):
    """The winner's rank (its ``<mono>``) from a membership row's value; None if damaged."""
    found = membership(value)
    return None if found is None else found.mono


def latest_prefix(group):
    if group[:1] == MEMBER_GROUP:
        return member_key(group[1:-32], group[-32:])
    return topic_key(group[1:])


def latest_keys(group):
    """The one key ``latest`` writes for a group, known without reading."""
    return [latest_prefix(group)]


def latest(group, winner):
    if winner is None:
        return []
    if group[:1] == MEMBER_GROUP:
        t = winner.post.post_type
        return [(latest_prefix(group), encode_membership(Membership(t != LEAVE, t, winner.mono)))]
    return [(latest_prefix(group), winner.post.topic.encode("utf-8"))]


class ChannelView(View):
    """The ``channel`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    groups = staticmethod(groups)
    candidates = staticmethod(candidates)
    winner_key = staticmethod(winner_key)
    register_rank = staticmethod(register_rank)
    latest = staticmethod(latest)
    latest_prefix = staticmethod(latest_prefix)
    latest_keys = staticmethod(latest_keys)


VIEW = ChannelView()
