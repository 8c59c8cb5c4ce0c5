"""Authoring: links to the channel's heads, a clock that never runs backwards, bad arguments write nothing."""

from __future__ import annotations

import pytest

from cablestore import (
    DELETE,
    INFO,
    JOIN,
    TEXT,
    CableError,
    LimitError,
    Store,
    decode_post,
    encode_post,
    make_post,
    post_hash,
    verify_post,
)
from cablestore.authoring.author import Author, clock_key
from cablestore.errors import NotYourPostError, PostFieldError
from cablestore.keyspace.keys import WEEK_MS

from .conftest import NOW, dump, post


class Clock:
    """A settable wall clock (ms)."""

    def __init__(self, t: int):
        self.t = t

    def __call__(self) -> int:
        return self.t


@pytest.fixture
def clock():
    return Clock(NOW - 60_000)


@pytest.fixture
def me(store, alice, clock):
    return Author(store, alice, now=clock)


def _post(store, h):
    return decode_post(store.get(h))


def test_every_post_type_decodes_verifies_and_reencodes(store, me, bob):
    other = post(bob, TEXT, NOW - 120_000, channel="dev", text="earlier, by bob")
    store.ingest(other)
    hashes = [
        me.join("dev"),
        me.text("dev", "hello"),
        me.topic("dev", "the dev channel"),
        me.info([("name", "alice"), ("accept-role", 1)]),
        me.name("al"),
        me.leave("dev"),
    ]
    text_buf = store.get(hashes[1])
    hashes.append(me.delete(hashes[1]))
    types = [decode_post(text_buf).post_type]
    assert encode_post(decode_post(text_buf)) == text_buf and verify_post(text_buf)
    for h in hashes[:1] + hashes[2:]:
        buf = store.get(h)
        p = decode_post(buf)
        assert verify_post(buf) and post_hash(buf) == h and encode_post(p) == buf
        assert p.public_key == me.public_key
        types.append(p.post_type)
    assert store.get(hashes[1]) is None and store.is_deleted(hashes[1])
    assert sorted(set(types)) == list(range(6))
    assert store.name(me.public_key) == "al"
    assert store.user_info(me.public_key) == {"name": "al", "accept-role": "\x01"}  # name() keeps the rest
    assert store.check().consistent


def test_links_follow_the_channel_heads_and_info_delete_link_nothing(store, me, bob):
    j = me.join("dev")
    assert _post(store, j).links == ()  # an empty channel has no heads
    t = me.text("dev", "one")
    assert _post(store, t).links == (j,)
    assert store.heads("dev") == [t]
    i = me.info([("name", "alice")])
    d = me.delete(t)
    assert _post(store, i).links == () and _post(store, d).links == ()
    assert store.heads("dev") == [j]  # the deleted head gives way to what it linked
    other = me.join("other")
    assert _post(store, other).links == ()  # heads are per channel


def test_fork_and_merge(store, me, bob, clock):
    root = me.join("dev")
    mine = me.text("dev", "mine")
    theirs = post(bob, TEXT, clock.t + 5, [root], channel="dev", text="concurrent")  # forks at root
    store.ingest(theirs)
    assert store.heads("dev") == sorted([mine, post_hash(theirs)])
    merge = me.text("dev", "merge")
    assert set(_post(store, merge).links) == {mine, post_hash(theirs)}
    assert store.heads("dev") == [merge]
    assert sorted(store.reverse_links(mine) + store.reverse_links(post_hash(theirs))) == [merge, merge]


def test_timestamps_never_go_backwards(store, me, clock):
    first = _post(store, me.text("dev", "a")).timestamp
    second = _post(store, me.text("dev", "b")).timestamp  # same millisecond
    clock.t -= 3_600_000  # the wall clock is set back an hour
    third = _post(store, me.text("dev", "c")).timestamp
    assert first == clock.t + 3_600_000 and second == first + 1 and third == second + 1
    assert store.db.get(clock_key(me.public_key)) == third.to_bytes(8, "big")


