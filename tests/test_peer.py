"""The sans-I/O peer over in-memory pipes: answers, live requests, forwarding, sync, convergence."""

from __future__ import annotations

import threading

import pytest

from cablestore import DELETE, JOIN, TEXT, TOPIC, post_hash
from cablestore.authoring.workload import generate
from cablestore.errors import DuplicateRequestError, RequestTableFullError
from cablestore.peer import Concluded, Node, PeerLimits, Refused, Sync
from cablestore.store.read.peer import cursor_key
from cablestore.wire import decoding as D
from cablestore.wire import messages as M

from .conftest import keypair, post
from .peer_helpers import WALL, answers, link, pump, responses

T0 = WALL - 3_600_000


@pytest.fixture
def chat(stores):
    """A store with a small channel: alice joins, sets a topic, writes 5 texts; bob writes one."""
    alice, bob = keypair("alice"), keypair("bob")
    s = stores("chat")
    posts = [post(alice, JOIN, T0, channel="general"), post(alice, TOPIC, T0 + 1, channel="general", topic="one")]
    posts += [post(alice, TEXT, T0 + 10 + i, channel="general", text=f"hi {i}") for i in range(5)]
    posts.append(post(bob, TEXT, T0 + 100, channel="other", text="elsewhere"))
    for p in posts:
        s.ingest(p)
    return s, [post_hash(p) for p in posts], alice, bob


def ask(conn, request, now=WALL) -> list:
    """Send one request to ``conn`` as a remote peer would; return the decoded answers."""
    conn.receive_data(M.encode(request), now)
    return responses(conn.data_to_send())


RID = b"\x00\x00\x00\x01"


# --- answering --------------------------------------------------------------------


def test_post_request_answers_held_posts_and_ends_with_an_empty_response(chat):
    s, hashes, alice, _ = chat
    conn = Node(s).connect()
    s.ingest(post(alice, DELETE, T0 + 50, hashes=(hashes[2],)))
    out = ask(conn, M.PostRequest(RID, (hashes[0], hashes[2], b"\x01" * 32, hashes[3])))
    assert out == [M.PostResponse(RID, (s.get(hashes[0]), s.get(hashes[3]))), M.PostResponse(RID)]


def test_a_post_request_naming_a_post_many_times_is_sent_it_once(chat):
    """Regression: hashes were not de-duplicated, so a 2 MiB request got ~130x its size back."""
    s, hashes, *_ = chat
    conn = Node(s).connect()
    got = ask(conn, M.PostRequest(RID, (hashes[0],) * 500 + (hashes[1],) * 3))
    assert [p for m in got for p in m.posts] == [s.get(hashes[0]), s.get(hashes[1])]


def test_time_range_newest_first_start_inclusive_end_exclusive_limit(chat):
    s, hashes, *_ = chat
    conn = Node(s).connect()
    texts = hashes[2:7]
    assert ask(conn, M.TimeRangeRequest(RID, "General", T0 + 11, T0 + 14, 0)) == [
        M.HashResponse(RID, (texts[3], texts[2], texts[1])),
        M.HashResponse(RID),
    ]
    assert ask(conn, M.TimeRangeRequest(b"rid2", "general", 0, T0 + 100, 2)) == [M.HashResponse(b"rid2", (texts[4], texts[3])), M.HashResponse(b"rid2")]
    assert ask(conn, M.TimeRangeRequest(b"rid3", "nowhere", 0, 5, 0)) == [M.HashResponse(b"rid3")]


def test_channel_state_list_and_moderation(chat):
    s, hashes, *_ = chat
    conn = Node(s).connect()
    assert ask(conn, M.ChannelStateRequest(RID, "general", 0)) == [M.HashResponse(RID, tuple(s.channel_state("general"))), M.HashResponse(RID)]
    assert ask(conn, M.ChannelListRequest(b"rid2", 1, 1)) == [M.ChannelListResponse(b"rid2", ("other",))]
    assert ask(conn, M.ModerationStateRequest(b"rid3", ("general",), 0, 0)) == [M.HashResponse(b"rid3")]  # none: concluded
    assert not conn.state.requests


