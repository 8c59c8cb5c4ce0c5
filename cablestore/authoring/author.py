"""Writing posts: an :class:`Author` binds a keypair to a store.

Every method builds the post, links it, stamps it, signs it and ingests it
in one WriteBatch, and returns its hash:

* **Links** (spec 5.1.2.1): a post of a linkable type (text, topic, join,
  leave) links to every current head of its channel.  ``post/info`` and
  ``post/delete`` belong to no channel, and the spec asks links only of
  linkable types, so they link to nothing: linking them to a channel's heads
  would also end those heads (any known post that links counts), leaving the
  channel's next post nothing to link to.
* **Moderation posts** (:meth:`Author.role`, :meth:`Author.moderate`,
  :meth:`Author.block`, :meth:`Author.unblock`) link to nothing, like
  post/info and post/delete: they belong to no channel's chat, and a link
  from one would end the channel's heads (wire.md §5.1.2.1).
* **Timestamps** come from a clock that never goes backwards: the greater of
  ``now()``, one more than the author's last timestamp (a high-water mark
  kept under ``!local!clock!<pubkey>``, written in the post's WriteBatch, and
  the author's newest stored post), and one more than the newest head it
  links to.  So two posts in one millisecond, a restart, or a wall clock set
  back still give increasing timestamps, and timestamp order agrees with link
  order for local posts.  A head so far in the future that linking it would
  put the post at or beyond ``now + 7 days`` is left out of the links.
* **Bad arguments** raise a :class:`CableError` subclass before anything is
  written: :class:`PostFieldError` (missing or mistyped field),
  :class:`LimitError` (out of the spec's limits), :class:`NotYourPostError`
  (deleting a post that is not stored or not the author's).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from cablestore import views
from cablestore.errors import ArgumentError, LimitError, NotYourPostError, PostFieldError, QueryError, StoreError
from cablestore.keyspace.keys import CLOCK, HashLike, as_hash, beyond_horizon
from cablestore.store.store import Store, wall_clock_ms
from cablestore.wire.codec import (
    ACCEPT_ROLE,
    BLOCK,
    DELETE,
    DROP_POST,
    HIDE_POST,
    INFO,
    JOIN,
    LEAVE,
    MODERATION,
    ROLE,
    TEXT,
    TOPIC,
    UNBLOCK,
    UNDROP_POST,
    UNHIDE_POST,
    Post,
    decode_post,
    encode_post,
    info_dict,
    post_hash,
)
from cablestore.wire.crypto import Keypair, body_fields, make_post

# Authoring is at human speed: one lock for the process keeps two threads
# writing as one author from reading the same high-water mark.
_LOCK = threading.Lock()


def clock_key(public_key: bytes) -> bytes:
    """The ``!local!`` key holding the author's last timestamp."""
    return CLOCK + public_key


