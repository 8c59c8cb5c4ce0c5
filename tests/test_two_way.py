"""Peers that compare channel names exactly and only answer (as cable-core.js 0.2.1 does):
sync asks for every spelling, channel state answers end on the latest topic, channel lists use a
spelling the posts use, and ``serve`` pulls from whoever connects."""

from __future__ import annotations

from cablestore import JOIN, TEXT, TOPIC, Store, post_hash
from cablestore.peer import Node, Sync
from cablestore.wire.codec import decode_post

from .conftest import keypair, post
from .exact_peer import ExactPeer
from .peer_helpers import WALL

T0 = WALL - 3_600_000


def mixed_case_posts():
    """``Dev-Talk``: a join, a topic, 20 texts; ``dev-talk``: 3 texts by someone else (one channel here, two there)."""
    alice, bob = keypair("alice"), keypair("bob")
    posts = [post(alice, JOIN, T0, channel="Dev-Talk"), post(alice, TOPIC, T0 + 1, channel="Dev-Talk", topic="talk")]
    posts += [post(alice, TEXT, T0 + 10 + i, channel="Dev-Talk", text=f"dev {i}") for i in range(20)]
    posts += [post(bob, TEXT, T0 + 100 + i, channel="dev-talk", text=f"lower {i}") for i in range(3)]
    return posts


def drive(conn, peer: ExactPeer, sync: Sync, rounds: int = 200) -> None:
    """Move bytes between a connection and an exact peer until quiet (bounded)."""
    for _ in range(rounds):
        sync.poll(WALL)
        out = conn.data_to_send()
        back = peer.receive(out) if out else b""
        if back:
            conn.receive_data(back, WALL)
        sync.poll(WALL)
        if not out and not back and sync.done:
            return
    raise AssertionError("still talking")


def test_sync_asks_for_every_spelling_a_case_sensitive_peer_lists(stores):
    posts = mixed_case_posts()
    peer = ExactPeer(posts)
    mine = stores("mine")
    conn = Node(mine).connect("exact")
    sync = Sync(conn, "exact")
    drive(conn, peer, sync)
    summary = sync.summary()
    assert summary["complete"], summary
    assert summary["channels"] == ["dev-talk"]  # merged under the casefolded key
    assert all(mine.get(post_hash(p)) == p for p in posts)  # all 25, under both spellings
    assert len(mine.channel_time_range("dev-talk")) == 23 and mine.topic("DEV-TALK") == "talk"
    spelled = summary["spellings"]
    assert set(spelled) == {"Dev-Talk", "dev-talk"}
    assert spelled["Dev-Talk"]["posts"] == 22 and spelled["dev-talk"]["posts"] == 3
    assert all(v["asked"] >= 2 for v in spelled.values())


def test_sync_of_a_named_channel_asks_for_the_spellings_listed(stores):
    posts = mixed_case_posts()
    peer = ExactPeer(posts)
    mine = stores("mine")
    conn = Node(mine).connect("exact")
    sync = Sync(conn, "exact", channels=["DEV-TALK"])
    drive(conn, peer, sync)
    assert sync.summary()["complete"]
    assert all(mine.get(post_hash(p)) == p for p in posts)


def apply_in_arrival_order(store: Store, hashes) -> str:
    """The topic a peer ends on that keeps the last post/topic to arrive (cable-core.js)."""
    topic = None
    for h in hashes:
        p = decode_post(store.get(h))
        if p.post_type == TOPIC:
            topic = p.topic
    return topic


def test_channel_state_answer_ends_on_the_latest_topic(stores):
    s = stores("s")
    a, b = keypair("alice"), keypair("bob")
    for p in (
        post(a, JOIN, T0, channel="general"),
        post(b, JOIN, T0 + 1, channel="general"),
        post(a, TOPIC, T0 + 2, channel="general", topic="old"),
        post(b, TOPIC, T0 + 3, channel="general", topic="new"),
    ):
        s.ingest(p)
    answer = s.channel_state_answer("general")
    topics = [decode_post(s.get(h)).topic for h in answer if decode_post(s.get(h)).post_type == TOPIC]
    assert sorted(topics) == ["new", "old"]  # the superseded topic still makes alice a member
    assert apply_in_arrival_order(s, answer) == "new" == s.topic("general")