def test_live_time_range_pushes_until_cancelled(chat):
    s, hashes, alice, bob = chat
    conn = Node(s).connect()
    out = ask(conn, M.TimeRangeRequest(RID, "general", T0 + 13, 0, 0))
    assert out == [M.HashResponse(RID, (hashes[6], hashes[5]))]  # no conclusion: it stays live
    new = s.ingest(post(bob, TEXT, T0 + 200, channel="GENERAL", text="late"))
    s.ingest(post(bob, TEXT, T0 + 201, channel="other", text="not this channel"))
    s.ingest(post(bob, TEXT, T0 + 5, channel="general", text="older than time_start"))
    delete = s.ingest(post(alice, DELETE, T0 + 202, hashes=(hashes[3],)))
    assert responses(conn.data_to_send()) == [M.HashResponse(RID, (new,)), M.HashResponse(RID, (delete,))]
    assert ask(conn, M.CancelRequest(b"can1", cancel_id=RID)) == []
    s.ingest(post(bob, TEXT, T0 + 300, channel="general", text="after cancel"))
    assert conn.data_to_send() == b"" and not conn.state.requests


def test_live_time_range_concludes_at_its_limit(chat):
    s, hashes, _, bob = chat
    conn = Node(s).connect()
    assert ask(conn, M.TimeRangeRequest(RID, "general", T0 + 14, 0, 3)) == [M.HashResponse(RID, (hashes[6],))]
    first = s.ingest(post(bob, TEXT, T0 + 400, channel="general", text="a"))
    s.ingest_many([post(bob, TEXT, T0 + 401 + i, channel="general", text=f"b{i}") for i in range(3)])
    out = responses(conn.data_to_send())
    assert [len(m.hashes) for m in out] == [1, 1, 0] and out[0].hashes == (first,)
    assert not conn.state.requests


def test_live_state_pushes_changes_and_the_next_latest_after_a_delete(chat):
    s, hashes, alice, bob = chat
    conn = Node(s).connect()
    out = ask(conn, M.ChannelStateRequest(RID, "general", 1))
    assert out == [M.HashResponse(RID, tuple(s.channel_state("general")))]
    topic2 = s.ingest(post(alice, TOPIC, T0 + 500, channel="general", topic="two"))
    joined = s.ingest(post(bob, JOIN, T0 + 501, channel="general"))
    s.ingest(post(bob, TEXT, T0 + 502, channel="general", text="chat is not state"))
    assert responses(conn.data_to_send()) == [M.HashResponse(RID, (topic2,)), M.HashResponse(RID, (joined,))]
    s.ingest(post(alice, DELETE, T0 + 503, hashes=(topic2,)))
    assert responses(conn.data_to_send()) == [M.HashResponse(RID, (hashes[1],))]  # topic "one" again
    assert s.topic("general") == "one"


def test_a_post_info_rereads_only_the_live_states_of_its_authors_channels(chat, monkeypatch):
    """Regression: every post/info (or delete) committed re-read the state of every channel with a live
    state request (1,024 a peer allowed, ~35 µs each), so a peer holding many made each commit cost 140 ms."""
    from cablestore import INFO
    s, hashes, alice, bob = chat
    conn = Node(s).connect()
    for i, channel in enumerate(["general", "other"] + [f"empty{i}" for i in range(30)]):
        ask(conn, M.ChannelStateRequest(b"st%02d" % i, channel, 1))
    read = []
    real = s.channel_state_answer
    monkeypatch.setattr(s, "channel_state_answer", lambda channel: read.append(channel) or real(channel))
    info = post(alice, INFO, T0 + 200, info=[("name", "alice")])
    s.ingest(info)
    assert read == ["general"]  # alice is a member of general only
    (pushed,) = responses(conn.data_to_send())
    assert pushed.req_id == b"st00" and pushed.hashes == (post_hash(info),)
    read.clear()
    s.ingest(post(bob, INFO, T0 + 201, info=[("name", "bob")]))
    assert read == ["other"]


def test_live_push_from_a_local_author_in_another_thread_wakes_the_transport(chat):
    s, hashes, _, bob = chat
    node = Node(s)
    woken = threading.Event()
    node.on_output = woken.set
    conn = node.connect()
    ask(conn, M.TimeRangeRequest(RID, "general", 0, 0, 0))
    t = threading.Thread(target=s.ingest, args=(post(bob, TEXT, T0 + 600, channel="general", text="from a thread"),))
    t.start()
    t.join(10)
    assert woken.wait(10)
    assert len(responses(conn.data_to_send())[0].hashes) == 1


# --- requesting ---------------------------------------------------------------------


