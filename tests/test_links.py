"""The ``!links`` view: links, reverse links and channel heads (spec 5.1.2), live and rebuilt."""

from __future__ import annotations

import random
import shutil

import pytest

from cablestore import DELETE, JOIN, TEXT, Store, decode_post, post_hash
from cablestore.authoring.workload import generate, read_posts
from cablestore.keyspace.keys import canonical_channel
from cablestore.rebuild import check
from cablestore.views.links import LINKABLE

from .conftest import NOW, dump, post

FIXTURE = "tests/data/cablejs-0.2.1-s7-2000/posts.bin"


def oracle(store: Store):
    """Heads and reverse links computed from the stored posts by brute force."""
    posts = {k[len(b"!post!") :]: decode_post(v) for k, v in store.items(b"!post!")}
    linked_by: dict[bytes, set[bytes]] = {}
    for h, p in posts.items():
        for target in p.links:
            linked_by.setdefault(target, set()).add(h)
    heads: dict[str, set[bytes]] = {}
    for h, p in posts.items():
        if p.post_type in LINKABLE and h not in linked_by:
            heads.setdefault(canonical_channel(p.channel), set()).add(h)
    return heads, linked_by


def assert_matches_oracle(store: Store) -> None:
    heads, linked_by = oracle(store)
    for channel in set(heads) | set(store.channel_list()):
        assert store.heads(channel) == sorted(heads.get(channel, ())), channel
    for target, linkers in linked_by.items():
        assert set(store.reverse_links(target)) == linkers
    assert sum(1 for k, _ in store.items(b"!rev!") if len(k) == LINKER_KEY) == sum(len(v) for v in linked_by.values())


LINKER_KEY = len(b"!rev!") + 32 + 1 + 32  # !rev!<target>l<hash>


def _links_dump(store):
    """Every entry of the links view: the heads and the linker entries."""
    return [(k, v) for k, v in store.items(b"!links!")] + [(k, v) for k, v in store.items(b"!rev!") if len(k) == LINKER_KEY]


def test_fixture_and_workload_heads_match_the_oracle(tmp_path):
    bufs = read_posts(FIXTURE) + generate(seed=21, posts=600)
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest_many(bufs)
        assert any(store.is_deleted(post_hash(b)) for b in bufs)  # deletes took part
        assert_matches_oracle(store)
        for buf in bufs[:50]:
            h = post_hash(buf)
            if h in store:
                assert store.links(h) == list(decode_post(buf).links)


def test_heads_are_a_function_of_the_stored_set_not_of_arrival_order(tmp_path):
    bufs = read_posts(FIXTURE)[:800]
    shuffled = bufs[:]
    random.Random(4).shuffle(shuffled)
    with Store(tmp_path / "a", now=lambda: NOW) as a, Store(tmp_path / "b", now=lambda: NOW) as b:
        a.ingest_many(bufs)
        for buf in shuffled:  # one WriteBatch each, in another order (a delete may come first)
            b.ingest_many([buf])
        assert sorted(a.items(b"!post!")) == sorted(b.items(b"!post!"))
        assert _links_dump(a) == _links_dump(b)
        assert b.check().consistent


def test_fork_then_merge(store, alice, bob):
    root = post(alice, JOIN, 1000, channel="dev")
    store.ingest(root)
    a = post(alice, TEXT, 2000, [post_hash(root)], channel="dev", text="from alice")
    b = post(bob, TEXT, 2001, [post_hash(root)], channel="Dev", text="from bob")  # same channel, other case
    store.ingest_many([a, b])
    assert store.heads("dev") == sorted([post_hash(a), post_hash(b)])
    assert store.reverse_links(post_hash(root)) == sorted([post_hash(a), post_hash(b)])
    merge = post(alice, TEXT, 3000, [post_hash(a), post_hash(b)], channel="dev", text="merge")
    store.ingest(merge)
    assert store.heads("DEV") == [post_hash(merge)]
    assert store.links(post_hash(merge)) == [post_hash(a), post_hash(b)]
    assert store.check().consistent