class Author:
    """Posts as ``keypair`` into ``store``; ``now`` (ms) is the wall clock (a hook for tests).

    A channel is written in the spelling the store's posts of it already use
    (``Store.listed_spellings``: deployed peers compare names exactly), unless
    ``exact_channel=True``: then as given.
    """

    def __init__(self, store: Store, keypair: Keypair, *, now: Callable[[], int] | None = None, exact_channel: bool = False):
        # Checked here, not at the first post: a key file's path or a store's path is a common slip.
        if not isinstance(store, Store):
            raise ArgumentError(f"Author needs an open Store, not {type(store).__name__} (open one with Store(path))")
        if not isinstance(keypair, Keypair):
            raise ArgumentError(f"Author needs a Keypair, not {type(keypair).__name__} (read a key file with read_keyfile(path))")
        if now is not None and not callable(now):
            raise ArgumentError(f"now must be a callable returning milliseconds (or None), not {type(now).__name__}")
        self.store = store
        self.keypair = keypair
        self._now = now or wall_clock_ms
        self.exact_channel = exact_channel

    @property
    def public_key(self) -> bytes:
        """The author's 32-byte public key."""
        return self.keypair.public_key

    # --- one method per post type -------------------------------------------
    def text(self, channel: str, text: str) -> bytes:
        """Post a chat message to ``channel``; return its hash."""
        return self.post(TEXT, channel=channel, text=text)

    def join(self, channel: str) -> bytes:
        """Join ``channel`` (a post/join); return its hash."""
        return self.post(JOIN, channel=channel)

    def leave(self, channel: str) -> bytes:
        """Leave ``channel`` (a post/leave); return its hash."""
        return self.post(LEAVE, channel=channel)

    def topic(self, channel: str, topic: str) -> bytes:
        """Set (or, with ``""``, clear) the channel's topic."""
        return self.post(TOPIC, channel=channel, topic=topic)

    def info(self, pairs: Sequence[tuple[str, str | int]]) -> bytes:
        """Post a post/info with exactly these ``(key, value)`` pairs (it replaces the previous one).

        ``("accept-role", 0)`` (or 1, True, False) is written as the spec's one-byte varint.
        """
        return self.post(INFO, info=pairs)

    def name(self, name: str) -> bytes:
        """Set the author's name, keeping the other properties of their current post/info."""
        if not isinstance(name, str):
            raise PostFieldError(f"name must be a string, got {type(name).__name__}")
        return self._update_info("name", name)

    def accept_role(self, accept: int | bool) -> bytes:
        """Accept (1) or decline (0) roles others give this author (moderation.md §4.2.4), keeping their name.

        A post/info replaces the previous one, so the current name (and any
        other property) is written again with ``accept-role``.
        """
        if isinstance(accept, str) or accept not in (0, 1):
            raise PostFieldError(f"accept-role is 0 or 1, got {accept!r}")
        return self._update_info(ACCEPT_ROLE, int(accept))

    def _update_info(self, key: str, value: str | int) -> bytes:
        current: dict = self.store.user_info(self.public_key)
        current[key] = value
        return self.info(list(current.items()))

    def delete(self, *hashes: HashLike) -> bytes:
        """Delete posts of this author (hashes as bytes or hex); every one must be stored and theirs."""
        return self.post(DELETE, hashes=hashes)

    # --- moderation (moderation.md §5.1) --------------------------------------
    def role(self, recipient: HashLike, role: int, *, channel: str = "", reason: str = "", private: bool = False) -> bytes:
        """Set ``recipient``'s role (0 admin, 1 mod, 2 normal user) in ``channel`` (``""``: the whole cabal)."""
        return self.post(ROLE, reason=reason, privacy=int(private), channel=channel, recipients=[_key(recipient)], role=role)

    def moderate(self, action: int, recipients: Iterable[HashLike] = (), *, channel: str = "", reason: str = "", private: bool = False) -> bytes:
        """A post/moderation: ``action`` 0-7 (hide/unhide user, hide/unhide post, drop/undrop post, drop/undrop channel).

        Users and posts are named in ``recipients`` (public keys or post
        hashes, bytes or hex); a channel action names ``channel`` and no one.
        A post action's ``channel`` defaults to the channel of the first
        stored post it names (the spec asks for the posts' channel).
        """
        targets = [_key(r) for r in recipients]
        if action in (HIDE_POST, UNHIDE_POST, DROP_POST, UNDROP_POST) and not channel and targets:
            stored = self.store.post(targets[0])
            channel = stored.channel if stored is not None and stored.channel else ""
        return self.post(MODERATION, reason=reason, privacy=int(private), channel=channel, recipients=targets, action=action)

    def block(self, users: Iterable[HashLike], *, drop: bool = False, notify: bool = False, reason: str = "", private: bool = False) -> bytes:
        """Block ``users``; ``drop`` removes their stored posts, ``notify`` sends them the block."""
        return self.post(BLOCK, reason=reason, privacy=int(private), recipients=[_key(u) for u in users], drop=int(drop), notify=int(notify))

    def unblock(self, users: Iterable[HashLike], *, undrop: bool = False, reason: str = "", private: bool = False) -> bytes:
        """Unblock ``users``; ``undrop`` lets their dropped posts be stored again."""
        return self.post(UNBLOCK, reason=reason, privacy=int(private), recipients=[_key(u) for u in users], undrop=int(undrop))

    # --- the common path ----------------------------------------------------
    def post(self, post_type: int, **body: Any) -> bytes:
        """Build, link, stamp, sign and ingest a post of ``post_type``; return its hash."""
        check_reason(body.get("reason"))
        if post_type == DELETE and "hashes" in body:
            body["hashes"] = self._own_posts(body["hashes"])
        draft = _checked_draft(self.public_key, post_type, body)
        if draft.channel and not self.exact_channel:  # as the channel's posts spell it (one channel either way)
            body["channel"] = self.store.listed_spellings([draft.channel])[0]
        with _LOCK:
            now = self._now()
            links, newest_head = self._links(draft, now)
            timestamp = max(now, self._high_water() + 1, newest_head + 1)
            buf, _ = make_post(self.keypair, post_type, timestamp, links, **body)
            stamp = {clock_key(self.public_key): timestamp.to_bytes(8, "big")}
            return self.store.ingest(buf, extra=stamp)

    def _links(self, draft: Post, now: int) -> tuple[list[bytes], int]:
        """The channel's heads this post links to, and the newest one's timestamp."""
        if draft.post_type not in views.links.LINKABLE:
            return [], 0
        links, newest = [], 0
        for h in self.store.heads(draft.channel):
            blob = self.store.get(h)
            if blob is None:  # removed since the heads were read
                continue
            ts = decode_post(blob).timestamp
            if beyond_horizon(ts + 1, now):  # linking it would make this post unacceptable
                continue
            links.append(h)
            newest = max(newest, ts)
        return links, newest

    def _high_water(self) -> int:
        """The latest timestamp this author used: the stored mark, or their newest post."""
        raw = self.store.local_value(clock_key(self.public_key))
        mark = int.from_bytes(raw, "big") if raw is not None and len(raw) == 8 else 0
        return max(mark, self.store.newest_timestamp(self.public_key))

    def _own_posts(self, hashes: Iterable) -> tuple[bytes, ...]:
        if isinstance(hashes, (bytes, str)) or not isinstance(hashes, Iterable):
            raise PostFieldError("hashes must be a list of post hashes")
        hashes = list(hashes)
        if not hashes:
            raise PostFieldError("delete needs at least one hash")
        out = []
        for value in hashes:
            try:
                h = as_hash(value)
            except QueryError as exc:
                raise PostFieldError(f"not a post hash: {value!r}") from exc
            blob = self.store.get(h)
            if blob is None:
                raise NotYourPostError(f"post {h.hex()} is not stored, so it cannot be shown to be yours")
            if blob[:32] != self.public_key:
                raise NotYourPostError(f"post {h.hex()} was written by {blob[:32].hex()}, not by you")
            out.append(h)
        return tuple(dict.fromkeys(out))


