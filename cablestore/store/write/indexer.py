"""Applying posts to a write transaction: view entries, delete cascades, tombstones.

The final store is a function of the set of posts it was offered, whatever
their arrival order, except in the cases docs/design.md "Arrival order" lists.  Three
rules make that so:

* What a tombstone knows about its target (author, type, timestamp,
  channels) is a fact about the target: a second post/delete of a post that
  is already gone copies it from a tombstone that knows it, and when a
  deleted post arrives after its deletion (and is refused), every tombstone
  of it learns it, and the deletes they belong to are re-listed.
* Authority comes from whatever names the target's author: the stored post,
  or a tombstone that learned it.  A post/delete every target of which is
  known to be another author's is refused; one stored before that was known
  is retracted (removed with its tombstones) once the targets show who wrote
  them.  A delete naming both its author's posts and others' is stored; its
  claims on the others' posts are recorded and remove nothing.
* A refused post/delete still teaches who wrote it (``!refused!<hash>``):
  a later delete naming it is judged as if it were stored, so a delete of a
  refused delete is decided the same whichever arrives first.
* Channels of a deleted post/delete are those of its targets, as known.
  A target this store never held is known only from a peer that listed the
  delete in a channel's time range: :func:`learn_listing` records that
  channel on the tombstones that know nothing else (docs/design.md).  A
  delete D1 its author deleted keeps, retired, the tombstones of the targets
  it knew nothing of: a target offered later teaches the deletes of D1 its
  channels (docs/moderation.md "Deletes of deletes").
"""

from __future__ import annotations

from cablestore import views
from cablestore.errors import CableError, DeletedPostError, UnauthorizedDeleteError
from cablestore.keyspace import facts
from cablestore.keyspace.keys import DELETED, POSTS, REFUSED, canonical_channel
from cablestore.keyspace.records import Indexed, Tombstone
from cablestore.store.write import enforcing, known_channels
from cablestore.store.write.batch import ENFORCE_UNREAD, IndexState
from cablestore.store.write.resolving import needed, refresh, worth_resolving
from cablestore.views import recon as recon_view
from cablestore.views import search as search_view
from cablestore.wire.codec import DELETE, INFO, Post, decode_post


def apply(state: IndexState, buf: bytes, h: bytes, post: Post, listed: tuple[str, ...] = ()) -> bool | CableError:
    """Index one validated post into ``state``; ``listed``: channels a peer listed it in (see :func:`learn_listing`).

    Returns True (stored), False (already stored), or the refusal
    (:class:`DeletedPostError`, :class:`UnauthorizedDeleteError`) of a post
    that is not stored but may have taught the tombstones that named it what
    it was: commit ``state`` either way.
    """
    key = POSTS + h
    if state.get(key) is not None:
        return False
    if key not in state.writes:  # then the DB answered: a post new to the DB
        state.fresh.add(h)
    tombs = state.tombstones(h)
    if tombs:
        # A refused post still teaches the tombstones that named it what it was.
        _settle_claims(state, h, post, tombs)
    if post.post_type == DELETE and (refusal := _unauthorized(state, post)):
        state.put(REFUSED + h, post.public_key)  # who wrote it, for the deletes that name it later
        return refusal
    if tombs and any(t.deleter == post.public_key and not t.retired for t in tombs):
        if post.post_type == DELETE and not any(t.knows_target for t in tombs):  # seen for the first time
            _retire_unknown(state, h, post)
        return DeletedPostError(f"post {h.hex()} was deleted by its author")
    if state.enforce_memo is ENFORCE_UNREAD:
        state.enforce_memo = enforcing.memo_for(state.txn.db)
    if state.enforce_memo is not None and (kept_out := enforcing.refusal(state.get, h, post, state.enforce_memo)) is not None:
        _keep_what_a_block_removes(state, h, post)
        return kept_out
    made = ()
    if post.post_type == DELETE:
        made = tuple(_delete_target(state, target, h, post) for target in dict.fromkeys(post.hashes))
        if listed:
            made = _learned(state, made, listed)
    elif post.post_type in facts.FACT_TYPES and state.get(facts.key(h)) is not None:
        state.delete(facts.key(h))  # the post itself is back (a block ended): it speaks for itself
    index(state, Indexed.of(buf, post, h, made), buf)
    return True


