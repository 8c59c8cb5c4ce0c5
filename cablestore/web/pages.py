"""What each page of the web archive shows, read from a :class:`cablestore.Store` through its public read methods.

Each function takes the store and the page's parsed arguments and returns a
dict of plain values for its template (:mod:`cablestore.web.app` renders it).
Nothing here writes, and nothing reads LevelDB directly: channels, messages,
links, users and the moderation tables come from the store's own queries.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cablestore.errors import NotFoundError, QueryError
from cablestore.keyspace.keys import as_hash, canonical_channel
from cablestore.progress import plural
from cablestore.store.read.decoded import StoredPost
from cablestore.wire.codec import ACTION_NAMES, ROLE_NAMES

if TYPE_CHECKING:
    from cablestore.store.store import Store
    from cablestore.web.names import Labels

PAGE_SIZE = 50  # messages on a channel page
MAX_PAGE = 500  # ?n= at most
CABAL = "(cabal)"  # how the cabal-wide moderation context is shown


def when(ms: int) -> str:
    """A post's claimed time, as people read it (UTC, to the second)."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a claimed time past what datetime holds
        return f"{ms} ms"


#: A post's type as its page's heading says it (never the wire name, ``post/delete``).
TITLES = {
    "post/text": "Message", "post/delete": "Deletion", "post/info": "User information", "post/topic": "Topic change",
    "post/join": "Joined a channel", "post/leave": "Left a channel", "post/role": "Moderation: a role",
    "post/moderation": "Moderation", "post/block": "Moderation: a block", "post/unblock": "Moderation: an unblock",
}


def channel_name(text: str) -> str:
    """A channel named in a URL: ``general`` or, as the CLI and ``channels`` write it, ``#general`` (one ``#`` dropped)."""
    return text[1:] if text.startswith("#") else text


@dataclass(frozen=True, slots=True)
class Shown:
    """One post as a page lists it: the decoded post and its author's label (names shared by two users get key digits)."""

    post: StoredPost
    label: str

    @property
    def hash(self) -> str:
        """The post's hash in hex."""
        return self.post.hash.hex()

    @property
    def time(self) -> str:
        """The post's claimed time, UTC, to the second."""
        return when(self.post.timestamp)

    @property
    def hidden(self) -> bool:
        """Whether a moderator hid the post (or its author) for the local user."""
        return self.post.hidden_by is not None

    @property
    def summary(self) -> str:
        """What the post says or does, in one line of words."""
        p = self.post
        if p.text is not None:
            return p.text
        if p.topic is not None:
            return f"set the topic of #{p.channel} to {p.topic}"
        kind = p.type_name
        if kind == "post/delete":  # as `cablestore show` prints it
            return f"[deleted {plural(len(p.deleted), 'post')}]"
        if kind == "post/info":
            return "set " + ", ".join(f"{k}={v}" for k, v in (p.info or ()))
        if kind in ("post/join", "post/leave"):
            return f"{'joined' if kind == 'post/join' else 'left'} #{p.channel}"
        return moderation_words(p) + (f": {p.reason}" if p.reason else "")


def moderation_words(p: StoredPost) -> str:
    """A moderation post in words: what it does, to how many, where."""
    where = f" in #{p.channel}" if p.channel else ""
    count = len(p.recipients or ())
    if p.role is not None:
        return f"gave {count} user(s) the role {ROLE_NAMES[p.role]}{where}"
    if p.action is not None:
        return f"{ACTION_NAMES[p.action]}: {count} target(s){where}"
    if p.drop is not None:
        return f"blocked {count} user(s)" + (" and dropped their posts" if p.drop else "")
    if p.undrop is not None:
        return f"unblocked {count} user(s)"
    return p.type_name


def shown(store: Store, posts: list[StoredPost], labels: Labels | None = None) -> list[Shown]:
    """``posts`` with their authors' labels (``labels``: a :class:`cablestore.web.names.Labels`, else the store's)."""
    names = (labels or store.user_labels)({p.author for p in posts})
    return [Shown(p, names[p.author]) for p in posts]


def parse_hash(text: str) -> bytes:
    """A post hash from a URL (64 hex digits); anything else is a :class:`QueryError` (a 400 page)."""
    if len(text) != 64:
        raise QueryError("a post hash is 64 hex digits")
    return as_hash(text)


def parse_cursor(text: str | None) -> tuple[int, bytes] | None:
    """``?before=TIMESTAMP-HASH``: the last post of the page before, or None for the newest page."""
    if not text:
        return None
    ts, sep, h = text.partition("-")
    if not sep or not ts.isdigit() or len(ts) > 20:
        raise QueryError("before is TIMESTAMP-HASH")
    return int(ts), parse_hash(h)


def parse_count(text: str | None, default: int = PAGE_SIZE) -> int:
    """``?n=``: messages on a page, 1 to :data:`MAX_PAGE` (``default`` when not given)."""
    if text is None or text == "":
        return default
    if not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise QueryError(f"n is a number from 1 to {MAX_PAGE}")
    return int(text)