def test_channel_list_uses_the_spelling_of_the_earliest_post(stores):
    s = stores("s")
    a = keypair("alice")
    s.ingest(post(a, JOIN, T0, channel="dev-talk"))
    s.ingest(post(a, TEXT, T0 + 5, channel="Dev-Talk", text="first text"))
    s.ingest(post(a, JOIN, T0, channel="plain"))
    assert s.listed_spellings(["dev-talk", "plain"]) == ["Dev-Talk", "plain"]  # a text or topic before joins
    s.ingest(post(a, TOPIC, T0 + 9, channel="DEV-talk", topic="t"))
    assert s.listed_spellings(["dev-talk"]) == ["Dev-Talk"]  # a later spelling does not take over
    s.ingest(post(a, TOPIC, T0 + 1, channel="dev-TALK", topic="t"))
    assert s.listed_spellings(["dev-talk"]) == ["dev-TALK"]  # an earlier one does
    assert s.channel_list() == ["dev-talk", "plain"]  # the store's keys stay casefolded


# --- serve pulls: real sockets on 127.0.0.1 ---------------------------------------------

async def _serving(store, **kw):
    import asyncio

    from cablestore.peer import run_server

    ready, stop = asyncio.Event(), asyncio.Event()
    port = []

    def on_ready(host, p):
        port.append(p)
        ready.set()

    task = asyncio.create_task(run_server(store, "127.0.0.1:0", ready=on_ready, stop=stop, **kw))
    await asyncio.wait_for(ready.wait(), 10)
    return port[0], stop, task


async def _until(check, timeout=10.0):
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _history_requests_of_one_visit(served, posts, arrived=lambda: True) -> list:
    """An answer-only peer holding ``posts`` visits a pulling serve until the pull went live: the history requests it got."""
    import asyncio

    from cablestore.wire import messages as M

    from .exact_peer import ExactPeerClient

    port, stop, task = await _serving(served)
    try:
        client = await ExactPeerClient(ExactPeer(posts)).connect("127.0.0.1", port)
        await _until(arrived)
        await _until(lambda: any(isinstance(m, M.TimeRangeRequest) and m.time_end == 0 for m in client.peer.asked))
        await client.close()
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
    return [m for m in client.peer.asked if isinstance(m, M.TimeRangeRequest) and m.time_end != 0]


def test_serve_pulls_from_an_answer_only_peer_and_pushes_what_it_writes_to_a_third_peer(stores):
    import asyncio

    from cablestore.wire import messages as M

    from .exact_peer import ExactPeerClient
    from .peer_helpers import RawPeer, hashes_of

    served = stores("served")
    a, c = keypair("alice"), keypair("carol")
    served.ingest(post(a, JOIN, T0, channel="general"))
    before = post(c, TEXT, T0 + 5, channel="General", text="held before connecting")
    after_text = post(c, TEXT, WALL, channel="General", text="written while connected")

    async def scenario():
        port, stop, task = await _serving(served)
        try:
            third = await RawPeer.connect(port)  # holds a live time range on the served store
            rid = b"\x00\x00\x07\x01"
            await third.send(M.TimeRangeRequest(rid, "general", 0, 0, 0))
            client = await ExactPeerClient(ExactPeer([before])).connect("127.0.0.1", port)
            assert await _until(lambda: served.get(post_hash(before)) is not None), "the held post was not pulled"
            asked = {type(m).__name__ for m in client.peer.asked}
            assert {"ChannelListRequest", "TimeRangeRequest", "ChannelStateRequest", "ModerationStateRequest"} <= asked
            assert any(isinstance(m, M.TimeRangeRequest) and m.channel == "General" and m.time_end == 0 for m in client.peer.asked)
            client.post(after_text)  # the peer only answers its live requests: serve must hold one
            assert await _until(lambda: served.get(post_hash(after_text)) == after_text), "the new post was not pulled"

            async def pushed():
                while post_hash(after_text) not in hashes_of(m for m in third.inbox if getattr(m, "req_id", None) == rid):
                    if not await third.read(0.2):
                        return False
                return True

            assert await asyncio.wait_for(pushed(), 10)
            await client.close()
            third.writer.close()
        finally:
            stop.set()
            summary = await asyncio.wait_for(task, 20)
        return summary

    summary = asyncio.run(scenario())
    assert summary["pulls"] >= 2 and summary["pulled_posts"] >= 2


def test_serve_no_pull_only_answers(stores):
    import asyncio

    from .exact_peer import ExactPeerClient

    served = stores("served")
    held = post(keypair("carol"), TEXT, T0, channel="general", text="never asked for")

    async def scenario():
        port, stop, task = await _serving(served, pull=False)
        try:
            client = await ExactPeerClient(ExactPeer([held])).connect("127.0.0.1", port)
            await asyncio.sleep(0.5)
            assert client.peer.asked == []
            await client.close()
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)

    asyncio.run(scenario())
    assert served.get(post_hash(held)) is None