def commit(state: IndexState, local_user: bytes | None, sync: bool = False, resolve: bool = False) -> None:
    """Finish a batch and write it: settle its latest groups, resolve the moderation state it changed (removing the posts that state keeps out), write.

    The one place that orders a batch's last steps: the writer's door
    (:meth:`cablestore.store.write.writer.Writer.batch`) calls it, and the Txn
    below only writes.  ``resolve``: resolve the whole moderation state even
    when no moderation post changed (a new local user).
    """
    state.settle()
    if resolve or (needed(state.types) and worth_resolving(state)):
        enforce(state, refresh(state, local_user))
        state.settle()  # what the enforcement removed touched latest groups
    state.commit(sync)


def enforce(state: IndexState, changed: set[bytes]) -> None:
    """Remove the stored posts the moderation state (just rewritten: ``changed``) keeps out."""
    for h in sorted(enforcing.candidates(state, changed)):
        blob = state.get(POSTS + h)
        if blob is None:
            continue
        post = decode_post(blob)
        why = enforcing.refusal(state.get, h, post)
        if why is not None:
            # A blocked user's post/delete goes with what it deleted: their posts are dropped anyway, and a
            # delete refused on arrival leaves no tombstone either (a re-sync after an unblock brings both back).
            unindex(state, h, blob, forget_tombstones=post.post_type == DELETE)
            _keep_what_a_block_removes(state, h, post)
            state.enforced[h] = why


def _keep_what_a_block_removes(state: IndexState, h: bytes, post: Post) -> None:
    """What stays of a post a block keeps out: the fact the moderation state needs (types 6-9 and post/info).

    The same row whether the post was stored first and removed, or refused
    on arrival: what the store holds stays a function of the set of posts.
    """
    t = post.post_type
    if t in facts.FACT_TYPES:
        state.put(facts.key(h), facts.pack(h, post))
        state.types.add(t)  # a fact is an input of the moderation state
        if t == INFO:
            state.info_authors.add(post.public_key)


def _author_of(state: IndexState, target: bytes) -> bytes | None:
    blob = state.get(POSTS + target)
    if blob is not None:
        return blob[:32]
    found = next((t.author for t in state.tombstones(target) if t.knows_target), None)
    return found if found is not None else state.get(REFUSED + target)


def _unauthorized(state: IndexState, delete: Post, known: dict[bytes, bytes] | None = None) -> UnauthorizedDeleteError | None:
    """A refusal if every post the delete names is known to be someone else's.

    A delete naming some posts of its author and some of others' is stored:
    its tombstones on the others' posts record them as unauthorized and
    remove nothing.  ``known``: authors the caller has just learned.
    """
    known = known or {}
    authors = [known.get(t) or _author_of(state, t) for t in dict.fromkeys(delete.hashes)]
    if authors and all(a is not None and a != delete.public_key for a in authors):
        return UnauthorizedDeleteError("every post it names belongs to another author")
    return None


def _settle_claims(state: IndexState, h: bytes, post: Post, tombs: list[Tombstone]) -> None:
    """Now that post ``h`` is known, settle every tombstone that named it."""
    channels = None
    for tomb in tombs:
        if tomb.retired:  # its post/delete is deleted: what it waited for is the channels of the deletes of that delete
            if tomb.deleter == post.public_key:
                if channels is None:
                    channels = known_channels.of_post(state, h, post)
                _teach_deletes_of(state, tomb.by, tomb.deleter, channels)
            _end_retired(state, tomb)
            continue
        by_blob = state.get(POSTS + tomb.by)
        if tomb.deleter != post.public_key:
            if by_blob is not None and _unauthorized(state, decode_post(by_blob), {h: post.public_key}):
                unindex(state, tomb.by, by_blob, forget_tombstones=True)  # would have been refused
                state.put(REFUSED + tomb.by, by_blob[:32])  # as a refusal: who wrote it stays known
                continue
            learned = tomb.with_target(post.public_key, post.post_type, post.timestamp, ())
            if learned != tomb:  # an unauthorized claim: recorded, removes nothing
                if tomb.channels and by_blob is not None:
                    _relist(state, tomb.by, by_blob, learned)  # a listing that claimed a channel for it no longer counts
                else:
                    state.put_tombstone(learned)
            continue
        # A post/delete's channels come from its targets, which may have
        # become known since: recompute them; other facts are fixed once known.
        if tomb.knows_target and post.post_type != DELETE:
            continue
        if channels is None:
            channels = known_channels.of_post(state, h, post)
        # Knowledge only grows: a target of the delete may be gone by now.
        known = tuple(sorted(set(channels) | set(tomb.channels)))
        learned = tomb.with_target(post.public_key, post.post_type, post.timestamp, known)
        if learned == tomb:
            continue
        if by_blob is not None:
            _relist(state, tomb.by, by_blob, learned)
        else:
            state.put_tombstone(learned)


