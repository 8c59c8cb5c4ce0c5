"""Every key of a post is named by the post itself: a removal reads the post (no reverse entry), and heads come from the linker rows and the post."""

from __future__ import annotations

from cablestore import POST_TYPE_NAMES, Store, decode_post, views
from cablestore.authoring.workload import generate, read_posts
from cablestore.keyspace.keys import POSTS, REVERSE
from cablestore.keyspace.records import Indexed
from cablestore.wire.codec import TEXT

from .conftest import NOW, dump, post
from .moderation_helpers import cabal


def test_every_key_of_every_post_is_named_by_the_post_and_no_reverse_entry_is_kept(tmp_path):
    bufs = read_posts("tests/data/cablejs-0.2.1-s7-2000/posts.bin") + generate(seed=5, posts=800) + cabal()
    seen_types, seen_links = set(), False
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest_many(bufs)
        assert all(len(k) > len(REVERSE) + 32 for k, _ in store.items(REVERSE))  # linker rows only
        for key, blob in store.items(POSTS):
            h = key[len(POSTS) :]
            post_ = decode_post(blob)
            made = store.tombstones_made_by(h, post_.hashes) if post_.hashes else ()
            entries = views.entries(Indexed.of(blob, post_, h, made))
            assert entries and all(store.db.get(k) == v for k, v in entries)
            seen_links = seen_links or bool(post_.links)
            seen_types.add(post_.post_type)
    assert seen_types == set(POST_TYPE_NAMES) and seen_links


def test_heads_follow_linkers_and_the_post_itself_whatever_arrives_first(tmp_path, alice):
    first = post(alice, TEXT, NOW, channel="dev", text="a")
    h1 = Indexed.of(first).hash
    second = post(alice, TEXT, NOW + 1, links=[h1], channel="dev", text="b")
    h2 = Indexed.of(second).hash
    stores = []
    for name, order in (("a", [first, second]), ("b", [second, first])):
        with Store(tmp_path / name, now=lambda: NOW) as s:
            for buf in order:
                s.ingest(buf)
            assert s.heads("dev") == [h2]  # linked before it arrived: no head when it does
            stores.append(dump(s))
    assert stores[0] == stores[1]
    with Store(tmp_path / "a", now=lambda: NOW) as s:
        assert s.delete(h2)  # the removal reads the post for its keys: nothing of it stays
        assert s.heads("dev") == [h1] and not list(s.items(REVERSE))  # what it alone linked is a head again
        assert s.delete(h1) and s.heads("dev") == []
        left = dump(s)
    with Store(tmp_path / "empty", now=lambda: NOW) as s:
        assert left == dump(s)  # two removals leave nothing behind