def test_a_reconnecting_peer_is_asked_only_from_the_cursor(stores):
    import asyncio


    served = stores("served")
    posts = mixed_case_posts()

    first = asyncio.run(_history_requests_of_one_visit(served, posts, lambda: all(served.get(post_hash(p)) for p in posts)))
    second = asyncio.run(_history_requests_of_one_visit(served, posts))
    assert first and all(m.time_start == 0 for m in first)
    newest = max(decode_post(p).timestamp for p in posts if decode_post(p).post_type == TEXT and decode_post(p).channel == "dev-talk")
    assert second and all(m.time_start > 0 for m in second)  # from the cursor, not the whole history
    assert all(m.time_start <= newest - 3_600_000 + 1 for m in second)


def test_a_peer_comparing_names_exactly_syncs_a_mixed_case_channel_from_serve_completely(stores):
    import asyncio

    from cablestore.wire import messages as M

    from .peer_helpers import RawPeer, hashes_of

    served = stores("served")
    posts = mixed_case_posts()
    for p in posts:
        served.ingest(p)

    async def scenario():
        port, stop, task = await _serving(served, pull=False)
        try:
            peer = await RawPeer.connect(port)
            n = 0

            def rid():
                nonlocal n
                n += 1
                return n.to_bytes(4, "big")

            r = rid()
            await peer.send(M.ChannelListRequest(r, 0, 0))
            (listing,) = await peer.answers(r)
            got = {}
            for name in listing.channels:  # asked exactly as listed, as cable-core.js does
                wanted = []
                for req in (M.TimeRangeRequest(rid(), name, 0, 1 << 62, 0),
                            M.ChannelStateRequest(rid(), name, 0)):
                    await peer.send(req)
                    wanted += hashes_of(await peer.answers(req.req_id))
                r = rid()
                await peer.send(M.PostRequest(r, tuple(dict.fromkeys(wanted))))
                for m in await peer.answers(r):
                    for buf in m.posts:
                        got[post_hash(buf)] = buf
            peer.writer.close()
            return listing.channels, got
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)

    listed, got = asyncio.run(scenario())
    assert listed == ("Dev-Talk",)  # the earliest text or topic (alice's topic) spells it so
    assert set(got) == {post_hash(p) for p in posts}  # every post, under the one name listed


def test_serve_pulls_a_channel_the_client_joined_after_connecting(stores):
    """cable-client.js joins its default channel ~15 ms after connecting, after answering serve's one channel
    list request with nothing (the interop run): serve learns the channel from the client's own requests."""
    import asyncio

    from cablestore.wire import messages as M

    from .exact_peer import ExactPeerClient

    served = stores("served")
    c = keypair("carol")
    written = post(c, TEXT, WALL, channel="default", text="written in a channel joined late")

    async def scenario():
        port, stop, task = await _serving(served)
        try:
            client = await ExactPeerClient(ExactPeer()).connect("127.0.0.1", port)  # lists no channel
            assert await _until(lambda: any(isinstance(m, M.ChannelListRequest) for m in client.peer.asked))
            await asyncio.sleep(0.2)
            client.writer.write(M.encode(M.TimeRangeRequest(b"\x00\x00\x09\x01", "default", 0, 0, 0)))  # as the client asks
            assert await _until(lambda: any(isinstance(m, M.TimeRangeRequest) and m.channel == "default" and m.time_end == 0 for m in client.peer.asked)), \
                "serve did not start pulling the channel the client asked about"
            client.post(written)
            assert await _until(lambda: served.get(post_hash(written)) == written), "the post in the late channel was not pulled"
            await client.close()
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)

    asyncio.run(scenario())


def test_a_peer_that_held_nothing_when_pulled_is_asked_only_from_then_on_its_next_connection(stores):
    """A syncing peer is empty when the serving side pulls from it: its next contact must not re-list what it got."""
    import asyncio


    served = stores("served")
    for p in mixed_case_posts():
        served.ingest(p)

    before = WALL
    first = asyncio.run(_history_requests_of_one_visit(served, []))
    second = asyncio.run(_history_requests_of_one_visit(served, []))
    assert first and all(m.time_start == 0 for m in first)
    # Asked from the moment of the first contact, less the margin: not the whole history again.
    assert second and all(m.time_start >= before - 3_600_000 for m in second)
