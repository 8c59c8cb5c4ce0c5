"""Private cabals: serve and sync over the Cable Handshake, real TCP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from cablestore import Keypair, Store
from cablestore.authoring.author import Author
from cablestore.authoring.workload import generate
from cablestore.errors import CabalMismatchError, HandshakeRequiredError, WrongCabalKeyError
from cablestore.peer import Node, PeerLimits, PeerServer, run_server, run_sync
from cablestore.peer.secure import PrivateCabal, one_wire_message
from cablestore.wire import messages as M
from cablestore.wire.decoding import decode
from cablestore.wire.fields import encode_varint
from cablestore.wire.handshake import LEGACY_PROLOGUE, CableHandshake, MessageReceived

from .peer_helpers import answers

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
FAST = PeerLimits(handshake_timeout=400, max_connections=2, memory_mb=128)


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def full(tmp_path):
    store = Store(tmp_path / "full")
    store.ingest_many(generate(seed=5, posts=300))
    yield store
    store.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def closed_with_nothing(reader, timeout: float = 5.0) -> bytes:
    """Read until the server closes; what it sent."""
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(reader.read(4096), deadline - time.monotonic())
        except (TimeoutError, ConnectionError):
            break
        if not chunk:
            return got
        got += chunk
    return got + b"<not closed>" if time.monotonic() >= deadline else got


class Initiator:
    """A hand-driven initiator over a raw socket: the test's own side of the handshake."""

    def __init__(self, reader, writer, key=KEY, keypair=None, prologue=b"CABLE/1.0"):
        self.reader, self.writer = reader, writer
        self.hs = CableHandshake(initiator=True, cabal_key=key, now=now_ms(), keypair=keypair, prologue=prologue)
        self.messages: list[bytes] = []

    @classmethod
    async def connect(cls, port, **kw):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, **kw)

    def flush(self):
        self.writer.write(self.hs.data_to_send())

    async def pump(self, until, timeout=5.0):
        self.flush()
        deadline = time.monotonic() + timeout
        while not until() and time.monotonic() < deadline:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
            for event in self.hs.receive_data(data, now_ms()):
                if isinstance(event, MessageReceived):
                    self.messages.append(event.data)
            self.flush()
            if not data or self.hs.finished:
                break
        return until()


def test_one_wire_message():
    body = b"\x00" * 5
    assert one_wire_message(encode_varint(5) + body)
    assert not one_wire_message(encode_varint(6) + body)
    assert not one_wire_message(encode_varint(4) + body)
    assert not one_wire_message(b"\x80")
    assert not one_wire_message(b"\x00")


