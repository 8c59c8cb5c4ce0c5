"""The posts of the post responses a connection handles in one go are stored together (``Requesting.flush_staged``)."""

from __future__ import annotations

from cablestore import DELETE, TEXT, post_hash
from cablestore.peer import Node, PeerLimits
from cablestore.wire import messages as M

from .conftest import keypair, post
from .peer_helpers import WALL, responses

T0 = WALL - 3_600_000


def _texts(n: int) -> list[bytes]:
    alice = keypair("alice")
    return [post(alice, TEXT, T0 + i, channel="general", text=f"post {i}") for i in range(n)]


def test_post_responses_handled_in_one_go_are_stored_in_one_commit(stores):
    src, mine = stores("src"), stores("mine")
    bufs = _texts(40)
    src.ingest_many(bufs)
    a, b = Node(src, policy=PeerLimits(posts_per_page=4)).connect("b"), Node(mine).connect("a")
    commits = []
    mine.subscribe(lambda change: commits.append(len(change.added)))
    job = b.request_posts([post_hash(x) for x in bufs], now=WALL)
    a.receive_data(b.data_to_send(), WALL)
    out = a.data_to_send()
    assert sum(bool(m.posts) for m in responses(out) if isinstance(m, M.PostResponse)) > 1  # posts in several responses
    b.receive_data(out, WALL)
    assert commits == [40]  # one WriteBatch, not one per response
    assert all(post_hash(x) in mine for x in bufs)
    assert job.done and job.complete and job.posts_received == 40 and b.stats["ingested"] == 40


def test_a_hash_response_after_staged_posts_sees_them_stored_and_asks_for_none_of_them(stores):
    # A post response and a hash response listing the same posts, read at once: the posts are stored
    # before the listing is handled, so none is asked for again (staged, they are neither held nor in flight).
    src, mine = stores("src"), stores("mine")
    bufs = _texts(6)
    src.ingest_many(bufs)
    b = Node(mine).connect("a")
    hashes = [post_hash(x) for x in bufs]
    b.request_posts(hashes[:4], now=WALL)
    listing = b.request_time_range("general", 0, T0 + 100, now=WALL)
    sent = responses(b.data_to_send())
    (posts_req,) = [m for m in sent if isinstance(m, M.PostRequest)]
    (range_req,) = [m for m in sent if isinstance(m, M.TimeRangeRequest)]
    b.receive_data(
        M.encode(M.PostResponse(posts_req.req_id, tuple(bufs[:4])))
        + M.encode(M.HashResponse(range_req.req_id, tuple(reversed(hashes)))),
        WALL,
    )
    (again,) = [m for m in responses(b.data_to_send()) if isinstance(m, M.PostRequest)]
    assert set(again.hashes) == set(hashes[4:])
    assert all(h in mine for h in hashes[:4]) and listing.hashes_seen == 6


def test_a_listed_delete_staged_with_other_posts_learns_its_channel(stores):
    # Only a post/delete learns a channel from its listing; it still does when it is stored among texts.
    alice = keypair("alice")
    src, mine = stores("src"), stores("mine")
    gone = post(alice, TEXT, T0, channel="general", text="gone")
    bufs = [post(alice, TEXT, T0 + 1 + i, channel="general", text=f"kept {i}") for i in range(3)]
    delete = post(alice, DELETE, T0 + 10, hashes=(post_hash(gone),))
    src.ingest_many([gone, *bufs, delete])
    a, b = Node(src, policy=PeerLimits(posts_per_page=2)).connect("b"), Node(mine).connect("a")
    job = b.request_time_range("general", 0, T0 + 100, now=WALL)
    for _ in range(4):
        a.receive_data(b.data_to_send(), WALL)
        b.receive_data(a.data_to_send(), WALL)
    assert job.complete
    assert post_hash(delete) in mine and post_hash(gone) not in mine
    assert post_hash(delete) in mine.channel_time_range("general")  # listed where the peer listed it