def test_deleting_a_head_brings_back_what_it_alone_linked(store, alice, bob):
    root = post(alice, JOIN, 1000, channel="dev")
    a = post(alice, TEXT, 2000, [post_hash(root)], channel="dev", text="a")
    b = post(bob, TEXT, 2001, [post_hash(root)], channel="dev", text="b")
    top = post(alice, TEXT, 3000, [post_hash(a)], channel="dev", text="top")
    store.ingest_many([root, a, b, top])
    assert store.heads("dev") == sorted([post_hash(b), post_hash(top)])
    store.ingest(post(alice, DELETE, 4000, hashes=[post_hash(top)]))
    assert store.heads("dev") == sorted([post_hash(a), post_hash(b)])  # a is a head again
    assert store.reverse_links(post_hash(a)) == []
    store.ingest(post(bob, DELETE, 4001, hashes=[post_hash(b)]))
    assert store.heads("dev") == [post_hash(a)]  # root is still linked by a
    assert store.delete(post_hash(a))  # a local discard counts the same
    assert store.heads("dev") == [post_hash(root)]
    assert store.check().consistent
    assert_matches_oracle(store)


def test_a_remaining_linker_keeps_a_post_off_the_heads_without_its_post_being_read(tmp_path, alice, bob, monkeypatch):
    """Deleting one linker of ``root``: the other, found by the reverse seek, keeps ``root`` off the heads,
    and the txn does not read the other linker's post to learn that (its ``latest`` is empty whoever it is)."""
    from cablestore.store.write import txn as txn_mod

    root = post(alice, JOIN, 1000, channel="dev")
    a = post(alice, TEXT, 2000, [post_hash(root)], channel="dev", text="a")
    b = post(bob, TEXT, 2001, [post_hash(root)], channel="dev", text="b")
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest_many([root, a, b])
        store.writer.forget_caches()  # the remaining linker is found in the DB, as after a reopen
        read = []
        real_get = txn_mod.Txn.get

        def get(self, key):
            read.append(key)
            return real_get(self, key)

        monkeypatch.setattr(txn_mod.Txn, "get", get)
        store.ingest(post(alice, DELETE, 3000, hashes=[post_hash(a)]))
        monkeypatch.undo()
        assert b"!post!" + post_hash(b) not in read
        assert store.heads("dev") == [post_hash(b)]
        assert store.reverse_links(post_hash(root)) == [post_hash(b)]
        assert store.check().consistent
        assert_matches_oracle(store)


def test_a_link_to_an_unknown_hash_counts(store, alice, bob):
    missing = post(bob, TEXT, 1000, channel="dev", text="arrives late")
    linker = post(alice, TEXT, 2000, [post_hash(missing)], channel="dev", text="replying")
    store.ingest(linker)
    assert store.reverse_links(post_hash(missing)) == [post_hash(linker)]
    assert store.heads("dev") == [post_hash(linker)]
    store.ingest(missing)  # linked before it arrived: never a head
    assert store.heads("dev") == [post_hash(linker)]
    assert store.check().consistent
    store.ingest(post(alice, DELETE, 3000, hashes=[post_hash(linker)]))  # the linker is gone
    assert store.heads("dev") == [post_hash(missing)]
    assert store.reverse_links(post_hash(missing)) == []
    assert store.check().consistent


@pytest.mark.parametrize("after", [0, 2_000])  # the link filter built at the first question, and not yet built
def test_a_post_linked_before_a_reopen_is_no_head_when_it_arrives(tmp_path, alice, bob, monkeypatch, after):
    """The in-memory link filter (cablestore.store.write.hashfilter) is built from the stored linkers, not from what a store saw."""
    from cablestore.store.write import hashfilter

    monkeypatch.setattr(hashfilter, "LINK_FILTER_AFTER", after)
    missing = post(bob, TEXT, 1000, channel="dev", text="arrives late")
    linker = post(alice, TEXT, 2000, [post_hash(missing)], channel="dev", text="replying")
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest(linker)
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest(missing)
        assert (store.writer._link_filter._filter is None) == (after > 0)  # a write or two never pays the scan
        assert store.heads("dev") == [post_hash(linker)]
        assert_matches_oracle(store)


@pytest.mark.parametrize("repair", ["Store.check", "rebuild.check"])  # the second: what a control client of `serve` runs
def test_a_repair_that_restores_a_linker_is_seen_by_later_ingests(tmp_path, alice, bob, repair, monkeypatch):
    """A repair writes linker entries under the store's link filter: the store drops the filter, so it is no false "unlinked"."""
    from cablestore.store.write import hashfilter

    monkeypatch.setattr(hashfilter, "LINK_FILTER_AFTER", 0)  # built at the first question
    target = post(alice, TEXT, 1000, channel="dev", text="target")
    linker = post(bob, TEXT, 2000, [post_hash(target)], channel="dev", text="reply")
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest_many([target, linker])
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.db.delete(b"!rev!" + post_hash(target) + b"l" + post_hash(linker))  # damage: the linker entry is lost
        store.ingest(post(alice, JOIN, 1500, channel="other"))  # the first write: the filter is built without it
        assert store.writer._link_filter._filter is not None
        assert (store.check(fix=True) if repair == "Store.check" else check(store, fix=True)).consistent
        assert store.delete(post_hash(target))
        store.ingest(target)  # back again: still linked by the reply, so no head
        assert store.heads("dev") == [post_hash(linker)]
        assert store.check().consistent
        assert_matches_oracle(store)