def test_hash_responses_lead_to_post_requests_only_for_what_is_missing(chat, stores):
    s, hashes, alice, _ = chat
    mine = stores("mine")
    mine.ingest(s.get(hashes[6]))
    mine.ingest(post(alice, DELETE, T0 + 50, hashes=(hashes[5],)))  # alice deleted it: never fetch it
    a, b = link(Node(s), Node(mine))
    job = b.request_time_range("general", 0, T0 + 1000, now=WALL)
    pump((a, b))
    assert job.complete and job.hashes_seen == 5 and job.posts_requested == 3
    assert set(hashes[2:5]) <= {h for h in mine.channel_time_range("general")}
    assert hashes[5] not in mine


def test_sync_pulls_everything_and_a_second_sync_uses_the_cursor(chat, stores):
    s, hashes, alice, bob = chat
    empty = stores("empty")
    native = PeerLimits(reconcile=0)  # peers of native requests only (a reconciling pair settles the channel instead)
    a, b = link(Node(s, policy=native), Node(empty, policy=native))
    sync = Sync(b, "peer-a")
    pump((a, b), polls=[sync])
    assert sync.done and sync.summary()["complete"]
    assert answers(empty) == answers(s)
    cursor = empty.sync_cursor("peer-a", "general")
    assert cursor == T0 + 14 - 3_600_000
    assert empty.db.get(cursor_key("peer-a", "general")) == cursor.to_bytes(8, "big")
    s.ingest(post(bob, TEXT, T0 + 700, channel="general", text="new"))
    again = Sync(b, "peer-a", channels=["general"])
    again.poll(WALL)
    (listing,) = responses(b.data_to_send())  # the channel list first: it names the spellings to ask for
    b.receive_data(a.receive_data(M.encode(listing), WALL) or a.data_to_send(), WALL)
    again.poll(WALL)
    (time_range,) = [m for m in responses(b.data_to_send()) if isinstance(m, M.TimeRangeRequest)]
    assert time_range.time_start == cursor  # only what is new since the last sync
    a.receive_data(M.encode(time_range), WALL)
    pump((a, b), polls=[again])
    assert answers(empty) == answers(s)


def test_unsolicited_forged_and_refused_posts_leave_the_store_byte_identical(chat, stores):
    s, hashes, alice, bob = chat
    mine = stores("mine")
    conn = Node(mine).connect()
    job = conn.request_posts([hashes[2]], now=WALL)
    (req,) = responses(conn.data_to_send())
    before = list(mine.items())
    good = s.get(hashes[2])
    forged = good[:40] + bytes([good[40] ^ 1]) + good[41:]
    other = s.get(hashes[3])
    events = conn.receive_data(M.encode(M.PostResponse(req.req_id, (forged, other))), WALL)
    assert [type(e.error).__name__ for e in events if isinstance(e, Refused)] == ["UnsolicitedPostError"] * 2
    assert list(mine.items()) == before
    future = post(bob, TEXT, WALL + 30 * 86_400_000, channel="general", text="from the future")
    job2 = conn.request_posts([post_hash(future)], now=WALL)
    (req2,) = responses(conn.data_to_send())
    events = conn.receive_data(M.encode(M.PostResponse(req2.req_id, (future,))), WALL)
    assert any(isinstance(e, Refused) and type(e.error).__name__ == "FutureTimestampError" for e in events)
    assert list(mine.items()) == before and job2.done and not job2.complete
    conn.receive_data(M.encode(M.PostResponse(req.req_id, (good,))) + M.encode(M.PostResponse(req.req_id)), WALL)
    assert hashes[2] in mine and job.complete and not conn.closed
    assert conn.stats["refused"] == 1 and conn.stats["unsolicited"] == 2


# --- forwarding and de-duplication ----------------------------------------------------


def test_ttl_forwarding_along_a_chain_of_three(chat, stores):
    s, hashes, *_ = chat
    a_store, b_store = stores("a"), stores("b")
    na, nb, nc = Node(a_store), Node(b_store), Node(s)
    ab, ba = link(na, nb)
    bc, cb = link(nb, nc)
    job = ab.request_time_range("general", 0, T0 + 1000, now=WALL, ttl=1)
    pump((ab, ba), (bc, cb))
    assert job.complete and job.hashes_seen == 5
    assert set(hashes[2:7]) <= set(a_store.channel_time_range("general"))  # posts came through b
    assert not b_store.channel_time_range("general")  # b relayed, it did not keep
    assert not na.requests and not nb.requests and not nc.requests
    live = ab.request_time_range("general", T0 + 1000, 0, now=WALL, ttl=2)
    pump((ab, ba), (bc, cb))
    assert len(nb.requests) == 1 and len(nc.requests) == 1
    h = s.ingest(post(keypair("carol"), TEXT, T0 + 2000, channel="general", text="relayed live"))
    pump((ab, ba), (bc, cb))
    assert h in a_store
    ab.cancel(list(na.requests)[0])
    pump((ab, ba), (bc, cb))
    assert not nb.requests and not nc.requests  # the cancel went along the same route
    assert live.concluded