DEPLOYED_REASON_BYTES = 128  # what cable.js 0.2.1 accepts: the spec's 128 codepoints, counted in bytes


def check_reason(reason: object) -> None:
    """Refuse (:class:`LimitError`) a reason deployed peers cannot take: over 128 UTF-8 bytes.

    The spec allows 128 codepoints; cable.js 0.2.1 counts bytes, refuses the post, and a cable-core.js
    0.2.1 peer sent one dies (interop/README.md, "Moderation").  Such reasons are read, never written.
    """
    if isinstance(reason, str) and len(reason.encode("utf-8", "surrogatepass")) > DEPLOYED_REASON_BYTES:
        size = len(reason.encode("utf-8", "surrogatepass"))
        raise LimitError(f"reason is {size} bytes: deployed peers (cable.js 0.2.1) refuse more than {DEPLOYED_REASON_BYTES}")


def _key(value: HashLike) -> bytes:
    try:
        return as_hash(value)
    except QueryError as exc:
        raise PostFieldError(f"not a public key or post hash: {value!r}") from exc


def _checked_draft(public_key: bytes, post_type: int, body: dict) -> Post:
    """The post without links, timestamp or signature, checked as it will be encoded."""
    draft = Post(public_key, bytes(64), (), post_type, 0, **body_fields(body))
    encode_post(draft)  # raises PostFieldError / LimitError / UnknownPostTypeError
    return draft


def describe(buf: bytes) -> dict:
    """A post as JSON-ready data (hex for bytes), with its hash."""
    post = decode_post(buf)
    out = {
        "hash": post_hash(buf).hex(),
        "type": post.type_name,
        "public_key": post.public_key.hex(),
        "signature": post.signature.hex(),
        "links": [h.hex() for h in post.links],
        "timestamp": post.timestamp,
    }
    for name in ("channel", "text", "topic"):
        if getattr(post, name) is not None:
            out[name] = getattr(post, name)
    if post.hashes is not None:
        out["hashes"] = [h.hex() for h in post.hashes]
    if post.info is not None:
        out["info"] = [[k, info_dict([(k, v)])[k]] for k, v in post.info]
    return out