def test_non_linkable_posts_link_but_are_never_heads(store, alice):
    from cablestore import INFO

    text = post(alice, TEXT, 1000, channel="dev", text="t")
    store.ingest(text)
    info = post(alice, INFO, 2000, [post_hash(text)], info=[("name", "alice")])
    store.ingest(info)  # any known post that links counts (spec 5.1.2.1 criterion 3)
    assert store.heads("dev") == []
    assert store.reverse_links(post_hash(text)) == [post_hash(info)]
    assert store.purge_author(alice.public_key) == 2
    assert store.heads("dev") == [] and _links_dump(store) == []


def test_same_batch_link_and_delete(store, alice):
    """Within one WriteBatch a head is written, linked, then its linker deleted."""
    a = post(alice, TEXT, 1000, channel="dev", text="a")
    b = post(alice, TEXT, 2000, [post_hash(a)], channel="dev", text="b")
    d = post(alice, DELETE, 3000, hashes=[post_hash(b)])
    store.ingest_many([a, b, d])
    assert store.heads("dev") == [post_hash(a)]
    assert store.check().consistent


@pytest.fixture(scope="module")
def linked_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("links") / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(read_posts(FIXTURE)[:600])
        assert s.check().consistent
    return path


def _copy(src, tmp_path):
    path = tmp_path / "store"
    shutil.copytree(src, path)
    return Store(path, now=lambda: NOW)


def test_rebuild_reproduces_the_links_view_byte_for_byte(linked_store, tmp_path):
    with _copy(linked_store, tmp_path) as s:
        original = _links_dump(s)
        assert any(k.startswith(b"!links!h") for k, _ in original)
        for key, _ in original:
            s.db.delete(key)
        report = check(s, partitions=4)
        assert report.missing == dict(original)
        assert not report.extra and not report.different and not report.faults
        assert {k[:5] for k in report.missing} == {b"!link", b"!rev!"}
        assert check(s, fix=True, partitions=4).consistent
        assert _links_dump(s) == original


def _damage(s):
    """A head removed, a head invented, a linker entry's value changed, a reverse link invented."""
    heads = [k for k, _ in s.items(b"!links!h")]
    changed = next(k for k, _ in s.items(b"!rev!") if len(k) == LINKER_KEY)
    removed, invented = heads[0], heads[1][:-1] + bytes([heads[1][-1] ^ 1])
    linker = b"!rev!" + bytes(32) + b"l" + bytes(32)
    s.db.delete(removed)
    s.db.put(invented, b"")
    s.db.put(changed, b"x")
    s.db.put(linker, b"")
    return removed, invented, changed, linker


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_rebuild_finds_damage_to_the_links_view(linked_store, tmp_path, engine, request):
    if engine == "spark":
        request.getfixturevalue("spark_session")
    with _copy(linked_store, tmp_path) as s:
        original = dump(s)
        removed, invented, changed, linker = _damage(s)
        report = check(s, engine=engine, partitions=2)
        assert set(report.missing) == {removed}
        assert set(report.extra) == {invented, linker}
        assert set(report.different) == {changed}
        assert report.to_dict()["views"]["links"]["missing"] == 1
        if engine == "local":  # repair is engine-independent; one Spark job keeps the suite short
            assert check(s, fix=True, engine=engine, partitions=2).consistent
            assert dump(s) == original


def test_causal_sort_puts_links_before_timestamps(store, alice, bob):
    from cablestore.store.read.links import causal_sort

    root = post(alice, TEXT, 5000, channel="dev", text="root")
    skewed = post(bob, TEXT, 1000, [post_hash(root)], channel="dev", text="bob's clock is slow")
    side = post(alice, TEXT, 3000, channel="dev", text="unrelated")
    late = post(alice, TEXT, 2000, [post_hash(skewed), post_hash(side)], channel="dev", text="merge")
    store.ingest_many([root, skewed, side, late])
    order = causal_sort(store, [post_hash(b) for b in (late, side, skewed, root)] + [bytes(32)])
    assert order == [post_hash(side), post_hash(root), post_hash(skewed), post_hash(late)]
    by_time = sorted([root, skewed, side, late], key=lambda b: decode_post(b).timestamp)
    assert [post_hash(b) for b in by_time] != order  # timestamps alone would put bob's reply first
