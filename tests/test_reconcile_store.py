"""The range sums a store keeps for set reconciliation (views/recon.py, cablestore/store/read/ranges.py).

Every sum is compared with the one computed from the channel's ``!chat``
rows themselves, through ingest, deletes, local removals, relisting and
purges; ``check`` (both engines) must find a damaged, missing or extra
row, and a repair and a reindex must mend it.
"""

from __future__ import annotations

import random

import pytest

from cablestore import DELETE, TEXT, Store, post_hash
from cablestore.errors import CorruptRecordError, QueryError
from cablestore.keyspace.keys import CHAT, RECON, channel_key
from cablestore.rebuild.reindex import reindex
from cablestore.rebuild.verify import check
from cablestore.views import recon
from cablestore.wire.reconcile import Initiator, Items, fingerprint, respond

from .conftest import keypair, post

FAR = 1 << 41  # timestamps up to ~70 years: every granularity of bucket is used
NOW_FAR = FAR + 10**9
CHANNELS = ("general", "dev", "Ünïcode")
NO_END = (1 << 64, b"")


def _posts(rng: random.Random, n: int) -> list[bytes]:
    """Texts spread over ~35 years, a third in dense clusters (many in one bucket, equal timestamps)."""
    authors = [keypair(f"recon-{i}") for i in range(4)]
    out = []
    for i in range(n):
        ts = rng.randrange(FAR) if i % 3 else 1_700_000_000_000 + rng.randrange(5) * 1000
        out.append(post(rng.choice(authors), TEXT, ts, channel=rng.choice(CHANNELS), text=f"t{i}"))
    return out


def _store(path, posts) -> Store:
    s = Store(path, now=lambda: NOW_FAR)
    assert all(r.ok for r in s.ingest_many(posts))
    return s


def _chat_items(store: Store, channel: str) -> list[tuple[int, bytes]]:
    prefix = CHAT + channel_key(channel)
    return [(int.from_bytes(k[-40:-32], "big"), k[-32:]) for k, _ in store.items(prefix)]


def _brute(items, lo, hi) -> tuple[int, int]:
    pad = lambda b: (b[0], b[1] + bytes(32 - len(b[1])))  # noqa: E731
    chosen = [h for ts_h in items if pad(lo) <= ts_h and (hi == NO_END or ts_h < pad(hi)) for h in [ts_h[1]]]
    return sum(int.from_bytes(h, "little") for h in chosen) % (1 << 256), len(chosen)


def _rows(store: Store) -> dict:
    return dict(store.items(RECON))


def _expected_rows(store: Store) -> dict:
    return dict(recon.rows_from_chat(k for k, _ in store.items(CHAT)))


def _bounds(rng: random.Random, items) -> list[tuple[int, bytes]]:
    """Bounds of every kind: random, on bucket edges, at items (with hash prefixes of 0-32 bytes), the ends."""
    out = [(0, b""), NO_END]
    for _ in range(40):
        out.append((rng.randrange(FAR), b""))
        shift = rng.choice(recon.SHIFTS)
        out.append(((rng.randrange(FAR) >> shift) << shift, b""))
    for ts, h in rng.sample(items, min(40, len(items))):
        out += [(ts, b""), (ts, h[: rng.randrange(1, 33)]), (ts + 1, b""), (ts, h)]
    return out


def test_a_range_sum_is_the_sum_of_the_chat_rows_in_it_for_any_bounds(tmp_path):
    rng = random.Random(7)
    with _store(tmp_path / "s", _posts(rng, 900)) as s:
        assert _rows(s) == _expected_rows(s)
        for channel in CHANNELS:
            items = _chat_items(s, channel)
            assert s.range_sum(channel) == _brute(items, (0, b""), NO_END)
            bounds = _bounds(rng, items)
            for _ in range(300):
                lo, hi = sorted(rng.sample(bounds, 2), key=lambda b: (b[0], b[1] + bytes(32 - len(b[1]))))
                assert s.range_sum(channel, lo, hi) == _brute(items, lo, hi), (channel, lo, hi)
        # The fingerprint the reconciliation sends, from the store, is the in-memory one.
        items = Items(_chat_items(s, "dev"))
        total, count = s.range_sum("dev")
        assert fingerprint(total, count) == items.fingerprint(0, len(items))


