"""Syncing from a ``serve`` that pulls back: no echo of what a connection sent, and which posts a sync
can reach (real TCP on 127.0.0.1 where sockets matter; everything stopped and bounded)."""

from __future__ import annotations

import asyncio
import contextlib

from cablestore import INFO, JOIN, LEAVE, TEXT, TOPIC, post_hash
from cablestore.peer import Node, Sync
from cablestore.peer.sockets import Wire, attach_dialled, dial, now_ms

from .conftest import keypair, post
from .peer_helpers import WALL, link, pump
from .test_two_way import _serving, _until

T0 = WALL - 3 * 3_600_000


@contextlib.asynccontextmanager
async def _client_of(served, client_store, live_channels: int = 1):
    """A client node dialled to a pulling ``serve`` of ``served``, once the serve's pull holds live requests on it:
    (node, wire, conn, address); everything stopped after."""
    port, stop, task = await _serving(served)
    node = Node(client_store)
    wire = Wire(node)
    try:
        conn = attach_dialled(wire, await dial("127.0.0.1", port), f"127.0.0.1:{port}", None)
        assert await _until(lambda: len(node.state.live_channels()) >= live_channels)  # the serve's pull went live
        yield node, wire, conn, f"127.0.0.1:{port}"
    finally:
        await wire.close()
        node.close()
        stop.set()
        await asyncio.wait_for(task, 20)


async def _sync(wire, conn, address: str, timeout: float = 20) -> dict:
    """Sync the client from the serve it is connected to; the summary, once complete."""
    sync = Sync(conn, address)
    wire.on_event = lambda: sync.poll(now_ms())
    sync.poll(now_ms())
    wire.flush()
    assert await _until(lambda: sync.done, timeout)
    assert sync.summary()["complete"], sync.summary()
    return sync.summary()


def _history(n: int = 200) -> list[bytes]:
    """Texts in ``general`` over three hours, and the joins, a topic and a name of their authors."""
    people = [keypair(name) for name in ("alice", "bob", "carol")]
    out = [post(kp, JOIN, T0 + i, channel="general") for i, kp in enumerate(people)]
    out.append(post(people[0], TOPIC, T0 + 5, channel="general", topic="all things"))
    out.append(post(people[1], INFO, T0 + 6, info=[("name", "bob")]))
    out += [post(people[i % 3], TEXT, T0 + 10 + i * 50_000, channel="general", text=f"post {i}") for i in range(n)]
    return out


def test_posts_a_client_syncs_from_a_pulling_serve_are_not_pushed_back_to_it(stores):
    """The server's pull keeps live requests open on the client; the posts the client ingests from the
    server must not go back to it as new (they did, one hash response per commit, and each commit
    re-read the channel's state for the server).  A post written on the client still reaches the server."""
    served, client_store = stores("served"), stores("client")
    history = _history()
    for buf in history:
        served.ingest(buf)
    written = post(keypair("dave"), TEXT, WALL, channel="general", text="written on the client")

    async def scenario():
        # The server's pull asks the client (empty) for `general`, then holds its live requests open.
        async with _client_of(served, client_store) as (node, wire, conn, address):
            assert (await _sync(wire, conn, address))["posts_ingested"] == len(history)
            await asyncio.sleep(1.5)  # the clock's tick settles the stale live state requests
            echoed = node.stats["live_pushed_hashes"]
            client_store.ingest(written)
            assert await _until(lambda: served.get(post_hash(written)) == written), "a post written on the client was not pulled"
            return echoed, node.stats["live_pushed_hashes"]

    echoed, after = asyncio.run(scenario())
    assert echoed == 0, f"{echoed} hashes the client got from the server were pushed back to it"
    assert after >= 1  # the counter counts: the client's own post was pushed


def test_a_live_state_request_left_stale_by_its_own_peer_still_gets_what_a_delete_made_current(stores):
    """A delete from C makes an older post/info current again: C's live state request is recomputed on the
    node's tick and gets it, though the commit came from C."""
    from cablestore import DELETE

    a_store, b_store = stores("a"), stores("b")
    alice = keypair("alice")
    join = post(alice, JOIN, T0, channel="general")
    old_name = post(alice, INFO, T0 + 1, info=[("name", "old")])
    new_name = post(alice, INFO, T0 + 2, info=[("name", "new")])
    for buf in (join, old_name, new_name):
        a_store.ingest(buf)
    b_store.ingest(join)
    b_store.ingest(new_name)
    node_a = Node(a_store)
    a, b = link(node_a, Node(b_store), "a", "b")
    live = b.request_state("general", 1, now=WALL)  # b's live state request, held by a (on its connection ``a``)
    pump((a, b))
    assert not live.failed and b_store.get(post_hash(old_name)) is None
    delete = post(alice, DELETE, T0 + 3, hashes=[post_hash(new_name)])
    b_store.ingest(delete)
    ask = a.request_posts([post_hash(delete)], now=WALL)  # the delete reaches a as an answer from b
    pump((a, b))
    assert ask.complete and a_store.get(post_hash(new_name)) is None
    assert b_store.get(post_hash(old_name)) is None  # not pushed at the commit: b's request was only marked stale
    node_a.tick(WALL)  # the clock recomputes it and pushes what the delete made current
    pump((a, b))
    assert b_store.get(post_hash(old_name)) == old_name


