"""Reading a store back without decoding by hand: post(), messages(), posts(), stats(), len, reprs."""

from __future__ import annotations

import json

import pytest

from cablestore import DELETE, INFO, JOIN, TEXT, TOPIC, Keypair, Store, decode_post, post_hash
from cablestore.authoring.workload import generate
from cablestore.errors import QueryError
from cablestore.store.read.decoded import StoredPost

from .conftest import NOW, dump, post

T = 1_700_000_000_000


@pytest.fixture
def chat(store, alice, bob):
    """alice (named) and bob (unnamed) talk in #general; alice deletes one of her posts."""
    posts = {
        "name": post(alice, INFO, T, info=(("name", "alice"),)),
        "join": post(alice, JOIN, T + 1, channel="general"),
        "topic": post(alice, TOPIC, T + 2, channel="General", topic="tea"),
        "hi": post(alice, TEXT, T + 3, channel="general", text="hi"),
        "oops": post(alice, TEXT, T + 4, channel="general", text="oops"),
        "yo": post(bob, TEXT, T + 5, channel="GENERAL", text="yo"),
        "other": post(bob, TEXT, T + 6, channel="random", text="elsewhere"),
    }
    for buf in posts.values():
        store.ingest(buf)
    posts["del"] = post(alice, DELETE, T + 7, hashes=(post_hash(posts["oops"]),))
    store.ingest(posts["del"])
    return posts


def test_post_decodes_every_field_with_the_authors_current_name(store, chat, alice, bob):
    p = store.post(post_hash(chat["hi"]))
    assert isinstance(p, StoredPost)
    assert (p.type_name, p.author, p.author_name, p.timestamp, p.channel, p.text) == ("post/text", alice.public_key, "alice", T + 3, "general", "hi")
    assert p.raw == chat["hi"] and p.hash == post_hash(chat["hi"])
    assert p.links == () and p.topic is None and p.info is None and p.deleted == ()
    assert store.post(post_hash(chat["hi"]).hex()) == p  # hex works too
    topic = store.post(post_hash(chat["topic"]))
    assert (topic.type_name, topic.channel, topic.topic) == ("post/topic", "General", "tea")
    info = store.post(post_hash(chat["name"]))
    assert info.info == (("name", "alice"),) and info.to_dict()["info"] == {"name": "alice"}
    d = store.post(post_hash(chat["del"]))
    assert d.deleted == (post_hash(chat["oops"]),) and d.to_dict()["deleted"] == [post_hash(chat["oops"]).hex()]
    assert store.post(post_hash(chat["yo"])).author_name is None  # bob never named himself
    assert store.post(post_hash(chat["yo"])).who == bob.public_key.hex()[:8]


def test_post_of_unknown_or_deleted_hash_is_none_and_bad_hash_raises(store, chat):
    assert store.post(bytes(32)) is None
    assert store.post(post_hash(chat["oops"])) is None
    with pytest.raises(QueryError):
        store.post("not hex")


def test_messages_newest_first_with_deletions_and_current_names(store, chat, alice):
    msgs = store.messages("general")
    assert [(m.type_name, m.text, m.author_name) for m in msgs] == [
        ("post/delete", None, "alice"),
        ("post/text", "yo", None),
        ("post/text", "hi", "alice"),
    ]
    assert [m.hash for m in msgs] == store.channel_time_range("general")
    assert [m.text for m in store.messages("General", limit=2)] == [None, "yo"]
    assert [m.text for m in store.messages("general", start=T + 3, end=T + 6)] == ["yo", "hi"]
    # a rename shows on every message at once: the author's *current* name
    store.ingest(post(alice, INFO, T + 10, info=(("name", "alice2"),)))
    assert {m.author_name for m in store.messages("general") if m.author == alice.public_key} == {"alice2"}
    assert store.messages("nowhere") == []


def test_iteration_posts_and_len_agree_with_the_hash_store(store, chat):
    stored = {k[len(b"!post!"):] for k, _ in store.items(b"!post!")}
    assert len(store) == len(stored) == 7
    assert {p.hash for p in store} == stored
    assert all(p.raw == store.get(p.hash) for p in store)
    by_channel = {p.text or p.topic or p.type_name for p in store.posts("general")}
    assert by_channel == {"post/join", "tea", "hi", "yo", "post/delete"}
    assert bool(store)  # truthiness never scans (and an empty store is still a store)


def test_empty_store_is_truthy_with_len_zero(tmp_path):
    with Store(tmp_path / "s") as s:
        assert len(s) == 0 and bool(s) and list(s) == []
        assert s.stats().posts == 0 and s.stats().by_type["post/text"] == 0


def test_stats_count_posts_types_channels_users_tombstones_and_bytes(store, chat):
    st = store.stats()
    assert st.posts == 7 and st.tombstones == 1 and st.channels == 2 and st.users == 2
    assert st.by_type == {"post/text": 3, "post/delete": 1, "post/info": 1, "post/topic": 1, "post/join": 1, "post/leave": 0}
    assert st.bytes_on_disk > sum(len(store.get(p.hash)) for p in store)
    assert json.loads(json.dumps(st.to_dict()))["by_type"]["post/text"] == 3


def test_stats_on_a_generated_workload_match_a_count_by_decoding(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(generate(seed=4, posts=600))
        st = s.stats()
        decoded = [decode_post(v) for _, v in s.items(b"!post!")]
        assert st.posts == len(decoded) == len(s)
        assert sum(st.by_type.values()) == st.posts
        assert st.by_type["post/delete"] == sum(p.post_type == DELETE for p in decoded)
        assert st.users == len({p.public_key for p in decoded})
        assert st.channels == len(s.channel_list())


def test_reading_changes_nothing(store, chat):
    before = dump(store)
    store.post(post_hash(chat["hi"])), store.messages("general"), list(store), store.stats(), len(store)
    assert dump(store) == before


def test_reprs_are_short_and_never_show_the_secret_key(tmp_path, alice):
    secret = bytes(alice.signing_key).hex()
    assert repr(alice) == f"Keypair(public_key={alice.public_key.hex()})" and secret not in repr(alice)
    buf = post(alice, TEXT, T, channel="general", text="x" * 500)
    r = repr(decode_post(buf))
    assert r.startswith("Post(post/text, author=") and "channel='general'" in r and len(r) < 200
    s = Store(tmp_path / "s")
    assert repr(s) == f"<Store {str(tmp_path / 's')!r} open>"
    s.ingest(buf)
    sp = s.post(post_hash(buf))
    assert repr(sp).startswith(f"<StoredPost post/text {post_hash(buf).hex()[:12]} by ") and len(repr(sp)) < 200
    s.close()
    assert repr(s).endswith("closed>")


def test_keypair_repr_differs_per_key():
    a, b = Keypair(), Keypair()
    assert repr(a) != repr(b)
