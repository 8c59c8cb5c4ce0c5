"""Live requests: a time range with ``time_end = 0`` and a channel state with
``future = 1`` stay open, and every commit to the store (a remote peer, a
local author, ``ingest_many``) pushes what matches them.  A
:class:`cablestore.peer.node.Node` subscribes :meth:`LivePushes.on_commit`
to its store.

Live requests are indexed by channel, so a commit costs work for the
channels it touches, not for every live request in the table; a channel's
state is read once per commit however many requests watch it.  A push is
output that cannot wait: a connection that has not read its share of answers
is closed rather than buffered without bound.

A post that arrived from connection C is never pushed back to C: a commit
the node made while ingesting C's answer (``PeerState.ingesting``) adds
nothing C's live time ranges lack, so they are skipped, and C's live state
requests are not recomputed on it but marked stale, with the hashes C sent
added to what C is known to hold (its post/infos once, in ``C.held_infos``,
not once per channel: any channel's state may come to list them).  :meth:`LivePushes.settle` (the node's
clock) recomputes a stale state later, once, and pushes what else entered
it (an older post/info a delete from C made current again).  A peer that
syncs from us while we pull from it (``serve``) so costs one channel state
read per channel and tick, not one per commit; a stale entry holds at most
``limits.STALE_HASHES`` extra hashes (and C at most as many post/infos)
before it is recomputed at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cablestore.keyspace.keys import canonical_channel, mono
from cablestore.moderation import RELEVANT_TYPES
from cablestore.peer import limits
from cablestore.peer.state import PeerState
from cablestore.peer.table import MODERATION_LIVE, Inbound
from cablestore.wire.codec import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC
from cablestore.wire.messages import TimeRangeRequest

if TYPE_CHECKING:
    from cablestore.store.events import Committed

STATE_TYPES = frozenset({TOPIC, JOIN, LEAVE, INFO, DELETE})


class LivePushes:
    """Pushes commits to the live requests of a peer's state."""

    def __init__(self, state: PeerState) -> None:
        self.state = state
        self.store = state.store

    def on_commit(self, change: Committed) -> None:
        """The store committed ``change`` (a :class:`cablestore.store.events.Committed`): push what matches."""
        peer = self.state
        with peer.lock:
            live = peer.live_channels()
            if not live:
                return
            source = peer.ingesting  # the connection whose answer this commit ingested (None: a local write)
            chat, state, every_state, authors = self._touched_channels(change)
            if every_state or len(authors) > limits.MEMBER_LOOKUPS:
                state |= set(live)
            elif authors:
                state |= self._member_channels(authors, source)
            pushed = self._push_moderation(change)
            sent = None
            for channel in set(chat) | state:
                if channel == MODERATION_LIVE:
                    continue
                entries = peer.live_entries(channel)
                answer = None
                for entry in entries:
                    if entry.origin is source:
                        if isinstance(entry.request, TimeRangeRequest):
                            continue  # every post of this commit came from it
                        if sent is None:
                            sent = self._state_posts(change)
                            source.held_infos.update(sent.get(None, ()))
                            if len(source.held_infos) > limits.STALE_HASHES:
                                self.settle()  # as the clock would: every stale state is recomputed with them...
                                source.held_infos.clear()  # ...so they can be forgotten (bounded memory)
                        mine = sent.get(channel, ())
                        if len(entry.state) + len(mine) <= entry.answered_size + limits.STALE_HASHES:
                            entry.state.update(mine)  # it holds these: not pushed back when the state is recomputed
                            entry.stale = True
                            continue
                    if isinstance(entry.request, TimeRangeRequest):
                        if channel not in chat:
                            continue
                        hashes = self._matching_chat(entry, change, chat[channel])
                    else:
                        if answer is None:
                            answer = self._state_answer(channel)
                        hashes = self._refresh(entry, answer)
                    pushed = self._push(entry, hashes) or pushed
        if pushed and peer.on_output is not None:
            peer.on_output()

    def _state_answer(self, channel: str) -> list[bytes]:
        """A live channel's state answer, read again (counted: ``live_state_reads``)."""
        self.state.stats["live_state_reads"] += 1
        return self.store.channel_state_answer(channel)

    @staticmethod
    def _state_posts(change) -> dict:
        """The hashes of ``change`` a channel's state answer may list: by channel (topic, join, leave), and under None every post/info."""
        out: dict = {}
        for h, post in change.added:
            t = post.post_type
            if t == INFO:
                out[None] = out.get(None, ()) + (h,)
            elif t in (TOPIC, JOIN, LEAVE):
                key = canonical_channel(post.channel)
                out[key] = out.get(key, ()) + (h,)
        return out

    @staticmethod
    def _refresh(entry: Inbound, answer: list[bytes]) -> list[bytes]:
        """The hashes of ``answer`` new to ``entry`` (a live state request) and not sent by its peer; its state is ``answer`` from now on."""
        held = entry.origin.held_infos
        hashes = [h for h in answer if h not in entry.state and h not in held]
        entry.state = set(answer)
        entry.answered_size = len(answer)
        entry.stale = False
        return hashes

    def settle(self) -> None:
        """Recompute the live state requests left stale by commits of their own peer's posts; push what else entered."""
        peer = self.state
        pushed = False
        with peer.lock:
            for channel in peer.live_channels():
                if channel == MODERATION_LIVE:
                    continue
                answer = None
                for entry in peer.live_entries(channel):
                    if not entry.stale:
                        continue
                    if answer is None:
                        answer = self._state_answer(channel)
                    hashes = self._refresh(entry, answer)
                    pushed = self._push(entry, hashes) or pushed
        if pushed and peer.on_output is not None:
            peer.on_output()

    def _push_moderation(self, change) -> bool:
        """Push to live moderation state requests what a commit of moderation posts added to their answer."""
        entries = self.state.live_entries(MODERATION_LIVE)
        if not entries or not (change.removed or any(p.post_type in RELEVANT_TYPES for _, p in change.added)):
            return False
        pushed = False
        for entry in entries:
            answer = self.store.moderation_state(entry.request.channels, entry.request.oldest, to=entry.origin.user)
            hashes = [h for h in answer if h not in entry.state]
            entry.state = set(answer)
            pushed = self._push(entry, hashes) or pushed
        return pushed

    def _push(self, entry, hashes: list[bytes]) -> bool:
        """Push ``hashes`` to a live request if there are any and its connection has room (counted); whether it did."""
        if not hashes or entry.origin.closed or not entry.origin.room_for_push(40 * len(hashes) + 16):
            return False
        entry.origin.push(entry, hashes)
        self.state.stats["live_pushed_hashes"] += len(hashes)
        return True

    def _member_channels(self, authors: set[bytes], source=None) -> set[str]:
        """The channels with live state requests where one of ``authors`` is a member or ex-member
        (their latest post/info is in the answer: a post/info or a delete of theirs may change it).
        A channel whose only live state requests are ``source``'s is returned unread: they are marked stale."""
        out = set()
        for channel in self.state.live_channels():  # (canonical names, as the views key them)
            if channel == MODERATION_LIVE:
                continue
            states = [e for e in self.state.live_entries(channel) if not isinstance(e.request, TimeRangeRequest)]
            if not states:
                continue
            if source is not None and all(e.origin is source for e in states):
                out.add(channel)
                continue
            if self.store.any_member(channel, authors):
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
