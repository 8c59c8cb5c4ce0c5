"""Hostile posts given to a store: every refusal names its fault and leaves the store byte-identical."""

from __future__ import annotations

import threading
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore import DELETE, INFO, JOIN, TEXT, TOPIC, Store, post_hash
from cablestore.authoring.workload import generate
from cablestore.errors import (
    CableError,
    DeletedPostError,
    FutureTimestampError,
    LimitError,
    SignatureError,
    TruncatedError,
    UnauthorizedDeleteError,
    UnknownPostTypeError,
    Utf8Error,
)
from cablestore.keyspace.keys import WEEK_MS
from cablestore.wire.codec import encode_varint

from .conftest import NOW, dump, post

H = post_hash


def _string(raw: bytes) -> bytes:
    return encode_varint(len(raw)) + raw


def signed(kp, post_type: int, ts: int, body: bytes, links=()) -> bytes:
    """Sign hand-made bytes, so the fault is in the body, not the signature."""
    header_tail = encode_varint(len(links)) + b"".join(links) + encode_varint(post_type) + encode_varint(ts)
    message = header_tail + body
    return kp.public_key + kp.sign(message) + message


@pytest.fixture
def seeded(store, alice, bob):
    """A store with some content, and its exact bytes."""
    for buf in generate(seed=4, posts=120):
        store.ingest(buf)
    store.ingest(post(alice, TEXT, 1000, channel="general", text="mine"))
    return store


def refuses(store, buf, exc):
    before = dump(store)
    with pytest.raises(exc):
        store.ingest(buf)
    [result] = store.ingest_many([buf])
    assert isinstance(result.error, exc)
    # The one thing a refusal may write: who wrote a refused post/delete (docs/design.md "Arrival order").
    assert [kv for kv in dump(store) if not kv[0].startswith(b"!refused!")] == before
    refused = [kv for kv in dump(store) if kv[0].startswith(b"!refused!")]
    assert refused == ([] if exc is not UnauthorizedDeleteError else [(b"!refused!" + post_hash(buf), buf[:32])])


def test_forged_and_truncated_signatures(seeded, alice):
    good = post(alice, TEXT, 2000, channel="general", text="hello")
    refuses(seeded, good[:32] + bytes(64) + good[96:], SignatureError)
    refuses(seeded, good[:32] + good[32:96][::-1] + good[96:], SignatureError)
    refuses(seeded, good[:80], TruncatedError)  # the signature itself is cut short
    refuses(seeded, good[:32] + good[32:95], TruncatedError)


def test_valid_signature_from_another_key(seeded, alice, bob):
    good = post(alice, TEXT, 2000, channel="general", text="hello")
    refuses(seeded, bob.public_key + good[32:], SignatureError)


def test_deletes_of_other_users_posts_before_and_after_the_target(seeded, alice, bob):
    target = post(alice, TEXT, 3000, channel="general", text="target")
    seeded.ingest(target)
    refuses(seeded, post(bob, DELETE, 3001, hashes=(H(target),)), UnauthorizedDeleteError)
    assert seeded.get(H(target)) == target

    later = post(alice, TEXT, 4000, channel="general", text="later")
    seeded.ingest(post(bob, DELETE, 3500, hashes=(H(later),)))  # pre-emptive, not bob's to make
    seeded.ingest(later)
    assert seeded.get(H(later)) == later and not seeded.is_deleted(H(later))


def test_far_future_timestamps(seeded, alice):
    refuses(seeded, post(alice, TEXT, NOW + WEEK_MS, channel="general", text="x"), FutureTimestampError)
    refuses(seeded, post(alice, TEXT, 2**64 - 1, channel="general", text="x"), FutureTimestampError)


@pytest.mark.parametrize(
    "post_type,body",
    [
        (TEXT, _string(b"general") + _string(b"x" * 4097)),
        (TEXT, _string("☕".encode() * 65) + _string(b"x")),
        (TEXT, _string(b"") + _string(b"x")),
        (TOPIC, _string(b"general") + _string("é".encode() * 513)),
        (INFO, _string(b"k" * 129) + _string(b"v") + b"\x00"),
        (INFO, _string(b"bio") + _string(b"v" * 4097) + b"\x00"),
        (INFO, _string(b"name") + _string(b"n" * 33) + b"\x00"),
        (DELETE, encode_varint(0)),
    ],
)
def test_oversized_fields(seeded, alice, post_type, body):
    refuses(seeded, signed(alice, post_type, 2000, body), LimitError)


@pytest.mark.parametrize(
    "post_type,body",
    [
        (TEXT, encode_varint(2**60) + b"general"),  # string length
        (DELETE, encode_varint(2**62)),  # deletion count
        (INFO, _string(b"name") + encode_varint(2**63)),
    ],
)
def test_huge_declared_lengths_are_refused_before_allocation(seeded, alice, post_type, body):
    buf = signed(alice, post_type, 2000, body)
    tracemalloc.start()
    refuses(seeded, buf, TruncatedError)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50 * 2**20  # nothing sized by the declared length