def test_a_post_info_a_peer_sent_before_its_author_joined_is_not_pushed_back_to_it(stores):
    """Newest first, a sync gets a member's post/info before the join that makes it part of a channel's state:
    when the clock recomputes the peer's live state request after the join, the post/info (the peer sent it) is
    not pushed back (it was: 4,047 hashes over a 100k sync)."""
    a_store, b_store = stores("a"), stores("b")
    alice = keypair("alice")
    join = post(alice, JOIN, T0, channel="general")
    name = post(alice, INFO, T0 + 1, info=[("name", "alice")])
    other = post(keypair("bob"), JOIN, T0 + 2, channel="general")  # so b's channel list names general
    for buf in (join, name, other):
        b_store.ingest(buf)
    a_store.ingest(other)
    node_a = Node(a_store)
    a, b = link(node_a, Node(b_store), "a", "b")
    live = b.request_state("general", 1, now=WALL)  # b's live state request, held by a
    pump((a, b))
    assert not live.failed
    for sent in (name, join):  # b sends them as answers, the post/info first
        ask = a.request_posts([post_hash(sent)], now=WALL)
        pump((a, b))
        assert ask.complete and a_store.get(post_hash(sent)) == sent
        node_a.tick(WALL)  # the clock recomputes b's stale state request between the two
        pump((a, b))
    assert node_a.stats["live_pushed_hashes"] == 0, "hashes b sent were pushed back to it"


def test_superseded_state_posts_are_not_reachable_by_requests(stores):
    """Why a sync stores fewer posts than its source (89,047 of 92,395 at 100k): a channel state request
    answers the latest join/leave and post/info of each member and the latest topic, a time range only
    texts and deletes; the posts these superseded are listed by no request.  The state is the same."""
    source, synced = stores("source"), stores("synced")
    alice, bob = keypair("alice"), keypair("bob")
    superseded = [
        post(alice, JOIN, T0, channel="general"),
        post(alice, TOPIC, T0 + 1, channel="general", topic="first"),
        post(bob, INFO, T0 + 2, info=[("name", "b")]),
        post(bob, JOIN, T0 + 3, channel="general"),
        post(alice, LEAVE, T0 + 10, channel="general"),
    ]
    current = [
        post(alice, JOIN, T0 + 11, channel="general"),
        post(bob, TOPIC, T0 + 12, channel="general", topic="second"),
        post(bob, INFO, T0 + 13, info=[("name", "bob")]),
        post(bob, LEAVE, T0 + 14, channel="general"),
        post(alice, TEXT, T0 + 20, channel="general", text="hi"),
    ]
    for buf in superseded + current:
        source.ingest(buf)
    x, y = link(Node(synced), Node(source))
    sync = Sync(x, "source")
    pump((x, y), polls=[sync])
    assert sync.summary()["complete"]
    held = {h for h in map(post_hash, superseded + current) if synced.get(h) is not None}
    assert held == set(map(post_hash, current))
    assert synced.channel_state_answer("general") == source.channel_state_answer("general")
    assert synced.topic("general") == source.topic("general") and synced.members("general") == source.members("general")