def channels(store: Store) -> dict[str, Any]:
    """Every channel: name, topic, members, messages."""
    return {"channels": store.channels()}


def _known_channel(store: Store, channel: str) -> None:
    """A channel page for a channel the store has never seen is a 404, not an empty page."""
    if canonical_channel(channel) not in set(store.channel_list()):
        raise NotFoundError(f"There is no channel #{channel} in this store.")


def channel(store: Store, name: str, before: tuple[int, bytes] | None, n: int, labels: Labels | None = None) -> dict[str, Any]:
    """A channel's messages, newest first, ``n`` a page from ``before``; hidden posts kept and marked."""
    _known_channel(store, name)
    page, more = _page(store, name, before, n)
    nxt = f"{page[-1].timestamp}-{page[-1].hash.hex()}" if more else None
    return {"name": name, "topic": store.topic(name), "members": len(store.members(name)), "posts": shown(store, page, labels), "next": nxt, "n": n, "first": before is None}


def _page(store: Store, name: str, before: tuple[int, bytes] | None, n: int) -> tuple[list[StoredPost], bool]:
    """``n`` messages older than ``before`` (timestamp, hash), and whether there are more.

    The store's range ends at a timestamp; posts sharing the cursor's are
    skipped by hash (the range lists them by descending hash), fetching more
    while the skipped ones leave the page short.
    """
    if before is None:
        got = store.messages(name, limit=n + 1, include_hidden=True)
        return got[:n], len(got) > n
    ts, h = before
    fetch = n + 1
    while True:
        got = store.messages(name, end=ts + 1, limit=fetch, include_hidden=True)
        kept = [p for p in got if (p.timestamp, p.hash) < (ts, h)]
        if len(kept) > n or len(got) < fetch:
            return kept[:n], len(kept) > n
        fetch *= 2


def post(store: Store, text: str, labels: Labels | None = None) -> dict[str, Any]:
    """One post with the posts it links to and the stored posts linking to it (a post not held: 404)."""
    h = parse_hash(text)
    found = store.post(h)
    if found is None:
        raise NotFoundError("this store holds no post with that hash (never seen, deleted, or dropped by a moderator)")
    linked = [(link.hex(), store.post(link)) for link in found.links]
    linking = [p for p in (store.post(x) for x in store.reverse_links(h)) if p is not None]
    listed = shown(store, [found] + [p for _, p in linked if p is not None] + linking, labels)
    by_hash = {s.post.hash: s for s in listed}
    return {
        "post": by_hash[found.hash],
        "title": TITLES.get(found.type_name, "Post"),
        "fields": found.to_dict(),
        "links": [(hx, by_hash.get(p.hash) if p is not None else None) for hx, p in linked],
        "linking": [by_hash[p.hash] for p in linking],
    }


def users(store: Store) -> dict[str, Any]:
    """Every user: label, name, key, roles, where hidden, blocked, posts."""
    return {"users": store.users(), "cabal": CABAL}


def _action(store: Store, h: bytes | None, labels: dict) -> dict[str, Any] | None:
    """Who issued the moderation post ``h``, when and why (None when the store holds no such post)."""
    found = store.post(h) if h is not None else None
    if found is None:
        return None
    return {"hash": h.hex(), "who": labels.get(found.author) or found.author.hex()[:8], "when": when(found.timestamp), "why": found.reason or "", "what": moderation_words(found)}


def moderation(store: Store) -> dict[str, Any]:
    """The operator page: roles, hidden users and posts, drops and blocks per context, each with who, when and why."""
    summary = store.moderation_summary()
    roles = {c: store.roles(None if c == CABAL else c) for c in summary["roles"]}
    hidden_users = {c: store.hidden_users(None if c == CABAL else c) for c in summary["hidden_users"]}
    hidden_posts, dropped_posts, dropped_channels = store.hidden_posts(), store.dropped_posts(), store.dropped_channels()
    blocks = store.blocks()
    actions = [p for p in (store.post(h) for h in store.moderation_posts()) if p is not None]
    people = {pk for table in roles.values() for pk in table} | {pk for table in hidden_users.values() for pk in table} | set(blocks)
    labels = store.user_labels(people | {p.author for p in actions})

    def act(h):
        return _action(store, h, labels)

    return {
        "local_user": summary["local_user"],
        "roles": {c: [(labels[pk], pk.hex(), role) for pk, role in sorted(t.items(), key=lambda kv: labels[kv[0]].casefold())] for c, t in roles.items()},
        "hidden_users": {c: [(labels[pk], pk.hex(), act(h)) for pk, h in t.items()] for c, t in hidden_users.items() if t},
        "hidden_posts": [(h.hex(), act(a)) for h, a in hidden_posts.items()],
        "dropped_posts": [(h.hex(), act(a)) for h, a in dropped_posts.items()],
        "dropped_channels": [(name, act(a)) for name, a in dropped_channels.items()],
        "blocks": [(labels[pk], pk.hex(), v["drop"], v["notify"], act(v["by"])) for pk, v in blocks.items()],
        "actions": [Shown(p, labels[p.author]) for p in reversed(actions)],
    }