def test_duplicate_and_echoed_req_ids_are_discarded(chat):
    s, *_ = chat
    node = Node(s)
    conn, other = node.connect("one"), node.connect("two")
    ask(conn, M.TimeRangeRequest(RID, "general", 0, 0, 0, ttl=3))
    assert len(responses(other.data_to_send())) == 1  # forwarded once, with ttl 2
    events = other.receive_data(M.encode(M.TimeRangeRequest(RID, "general", 0, 0, 0, ttl=2)), WALL)  # the echo
    assert [type(e.error) for e in events] == [DuplicateRequestError]
    # It came first from `conn`: the echo's sender gets a concluding response, so it need not wait for a timeout.
    assert conn.data_to_send() == b"" and responses(other.data_to_send()) == [M.HashResponse(RID)]
    job = conn.request_channel_list(now=WALL)
    (mine,) = responses(conn.data_to_send())
    events = conn.receive_data(M.encode(M.ChannelListRequest(mine.req_id, 0, 0, ttl=0)), WALL)  # cable-core echo
    assert [type(e.error) for e in events] == [DuplicateRequestError] and conn.data_to_send() == b""
    conn.receive_data(M.encode(M.ChannelListResponse(mine.req_id, ("general",))), WALL)
    assert job.complete and job.channels == ("general",)


def test_no_answer_at_all_times_out_without_looping(chat, stores):
    mine = stores("mine")
    node = Node(mine, timeout=5_000)
    conn = node.connect()
    job = conn.request_posts([b"\x07" * 32], now=WALL)
    assert len(responses(conn.data_to_send())) == 1
    node.tick(WALL + 4_999)
    assert not job.done
    node.tick(WALL + 5_000)
    assert job.done and not job.complete and not node.requests and not node.state.in_flight_count
    assert [e.reason for e in conn.next_events() if isinstance(e, Concluded)] == ["timeout"]
    assert conn.data_to_send() == b""


def test_request_table_is_bounded_per_peer_and_never_answers_wrongly(chat):
    s, hashes, *_ = chat
    node = Node(s, policy=PeerLimits(live_per_peer=3, live_reserved=1, live_total=4))
    conn, other, third = node.connect("flood"), node.connect("other"), node.connect("third")
    for i in range(3):
        ask(conn, M.TimeRangeRequest(bytes([0, 0, 0, i]), "general", 0, 0, 0))
    events = conn.receive_data(M.encode(M.TimeRangeRequest(b"\x00\x00\x01\x00", "general", 0, 0, 0)), WALL)
    assert [type(e.error) for e in events] == [RequestTableFullError]
    assert responses(conn.data_to_send()) == [M.HashResponse(b"\x00\x00\x01\x00")]  # concluded so nobody waits
    assert conn.stats["requests_refused"] == node.stats["requests_refused"] == 1 and len(node.requests) == 3
    # Finite requests and channel lists need no slot: the flooding peer still gets them answered, whole.
    assert ask(conn, M.TimeRangeRequest(b"\x00\x00\x02\x00", "general", 0, T0 + 1000, 2)) == [
        M.HashResponse(b"\x00\x00\x02\x00", (hashes[6], hashes[5])), M.HashResponse(b"\x00\x00\x02\x00")]
    assert ask(conn, M.ChannelListRequest(b"\x00\x00\x03\x00", 0, 0)) == [M.ChannelListResponse(b"\x00\x00\x03\x00", ("general", "other"))]
    # Another peer gets its reserved live slot even past live_total, and then the table is full for it too.
    assert ask(other, M.TimeRangeRequest(b"\x00\x00\x04\x00", "general", 0, 0, 0)) == [M.HashResponse(b"\x00\x00\x04\x00", tuple(reversed(hashes[2:7])))]
    assert ask(third, M.TimeRangeRequest(b"\x00\x00\x05\x00", "general", 0, 0, 0))[0].hashes  # reserved: within its share
    assert ask(other, M.ChannelStateRequest(b"\x00\x00\x06\x00", "general", 1)) == [M.HashResponse(b"\x00\x00\x06\x00")]
    assert node.live_count == 5 and other.stats["requests_refused"] == 1
    conn.close()
    assert len(node.requests) == 2 and node.live_count == 2