def test_private_sync_end_to_end_and_plain_beside_it(full, tmp_path):
    mine, plain, outsider = (Store(tmp_path / n) for n in ("mine", "plain", "outsider"))

    async def main():
        server = await PeerServer(Node(full), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        plain_port = await server.listen("127.0.0.1", 0)
        try:
            private = await run_sync(mine, f"127.0.0.1:{server.port}", cabal_key=KEY, timeout=30)
            legacy = await run_sync(mine, f"127.0.0.1:{server.port}", cabal_key=KEY, prologue=LEGACY_PROLOGUE, timeout=30)
            open_ = await run_sync(plain, f"127.0.0.1:{plain_port}", timeout=30)
            # a plain client on the private port: closed at once, and told the peer may require a cabal key
            started = time.monotonic()
            with pytest.raises(HandshakeRequiredError, match="may require a cabal key"):
                await run_sync(outsider, f"127.0.0.1:{server.port}", timeout=30, progress_timeout=20)
            refused = {"seconds": time.monotonic() - started}
            return private, legacy, open_, refused, server.node.snapshot()
        finally:
            await server.close()

    private, legacy, open_, refused, snap = run(main())
    assert private["complete"] and private["posts_ingested"] > 200, private
    assert legacy["complete"], legacy
    assert open_["complete"] and open_["posts_ingested"] == private["posts_ingested"]
    assert refused["seconds"] < 3, refused
    assert snap["handshakes"] == 2 and snap["handshakes_failed_plain"] == 1, snap
    assert answers(mine) == answers(plain)
    for s in (mine, plain, outsider):
        s.close()


def test_wrong_key_fails_both_sides(full, tmp_path):
    other = Store(tmp_path / "other")

    async def main():
        server = await PeerServer(Node(full), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            with pytest.raises(WrongCabalKeyError, match="the handshake failed: the peer does not hold this cabal key") as caught:
                await run_sync(other, f"127.0.0.1:{server.port}", cabal_key=OTHER, timeout=30, progress_timeout=5)
            return caught.value, server.node.snapshot()
        finally:
            await server.close()

    error, snap = run(main())
    assert isinstance(error, WrongCabalKeyError)
    assert snap["handshakes_failed_key"] == 1
    assert snap["handshakes_failed"] == 1 and snap["closed"].get("handshake") == 1
    assert snap.get("handshakes", 0) == 0 and snap.get("requests", 0) == 0
    other.close()


def test_plain_client_on_private_port_gets_zero_bytes_and_is_closed(full):
    request = M.encode(M.ChannelListRequest(b"\x01\x02\x03\x04", 0, 0))

    async def main():
        server = await PeerServer(Node(full, policy=FAST), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            got = []
            for data in (request, request * 8, os.urandom(300)):  # short, 48 bytes and more, garbage
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(data)
                got.append(await closed_with_nothing(reader))
                writer.close()
            return got, server.node.snapshot()
        finally:
            await server.close()

    got, snap = run(main())
    assert got == [b"", b"", b""]
    assert snap["closed"].get("handshake") == 3 and snap.get("requests", 0) == 0 and snap.get("received", 0) == 0


def test_handshake_deadline_and_half_open_handshakes_hold_slots(full):
    async def main():
        server = await PeerServer(Node(full, policy=FAST), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            silent = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
            await asyncio.sleep(0.1)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)  # a third: over max_connections
            third = await closed_with_nothing(reader, 2.0)
            writer.close()
            refused = server.node.snapshot().get("connections_refused", 0)
            started = time.monotonic()
            first = await closed_with_nothing(silent[0][0], 5.0)
            waited = time.monotonic() - started
            for _, w in silent:
                w.close()
            return third, refused, first, waited, server.node.snapshot()
        finally:
            await server.close()

    third, refused, first, waited, snap = run(main())
    assert third == b"" and refused == 1  # the half-open handshakes held both slots
    assert first == b"" and waited < 3.0  # closed by the 400 ms handshake deadline (and the tick), not by the test
    assert snap["closed"].get("handshake") == 2


def test_draft8_request_answered_over_the_handshake_and_bad_segments_close(full):
    async def main():
        server = await PeerServer(Node(full), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            peer = await Initiator.connect(server.port, prologue=LEGACY_PROLOGUE)
            assert await peer.pump(lambda: peer.hs.handshake_complete)
            req_id = os.urandom(8)
            peer.hs.send_message(M.encode(M.ChannelListRequest(req_id, 0, 0), M.DRAFT8))
            assert await peer.pump(lambda: peer.messages)
            answer = decode(peer.messages[0], M.DRAFT8)
            # now a handshake message that is not one wire message (two of them): closed
            one = M.encode(M.ChannelListRequest(os.urandom(8), 0, 0), M.DRAFT8)
            peer.hs.send_message(one + one)
            peer.flush()
            after = await closed_with_nothing(peer.reader)
            # and a totalLen over the bound: closed, nothing more read
            big = await Initiator.connect(server.port)
            assert await big.pump(lambda: big.hs.handshake_complete)
            big.hs.send_message(encode_varint(8 << 20) + b"\x00" * (8 << 20))
            big.writer.write(big.hs.data_to_send()[:4096])
            after_big = await closed_with_nothing(big.reader)
            big.writer.close()
            peer.writer.close()
            return answer, req_id, after, after_big, server.node.snapshot()
        finally:
            await server.close()

    answer, req_id, after, after_big, snap = run(main())
    assert isinstance(answer, M.ChannelListResponse) and answer.req_id == req_id and answer.channels
    assert after == b"" and after_big == b""
    assert snap["closed"].get("framing") == 1 and snap["closed"].get("handshake") == 1, snap


def test_serve_refuses_another_cabals_store(tmp_path):
    store = Store(tmp_path / "s")
    store.join_cabal(KEY)

    async def main():
        await run_server(store, "127.0.0.1:0", cabal_key=OTHER, stop=asyncio.Event())

    with pytest.raises(CabalMismatchError):
        run(main())
    store.close()


def test_cli_sync_refuses_another_cabals_store(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for name in ("a", "b"):
        subprocess.run([sys.executable, "-m", "cablestore", "cabal", "new", str(tmp_path / f"{name}.key")], check=True, capture_output=True, env=env)
    Store(tmp_path / "s").close()
    from cablestore.authoring.keyfile import read_cabal_key

    with Store(tmp_path / "s") as s:
        s.join_cabal(read_cabal_key(tmp_path / "a.key"))
    out = subprocess.run(
        [sys.executable, "-m", "cablestore", "sync", str(tmp_path / "s"), "--connect", "127.0.0.1:9", "--cabal-key", str(tmp_path / "b.key")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and ("CabalMismatchError" in lines[0] or "TransportError" in lines[0]), out.stderr


def test_a_blocked_user_is_closed_after_the_handshake_and_a_known_one_identified(tmp_path):
    me, eve = Keypair(), Keypair()
    store = Store(tmp_path / "s", local_user=me.public_key)
    author_me = Author(store, me)
    author_me.block([eve.public_key])

    async def main():
        server = await PeerServer(Node(store), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            blocked = await Initiator.connect(server.port, keypair=eve)
            await blocked.pump(lambda: blocked.hs.handshake_complete)
            got = await closed_with_nothing(blocked.reader)
            blocked.writer.close()
            known = await Initiator.connect(server.port, keypair=me)
            assert await known.pump(lambda: known.hs.handshake_complete)
            await asyncio.sleep(0.2)
            users = [c.user for c in server.node.connections]
            known.writer.close()
            return got, users, server.node.snapshot()
        finally:
            await server.close()

    got, users, snap = run(main())
    assert got == b"" and snap["closed"].get("blocked") == 1
    assert users == [me.public_key]  # the local user authored the block: a known user
    store.close()


@pytest.fixture
def cabal(tmp_path):
    """me (the local user) blocks zed without notifying; ann blocks bob; bob blocks cat; dan blocks no one."""
    people = {n: Keypair() for n in ("me", "ann", "bob", "cat", "dan", "zed")}
    store = Store(tmp_path / "cabal", local_user=people["me"].public_key)
    authors = {n: Author(store, kp) for n, kp in people.items()}
    texts = {n: authors[n].text("general", f"hello from {n}") for n in ("ann", "bob", "cat", "dan")}
    quiet_block = authors["me"].block([people["zed"].public_key], notify=False)
    authors["ann"].block([people["bob"].public_key], notify=True)
    authors["bob"].block([people["cat"].public_key], notify=True)
    yield store, people, texts, quiet_block
    store.close()


def test_store_shunned_and_the_quiet_block_shared_only_with_identified_users(cabal):
    store, people, texts, quiet_block = cabal
    bob, zed = people["bob"].public_key, people["zed"].public_key
    assert store.shunned(bob) == {people["ann"].public_key, people["cat"].public_key}
    assert store.shunned(people["dan"].public_key) == frozenset()
    assert store.known_user(bob) and store.known_user(zed) and not store.known_user(Keypair().public_key)
    assert store.shareable([quiet_block]) == [None]  # a plain peer, or an unknown user
    assert store.shareable([quiet_block], to=bob) != [None]
    assert store.shareable([quiet_block], to=zed) == [None]  # never the blocked user
    assert quiet_block in store.moderation_state(to=bob) and quiet_block not in store.moderation_state()
    assert quiet_block not in store.moderation_state(to=zed)


def test_authenticated_post_responses_leave_out_shunned_authors(cabal):
    store, people, texts, quiet_block = cabal
    wanted = (*texts.values(), quiet_block)

    async def ask(port, keypair):
        peer = await Initiator.connect(port, keypair=keypair)
        assert await peer.pump(lambda: peer.hs.handshake_complete)
        peer.hs.send_message(M.encode(M.PostRequest(os.urandom(8), wanted), M.DRAFT8))
        await peer.pump(lambda: any(isinstance(decode(m, M.DRAFT8), M.PostResponse) and not decode(m, M.DRAFT8).posts for m in peer.messages))
        peer.writer.close()
        return {p[:32] for m in peer.messages for p in decode(m, M.DRAFT8).posts}

    async def main():
        server = await PeerServer(Node(store), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            return await ask(server.port, people["bob"]), await ask(server.port, Keypair())
        finally:
            await server.close()

    as_bob, as_stranger = run(main())
    pk = {n: kp.public_key for n, kp in people.items()}
    assert as_bob == {pk["bob"], pk["dan"], pk["me"]}  # ann blocks bob, bob blocks cat; the quiet block (by me) is sent
    assert as_stranger == {pk["ann"], pk["bob"], pk["cat"], pk["dan"]}  # an unknown user: all texts, no quiet block


def test_connections_per_user_and_per_address(cabal):
    store, people, _, _ = cabal

    async def main():
        policy = PeerLimits(connections_per_user=1, connections_per_address=3)
        server = await PeerServer(Node(store, policy=policy), "127.0.0.1", 0, private=PrivateCabal(KEY)).start()
        try:
            first = await Initiator.connect(server.port, keypair=people["dan"])
            assert await first.pump(lambda: first.hs.handshake_complete)
            second = await Initiator.connect(server.port, keypair=people["dan"])
            await second.pump(lambda: second.hs.handshake_complete)
            second_got = await closed_with_nothing(second.reader)
            third = await Initiator.connect(server.port, keypair=Keypair())  # an unknown user: no per-user count
            assert await third.pump(lambda: third.hs.handshake_complete)
            extra = await asyncio.open_connection("127.0.0.1", server.port)  # a 4th from 127.0.0.1 (dan's first and the stranger hold 2)
            fifth = await asyncio.open_connection("127.0.0.1", server.port)
            fifth_got = await closed_with_nothing(fifth[0], 3.0)
            snap = server.node.snapshot()
            for w in (first.writer, second.writer, third.writer, extra[1], fifth[1]):
                w.close()
            return second_got, fifth_got, snap
        finally:
            await server.close()

    second_got, fifth_got, snap = run(main())
    assert second_got == b"" and snap["closed"].get("per-user") == 1
    assert fifth_got == b"" and snap["connections_refused"] == 2


def _cli(*argv, **kw):
    return subprocess.run([sys.executable, "-m", "cablestore", *map(str, argv)], capture_output=True, text=True, timeout=120, **kw)


def test_cli_serve_private_and_plain_and_sync_with_keys(full, tmp_path):
    from .conftest import stop

    for name in ("cabal.key", "other.key"):
        assert _cli("cabal", "new", tmp_path / name).returncode == 0
    assert _cli("keygen", tmp_path / "me.key").returncode == 0
    refused = _cli("serve", tmp_path / "nowhere", "--listen", "127.0.0.1:0", "--plain-listen", "127.0.0.1:0")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1 and "--cabal-key" in refused.stderr
    path = full.path
    full.close()
    serve = subprocess.Popen([sys.executable, "-m", "cablestore", "serve", str(path), "--listen", "127.0.0.1:0", "--cabal-key", str(tmp_path / "cabal.key"),
                              "--key", str(tmp_path / "me.key"), "--plain-listen", "127.0.0.1:0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [json.loads(serve.stdout.readline()) for _ in range(2)]
        assert [x["kind"] for x in lines] == ["private", "plain"]
        private, plain = (x["listening"] for x in lines)
        good = _cli("sync", tmp_path / "a", "--connect", private, "--cabal-key", tmp_path / "cabal.key", "--key", tmp_path / "me.key", "--json")
        legacy = _cli("sync", tmp_path / "a", "--connect", private, "--cabal-key", tmp_path / "cabal.key", "--legacy-prologue", "--json")
        open_ = _cli("sync", tmp_path / "b", "--connect", plain, "--json")
        wrong = _cli("sync", tmp_path / "c", "--connect", private, "--cabal-key", tmp_path / "other.key", "--progress-timeout", "3", "--json")
        mixed = _cli("sync", tmp_path / "a", "--connect", private, "--cabal-key", tmp_path / "other.key")
    finally:
        assert stop(serve) == 0
    assert good.returncode == 0 and json.loads(good.stdout)["posts_ingested"] > 200, good.stderr
    assert legacy.returncode == 0 and json.loads(legacy.stdout)["complete"]
    assert open_.returncode == 0 and json.loads(open_.stdout)["posts_ingested"] == json.loads(good.stdout)["posts_ingested"]
    assert wrong.returncode == 2 and json.loads(wrong.stdout)["error"] == "WrongCabalKeyError", wrong
    assert "does not hold this cabal key" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()  # a failed sync into a store it made leaves nothing
    assert mixed.returncode == 2 and "CabalMismatchError" in mixed.stderr and len(mixed.stderr.strip().splitlines()) == 1


def test_a_partial_message_is_not_timed_out_while_our_own_backlog_pauses_reading(full):
    """Regression: a syncing peer busy ingesting stopped reading, and then closed the remote as 'slow' for the message it had not read."""
    node = Node(full, policy=PeerLimits(frame_timeout=1000))
    conn = node.connect("remote")
    whole = b"".join(M.encode(M.ChannelListRequest(i.to_bytes(4, "big"), 0, 1)) for i in range(1, 3000))
    partial = M.encode(M.ChannelListRequest(b"\xff\xff\xff\xff", 0, 1))
    conn.feed(whole + partial[:-2], 0)
    assert conn.inbox.ready_bytes >= node.policy.input_reserved and conn.read_allowance() == 0
    conn.check_time(5000)
    assert not conn.closed  # our backlog, not the remote's slowness
    while node.run(5000, 1000):
        pass
    conn.check_time(5001)
    assert conn.closed and conn.close_reason == "slow"  # once the backlog is handled, the old partial message counts


def test_a_stream_of_messages_cut_mid_message_is_not_slow(full):
    """Regression: the 'slow' timer began at the first partial message and ran on while every read completed
    one message and began the next, so a sync longer than 20 s (100k posts) was closed as slow."""
    node = Node(full, policy=PeerLimits(frame_timeout=1000))
    conn = node.connect("remote")
    one = M.encode(M.ChannelListRequest(b"\x00\x00\x00\x01", 0, 1))
    stream = b"".join(M.encode(M.ChannelListRequest(i.to_bytes(4, "big"), 0, 1)) for i in range(1, 40))
    half = len(one) // 2
    conn.feed(stream[:half], 0)
    at = half
    for step in range(1, 21):  # every 600 ms: the rest of one message and half of the next
        now = step * 600
        conn.feed(stream[at : at + len(one)], now)
        at += len(one)
        assert conn.inbox.partial_since is not None  # each read leaves a partial message
        while node.run(now, 100):
            pass
        conn.check_time(now)
        assert not conn.closed, (step, conn.close_reason)
    conn.check_time(20 * 600 + 1001)
    assert conn.closed and conn.close_reason == "slow"  # and a message that stops arriving still is


def test_cursors_over_the_handshake_are_kept_under_the_authenticated_user(tmp_path):
    """Once the handshake names a user the store knows, both sides keep that peer's cursors under the user, not its address."""
    srv, ann = Keypair(), Keypair()
    served = Store(tmp_path / "served")
    Author(served, srv).text("general", "from the server")
    client = Store(tmp_path / "client")
    Author(client, ann).text("general", "from ann")
    ann_key, srv_key = f"user:{ann.public_key.hex()}", f"user:{srv.public_key.hex()}"

    async def main():
        port, stop, ready = [], asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(run_server(served, "127.0.0.1:0", cabal_key=KEY, keypair=srv, stop=stop, signals=False,
                                              ready=lambda h, p: (port.append(p), ready.set())))
        await asyncio.wait_for(ready.wait(), 10)
        try:
            # First contact: neither side knows the other's user yet, so cursors are kept by address.
            first = await run_sync(client, f"127.0.0.1:{port[0]}", cabal_key=KEY, keypair=ann, timeout=30, signals=False)
            # Now each holds a post by the other: the second contact, under another address, is keyed by user.
            second = await run_sync(client, f"localhost:{port[0]}", cabal_key=KEY, keypair=ann, timeout=30, signals=False)
            for _ in range(200):  # the server's pull of the second connection settles just after it
                if served.sync_cursor(ann_key, "general") is not None:
                    break
                await asyncio.sleep(0.05)
            return first, second, port[0]
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)

    first, second, port = run(main())
    assert first["complete"] and second["complete"], (first, second)
    assert client.sync_cursor(f"127.0.0.1:{port}", "general") is not None  # first contact: by address
    assert client.sync_cursor(srv_key, "general") is not None
    assert client.sync_cursor(f"localhost:{port}", "general") is None  # second: by user, whatever the address
    assert served.sync_cursor("accepted:127.0.0.1", "general") is not None
    assert served.sync_cursor(ann_key, "general") is not None
    served.close()
    client.close()