def test_a_range_sum_reads_whole_buckets_not_every_item(tmp_path):
    rng = random.Random(3)
    with _store(tmp_path / "s", _posts(rng, 1500)) as s:
        runs, lo_edge, hi_edge = recon.plan(0, True, 1 << 64)
        rows = sum(len(list(s.db.iterator(start=recon.row_key(channel_key("dev"), sh, a), stop=recon.row_key(channel_key("dev"), sh, b)))) for sh, a, b in runs)
        assert (lo_edge, hi_edge) == (0, 1 << 64) and rows < 300 < s.range_sum("dev")[1]  # the whole channel: coarse rows only
        for lo_ts in (12345, 1 << 33, (1 << 39) + 7):  # any range: at most two runs a granularity
            assert len(recon.plan(lo_ts, True, FAR - 999)[0]) <= 2 * len(recon.SHIFTS)


def test_sums_follow_deletes_removals_purges_and_relisting(tmp_path):
    rng = random.Random(11)
    alice, bob = keypair("recon-alice"), keypair("recon-bob")
    texts = [post(alice if i % 2 else bob, TEXT, 1_700_000_000_000 + i * 600_000, channel=CHANNELS[i % 3], text=str(i)) for i in range(120)]
    with _store(tmp_path / "s", texts) as s:
        hashes = [h for ch in CHANNELS for _, h in _chat_items(s, ch)]
        mine = [h for h in hashes if s.get(h)[:32] == alice.public_key]
        # A post/delete removes its targets' rows and is listed (summed) in their channels.
        assert s.ingest_many([post(alice, DELETE, 1_700_100_000_000, hashes=tuple(mine[:5]))])[0].ok
        assert _rows(s) == _expected_rows(s)
        s.delete(rng.choice(hashes))  # a local removal
        assert _rows(s) == _expected_rows(s)
        s.purge_author(bob.public_key)
        assert _rows(s) == _expected_rows(s)
        # A delete of a post this store never held, listed in a channel by a peer: relisted there.
        unseen = post(alice, DELETE, 1_700_200_000_000, hashes=(bytes(32),))
        s.ingest_many([unseen])
        before = s.range_sum("dev")[1]
        assert s.learn_listing("dev", [post_hash(unseen)]) == 1
        assert s.range_sum("dev")[1] == before + 1 and _rows(s) == _expected_rows(s)
        assert s.check().consistent
        for i in range(30):  # a post a batch, as from a live peer: the writer's remembered rows stay true
            s.ingest(post(alice, TEXT, 1_700_300_000_000 + i * 100_000, channel=CHANNELS[i % 2], text=f"live {i}"))
        assert _rows(s) == _expected_rows(s)
        for h in [h for ch in CHANNELS for _, h in _chat_items(s, ch)]:  # everything gone: no row left
            s.delete(h)
        assert _rows(s) == {} and s.range_sum("general") == (0, 0)


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_check_finds_a_damaged_missing_or_extra_sum_and_repair_and_reindex_mend_it(tmp_path, engine, request):
    if engine == "spark":
        request.getfixturevalue("spark_session")
    rng = random.Random(5)
    with _store(tmp_path / "s", _posts(rng, 300)) as s:
        good = _rows(s)
        keys = sorted(good)
        total, count = recon.decode(good[keys[0]])
        s.db.put(keys[0], recon.encode(total + 1, count))  # a sum off by one
        s.db.delete(keys[1])  # a bucket lost
        s.db.put(recon.row_key(channel_key("nowhere"), 20, 5), recon.encode(9, 1))  # a bucket of nothing
        damaged = next(k for k in keys[4:] if k[-9] == recon.SHIFTS[-1])  # a coarse row: a whole channel's sum reads it
        s.db.put(damaged, b"short")
        report = check(s, engine=engine, partitions=2 if engine == "spark" else 4)
        assert not report.consistent
        assert set(report.different) == {keys[0], damaged} and set(report.missing) == {keys[1]}
        assert set(report.extra) == {recon.row_key(channel_key("nowhere"), 20, 5)}
        assert report.to_dict()["views"]["recon"]
        with pytest.raises(CorruptRecordError):
            s.range_sum(_channel_of(s, damaged))
        assert check(s, fix=True, engine=engine, partitions=2 if engine == "spark" else 4).consistent
        assert _rows(s) == good
        s.db.put(keys[3], recon.encode(0, 7))
        reindex(s)
        assert _rows(s) == good and s.check().consistent


