"""Store tests against the cable.js 0.2.1 fixture (seed 7, 2,000 signed posts).

Data comes only from ``tests/data/cablejs-0.2.1-s7-2000``: ``posts.bin`` (the
posts, in ingestion order) and ``posts.jsonl`` (one JSON line per post: hash,
type, author, timestamp, channel, body, tags naming the edge case it exercises).

The expected answers come from :class:`Oracle`, a deliberately naive model of
the Cable semantics written over ``posts.jsonl`` alone (it never looks at the
store's keys or code): it applies the posts in order, keeps a dict of stored
posts, and answers every query by scanning that dict.  The rules it follows:

* "Latest" = highest timestamp (as an integer), ties broken by the higher hash.
* Channel names compare via ``str.casefold()``.
* A post/delete removes each stored target and leaves a tombstone for every
  target.  A post/delete that deletes another post/delete removes it and
  forgets the tombstones it made, without bringing its targets back.
* A post/delete is listed in a channel's time range under the channels of the
  posts it deleted: the channel of a text/topic/join/leave, the channels the
  author was a member of (at that moment) for a post/info, the channels the
  deleted delete was listed under for a post/delete.
* A user is a member of a channel if their latest join/text/topic/leave there
  is not a leave.

The store is built once per module, one ``ingest`` at a time, and a snapshot of
every query is taken at checkpoints around each tagged edge case, so the
intermediate states (e.g. right after a post/info is deleted) are checked as
well as the final one.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.authoring.workload import read_posts
from cablestore.errors import DeletedPostError

FIXTURE = Path(__file__).parent / "data" / "cablejs-0.2.1-s7-2000"
NOW = 1_700_200_000_000  # later than every post, so none is "from the future"

BUFS: list[bytes] = read_posts(FIXTURE / "posts.bin")
with open(FIXTURE / "posts.jsonl", encoding="utf-8") as _f:
    META: list[dict] = [json.loads(line) for line in _f if line.strip()]
with open(FIXTURE / "users.json", encoding="utf-8") as _f:
    USERS: list[dict] = json.load(_f)
with open(FIXTURE / "summary.json", encoding="utf-8") as _f:
    SUMMARY: dict = json.load(_f)

BY_HASH = {m["hash"]: m for m in META}
BY_TAG: dict[str, list[dict]] = defaultdict(list)
for _m in META:
    for _tag in _m.get("tags", []):
        BY_TAG[_tag].append(_m)
PUBKEYS = [u["publicKey"] for u in USERS]
USER = {u["initialName"]: u["publicKey"] for u in USERS}

TYPE_CODE = {"post/text": 0, "post/delete": 1, "post/info": 2, "post/topic": 3, "post/join": 4, "post/leave": 5}
CHANNEL_TYPES = frozenset({"post/text", "post/topic", "post/join", "post/leave"})
JOIN_LEAVE = frozenset({"post/join", "post/leave"})

CHANNELS = sorted({m["channel"].casefold() for m in META if "channel" in m}, key=lambda c: c.encode("utf-8"))
# Every spelling the queries are asked with: canonical, as written in the data,
# other case variants, a prefix of a real channel and a channel nobody used.
SPELLINGS = [
    "general",
    "Dev-Talk",
    "dev-talk",
    "DEV-TALK",
    "ünïcode-☕",
    "ÜNÏCODE-☕",
    "news",
    "news!2024",
    "NEWS!2024",
    "news!",
    "new",
    "random",
]


def tagged(tag: str) -> list[dict]:
    return BY_TAG[tag]


def the(tag: str) -> dict:
    (m,) = BY_TAG[tag]
    return m


# --------------------------------------------------------------------------
# the oracle
# --------------------------------------------------------------------------
def mono(m: dict) -> tuple[int, bytes]:
    return (int(m["timestamp"]), bytes.fromhex(m["hash"]))


def newest_first(posts) -> list[dict]:
    return sorted(posts, key=mono, reverse=True)


def latest(posts) -> dict | None:
    return max(posts, key=mono, default=None)


class Oracle:
    """The Cable semantics as plain Python over ``posts.jsonl``; hashes are hex."""

    def __init__(self, by_hash: dict | None = None):
        self.by_hash = BY_HASH if by_hash is None else by_hash  # hash -> post dict, to find deleters
        self.stored: dict[str, dict] = {}
        self.tombs: dict[str, set[str]] = defaultdict(set)  # target -> deletes whose tombstone holds
        self.listed: dict[str, set[str]] = {}  # post/delete -> channels it is listed under

    def ingest(self, m: dict) -> str:
        """Apply one post; returns "stored", "dup" or "refused"."""
        mh = m["hash"]
        if mh in self.stored:
            return "dup"
        if any(self.by_hash[d]["author"] == m["author"] for d in self.tombs[mh]):
            return "refused"  # deleted by its author: never stored again
        if m["type"] == "post/delete":
            channels: set[str] = set()
            for target in dict.fromkeys(m["deletes"]):
                t = self.stored.get(target)
                if t is not None:
                    assert t["author"] == m["author"], "the fixture only deletes own posts"
                    channels |= self.channels_of(t)
                    del self.stored[target]
                    if t["type"] == "post/delete":  # delete-of-delete: forget its tombstones
                        for t2 in t["deletes"]:
                            self.tombs[t2].discard(target)
                self.tombs[target].add(mh)
            self.listed[mh] = channels
        self.stored[mh] = m
        return "stored"

    def channels_of(self, m: dict) -> set[str]:
        if m["type"] in CHANNEL_TYPES:
            return {m["channel"].casefold()}
        if m["type"] == "post/info":
            return {c for c in self.channel_list() if self.is_member(m["author"], c)}
        if m["type"] == "post/delete":
            return set(self.listed[m["hash"]])
        raise AssertionError(m["type"])

    # --- helpers ---------------------------------------------------------
    def in_channel(self, channel: str, types) -> list[dict]:
        ch = channel.casefold()
        return [m for m in self.stored.values() if m["type"] in types and m["channel"].casefold() == ch]

    def latest_by_author(self, posts) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for m in posts:
            if m["author"] not in out or mono(m) > mono(out[m["author"]]):
                out[m["author"]] = m
        return out

    def membership(self, channel: str) -> dict[str, bool]:
        """Members and ex-members (anyone with a stored join/text/topic/leave
        there) -> whether their latest such post is not a post/leave."""
        latest_posts = self.latest_by_author(self.in_channel(channel, CHANNEL_TYPES))
        return {pk: m["type"] != "post/leave" for pk, m in latest_posts.items()}

    def is_member(self, pubkey: str, channel: str) -> bool:
        return self.membership(channel).get(pubkey, False)

    def infos(self, pubkey: str) -> list[dict]:
        return [m for m in self.stored.values() if m["type"] == "post/info" and m["author"] == pubkey]

    # --- the queries -------------------------------------------------------
    def get(self, mh: str):
        return "ok" if mh in self.stored else None

    def is_deleted(self, mh: str) -> bool:
        return mh not in self.stored and bool(self.tombs.get(mh))

    def channel_time_range(self, channel: str, start: int = 0, end: int = 0, limit: int = 0) -> list[str]:
        ch = channel.casefold()
        posts = self.in_channel(ch, {"post/text"})
        posts += [m for m in self.stored.values() if m["type"] == "post/delete" and ch in self.listed[m["hash"]]]
        posts = [m for m in posts if m["timestamp"] >= start and (end == 0 or m["timestamp"] < end)]
        out = [m["hash"] for m in newest_first(posts)]
        return out[:limit] if limit else out

    def channel_state(self, channel: str, historic: bool = False) -> list[str]:
        topics = self.in_channel(channel, {"post/topic"})
        joins_leaves = self.in_channel(channel, JOIN_LEAVE)
        people = self.membership(channel)  # members and ex-members
        infos = [m for m in self.stored.values() if m["type"] == "post/info" and m["author"] in people]
        if historic:
            out = topics + joins_leaves + infos
        else:
            out = [latest(topics)] if topics else []
            out += self.latest_by_author(joins_leaves).values()
            out += self.latest_by_author(infos).values()
        return [m["hash"] for m in out]

    def channel_list(self, offset: int = 0, limit: int = 0) -> list[str]:
        names = {m["channel"].casefold() for m in self.stored.values() if m["type"] in CHANNEL_TYPES}
        names = sorted(names, key=lambda c: c.encode("utf-8"))
        return names[offset : offset + limit if limit else None]

    def topic(self, channel: str) -> str:
        last = latest(self.in_channel(channel, {"post/topic"}))
        return "" if last is None else last["topic"]

    def members(self, channel: str) -> list[str]:
        # lowercase hex sorts like the bytes it encodes
        return sorted(pk for pk, member in self.membership(channel).items() if member)

    def name(self, pubkey: str) -> str | None:
        last = latest(self.infos(pubkey))
        return None if last is None else last.get("name")

    def author_posts(self, pubkey: str, post_type: int | None = None) -> list[str]:
        mine = [
            m
            for m in self.stored.values()
            if m["author"] == pubkey and (post_type is None or TYPE_CODE[m["type"]] == post_type)
        ]
        return [m["hash"] for m in newest_first(mine)]


class StoreView:
    """The store's answers in the oracle's representation (hex strings)."""

    def __init__(self, store: Store):
        self.store = store

    def get(self, mh: str):
        got = self.store.get(mh)
        if got is None:
            return None
        return "ok" if got == BUFS[BY_HASH[mh]["idx"]] else f"different bytes ({len(got)})"

    def is_deleted(self, mh: str) -> bool:
        return self.store.is_deleted(mh)

    def channel_time_range(self, channel, start=0, end=0, limit=0) -> list[str]:
        return [x.hex() for x in self.store.channel_time_range(channel, start, end, limit)]

    def channel_state(self, channel, historic=False) -> list[str]:
        return [x.hex() for x in self.store.channel_state(channel, historic=historic)]

    def channel_list(self, offset=0, limit=0) -> list[str]:
        return self.store.channel_list(offset, limit)

    def topic(self, channel) -> str:
        return self.store.topic(channel)

    def members(self, channel) -> list[str]:
        return [x.hex() for x in self.store.members(channel)]

    def name(self, pubkey):
        return self.store.name(pubkey)

    def author_posts(self, pubkey, post_type=None) -> list[str]:
        return [x.hex() for x in self.store.author_posts(pubkey, post_type)]


# Hashes whose get/is_deleted can change other than by their own arrival.
DELETE_INVOLVED = [m["hash"] for m in META if m["type"] == "post/delete" or "deleted_by" in m]
CHECK_SPELLINGS = CHANNELS + ["Dev-Talk"]


def snapshot(q, full: bool = True) -> dict:
    """Every query's answer; channel_state as a multiset (sorted).

    ``full=False`` (intermediate checkpoints): canonical channel names plus
    "Dev-Talk" only, get/is_deleted only for posts/deletes and their targets.
    """
    out: dict[tuple, object] = {("channel_list",): q.channel_list()}
    for offset, limit in [(0, 1), (1, 2), (2, 0), (4, 10), (10, 0)]:
        out[("channel_list", offset, limit)] = q.channel_list(offset, limit)
    for ch in SPELLINGS if full else CHECK_SPELLINGS:
        out[("channel_time_range", ch)] = q.channel_time_range(ch)
        out[("channel_state", ch)] = sorted(q.channel_state(ch))
        out[("channel_state", ch, "historic")] = sorted(q.channel_state(ch, True))
        out[("topic", ch)] = q.topic(ch)
        out[("members", ch)] = q.members(ch)
    for pk in PUBKEYS:
        out[("name", pk)] = q.name(pk)
        out[("author_posts", pk)] = q.author_posts(pk)
        for code in TYPE_CODE.values():
            out[("author_posts", pk, code)] = q.author_posts(pk, code)
    for mh in [m["hash"] for m in META] if full else DELETE_INVOLVED:
        out[("get", mh)] = q.get(mh)
        out[("is_deleted", mh)] = q.is_deleted(mh)
    return out


def mismatches(got: dict, want: dict) -> list[str]:
    assert got.keys() == want.keys()
    return [f"{k}: store={got[k]!r} oracle={want[k]!r}" for k in want if got[k] != want[k]]


# Checkpoints: the number of posts ingested when a snapshot is taken: before
# and after every post carrying an edge-case tag, every post with a 10-digit
# timestamp, every post that arrives after a newer one it competes with for
# "latest" (same author and channel, same channel's topic, same author's
# post/info), and the deletes of those newer ones; plus every 250 posts.
ROUTINE_TAGS = {"delete-text", "bootstrap-join", "initial-name"}


def _interesting_posts() -> set[int]:
    out = set()
    seen: dict[tuple, list[dict]] = defaultdict(list)
    for m in META:
        if set(m.get("tags", [])) - ROUTINE_TAGS or m["timestamp"] < 10**12:
            out.add(m["idx"])
        groups = []
        if m["type"] in CHANNEL_TYPES:
            groups.append(("membership", m["author"], m["channel"].casefold()))
        if m["type"] == "post/topic":
            groups.append(("topic", m["channel"].casefold()))
        if m["type"] == "post/info":
            groups.append(("info", m["author"]))
        for group in groups:
            newer = [p for p in seen[group] if mono(p) > mono(m)]
            if newer:
                out.add(m["idx"])
                out.update(BY_HASH[p["deleted_by"]]["idx"] for p in newer if "deleted_by" in p)
            seen[group].append(m)
    return out


CHECKPOINTS = sorted(
    {i + d for i in _interesting_posts() for d in (0, 1)} | set(range(0, len(META) + 1, 250)) | {len(META)}
)
FINAL = len(META)


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------
class Snaps(dict):
    """Checkpoint -> snapshot; a short repr keeps failure reports readable."""

    def __repr__(self):
        return f"<{len(self)} snapshots>"


@dataclass(repr=False)
class Built:
    store: Store
    hashes: list[bytes]
    snaps: Snaps

    def __repr__(self):
        return f"<store built from {len(self.hashes)} posts, {len(self.snaps)} snapshots>"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("fixture") / "one-by-one.ldb"
    with Store(path, now=lambda: NOW) as store:
        view = StoreView(store)
        snaps, hashes = Snaps(), []
        for n, buf in enumerate(BUFS):
            if n in CHECKPOINTS:
                snaps[n] = snapshot(view, full=False)
            hashes.append(store.ingest(buf))
        snaps[FINAL] = snapshot(view)
        yield Built(store, hashes, snaps)


@pytest.fixture(scope="module")
def oracle_snaps() -> Snaps:
    oracle, snaps = Oracle(), Snaps()
    for n, m in enumerate(META):
        if n in CHECKPOINTS:
            snaps[n] = snapshot(oracle, full=False)
        assert oracle.ingest(m) == "stored"
    snaps[FINAL] = snapshot(oracle)
    return snaps


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    o = Oracle()
    for m in META:
        o.ingest(m)
    return o


@pytest.fixture(scope="module")
def store(built) -> Store:
    return built.store


@pytest.fixture(scope="module")
def view(built) -> StoreView:
    return StoreView(built.store)


def hexes(hashes) -> list[str]:
    return [x.hex() for x in hashes]


# --------------------------------------------------------------------------
# the fixture itself (what the oracle relies on)
# --------------------------------------------------------------------------
def test_fixture_files_agree():
    assert len(BUFS) == len(META) == SUMMARY["generated"] == 2000
    assert [m["idx"] for m in META] == list(range(len(META)))
    for buf, m in zip(BUFS, META, strict=False):
        assert hashlib.blake2b(buf, digest_size=32).hexdigest() == m["hash"]
        assert buf[:32].hex() == m["author"]
    assert Counter(m["type"] for m in META) == Counter(SUMMARY["byType"])
    assert Counter(t for m in META for t in m.get("tags", [])) == Counter(SUMMARY["byTag"])
    assert sum("deleted_by" in m for m in META) == SUMMARY["deletedPosts"]
    assert {m["author"] for m in META} == set(PUBKEYS)
    assert set(CHANNELS) == {c.casefold() for c in SUMMARY["channels"]}
    # every delete targets an earlier post by the same author; deleted_by is consistent
    for m in META:
        if m["type"] == "post/delete":
            for t in m["deletes"]:
                assert BY_HASH[t]["idx"] < m["idx"] and BY_HASH[t]["author"] == m["author"]
        if "deleted_by" in m:
            assert m["hash"] in BY_HASH[m["deleted_by"]]["deletes"]


def test_every_post_is_accepted_with_its_hash(built):
    assert hexes(built.hashes) == [m["hash"] for m in META]


# --------------------------------------------------------------------------
# whole-state comparisons
# --------------------------------------------------------------------------
@pytest.mark.parametrize("n", CHECKPOINTS, ids=lambda n: f"after-{n}-posts")
def test_checkpoint_matches_oracle(n, built, oracle_snaps):
    assert mismatches(built.snaps[n], oracle_snaps[n]) == []


@pytest.mark.parametrize("channel", SPELLINGS)
def test_channel_time_range_whole(channel, view, oracle):
    assert view.channel_time_range(channel) == oracle.channel_time_range(channel)
    assert view.channel_time_range(channel, 0, 0, 0) == oracle.channel_time_range(channel)


def windows(timestamps: list[int]) -> list[tuple[int, int, int]]:
    """(start, end, limit) triples around the timestamps of a channel (newest first)."""
    out = [(0, 0, 1), (0, 0, 7), (0, 0, len(timestamps) + 5), (NOW, 0, 0), (0, 1, 0)]
    out += [(0, 10**10, 0), (1234567890, 1234567891, 0), (9876543210, 9876543211, 0), (10**10, 0, 0)]
    if timestamps:
        a = timestamps[len(timestamps) // 3]
        b = timestamps[2 * len(timestamps) // 3]
        out += [
            (b, a, 0),
            (b, a, 3),
            (b, a, 1),
            (b, 0, 0),
            (b, 0, 4),
            (0, a, 0),
            (0, a, 2),
            (a, a, 0),
            (a, a + 1, 0),
            (b - 1, b + 1, 0),
            (timestamps[-1], timestamps[0], 0),
            (timestamps[-1], timestamps[0] + 1, 0),
        ]
    return out


@pytest.mark.parametrize("channel", CHANNELS)
def test_channel_time_range_windows(channel, view, oracle):
    timestamps = [BY_HASH[x]["timestamp"] for x in oracle.channel_time_range(channel)]
    bad = []
    for start, end, limit in windows(timestamps):
        got = view.channel_time_range(channel, start, end, limit)
        want = oracle.channel_time_range(channel, start, end, limit)
        if got != want:
            bad.append((start, end, limit, got, want))
    assert bad == []


@pytest.mark.parametrize("channel", CHANNELS)
def test_time_range_start_inclusive_end_exclusive_limit_newest(channel, view):
    everything = view.channel_time_range(channel)
    ts = [BY_HASH[x]["timestamp"] for x in everything]
    assert ts == sorted(ts, reverse=True)
    a, b = ts[len(ts) // 3], ts[2 * len(ts) // 3]
    window = view.channel_time_range(channel, b, a)
    window_ts = [BY_HASH[x]["timestamp"] for x in window]
    assert window == [x for x, t in zip(everything, ts, strict=False) if b <= t < a]
    assert b in window_ts  # start is inclusive
    assert a not in window_ts  # end is exclusive
    assert view.channel_time_range(channel, b, a, 3) == window[:3]  # limit keeps the newest
    assert view.channel_time_range(channel, a, a) == []
    assert view.channel_time_range(channel, 0, 0, 1) == everything[:1]


@pytest.mark.parametrize("historic", [False, True], ids=["latest", "historic"])
@pytest.mark.parametrize("channel", SPELLINGS)
def test_channel_state(channel, historic, view, oracle):
    got = view.channel_state(channel, historic)
    want = oracle.channel_state(channel, historic)
    assert Counter(got) == Counter(want)


@pytest.mark.parametrize("historic", [False, True], ids=["latest", "historic"])
@pytest.mark.parametrize("channel", CHANNELS)
def test_channel_state_parts_in_documented_order(channel, historic, view, oracle):
    """Topic part first (newest first), then join/leave, then post/info."""
    got = view.channel_state(channel, historic)
    part = {"post/topic": 0, "post/join": 1, "post/leave": 1, "post/info": 2}
    parts = [part[BY_HASH[x]["type"]] for x in got]
    assert parts == sorted(parts)
    topics = [x for x in got if BY_HASH[x]["type"] == "post/topic"]
    want_topics = [m["hash"] for m in newest_first(oracle.in_channel(channel, {"post/topic"}))]
    assert topics == (want_topics if historic else want_topics[:1])


@pytest.mark.parametrize("channel", SPELLINGS)
def test_topic_and_members(channel, view, oracle):
    assert view.topic(channel) == oracle.topic(channel)
    assert view.members(channel) == oracle.members(channel)


def test_channel_list(view, oracle):
    assert view.channel_list() == oracle.channel_list() == CHANNELS
    assert CHANNELS == ["dev-talk", "general", "news", "news!2024", "ünïcode-☕"]
    for offset in range(7):
        for limit in range(7):
            assert view.channel_list(offset, limit) == CHANNELS[offset : offset + limit if limit else None]


@pytest.mark.parametrize("user", list(USER))
def test_name(user, view, oracle, store):
    pk = USER[user]
    assert view.name(pk) == oracle.name(pk)
    assert store.name(bytes.fromhex(pk)) == oracle.name(pk)


@pytest.mark.parametrize("user", list(USER))
def test_author_posts(user, view, oracle):
    pk = USER[user]
    assert view.author_posts(pk) == oracle.author_posts(pk)
    for code in TYPE_CODE.values():
        assert view.author_posts(pk, code) == oracle.author_posts(pk, code)
    assert sorted(view.author_posts(pk)) == sorted(x for c in TYPE_CODE.values() for x in view.author_posts(pk, c))


def test_get_every_hash(store, oracle):
    for m, buf in zip(META, BUFS, strict=False):
        want = buf if m["hash"] in oracle.stored else None
        assert store.get(m["hash"]) == want, m["idx"]
        assert store.get(bytes.fromhex(m["hash"])) == want, m["idx"]
    assert len(oracle.stored) == len(META) - SUMMARY["deletedPosts"]
    assert store.get_many([m["hash"] for m in META]) == [
        buf if m["hash"] in oracle.stored else None for m, buf in zip(META, BUFS, strict=False)
    ]


def test_is_deleted_of_every_target(store, oracle):
    targets = {t for m in META if m["type"] == "post/delete" for t in m["deletes"]}
    assert len(targets) == SUMMARY["deletedPosts"]
    got = {t: store.is_deleted(t) for t in targets}
    want = {t: oracle.is_deleted(t) for t in targets}
    assert got == want
    # every target is gone; only the target of the deleted delete is no longer "deleted"
    assert all(store.get(t) is None for t in targets)
    assert {t for t, d in got.items() if not d} == {the("delete-to-be-deleted")["deletes"][0]}
    # nothing stored is deleted
    assert not any(store.is_deleted(x) for x in oracle.stored)


# --------------------------------------------------------------------------
# ingest paths: batch == one by one, and idempotence
# --------------------------------------------------------------------------
def test_ingest_many_in_chunks_matches_one_by_one(built, tmp_path):
    with Store(tmp_path / "batched.ldb", now=lambda: NOW) as batched:
        results = []
        for i in range(0, len(BUFS), 250):
            results += batched.ingest_many(BUFS[i : i + 250])
        assert [r.ok for r in results] == [True] * len(BUFS), [(r.index, r.error) for r in results if not r.ok]
        assert [r.hash.hex() for r in results] == [m["hash"] for m in META]
        assert all(r.new for r in results)
        assert list(batched.items()) == list(built.store.items())


def test_ingest_many_in_one_batch_matches_one_by_one(built, tmp_path):
    with Store(tmp_path / "one-batch.ldb", now=lambda: NOW) as batched:
        assert all(r.ok for r in batched.ingest_many(BUFS))
        assert list(batched.items()) == list(built.store.items())


def resurrectable(oracle: Oracle) -> set[str]:
    """Posts neither stored nor deleted after the whole fixture: the targets of a
    delete that was itself deleted (their tombstones are forgotten)."""
    return {m["hash"] for m in META if m["hash"] not in oracle.stored and not oracle.is_deleted(m["hash"])}


def test_reingesting_every_post_changes_nothing(built, oracle, tmp_path):
    """Every stored post is a no-op, every deleted post is refused; the database
    stays byte-identical.  (The one target of the deleted delete is not
    re-offered here: see the next test.)"""
    back = resurrectable(oracle)
    assert back == {the("delete-to-be-deleted")["deletes"][0]}
    with Store(tmp_path / "again.ldb", now=lambda: NOW) as again:
        for buf in BUFS:
            again.ingest(buf)
        before = list(again.items())
        assert before == list(built.store.items())
        for m, buf in zip(META, BUFS, strict=False):
            if m["hash"] in back:
                continue
            if m["hash"] in oracle.stored:
                assert again.ingest(buf).hex() == m["hash"]
            else:
                with pytest.raises(DeletedPostError):
                    again.ingest(buf)
        assert list(again.items()) == before
        results = again.ingest_many([buf for m, buf in zip(META, BUFS, strict=False) if m["hash"] not in back])
        offered = [m for m in META if m["hash"] not in back]
        assert [r.ok for r in results] == [m["hash"] in oracle.stored for m in offered]
        assert all(isinstance(r.error, DeletedPostError) for r in results if not r.ok)
        assert not any(r.new for r in results)
        assert list(again.items()) == before


def test_reingesting_target_of_deleted_delete_stores_it_again(built, tmp_path):
    """Deleting a delete forgets the tombstones it made (is_deleted is False), so
    nothing refuses its target any more: offered again, it is stored again, as
    if it arrived for the first time after the whole fixture."""
    target = the("delete-to-be-deleted")["deletes"][0]
    buf = BUFS[BY_HASH[target]["idx"]]
    with Store(tmp_path / "again.ldb", now=lambda: NOW) as again:
        again.ingest_many(BUFS)
        assert again.get(target) is None and not again.is_deleted(target)
        assert again.ingest(buf).hex() == target
        assert again.get(target) == buf
        assert target in hexes(again.channel_time_range(BY_HASH[target]["channel"]))
        with Store(tmp_path / "fresh.ldb", now=lambda: NOW) as fresh:
            o = Oracle()
            for m in META:
                o.ingest(m)
            assert o.ingest(BY_HASH[target]) == "stored"
            for ch in SPELLINGS:
                assert hexes(again.channel_time_range(ch)) == o.channel_time_range(ch)
            fresh.ingest_many(BUFS + [buf])
            assert list(again.items()) == list(fresh.items())


# --------------------------------------------------------------------------
# the tagged edge cases
# --------------------------------------------------------------------------
def test_case_variant_channels_are_one_channel(store, view, oracle):
    lower = tagged("case-variant")
    assert {m["channel"] for m in lower} == {"dev-talk"}
    upper = [m for m in META if m.get("channel") == "Dev-Talk"]
    assert upper
    assert "Dev-Talk" not in store.channel_list()
    assert store.channel_list().count("dev-talk") == 1
    listing = view.channel_time_range("Dev-Talk")
    assert listing == oracle.channel_time_range("dev-talk")
    for spelling in ["dev-talk", "DEV-TALK", "dEv-TaLk"]:
        assert view.channel_time_range(spelling) == listing
        assert store.topic(spelling) == store.topic("Dev-Talk")
        assert store.members(spelling) == store.members("Dev-Talk")
        assert Counter(store.channel_state(spelling, True)) == Counter(store.channel_state("Dev-Talk", True))
    text = next(m for m in lower if m["type"] == "post/text")
    join = next(m for m in lower if m["type"] == "post/join")
    assert text["hash"] in listing
    assert any(m["hash"] in listing for m in upper if m["type"] == "post/text")
    assert join["hash"] in view.channel_state("Dev-Talk", True)
    assert join["hash"] in view.author_posts(join["author"], TYPE_CODE["post/join"])
    # the upper-case unicode spelling is the same channel too
    assert view.channel_time_range("ÜNÏCODE-☕") == view.channel_time_range("ünïcode-☕") != []


def test_case_variant_join_counts_for_membership(built, oracle_snaps):
    join = next(m for m in tagged("case-variant") if m["type"] == "post/join")
    after = built.snaps[join["idx"] + 1]
    assert mismatches(after, oracle_snaps[join["idx"] + 1]) == []
    for spelling in ["Dev-Talk", "dev-talk"]:
        assert join["author"] in after[("members", spelling)]
        assert join["hash"] in after[("channel_state", spelling)]


def test_channel_with_bang_does_not_leak(store, view, oracle):
    news, bang = view.channel_time_range("news"), view.channel_time_range("news!2024")
    assert news == oracle.channel_time_range("news") != []
    assert bang == oracle.channel_time_range("news!2024") != []
    def texts(xs):
        return {x for x in xs if BY_HASH[x]["type"] == "post/text"}
    assert texts(news) and texts(bang) and not texts(news) & texts(bang)
    # a post/delete is in both only when it deleted something of both (a post/info of a member of both)
    for x in set(news) & set(bang):
        assert BY_HASH[x]["type"] == "post/delete"
        assert oracle.listed[x] >= {"news", "news!2024"}
    assert all(BY_HASH[x]["channel"] == "news" for x in news if BY_HASH[x]["type"] == "post/text")
    assert all(BY_HASH[x]["channel"] == "news!2024" for x in bang if BY_HASH[x]["type"] == "post/text")
    assert not set(view.channel_state("news", True)) & {
        m["hash"] for m in META if m.get("channel") == "news!2024"
    }
    assert store.topic("news") == oracle.topic("news") != store.topic("news!2024") == oracle.topic("news!2024")
    assert view.members("news") == oracle.members("news")
    assert view.members("news!2024") == oracle.members("news!2024")
    for prefix in ["news!", "new", "news!2", "news!20245"]:
        assert store.channel_time_range(prefix) == []
        assert store.channel_state(prefix, True) == []
        assert store.members(prefix) == []
        assert store.topic(prefix) == ""
    assert {"news", "news!2024"} <= set(store.channel_list())


def test_small_ts_sorts_before_13_digit(view, oracle):
    small = tagged("small-ts")
    assert {len(str(m["timestamp"])) for m in small} == {10}
    for ch in {m["channel"] for m in small if "channel" in m}:
        listing = view.channel_time_range(ch)
        assert listing == oracle.channel_time_range(ch)
        ts = [BY_HASH[x]["timestamp"] for x in listing]
        n_small = sum(t < 10**10 for t in ts)
        assert n_small >= 1
        assert all(t >= 10**12 for t in ts[: len(ts) - n_small])  # 13-digit ones first (newer)
        assert all(t < 10**10 for t in ts[len(ts) - n_small :])  # 10-digit ones last (older)
        assert ts == sorted(ts, reverse=True)
        assert view.channel_time_range(ch, 0, 10**10) == listing[len(ts) - n_small :]
        assert view.channel_time_range(ch, 10**10) == listing[: len(ts) - n_small]
    # the ones still stored are listed
    for m in small:
        if m["type"] == "post/text" and m["hash"] in oracle.stored:
            assert m["hash"] in view.channel_time_range(m["channel"], 0, 10**10)
    # and author_posts orders them numerically too
    for pk in {m["author"] for m in small}:
        ts = [BY_HASH[x]["timestamp"] for x in view.author_posts(pk)]
        assert ts == sorted(ts, reverse=True) and ts[-1] < 10**10


def test_delete_small_ts(built, oracle):
    delete = the("delete-small-ts")
    (target,) = delete["deletes"]
    assert "small-ts" in BY_HASH[target]["tags"]
    ch = BY_HASH[target]["channel"]
    before, after = built.snaps[delete["idx"]], built.snaps[delete["idx"] + 1]
    assert target in before[("channel_time_range", ch)]
    assert target not in after[("channel_time_range", ch)]
    assert delete["hash"] in after[("channel_time_range", ch)]
    assert after[("get", target)] is None and after[("is_deleted", target)] is True
    # a post/delete with a 10-digit timestamp sorts among the old posts
    small_delete = next(m for m in tagged("small-ts") if m["type"] == "post/delete")
    listed = oracle.listed[small_delete["hash"]]
    assert listed
    for ch in listed:
        listing = StoreView(built.store).channel_time_range(ch, 0, 10**10)
        assert small_delete["hash"] in listing


def test_dup_ts_ordering(view, oracle):
    groups = defaultdict(list)
    for m in tagged("dup-ts"):
        groups[(m["channel"].casefold(), m["timestamp"])].append(m)
    assert sorted(len(g) for g in groups.values()) == [2, 3]
    for (ch, ts), posts in groups.items():
        want = [m["hash"] for m in sorted(posts, key=lambda m: bytes.fromhex(m["hash"]), reverse=True)]
        # equal timestamps: higher hash first, whatever the arrival order
        assert view.channel_time_range(ch, ts, ts + 1) == want
        listing = view.channel_time_range(ch)
        assert [x for x in listing if x in want] == want
        assert view.channel_time_range(ch, ts, ts + 1, 1) == want[:1]
        assert view.channel_time_range(ch, 0, ts) == oracle.channel_time_range(ch, 0, ts)
        assert not set(view.channel_time_range(ch, 0, ts)) & set(want)  # end is exclusive
    # the same rule for author_posts: the three dup-ts posts share an author
    (triple,) = [g for g in groups.values() if len(g) == 3]
    pk = triple[0]["author"]
    listing = [x for x in view.author_posts(pk) if BY_HASH[x]["timestamp"] == triple[0]["timestamp"]]
    assert listing == sorted((m["hash"] for m in triple), reverse=True)


def test_delete_latest_info_rederives_name(built, oracle_snaps):
    delete = the("delete-latest-info")
    (target,) = delete["deletes"]
    pk = delete["author"]
    n = delete["idx"]
    before, after = built.snaps[n], built.snaps[n + 1]
    assert before[("name", pk)] == BY_HASH[target]["name"]
    earlier = [m for m in META[:n] if m["type"] == "post/info" and m["author"] == pk and m["hash"] != target]
    previous = latest(earlier)
    assert previous["name"] != BY_HASH[target]["name"]
    assert after[("name", pk)] == previous["name"] == oracle_snaps[n + 1][("name", pk)]
    assert after[("get", target)] is None and after[("is_deleted", target)] is True
    assert target not in after[("author_posts", pk)]
    # the member's post/info in channel state falls back to the previous one
    for ch in CHANNELS:
        if target in before[("channel_state", ch)]:
            assert previous["hash"] in after[("channel_state", ch)]
            assert target not in after[("channel_state", ch, "historic")]
    # the delete is listed under the channels its author was a member of
    member_of = [ch for ch in CHANNELS if pk in before[("members", ch)]]
    assert member_of
    for ch in CHANNELS:
        assert (delete["hash"] in after[("channel_time_range", ch)]) == (ch in member_of)


def test_delete_first_info_keeps_name(built):
    delete = the("delete-first-info")
    (target,) = delete["deletes"]
    pk, n = delete["author"], delete["idx"]
    before, after = built.snaps[n], built.snaps[n + 1]
    assert before[("name", pk)] == after[("name", pk)] != BY_HASH[target]["name"]
    assert after[("get", target)] is None
    assert target not in after[("author_posts", pk, TYPE_CODE["post/info"])]
    member_of = [ch for ch in CHANNELS if pk in before[("members", ch)]]
    for ch in CHANNELS:
        assert (delete["hash"] in after[("channel_time_range", ch)]) == (ch in member_of)


def test_delete_all_remaining_infos_clears_name(built, oracle_snaps):
    delete = the("delete-all-remaining-infos")
    pk, n = delete["author"], delete["idx"]
    before, after = built.snaps[n], built.snaps[n + 1]
    infos_before = before[("author_posts", pk, TYPE_CODE["post/info"])]
    assert infos_before and set(infos_before) <= set(delete["deletes"])
    assert before[("name", pk)] is not None
    assert after[("name", pk)] is None
    assert oracle_snaps[n + 1][("name", pk)] is None
    assert after[("author_posts", pk, TYPE_CODE["post/info"])] == []
    for ch in CHANNELS:
        historic = after[("channel_state", ch, "historic")]
        assert not set(historic) & set(delete["deletes"])


def test_delete_info_listed_under_member_channels(built, oracle):
    for delete in tagged("delete-info"):
        n, pk = delete["idx"], delete["author"]
        member_of = {ch for ch in CHANNELS if pk in built.snaps[n][("members", ch)]}
        assert oracle.listed[delete["hash"]] == member_of
        for ch in CHANNELS:
            assert (delete["hash"] in built.snaps[n + 1][("channel_time_range", ch)]) == (ch in member_of)


def test_delete_topic_reverts_topic(built, oracle_snaps):
    delete = the("delete-topic")
    (target,) = delete["deletes"]
    ch, n = BY_HASH[target]["channel"], delete["idx"]
    before, after = built.snaps[n], built.snaps[n + 1]
    assert before[("topic", ch)] == BY_HASH[target]["topic"]
    previous = latest(
        m for m in META[:n] if m["type"] == "post/topic" and m.get("channel") == ch and m["hash"] != target
    )
    assert after[("topic", ch)] == previous["topic"] == oracle_snaps[n + 1][("topic", ch)]
    assert previous["hash"] in after[("channel_state", ch)]
    assert target not in after[("channel_state", ch, "historic")]
    assert delete["hash"] in after[("channel_time_range", ch)]


def test_empty_topic_is_empty_string(built):
    post = the("empty-topic")
    ch, n = post["channel"], post["idx"]
    assert post["topic"] == ""
    assert built.snaps[n][("topic", ch)] != ""
    assert built.snaps[n + 1][("topic", ch)] == ""
    assert post["hash"] in built.snaps[n + 1][("channel_state", ch)]  # still the latest topic post


def test_delete_only_membership_record(built, oracle_snaps):
    delete = the("delete-only-membership-record")
    (target,) = delete["deletes"]
    join = BY_HASH[target]
    ch, pk, n = join["channel"], join["author"], delete["idx"]
    assert join["type"] == "post/join" and "join-to-delete" in join["tags"]
    before, after = built.snaps[n], built.snaps[n + 1]
    assert mismatches(after, oracle_snaps[n + 1]) == []
    assert target in before[("channel_state", ch)]
    assert after[("get", target)] is None and after[("is_deleted", target)] is True
    # the join was the author's only join/leave there: none is left in channel state
    historic = after[("channel_state", ch, "historic")]
    assert not [x for x in historic if BY_HASH[x]["author"] == pk and BY_HASH[x]["type"] in JOIN_LEAVE]
    # the text written after the join still makes them a member (an implicit join)
    text_after = the("text-after-join")
    assert text_after["author"] == pk and text_after["hash"] in after[("channel_time_range", ch)]
    assert pk in after[("members", ch)]
    assert delete["hash"] in after[("channel_time_range", ch)]


def test_delete_membership_with_prior(built, oracle_snaps):
    delete = the("delete-membership-with-prior")
    (target,) = delete["deletes"]
    rejoin = BY_HASH[target]
    leave = the("leave")
    ch, pk, n = rejoin["channel"], rejoin["author"], delete["idx"]
    assert leave["author"] == pk and leave["channel"] == ch
    before, after = built.snaps[n], built.snaps[n + 1]
    assert pk in before[("members", ch)] and target in before[("channel_state", ch)]
    assert pk not in after[("members", ch)] == oracle_snaps[n + 1][("members", ch)]
    assert leave["hash"] in after[("channel_state", ch)]  # the prior leave is their latest again
    assert target not in after[("channel_state", ch, "historic")]
    assert delete["hash"] in after[("channel_time_range", ch)]


def test_delete_leave_restores_membership(built, oracle_snaps):
    delete = the("delete-leave")
    (target,) = delete["deletes"]
    leave = BY_HASH[target]
    ch, pk, n = leave["channel"], leave["author"], delete["idx"]
    before, after = built.snaps[n], built.snaps[n + 1]
    assert pk not in before[("members", ch)]
    assert pk in after[("members", ch)]  # their earlier join/text there is their latest again
    assert after[("members", ch)] == oracle_snaps[n + 1][("members", ch)]
    assert target not in after[("channel_state", ch, "historic")]
    assert sorted(after[("channel_state", ch)]) == oracle_snaps[n + 1][("channel_state", ch)]


def test_delete_of_delete(built, store, view, oracle):
    first = the("delete-to-be-deleted")
    second = the("delete-of-delete")
    assert second["deletes"] == [first["hash"]] and first["deleted_by"] == second["hash"]
    (text,) = first["deletes"]
    ch = BY_HASH[text]["channel"]
    mid = built.snaps[first["idx"] + 1]  # after the first delete
    assert mid[("get", text)] is None and mid[("is_deleted", text)] is True
    assert first["hash"] in mid[("channel_time_range", ch)]
    after = built.snaps[second["idx"] + 1]
    # the first delete is gone, with its listing; its target stays gone, its tombstone forgotten
    assert after[("get", first["hash"])] is None and after[("is_deleted", first["hash"])] is True
    assert after[("get", text)] is None and after[("is_deleted", text)] is False
    assert first["hash"] not in after[("channel_time_range", ch)]
    assert text not in after[("channel_time_range", ch)]
    # the second delete is listed where the first one was
    assert second["hash"] in after[("channel_time_range", ch)]
    assert oracle.listed[second["hash"]] == oracle.listed[first["hash"]] == {ch.casefold()}
    for c in CHANNELS:
        assert (second["hash"] in after[("channel_time_range", c)]) == (c == ch.casefold())
    assert first["hash"] not in after[("author_posts", first["author"])]
    # and so at the end
    assert store.get(text) is None and store.get(first["hash"]) is None
    assert not store.is_deleted(text) and store.is_deleted(first["hash"])
    assert second["hash"] in view.channel_time_range(ch)
    assert first["hash"] not in view.channel_time_range(ch)


def test_multi_delete(built, oracle):
    for delete in tagged("multi-delete"):
        assert len(delete["deletes"]) > 1
        after = built.snaps.get(delete["idx"] + 1) or built.snaps[FINAL]
        channels = set()
        for t in delete["deletes"]:
            assert after[("get", t)] is None
            assert after[("is_deleted", t)] is True
            channels.add(BY_HASH[t]["channel"].casefold())
        assert oracle.listed[delete["hash"]] == channels
        for ch in CHANNELS:
            assert (delete["hash"] in built.snaps[FINAL][("channel_time_range", ch)]) == (ch in channels)


def test_implicit_join_makes_member(built, oracle_snaps):
    for m in tagged("implicit-join"):
        # (cable.js tags these as implicit joins because it keeps case-variant
        # channels apart; case-insensitively most of these authors were members already)
        assert m["author"] in built.snaps[m["idx"] + 1][("members", m["channel"])]
    # and at the end the store agrees with the oracle for every channel
    for ch in SPELLINGS:
        assert built.snaps[FINAL][("members", ch)] == oracle_snaps[FINAL][("members", ch)]


def test_name_change(built):
    for m in tagged("name-change"):
        assert built.snaps[m["idx"] + 1][("name", m["author"])] == m["name"]


def test_second_topic_replaces_first(built):
    m = the("second-topic")
    assert built.snaps[m["idx"] + 1][("topic", m["channel"])] == m["topic"]
    assert built.snaps[m["idx"] + 1][("channel_state", m["channel"])].count(m["hash"]) == 1


def test_unknown_channel_is_empty(store):
    for ch in ["random", "nope", ""]:
        assert store.channel_time_range(ch) == []
        assert store.channel_state(ch) == [] and store.channel_state(ch, historic=True) == []
        assert store.topic(ch) == ""
        assert store.members(ch) == []


def test_small_ts_join_does_not_beat_newer_leave(built, oracle_snaps):
    """A post/join stamped 9999999999 (10 digits) arriving after a post/leave
    stamped 17000...: as strings "9999999999" > "1700...", as integers the
    leave is newer, so the user is still not a member."""
    (join,) = [m for m in META if m["type"] == "post/join" and m["timestamp"] < 10**12]
    ch, pk, n = join["channel"], join["author"], join["idx"]
    mine = [m for m in META[:n] if m["author"] == pk and m.get("channel", "").casefold() == ch.casefold()]
    leave = latest(mine)
    assert leave["type"] == "post/leave" and str(join["timestamp"]) > str(leave["timestamp"])
    after = built.snaps[n + 1]
    assert pk not in after[("members", ch)] == oracle_snaps[n + 1][("members", ch)]
    assert leave["hash"] in after[("channel_state", ch)]
    assert join["hash"] not in after[("channel_state", ch)]
    assert join["hash"] in after[("channel_state", ch, "historic")]


def test_latest_is_by_timestamp_not_arrival(built, oracle_snaps):
    """A post/leave that arrives after a newer post/text of the same author in
    the same channel does not end the membership; once that text is deleted,
    the leave is the latest and it does."""
    found = 0
    for leave in (m for m in META if m["type"] == "post/leave"):
        ch = leave["channel"].casefold()
        newer = [
            m
            for m in META[: leave["idx"]]
            if m["author"] == leave["author"] and m.get("channel", "").casefold() == ch and mono(m) > mono(leave)
        ]
        if not newer or leave["timestamp"] < 10**12:
            continue
        found += 1
        pk, n = leave["author"], leave["idx"]
        assert pk in built.snaps[n + 1][("members", ch)]
        assert leave["hash"] in built.snaps[n + 1][("channel_state", ch, "historic")]
        for m in newer:
            if "deleted_by" in m:
                d = BY_HASH[m["deleted_by"]]["idx"]
                assert built.snaps[d + 1][("members", ch)] == oracle_snaps[d + 1][("members", ch)]
    assert found >= 1