# --- convergence ----------------------------------------------------------------------


def test_two_and_three_peers_converge_on_a_workload_with_deletes(stores):
    bufs = generate(seed=11, posts=1500)
    full, part, empty = stores("full"), stores("part"), stores("empty")
    full.ingest_many(bufs)
    part.ingest_many(bufs[:900])  # later deletes of its posts arrive by sync: late deletes
    nodes = {n: Node(s) for n, s in (("full", full), ("part", part), ("empty", empty))}
    names = list(nodes)
    for x in names:
        for y in names:
            if x == y:
                continue
            cx, cy = link(nodes[x], nodes[y], x, y)
            sync = Sync(cy, x)
            pump((cx, cy), polls=[sync])
            assert sync.done
            cx.close()
            cy.close()
    expected = answers(full)
    assert answers(part) == expected
    assert answers(empty) == expected
    deleted = [h for h in (post_hash(b) for b in bufs) if full.is_deleted(h)]
    assert deleted and not any(h in part or h in empty for h in deleted)


def test_draft8_framing_end_to_end(chat, stores):
    s, hashes, *_ = chat
    empty = stores("empty8")
    a, b = link(Node(s, framing=M.DRAFT8), Node(empty, framing=M.DRAFT8))
    sync = Sync(b, "draft8-peer")
    sync.poll(WALL)
    first = D.Decoder(M.DRAFT8).feed(b._out)  # the reconciliation probe, then the channel list request
    assert [type(m) for m in first] == [M.ReconcileRequest, M.ChannelListRequest] and all(len(m.req_id) == 8 for m in first)
    pump((a, b), polls=[sync])
    assert sync.summary()["complete"] and answers(empty) == answers(s)


def test_requests_re_sent_after_a_disconnect_are_discarded(chat, stores):
    mine = stores("mine")
    node = Node(mine)
    first = node.connect("first")
    first.request_state("general", now=WALL)
    (sent,) = responses(first.data_to_send())
    first.close()
    second = node.connect("second")  # a cable-core peer re-sends the requests of peers that left
    events = second.receive_data(M.encode(replace_ttl(sent, 0)), WALL)
    assert [type(e.error) for e in events] == [DuplicateRequestError] and second.data_to_send() == b""


def replace_ttl(m, ttl):
    import dataclasses

    return dataclasses.replace(m, ttl=ttl)


def test_one_sync_per_channel_at_a_time(chat, stores):
    s, *_ = chat
    mine = stores("mine")
    node = Node(mine)
    a1, b1 = link(Node(s), node)
    a2, b2 = link(Node(s), node)
    one, two = Sync(b1, "one", channels=["general"]), Sync(b2, "two", channels=["general"])
    for conn, other, sync in ((b1, a1, one), (b2, a2, two)):  # each asks for the channel list first
        sync.poll(WALL)
        conn.receive_data(other.receive_data(conn.data_to_send(), WALL) or other.data_to_send(), WALL)
    one.poll(WALL)
    two.poll(WALL)
    sent = responses(b2.data_to_send())
    assert not any(isinstance(m, M.TimeRangeRequest) for m in sent) and node.syncing == {"general": 1}  # two waits for one
    pump((a1, b1), polls=[one])
    assert one.done and not node.syncing
    pump((a2, b2), polls=[two])
    assert two.done and two.summary()["posts_ingested"] == 0  # one already fetched everything


