"""Live requests: a time range with ``time_end = 0`` and a channel state with
``future = 1`` stay open, and every commit to the store (a remote peer, a
local author, ``ingest_many``) pushes what matches them.  A mixin of
:class:`cablestore.peer.protocol.Node`.

Live requests are indexed by channel, so a commit costs work for the
channels it touches, not for every live request in the table; a channel's
state is read once per commit however many requests watch it.  A push is
output that cannot wait: a connection that has not read its share of answers
is closed rather than buffered without bound.
"""

from __future__ import annotations

from cablestore.keyspace.keys import canonical_channel, escape, mono
from cablestore.moderation import RELEVANT_TYPES
from cablestore.peer.answering import MODERATION_LIVE
from cablestore.peer.answers import channel_state_answer
from cablestore.peer.table import Inbound
from cablestore.wire.codec import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC
from cablestore.wire.messages import TimeRangeRequest

STATE_TYPES = frozenset({TOPIC, JOIN, LEAVE, INFO, DELETE})
# Authors of post/infos and deletes in one commit up to which the live state channels they are
# (ex-)members of are looked up (a point read per channel and author, ~1.5 µs); with more, every
# live state channel is re-read (~35 µs each), as a removal always does.
MEMBER_LOOKUPS = 16


class LivePushes:
    """Pushes commits to the live requests in the table (see :class:`cablestore.peer.protocol.Node`)."""

    def _on_commit(self, change) -> None:
        with self.lock:
            if not self._live_index:
                return
            chat, state, every_state, authors = self._touched_channels(change)
            if every_state or len(authors) > MEMBER_LOOKUPS:
                state |= set(self._live_index)
            elif authors:
                state |= self._member_channels(authors)
            pushed = self._push_moderation(change)
            for channel in set(chat) | state:
                if channel == MODERATION_LIVE:
                    continue
                entries = [e for e in self._live_index.get(channel, ()) if e.live]
                answer = None
                for entry in entries:
                    if isinstance(entry.request, TimeRangeRequest):
                        if channel not in chat:
                            continue
                        hashes = self._matching_chat(entry, change, chat[channel])
                    else:
                        if answer is None:
                            answer = channel_state_answer(self.store, channel)
                        hashes = [h for h in answer if h not in entry.state]
                        entry.state = set(answer)
                    if hashes and not entry.origin.closed and entry.origin._room_for_push(40 * len(hashes) + 16):
                        entry.origin._push(entry, hashes)
                        pushed = True
        if pushed and self.on_output is not None:
            self.on_output()

    def _push_moderation(self, change) -> bool:
        """Push to live moderation state requests what a commit of moderation posts added to their answer."""
        entries = [e for e in self._live_index.get(MODERATION_LIVE, ()) if e.live]
        if not entries or not (change.removed or any(p.post_type in RELEVANT_TYPES for _, p in change.added)):
            return False
        pushed = False
        for entry in entries:
            answer = self.store.moderation_state(entry.request.channels, entry.request.oldest)
            hashes = [h for h in answer if h not in entry.state]
            entry.state = set(answer)
            if hashes and not entry.origin.closed and entry.origin._room_for_push(40 * len(hashes) + 16):
                entry.origin._push(entry, hashes)
                pushed = True
        return pushed

    def _member_channels(self, authors: set[bytes]) -> set[str]:
        """The channels with live state requests where one of ``authors`` is a member or ex-member
        (their latest post/info is in the answer: a post/info or a delete of theirs may change it)."""
        from cablestore.views import channel as channel_view

        get, membership, out = self.store.db.get, channel_view.latest_prefix, set()
        for channel, entries in self._live_index.items():  # (canonical names, as the view keys them)
            if channel == MODERATION_LIVE or all(isinstance(e.request, TimeRangeRequest) for e in entries):
                continue
            group = b"m" + escape(channel)  # the channel view's member group, less the member's key
            if any(get(membership(group + pk)) is not None for pk in authors):
                out.add(channel)
        return out

    def _touched_channels(self, change) -> tuple[dict[str, list], set[str], bool, set[bytes]]:
        """The channels whose chat the commit added to (with the posts), whose state it may have changed,
        whether it may change every channel's state, and the authors whose (ex-)member channels' state it may change."""
        chat: dict[str, list] = {}
        state: set[str] = set()
        authors: set[bytes] = set()
        every_state = bool(change.removed)
        for h, post in change.added:
            t = post.post_type
            if t == TEXT:
                chat.setdefault(canonical_channel(post.channel), []).append((h, post))
            elif t == DELETE:
                for tomb in self.store.tombstones_made_by(h, post.hashes):
                    for c in tomb.channels:
                        chat.setdefault(canonical_channel(c), []).append((h, post))
                        state.add(canonical_channel(c))
                authors.add(post.public_key)  # a deleted post/info changes the state of its author's channels
            elif t == INFO:
                authors.add(post.public_key)
            elif t in (TOPIC, JOIN, LEAVE):
                state.add(canonical_channel(post.channel))
        return chat, state, every_state, authors

    @staticmethod
    def _matching_chat(entry: Inbound, change, posts) -> list[bytes]:
        """The hashes of ``posts`` (this channel's, in commit order) that ``entry`` is to be pushed."""
        out = []
        for h, post in dict((h, p) for h, p in posts).items():
            if post.timestamp < entry.request.time_start:
                continue
            if entry.cursor is not None and mono(post.timestamp, h) <= entry.cursor:
                continue  # still being answered page by page: a later page lists it
            out.append(h)
        return out
