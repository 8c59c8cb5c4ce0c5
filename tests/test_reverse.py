"""The reverse entry rebuilds exactly the keys the views write, for every kind of post."""

from __future__ import annotations

from cablestore import POST_TYPE_NAMES, Store, decode_post, views
from cablestore.authoring.workload import generate, read_posts
from cablestore.keyspace import reverse
from cablestore.keyspace.records import Indexed

from .conftest import NOW
from .moderation_helpers import cabal


def test_reverse_keys_equal_view_entries_for_every_stored_post(tmp_path):
    bufs = read_posts("tests/data/cablejs-0.2.1-s7-2000/posts.bin") + generate(seed=5, posts=800) + cabal()
    seen_types, seen_links = set(), False
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest_many(bufs)
        for key, blob in store.items(b"!post!"):
            h = key[len(b"!post!") :]
            post = decode_post(blob)
            made = store.tombstones_made_by(h, post.hashes) if post.hashes else ()
            ip = Indexed.of(blob, post, h, made)
            linkers = [k for k, _ in views.links.entries(ip)]  # from the post's own links, not the entry
            expected = [k for k, _ in views.entries(ip) if k not in linkers]
            assert views.reverse_keys(h, store.db.get(reverse.key(h))) == expected
            assert all(store.db.get(k) is not None for k in expected + linkers)
            seen_links = seen_links or bool(linkers)
            seen_types.add(post.post_type)
    assert seen_types == set(POST_TYPE_NAMES) and seen_links


def test_reverse_entries_written_with_links_still_read(tmp_path):
    """Entries of stores written before the links left the entry carry them as a fifth field."""
    import msgpack

    from cablestore.keyspace.keys import mono

    h, pk, link = bytes(range(32)), b"k" * 32, b"l" * 32
    stand_in = reverse.stand_in(h, msgpack.packb([5, 0, pk, ["dev"], [link]]))
    assert stand_in.post.links == (link,) and stand_in.channel == "dev" and stand_in.mono == mono(5, h)
    assert reverse.stand_in(h, msgpack.packb([5, 0, pk, ["dev"]])).post.links == ()