def test_a_sync_holding_a_channel_forever_delays_another_sync_of_it_only_a_while(chat, stores):
    """Regression: a hostile peer that keeps its sync of a channel alive (trickling posts) kept every other
    peer's sync of that channel waiting until its progress timeout, so nothing of theirs ever arrived."""
    from cablestore.peer.limits import CHANNEL_WAIT

    s, hashes, *_ = chat
    mine = stores("mine")
    node = Node(mine)
    a1, b1 = link(Node(stores("hostile")), node)  # lists "general" but never answers for it
    a2, b2 = link(Node(s), node)
    one, two = Sync(b1, "one", channels=["general"]), Sync(b2, "two", channels=["general"])
    for conn, other, sync in ((b1, a1, one), (b2, a2, two)):
        sync.poll(WALL)
        conn.receive_data(other.receive_data(conn.data_to_send(), WALL) or other.data_to_send(), WALL)
    one.poll(WALL)  # one holds "general"; its requests go nowhere
    b1.data_to_send()
    two.poll(WALL)  # and two finds it held
    pump((a2, b2), polls=[two], now=WALL + CHANNEL_WAIT // 2)
    assert not two.done and not any(h in mine for h in hashes[:7])  # two waits for one, a while
    pump((a2, b2), polls=[two], now=WALL + CHANNEL_WAIT)
    assert two.done and two.summary()["complete"] and all(h in mine for h in hashes[:7])
    assert not one.done and node.syncing == {"general": 1}  # one still holds it; two let go


def test_a_hash_another_peer_has_in_flight_is_waited_for_then_fetched_not_called_complete(chat, stores):
    """Regression: a hash listed while another connection had it in flight was skipped, so a peer
    that lists hashes and never sends them made another peer's sync end "complete" without the posts."""
    s, hashes, *_ = chat
    mine = stores("mine")
    node = Node(mine, timeout=30_000)
    a1, b1 = link(Node(stores("hostile")), node)
    a2, b2 = link(Node(s), node)
    b1.request_posts(hashes[2:7], now=WALL)  # in flight on b1, never answered
    sync = Sync(b2, "two", channels=["general"])
    pump((a2, b2), polls=[sync])
    assert not sync.done and not any(h in mine for h in hashes[2:7])  # waiting, not complete
    from cablestore.peer.limits import DEFER_MS

    later = WALL + DEFER_MS
    node.tick(later - 1)
    pump((a2, b2), polls=[sync], now=later - 1)
    assert not sync.done
    pump((a2, b2), polls=[sync], now=later)  # past the wait: asked for on this connection
    assert sync.done and sync.summary()["complete"] and all(h in mine for h in hashes[:7])


def _in_flight_on_a_silent_peer(chat, stores):
    """A node whose first connection has texts 2-6 of ``chat`` in flight to a peer that never answers,
    and a second connection (``(a2, b2)``) to a peer holding them: ``(s, hashes, mine, node, (a2, b2))``."""
    s, hashes, *_ = chat
    mine = stores("mine")
    node = Node(mine, timeout=30_000)
    _, b1 = link(Node(stores("hostile")), node)
    b1.request_posts(hashes[2:7], now=WALL)
    return s, hashes, mine, node, link(Node(s), node)


def test_a_hash_waited_on_counts_once_against_the_pending_bound(chat, stores):
    """Regression (review): a hash in flight elsewhere counted twice (in flight, and waited on), so two peers
    serving one channel failed a sync with "overflow" at half the bound."""
    s, hashes, *_ = chat
    mine = stores("mine")
    node = Node(mine, policy=PeerLimits(pending_hashes=8))  # 7 distinct posts wanted in all
    a1, b1 = link(Node(s), node)
    a2, b2 = link(Node(s), node)
    b1.request_posts(hashes[2:7], now=WALL)
    sync = Sync(b2, "two", channels=["general"])
    pump((a2, b2), polls=[sync])
    pump((a1, b1), polls=[sync])
    pump((a2, b2), polls=[sync])
    assert sync.done and sync.summary()["complete"], sync.summary()["reason"]
    assert all(h in mine for h in hashes[:7]) and node.deferred == 0


def test_a_store_failing_while_deferred_hashes_settle_fails_their_jobs_and_leaks_nothing(chat, stores):
    """Regression (review): a store error escaped Node.tick (ending serve's ticker) and left counts behind."""
    from cablestore.peer.limits import DEFER_MS

    s, hashes, mine, node, (a2, b2) = _in_flight_on_a_silent_peer(chat, stores)
    first, second = b2.request_posts(hashes[2:4], now=WALL), b2.request_posts(hashes[4:7], now=WALL)
    assert node.deferred == 5 and second.outstanding == 3
    mine.close()  # every read now raises StoreClosedError
    node.tick(WALL + DEFER_MS)
    assert node.deferred == 0 and first.done and second.done and not b2._deferred
    assert first.failed and second.failed and "StoreClosedError" in second.reason


def test_a_sync_given_up_asks_for_none_of_the_hashes_it_waited_on(chat, stores):
    """Regression (review): an abandoned sync's deferred hashes were still asked for, for nobody."""
    from cablestore.peer.limits import DEFER_MS

    s, hashes, mine, node, (a2, b2) = _in_flight_on_a_silent_peer(chat, stores)
    sync = Sync(b2, "two", channels=["general"])
    pump((a2, b2), polls=[sync])
    assert node.deferred == 5
    sync.abandon("given up")
    b2.data_to_send()
    node.tick(WALL + DEFER_MS)
    assert not any(isinstance(m, M.PostRequest) for m in responses(b2.data_to_send())) and node.deferred == 0


def test_a_hash_in_flight_elsewhere_that_arrives_there_ends_the_wait_without_a_second_request(chat, stores):
    s, hashes, *_ = chat
    mine = stores("mine")
    node = Node(mine)
    a1, b1 = link(Node(s), node)
    a2, b2 = link(Node(s), node)
    b1.request_posts(hashes[2:7], now=WALL)
    sync = Sync(b2, "two", channels=["general"])
    pump((a2, b2), polls=[sync])
    assert not sync.done
    pump((a1, b1), polls=[sync])  # the first connection delivers them
    pump((a2, b2), polls=[sync])
    assert sync.done and sync.summary()["complete"] and all(h in mine for h in hashes[:7])
    assert sync.summary()["posts_received"] == 2  # the join and the topic: the texts came once, on b1


def test_a_channel_list_longer_than_a_decoder_takes_is_answered_in_pages(stores):
    """Regression: a store with more than 4,096 channels answered a list its own decoder refuses."""
    from cablestore.peer.limits import CHANNELS_PER_RESPONSE

    alice = keypair("alice")
    s = stores("many")
    s.ingest_many([post(alice, JOIN, T0 + i, channel=f"c{i:05d}") for i in range(CHANNELS_PER_RESPONSE + 4)])
    conn = Node(s).connect()
    (first,) = ask(conn, M.ChannelListRequest(b"lst1", 0, 0))  # decoded with the real decoder
    (rest,) = ask(conn, M.ChannelListRequest(b"lst2", CHANNELS_PER_RESPONSE, 0))
    assert len(first.channels) == CHANNELS_PER_RESPONSE and len(rest.channels) == 4
    assert list(first.channels + rest.channels) == s.channel_list()


def test_a_channel_list_is_spelled_a_few_channels_a_turn(stores, monkeypatch):
    """Regression: a channel list answer read every channel's posts in one unit of work (~40 µs a channel,
    150 ms at 4,096), so one cheap request delayed every other connection's answers that long."""
    from cablestore.peer import limits

    monkeypatch.setattr(limits, "SPELLINGS_PER_TURN", 2)
    alice = keypair("alice")
    s = stores("five")
    s.ingest_many([post(alice, JOIN, T0 + i, channel=f"C{i}") for i in range(5)])
    conn = Node(s).connect()
    conn.feed(M.encode(M.ChannelListRequest(b"lst1", 0, 0)), WALL)
    sent = []
    for _ in range(3):
        assert not sent
        assert conn._work(WALL, 1) == 1  # one unit: the request, then one step of two channels each
        sent = responses(conn.data_to_send())
    assert sent == [M.ChannelListResponse(b"lst1", tuple(f"C{i}" for i in range(5)))]  # one whole answer, as posts spell them


def _sync_joined_channels(stores, n: int):
    """A store whose alice joined channels c0 .. c<n-1>, and a finished sync of it into an empty store."""
    alice = keypair("alice")
    s, mine = stores("joined"), stores("mine")
    s.ingest_many([post(alice, JOIN, T0 + i, channel=f"c{i}") for i in range(n)])
    a, b = link(Node(s), Node(mine))
    sync = Sync(b, "peer")
    pump((a, b), polls=[sync])
    return s, mine, sync


def test_sync_pages_through_the_channel_list(stores, monkeypatch):
    from cablestore.peer import limits

    monkeypatch.setattr(limits, "CHANNELS_PER_RESPONSE", 3)
    s, mine, sync = _sync_joined_channels(stores, 7)
    assert sync.done and sync.summary()["complete"] and sync.summary()["channels_listed"] == 7
    assert mine.channel_list() == s.channel_list() == [f"c{i}" for i in range(7)]


def test_sync_gives_up_on_a_channel_list_without_end(stores, monkeypatch):
    from cablestore.peer import limits

    monkeypatch.setattr(limits, "CHANNELS_PER_RESPONSE", 2)
    monkeypatch.setattr(limits, "MAX_LISTED_CHANNELS", 6)
    _, _, sync = _sync_joined_channels(stores, 10)
    assert sync.done and not sync.summary()["complete"] and "more than 6 channels" in sync.summary()["reason"]


def test_a_live_sync_keeps_a_bounded_number_of_channels_live(stores, monkeypatch):
    """A peer that lists many channels (pages of them, now) cannot make a live sync hold two requests for each."""
    from cablestore.peer import limits

    monkeypatch.setattr(limits, "MAX_LIVE_CHANNELS", 2)
    alice = keypair("alice")
    s, mine = stores("five"), stores("mine")
    s.ingest_many([post(alice, JOIN, T0 + i, channel=f"c{i}") for i in range(5)])
    a, b = link(Node(s), Node(mine))
    sync = Sync(b, "peer", live=True)
    pump((a, b), polls=[sync])
    assert mine.channel_list() == [f"c{i}" for i in range(5)]  # every channel synced once
    assert sum(1 for ch in sync.channels.values() if ch.live) == 2 and sync.summary()["channels_not_live"] == 3
    assert sum(1 for e in b.outbound.values() if e.live) == 2 * 2 + 1  # two live channels, and the moderation state


def test_post_requests_beyond_the_window_wait_and_none_times_out_in_our_buffer(stores):
    from cablestore.peer.limits import HASHES_PER_POST_REQUEST, POST_REQUESTS_IN_FLIGHT

    node = Node(stores("mine"), timeout=5_000)
    conn = node.connect()
    n = HASHES_PER_POST_REQUEST * (POST_REQUESTS_IN_FLIGHT + 1)
    job = conn.request_posts([i.to_bytes(32, "big") for i in range(1, n + 1)], now=WALL)
    sent = responses(conn.data_to_send())
    assert len(sent) == POST_REQUESTS_IN_FLIGHT and job.outstanding == POST_REQUESTS_IN_FLIGHT + 1
    conn.receive_data(M.encode(M.PostResponse(sent[0].req_id)), WALL + 4_000)  # the peer lacks them
    (fifth,) = responses(conn.data_to_send())
    node.tick(WALL + 5_000)  # the first four time out, the fifth was sent later
    assert len(node.requests) == 1 and fifth.req_id in node.requests
    node.tick(WALL + 9_000)
    assert job.done and not job.complete and not node.state.in_flight_count


# --- answering in slices ------------------------------------------------------------------


def test_a_live_time_range_answered_page_by_page_misses_and_repeats_nothing_committed_meanwhile(chat):
    s, hashes, alice, _ = chat
    node = Node(s, policy=PeerLimits(hashes_per_page=2, slice_units=1))
    conn = node.connect("x")
    conn.feed(M.encode(M.TimeRangeRequest(RID, "general", 0, 0, 0)), WALL)
    node.run(WALL, 1)  # the request and its first page: the two newest
    assert hashes_of(responses(conn.data_to_send())) == [hashes[6], hashes[5]]
    newer = s.ingest(post(alice, TEXT, T0 + 50, channel="general", text="newer than every page"))
    older = s.ingest(post(alice, TEXT, T0 + 11, channel="general", text="one the pages will reach"))
    while node.run(WALL, 1):
        pass
    rest = hashes_of(responses(conn.data_to_send()))
    assert sorted(rest) == sorted([newer, hashes[4], hashes[3], older, hashes[2]])  # pushed or paged, each once
    assert rest[0] == newer and node.requests[RID].live  # the push, then the pages


def test_a_sync_asks_for_a_few_channels_at_a_time(stores):
    many = stores("many")
    kp = keypair("alice")
    many.ingest_many([post(kp, TEXT, T0 + i, channel=f"ch{i:02}", text="hi") for i in range(20)])
    mine = stores("mine")
    a, b = link(Node(many), Node(mine))
    sync = Sync(b, "many", parallel=3)
    most = 0
    for _ in range(200):
        sync.poll(WALL)
        for src, dst in ((b, a), (a, b)):
            data = src.data_to_send()
            if data:
                dst.receive_data(data, WALL)
        most = max(most, sum(1 for e in b.outbound.values() if not isinstance(e.request, (M.PostRequest, M.ChannelListRequest))))
        if sync.done:
            break
    assert sync.summary()["complete"] and len(mine.channel_list()) == 20
    assert most <= 2 * 3  # a history and a state request per channel in progress


def hashes_of(answers) -> list[bytes]:
    return [h for m in answers for h in m.hashes]


def test_the_poll_that_finishes_the_last_channel_asks_for_the_moderation_state_at_once(chat, stores):
    """Else the request waits for the next event: a transport's tick, a second later (every sync paid it)."""
    s, *_ = chat
    a, b = link(Node(s), Node(stores("copy")))
    sync = Sync(b, "peer-a")
    seen = []

    class Watch:
        def poll(self, now):
            sync.poll(now)
            seen.append(bool(sync.channels) and all(ch.finished for ch in sync.channels.values()) and sync.moderation is None)

    pump((a, b), polls=[Watch()])
    assert sync.summary()["complete"] and seen and not any(seen)