def learn_listing(state: IndexState, h: bytes, channel: str) -> bool:
    """Record that a peer listed the stored post/delete ``h`` in ``channel``'s time range.

    Only tombstones that know nothing of their target learn it: what the
    store knows from the target itself wins.  Returns True if the delete is
    now listed under ``channel`` where it was not before.
    """
    blob = state.get(POSTS + h)
    if blob is None:
        return False
    post = decode_post(blob)
    if post.post_type != DELETE:
        return False
    channel = canonical_channel(channel)
    tombs = state.tombstones_by(h, post.hashes)
    if any(channel in t.channels for t in tombs):
        return False
    blind = [t for t in tombs if not t.knows_target]
    if not blind:
        return False
    _relist(state, h, blob, *(tomb.with_channels((channel,)) for tomb in blind))
    return True


def _learned(state: IndexState, made: tuple[Tombstone, ...], listed: tuple[str, ...]) -> tuple[Tombstone, ...]:
    """The tombstones ``made`` by a post/delete being indexed as :func:`learn_listing` of ``listed`` leaves them, written now (no re-index after)."""
    before = made
    for channel in map(canonical_channel, listed):
        if not any(channel in t.channels for t in made):
            made = tuple(t if t.knows_target else t.with_channels((channel,)) for t in made)
    for old, new in zip(before, made, strict=True):
        if new is not old:
            state.put_tombstone(new)
    return made


def _relist(state: IndexState, h: bytes, blob: bytes, *changed: Tombstone) -> None:
    """Rewrite tombstones of the stored post/delete ``h`` and re-index it.

    It is unindexed first, with the tombstones it was indexed with: they
    name the channels its entries were listed under (there is no other
    record of them), so the entries of a channel it leaves go too.
    """
    post = unindex(state, h, blob, forget_tombstones=False).post
    for tomb in changed:
        state.put_tombstone(tomb)
    index(state, Indexed.of(blob, post, h, tuple(state.tombstones_by(h, post.hashes))), blob)


def index(state: IndexState, ip: Indexed, buf: bytes) -> None:
    """Write a post and its view entries."""
    state.put(POSTS + ip.hash, buf)
    entries = views.entries(ip)
    state.put_many(entries)
    recon_view.add(state.sums, ip.post.post_type, entries, 1, True)  # the channel's range sums (entries in view order), written at commit
    if state.search:
        state.put_many(search_view.entries(ip))
    state.deleted.discard(ip.hash)
    state.added[ip.hash] = ip.post
    _note(state, ip)
    state.add_candidates(views.groups(ip), ip)


def _note(state: IndexState, ip: Indexed) -> None:
    """What a state keeps of each post it indexes or removes: its type, and whose post/info or channel post it was."""
    post = ip.post
    state.types.add(post.post_type)
    if post.post_type == INFO:
        state.info_authors.add(post.public_key)
    elif ip.channel is not None:
        state.author_channels.setdefault(post.public_key, set()).add(ip.channel)


def unindex(state: IndexState, h: bytes, blob: bytes, *, forget_tombstones: bool) -> Indexed:
    """Remove a stored post, its view entries and (optionally) its tombstones."""
    post = decode_post(blob)
    made = tuple(state.tombstones_by(h, post.hashes)) if post.post_type == DELETE else ()
    ip = Indexed.of(blob, post, h, made)
    keys = {k for k, _ in views.entries(ip)}  # a post/delete's channels: from the tombstones it made
    if state.search:  # the search entries come from the text, which only the post holds
        keys.update(k for k, _ in search_view.entries(ip))
    recon_view.add(state.sums, post.post_type, keys, -1)  # the range sums the post's !chat rows were counted in
    for key in keys:
        state.delete(key)
    state.delete(POSTS + h)
    state.deleted.add(h)
    state.added.pop(h, None)
    _note(state, ip)
    for view, group in views.groups(ip):
        state.touch(view, group)
        # What the post would write as its group's latest goes too: settle
        # rewrites what is still right.
        for key, _ in view.latest(group, ip):
            state.delete(key)
    if forget_tombstones:
        for tomb in made:
            _forget(state, tomb)
    return ip