def test_clock_survives_a_restart_and_a_lost_mark(tmp_path, alice):
    path = tmp_path / "s"
    with Store(path, now=lambda: NOW) as s:
        last = decode_post(s.get(Author(s, alice, now=lambda: NOW).text("dev", "x"))).timestamp
    with Store(path, now=lambda: NOW) as s:  # reopened, and the wall clock is a day behind
        later = decode_post(s.get(Author(s, alice, now=lambda: NOW - 86_400_000).text("dev", "y"))).timestamp
        assert later == last + 1
        s.db.delete(clock_key(alice.public_key))  # even without the mark, the newest own post bounds it
        again = decode_post(s.get(Author(s, alice, now=lambda: 0).join("dev"))).timestamp
        assert again == later + 1


def test_never_earlier_than_the_heads_it_links(store, me, bob, clock):
    ahead = post(bob, TEXT, clock.t + 3_600_000, channel="dev", text="bob's clock runs fast")
    store.ingest(ahead)
    p = _post(store, me.text("dev", "reply"))
    assert p.links == (post_hash(ahead),) and p.timestamp == clock.t + 3_600_001


def test_a_head_too_far_ahead_is_not_linked(store, me, bob, clock):
    far = post(bob, TEXT, NOW + WEEK_MS - 1, channel="dev", text="a week ahead")  # accepted: < now + 7 days
    store.ingest(far)
    clock.t = NOW
    reply = me.text("dev", "reply")
    p = _post(store, reply)
    assert p.links == () and p.timestamp == NOW
    assert store.heads("dev") == sorted([post_hash(far), reply])  # a fork, not an unacceptable post


BAD = [
    ("text without channel", lambda a: a.post(TEXT, text="x"), PostFieldError),
    ("65-codepoint channel", lambda a: a.text("c" * 65, "x"), LimitError),
    ("empty channel", lambda a: a.join(""), LimitError),
    ("channel not a string", lambda a: a.join(7), PostFieldError),
    ("info as a dict", lambda a: a.info({"name": "x"}), PostFieldError),
    ("33-codepoint name", lambda a: a.name("n" * 33), LimitError),
    ("text over 4096 bytes", lambda a: a.text("dev", "x" * 4097), LimitError),
    ("unknown field", lambda a: a.post(JOIN, chanel="dev"), PostFieldError),
    ("delete nothing", lambda a: a.delete(), PostFieldError),
    ("delete a malformed hash", lambda a: a.delete("zz"), PostFieldError),
    ("delete an unknown post", lambda a: a.delete(bytes(32)), NotYourPostError),
    ("delete another's post", lambda a: a.delete(a.bobs), NotYourPostError),
]


@pytest.mark.parametrize("case,call,error", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_raise_and_write_nothing(store, me, bob, case, call, error):
    bobs = post(bob, TEXT, NOW - 5, channel="dev", text="bob's")
    store.ingest(bobs)
    me.text("dev", "mine")
    me.bobs = post_hash(bobs)
    before = dump(store)
    with pytest.raises(error):
        call(me)
    assert issubclass(error, CableError)
    assert dump(store) == before


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(post_type=TEXT, text="no channel"), PostFieldError),
        (dict(post_type=INFO, info={"name": "x"}), PostFieldError),
        (dict(post_type=TEXT, channel="c" * 65, text="x"), LimitError),
        (dict(post_type=DELETE, hashes=b"x" * 32), PostFieldError),
        (dict(post_type=JOIN, channel="dev", topic="stray"), PostFieldError),
        (dict(post_type=9, channel="dev"), CableError),
    ],
)
def test_make_post_refuses_bad_fields_with_cable_errors(alice, kwargs, error):
    """Regression: a missing channel raised AttributeError and info as a dict ValueError."""
    post_type = kwargs.pop("post_type")
    with pytest.raises(error):
        make_post(alice, post_type, NOW, **kwargs)


def test_make_post_still_takes_lists(alice):
    _, p = make_post(alice, INFO, NOW, [bytes(32)], info=[["name", "a"]])
    assert p.info == (("name", "a"),) and p.links == (bytes(32),)
    _, d = make_post(alice, DELETE, NOW, hashes=[bytes(32)])
    assert d.hashes == (bytes(32),)