def test_live_state_reads_while_a_client_syncs_many_post_infos_are_bounded_by_ticks_not_commits(stores):
    """A post/info may enter any channel's state, so the client marks the server's live state requests of every
    channel stale on it: they are read again once a tick, and once each time their stale hashes reach the limit."""
    served, client_store = stores("served"), stores("client")
    people = [keypair(f"user{i}") for i in range(40)]
    channels = [f"room{i}" for i in range(12)]
    history = [post(kp, JOIN, T0 + i, channel=ch) for i, kp in enumerate(people) for ch in channels]
    history += [post(kp, INFO, T0 + 1000 + 40 * r + i, info=[("name", f"u{i} r{r}")]) for r in range(40) for i, kp in enumerate(people)]
    for buf in history:
        served.ingest(buf)

    async def scenario():
        async with _client_of(served, client_store, live_channels=len(channels)) as (node, wire, conn, address):
            started = asyncio.get_running_loop().time()
            await _sync(wire, conn, address, 30)
            return node.stats["live_state_reads"], asyncio.get_running_loop().time() - started, wire.tick_seconds

    reads, elapsed, tick = asyncio.run(scenario())
    # Once a tick per channel, and once more per channel each time the connection's held post/infos reach the limit.
    ticks = elapsed / tick + 2
    overflows = len(history) // 1024 + 1
    assert reads <= len(channels) * (ticks + overflows), (reads, elapsed, tick)


def test_a_delete_the_client_held_and_the_server_lists_is_not_pushed_back_to_the_server(stores):
    """A listing of posts the client holds can teach a delete its channel (a commit): the listing came from the
    server, so nothing of it goes back to the server's live requests (it did: thousands of hashes and a channel
    state read per commit in a 100k sync)."""
    from cablestore import DELETE

    served, client_store = stores("served"), stores("client")
    alice = keypair("alice")
    target = post(alice, TEXT, WALL - 60_000, channel="general", text="soon gone")
    delete = post(alice, DELETE, WALL - 30_000, hashes=[post_hash(target)])
    texts = [post(alice, TEXT, WALL - 50_000 + i, channel="general", text=f"kept {i}") for i in range(5)]
    for buf in (target, delete, *texts):
        served.ingest(buf)
    client_store.ingest(delete)  # held, but the client knows no channel for it yet

    async def scenario():
        async with _client_of(served, client_store) as (node, wire, conn, address):
            await _sync(wire, conn, address)
            return node.stats["live_pushed_hashes"]

    pushed = asyncio.run(scenario())
    # The listing taught the delete its channel: the client lists it there now, as the server does.
    assert any(key.endswith(post_hash(delete)) for key in client_store.time_range_page("general", 0, WALL + 1, None, 100))
    assert pushed == 0, f"{pushed} hashes the server listed were pushed back to it"


def test_a_channel_longer_than_the_pending_hash_bound_syncs_whole_a_page_at_a_time(stores):
    """A peer lists a channel's history faster than its posts arrive: asked whole, a channel of more posts than
    the syncing side may wait on failed ("overflow": every 1M-post sync); history is now asked a page at a time."""
    from cablestore.peer import PeerLimits, run_sync

    served, client_store = stores("served"), stores("client")
    people = [keypair(f"writer{i}") for i in range(4)]
    history = [post(people[i % 4], TEXT, T0 + i * 1000, channel="general", text=f"post {i}") for i in range(3000)]
    served.ingest_many(history)

    async def scenario():
        port, stop, task = await _serving(served, pull=False)
        try:
            return await run_sync(client_store, f"127.0.0.1:{port}", policy=PeerLimits(pending_hashes=1500), timeout=60, signals=False)
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)

    summary = asyncio.run(scenario())
    assert summary["complete"], summary
    assert all(client_store.get(post_hash(p)) == p for p in history)
    assert summary["requests_sent"] >= 3 + 3  # three pages of history (1,024 hashes each at most), and their posts


def test_a_post_the_pulling_side_refuses_does_not_end_its_live_pull(stores):
    """A serve that dropped a blocked user's posts pulls from a peer still holding one: the refusal of that post
    ended the whole pull (live requests included), so nothing the peer wrote later reached the serve."""
    from cablestore import Keypair
    from cablestore.authoring.author import Author

    admin, spammer, bob = Keypair(), keypair("spammer"), keypair("bob")
    served, client_store = stores("served"), stores("client")
    served.set_local_user(admin.public_key)
    Author(served, admin).block([spammer.public_key], drop=True, notify=True)
    served.ingest(post(bob, JOIN, WALL - 10_000, channel="general"))
    client_store.ingest(post(bob, JOIN, WALL - 10_000, channel="general"))
    client_store.ingest(post(spammer, TEXT, WALL - 5_000, channel="general", text="buy now"))  # recent: a live request lists it
    later = post(bob, TEXT, WALL + 1, channel="general", text="written after the refusal")

    async def scenario():
        async with _client_of(served, client_store):
            await asyncio.sleep(1.0)  # the serve's pull fetched (and refused) the spammer's post
            client_store.ingest(later)
            return await _until(lambda: served.get(post_hash(later)) == later, 10)

    assert asyncio.run(scenario()), "a post written after the refusal never reached the serve"