# --- one-shot use (the CLI) ---------------------------------------------------
_KINDS = {
    "text": (TEXT, ("channel", "text")),
    "join": (JOIN, ("channel",)),
    "leave": (LEAVE, ("channel",)),
    "topic": (TOPIC, ("channel", "topic")),
    "name": (INFO, ("name",)),
    "accept-role": (INFO, ("accept_role",)),
    "delete": (DELETE, None),
}


def post_with_keyfile(
    store_path: str | os.PathLike | Store, key_path: str | os.PathLike, kind: str, args: Sequence[str], *,
    now: Callable[[], int] | None = None, local_user: HashLike | None = None, exact_channel: bool = False,
) -> bytes:
    """Write one post of ``kind`` (text, join, leave, topic, name, accept-role, delete) as the key file's owner.

    ``store_path`` may be a :class:`cablestore.Store` held open (``serve``
    does so for its control clients): it is written to and left open.

    A channel is written as the store's posts of it spell it, unless ``exact_channel`` (see :class:`Author`).
    Returns the stored post's bytes.  The key and the arguments are checked
    before the store is opened, so a refusal creates nothing; the store is
    created if missing, except for ``delete`` (which needs the posts).
    """
    from cablestore.authoring.keyfile import read_keyfile

    if kind not in _KINDS:
        raise PostFieldError(f"unknown post kind {kind!r}; one of {', '.join(_KINDS)}")
    keypair = read_keyfile(key_path)
    post_type, names = _KINDS[kind]
    if names is not None:
        if len(args) != len(names):
            raise PostFieldError(f"{kind} takes {' '.join(n.upper() for n in names)}")
        body = dict(zip(names, args, strict=False))
        if kind == "accept-role":
            if args[0] not in ("0", "1", 0, 1):
                raise PostFieldError(f"accept-role is 0 or 1, got {args[0]!r}")
            args = [int(args[0])]
        if post_type == INFO:
            body = {"info": [(names[0].replace("_", "-"), args[0])]}
        _checked_draft(keypair.public_key, post_type, body)
    method = kind.replace("-", "_")
    if isinstance(store_path, Store):  # a store held open already (by `serve`): used, not closed
        _check_local_user(store_path, local_user)
        h = getattr(Author(store_path, keypair, now=now, exact_channel=exact_channel), method)(*args)
        return store_path.get(h)
    if kind == "delete":
        _require_store(store_path)
    with Store(store_path, local_user=local_user) as store:
        h = getattr(Author(store, keypair, now=now, exact_channel=exact_channel), method)(*args)
        return store.get(h)


def _check_local_user(store: Store, local_user: HashLike | None) -> None:
    """A store held open (by ``serve``) follows the rules of opening one: without a local user it takes
    ``local_user`` (once, kept); with another one, :class:`cablestore.errors.LocalUserError`."""
    from cablestore.errors import LocalUserError

    if local_user is None:
        return
    try:
        key = as_hash(local_user)
    except (QueryError, ValueError, TypeError) as exc:
        raise LocalUserError(f"local user must be a 32-byte public key (bytes or 64 hex digits): {exc}") from None
    if store.local_user is None:
        store.set_local_user(key)
    elif key != store.local_user:
        raise LocalUserError(
            f"{store.path} belongs to local user {store.local_user.hex()}, not {key.hex()}: moderate with that user's key (a store has one local user)"
        )


def read_heads(store_path: str | os.PathLike, channel: str) -> list[bytes]:
    """The heads of ``channel`` in the store at ``store_path`` (which must exist)."""
    _require_store(store_path)
    with Store(store_path, create=False) as store:
        return store.heads(channel)


def _require_store(store_path) -> None:
    # LevelDB creates the directory even when asked not to create the DB.
    if not (Path(store_path) / "CURRENT").is_file():
        raise StoreError(f"{store_path} is not a cablestore store (no such LevelDB directory)")
