"""The reverse entry rebuilds exactly the keys the views write, for every kind of post."""

from __future__ import annotations

from cablestore import POST_TYPE_NAMES, Store, decode_post, reverse, views
from cablestore.records import Indexed
from cablestore.workload import generate, read_posts

from .conftest import NOW


def test_reverse_keys_equal_view_entries_for_every_stored_post(tmp_path):
    bufs = read_posts("tests/data/cablejs-0.2.1-s7-2000/posts.bin") + generate(seed=5, posts=800)
    seen_types = set()
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest_many(bufs)
        for key, blob in store.items(b"!post!"):
            h = key[len(b"!post!") :]
            post = decode_post(blob)
            made = store.tombstones_made_by(h, post.hashes) if post.hashes else ()
            expected = [k for k, _ in views.entries(Indexed.of(blob, post, h, made))]
            assert reverse.keys(h, store.db.get(reverse.key(h))) == expected
            assert all(store.db.get(k) is not None for k in expected)
            seen_types.add(post.post_type)
    assert seen_types == set(POST_TYPE_NAMES)