def _retire(state: IndexState, made: tuple[Tombstone, ...]) -> tuple[bytes, ...]:
    """The tombstones of a post/delete its author just deleted: forget those that know their target, retire the others; their targets."""
    kept = []
    for tomb in made:
        if tomb.knows_target:
            _forget(state, tomb)
        else:
            state.put_tombstone(tomb.with_retired(True))
            kept.append(tomb.target)
    return tuple(sorted(kept))


def _retire_unknown(state: IndexState, h: bytes, delete: Post) -> None:
    """A post/delete refused because its author deleted it: the retired tombstones it would have left had it been stored first."""
    unknown = [t for t in dict.fromkeys(delete.hashes) if state.get(POSTS + t) is None and not any(x.knows_target for x in state.tombstones(t))]
    for target in unknown:
        if state.get(DELETED + target + h) is None:
            state.put_tombstone(Tombstone(target, h, delete.public_key, retired=True))
    if unknown:
        for up in state.tombstones(h):
            if up.deleter == delete.public_key and not set(unknown) <= set(up.keeps):
                state.put_tombstone(up.with_keeps(set(up.keeps) | set(unknown)))


def _teach_deletes_of(state: IndexState, deleted: bytes, author: bytes, channels: tuple[str, ...]) -> None:
    """The post/delete ``deleted`` (not stored: its author deleted it) turns out to have been in ``channels``: so were the deletes naming it."""
    for up in state.tombstones(deleted):
        if up.deleter != author:
            continue  # another author's claim on it is listed nowhere
        learned = up.with_channels(channels)
        if learned == up:
            continue
        by_blob = state.get(POSTS + up.by)
        if by_blob is not None:
            _relist(state, up.by, by_blob, learned)
        else:
            state.put_tombstone(learned)
            if up.retired:
                _teach_deletes_of(state, up.by, author, channels)


def _end_retired(state: IndexState, tomb: Tombstone) -> None:
    """A retired tombstone whose target has been offered: it has taught what it waited for."""
    state.forget_tombstone(tomb)
    for up in state.tombstones(tomb.by):
        if tomb.target in up.keeps:
            state.put_tombstone(up.with_keeps(set(up.keeps) - {tomb.target}))


def _forget(state: IndexState, tomb: Tombstone) -> None:
    """Forget a tombstone; when it was the last of its deleter on a deleted post/delete, that delete's retired tombstones go too."""
    state.forget_tombstone(tomb)
    if not tomb.keeps or any(t.deleter == tomb.deleter for t in state.tombstones(tomb.target)):
        return
    for retired in state.tombstones_by(tomb.target, tomb.keeps):
        if retired.retired:
            _forget(state, retired)


def _delete_target(state: IndexState, target: bytes, by: bytes, delete: Post) -> Tombstone:
    blob = state.get(POSTS + target)
    kept = state.get(DELETED + target + by)
    if blob is None and kept is not None:
        # This delete was discarded locally and has come back: its tombstone
        # still says what it deleted; keep that.
        tomb = Tombstone.unpack(target, by, kept).with_retired(False)  # a retired one: its delete is back
    elif blob is None:
        # Channels are known only from a deletion by the author itself; an
        # unauthorized claim knows who wrote the target but lists nothing.
        knowing = sorted((t for t in state.tombstones(target) if t.knows_target), key=lambda t: t.deleter != t.author)
        tomb = Tombstone(target, by, delete.public_key)
        if knowing:
            known = knowing[0]
            mine = known.author == known.deleter == delete.public_key
            tomb = tomb.with_target(known.author, known.post_type, known.timestamp, known.channels if mine else ())
            if mine and known.keeps:
                tomb = tomb.with_keeps(known.keeps)
    elif blob[:32] != delete.public_key:
        p = decode_post(blob)  # someone else's post: recorded as an unauthorized claim, left alone
        tomb = Tombstone(target, by, delete.public_key, p.public_key, p.post_type, p.timestamp, ())
    else:
        ip = unindex(state, target, blob, forget_tombstones=False)
        p = ip.post
        keeps = _retire(state, ip.tombstones)  # a deleted post/delete: its tombstones go, but for those still to learn
        tomb = Tombstone(target, by, delete.public_key, p.public_key, p.post_type, p.timestamp, known_channels.of_indexed(state, ip), keeps=keeps)
    state.put_tombstone(tomb)
    return tomb
