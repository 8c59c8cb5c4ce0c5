"""The spelling a channel is written and listed under: the one rule for authoring, ``channels`` and the
channel lists ``serve`` answers (docs/design.md#channel-names).

Channel names are case-insensitive (spec 5.4.1) and the store keys them casefolded, but deployed peers
(cable-core.js 0.2.1) compare them exactly: a cable-cli user in ``Dev-Talk`` never sees a post to
``dev-talk``.  So a channel is spelled as its posts spell it: the ``channel`` field of its *earliest*
post/text or post/topic (the lower timestamp, ties to the lower hash); for a channel with neither, of
its earliest post/join or post/leave.  The earliest, not the newest or the most used: it does not
change when someone writes another spelling (so writers do not drift apart), it is what the channel
was created under, and it is two seeks to find.  A channel the store holds no post of keeps the
spelling asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cablestore.keyspace.keys import POSTS, canonical_channel, channel_key
from cablestore.views import chat, state
from cablestore.wire.codec import decode_post

MONO = 40  # a key's <mono>: the timestamp (8 bytes, big-endian), then the hash
SCAN = 64  # post/deletes listed before a channel's first post/text that are stepped over, at most


def listed_spelling(store: Any, channel: str) -> str:
    """The spelling ``channel`` (any spelling of it) is written and listed under (see the module's rule)."""
    wanted = canonical_channel(channel)
    ch = channel_key(channel)
    with store.db.snapshot() as snap:
        found = [m for m in (_first_named(snap, chat.channel_prefix(channel), wanted), _first_named(snap, state.topic_prefix(ch), wanted)) if m]
        if not found:  # neither text nor topic: the earliest join or leave, of any member
            with snap.iterator(prefix=state.member_prefix(channel), include_value=False) as it:
                monos = sorted(key[-MONO:] for key in it)
            found = [m for m in (_named(snap, mono, wanted) for mono in monos[:SCAN]) if m][:1]
    return min(found)[1] if found else channel


def listed_spellings(store: Any, channels: Iterable[str]) -> list[str]:
    """:func:`listed_spelling` of each of ``channels`` (casefolded names, as ``Store.channel_list`` gives them)."""
    return [listed_spelling(store, c) for c in channels]


def _first_named(snap, prefix: bytes, wanted: str) -> tuple[bytes, str] | None:
    """``(mono, spelling)`` of the earliest post under ``prefix`` that names the channel (post/deletes are listed too)."""
    with snap.iterator(prefix=prefix, include_value=False) as it:
        for i, key in enumerate(it):
            if i == SCAN:
                return None
            named = _named(snap, key[-MONO:], wanted)
            if named is not None:
                return named
    return None


def _named(snap, mono: bytes, wanted: str) -> tuple[bytes, str] | None:
    buf = snap.get(POSTS + mono[-32:])
    if buf is None:
        return None
    name = decode_post(buf).channel
    return (mono, name) if name is not None and canonical_channel(name) == wanted else None