def _channel_of(store: Store, key: bytes) -> str:
    return next(ch for ch in store.channel_list() if key.startswith(RECON + channel_key(ch)))


@pytest.mark.parametrize(
    "lo, hi",
    [((-1, b""), NO_END), ((0, b""), (1 << 65, b"")), ((0, b"x" * 33), NO_END), ((0, "ab"), NO_END), ("lo", NO_END), ((0, b""), ((1 << 64), b"a"))],
)
def test_bad_bounds_are_refused_with_query_error(tmp_path, lo, hi):
    with Store(tmp_path / "s") as s, pytest.raises(QueryError):
        s.range_sum("general", lo, hi)


def _reconcile(initiator_items, responder_items) -> tuple[set, set, int, int]:
    """One reconciliation between two item sources: (have, need, rounds, bytes both ways)."""
    side = Initiator(initiator_items)
    message = side.start()
    while message is not None:
        message = side.receive(respond(responder_items, message))
    return side.have, side.need, side.rounds, side.sent + side.received


@pytest.mark.parametrize("k", [0, 1, 100])
def test_a_store_reconciles_from_its_sums_as_memory_does_reading_few_rows(tmp_path, k):
    rng = random.Random(k)
    posts = _posts(rng, 2000)
    gone = set(rng.sample(range(len(posts)), k))
    extra = [post(keypair("recon-extra"), TEXT, rng.randrange(FAR), channel="dev", text=f"x{i}") for i in range(k // 2)]
    with _store(tmp_path / "a", posts + extra) as a, _store(tmp_path / "b", [p for i, p in enumerate(posts) if i not in gone]) as b:
        theirs = _chat_items(b, "dev")
        ours = _chat_items(a, "dev")
        want_have = {h for _, h in ours} - {h for _, h in theirs}
        want_need = {h for _, h in theirs} - {h for _, h in ours}
        with a.range_items("dev") as store_items:  # the store answers
            assert len(store_items) == len(ours) and list(store_items.items) == ours
            have, need, rounds, _ = _reconcile(Items(theirs), store_items)
            assert (have, need) == (want_need, want_have)
            if k <= 1:
                assert store_items.reads < 2000 and rounds <= 3  # a few rows a round, not the channel's ~700 items
        with a.range_items("dev") as store_items:  # the store asks
            have, need, _, _ = _reconcile(store_items, Items(theirs))
            assert (have, need) == (want_have, want_need)
        with a.range_items("dev") as mine, b.range_items("dev") as other:  # both from their sums
            assert _reconcile(mine, other)[:2] == (want_have, want_need)


def test_store_items_select_every_position_and_map_bounds_back(tmp_path):
    rng = random.Random(2)
    with _store(tmp_path / "s", _posts(rng, 600)) as s, s.range_items("general") as items:
        mine = _chat_items(s, "general")
        assert [items.items[i] for i in range(len(mine))] == mine
        for _ in range(50):
            lo, hi = sorted(rng.sample(range(len(mine) + 1), 2))
            assert items.items[lo:hi] == mine[lo:hi]
            assert items.fingerprint(lo, hi) == Items(mine).fingerprint(lo, hi)
            assert items.index((mine[lo][0], mine[lo][1][:3])) <= lo
        with pytest.raises(IndexError):
            items.select(len(mine))