def test_huge_link_count(seeded, alice):
    body = _string(b"general") + _string(b"x")
    buf = alice.public_key + bytes(64) + encode_varint(2**61) + encode_varint(TEXT) + encode_varint(1) + body
    refuses(seeded, buf, TruncatedError)


def test_invalid_utf8(seeded, alice):
    refuses(seeded, signed(alice, TEXT, 2000, _string(b"general") + _string(b"\xff\xfe")), Utf8Error)
    refuses(seeded, signed(alice, JOIN, 2000, _string(b"gen\xc3")), Utf8Error)
    refuses(seeded, signed(alice, INFO, 2000, _string(b"name") + _string(b"\xed\xa0\x80") + b"\x00"), Utf8Error)


def test_unknown_post_types(seeded, alice):
    for t in (10, 255, 256, 2**40):
        refuses(seeded, signed(alice, t, 2000, _string(b"general")), UnknownPostTypeError)


def test_replays_change_nothing(seeded, alice):
    t = post(alice, TEXT, 5000, channel="general", text="once")
    seeded.ingest(t)
    before = dump(seeded)
    for _ in range(3):
        assert seeded.ingest(t) == H(t)
        assert seeded.ingest_many([t, t])[1].new is False
    assert dump(seeded) == before
    seeded.ingest(post(alice, DELETE, 6000, hashes=(H(t),)))
    refuses(seeded, t, DeletedPostError)  # a replay of a deleted post


def _mutate(buf: bytes, data) -> bytes:
    kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "overwrite"]))
    i = data.draw(st.integers(0, len(buf) - 1))
    if kind == "flip":
        return buf[:i] + bytes([buf[i] ^ (1 << data.draw(st.integers(0, 7)))]) + buf[i + 1 :]
    if kind == "truncate":
        return buf[:i]
    if kind == "insert":
        return buf[:i] + data.draw(st.binary(min_size=1, max_size=8)) + buf[i:]
    return buf[:i] + data.draw(st.binary(min_size=1, max_size=8)) + buf[i + 8 :]


VALID = generate(seed=8, posts=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mixed_stream_equals_the_valid_stream(tmp_path_factory, data):
    """A store fed valid and invalid posts ends byte-identical to one fed only the valid."""
    stream = []
    for buf in VALID:
        stream.append((buf, True))
        if data.draw(st.booleans()):
            bad = _mutate(buf, data)
            if bad != buf:
                stream.append((bad, False))
    base = tmp_path_factory.mktemp("mixed")
    with Store(base / "mixed", now=lambda: NOW) as mixed, Store(base / "clean", now=lambda: NOW) as clean:
        for buf, _ in stream:
            try:
                mixed.ingest(buf)
            except CableError:
                pass
        clean.ingest_many([buf for buf, ok in stream if ok])
        assert dump(mixed) == dump(clean)


def test_readers_never_see_half_a_batch_with_deletes(store, alice):
    """get_many reads one snapshot: a pair written and deleted together is seen together."""
    stop, errors = threading.Event(), []
    pairs = []
    for i in range(100):
        a = post(alice, TEXT, 10 + 3 * i, channel="c", text=f"a{i}")
        b = post(alice, TEXT, 11 + 3 * i, channel="c", text=f"b{i}")
        pairs.append((a, b, post(alice, DELETE, 12 + 3 * i, hashes=(H(a), H(b)))))

    def reader():
        while not stop.is_set():
            for a, b, _ in pairs[:: 7]:
                got = store.get_many([H(a), H(b)])
                if (got[0] is None) != (got[1] is None):
                    errors.append(H(a))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for a, b, d in pairs:
        store.ingest_many([a, b])
        store.ingest(d)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert all(store.is_deleted(H(a)) and store.is_deleted(H(b)) for a, b, _ in pairs)


def test_worker_processes_verify_like_inline(tmp_path):
    """verify_workers=2: same refusals and the same bytes as verifying inline."""
    posts = generate(seed=31, posts=700)
    forged = [b[:40] + bytes([b[40] ^ 1]) + b[41:] for b in posts[100:700:50]]
    stream = posts[:350] + forged + posts[350:]
    with Store(tmp_path / "inline", now=lambda: NOW) as inline, Store(tmp_path / "workers", now=lambda: NOW, verify_workers=2) as workers:
        a, b = inline.ingest_many(stream), workers.ingest_many(stream)
        assert [type(r.error) for r in a] == [type(r.error) for r in b]
        assert sum(isinstance(r.error, SignatureError) for r in b) == len(forged)
        assert dump(inline) == dump(workers)
