"""The embedding API (cablestore.Peer) and examples/ against a real `cablestore serve` on 127.0.0.1.

One `serve` process for the module, holding posts in #general and #random;
each test's peers have stores of their own and talk to it (or to each
other) over real TCP.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cablestore import JOIN, TEXT, Peer, Store
from cablestore.authoring.author import Author
from cablestore.authoring.keyfile import write_keyfile
from cablestore.errors import ArgumentError, CabalKeyRequiredError, CabalMismatchError, FellBehindError, HandshakeRequiredError, PeerClosedError, TransportError, WrongCabalKeyError
from cablestore.peer import PrivateCabal

from .conftest import keypair, stop

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "cablestore"]
WAIT = 30  # seconds any one wait may take before the test fails


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(served store path, port)``: a `cablestore serve` of a store holding a post in #general and one in #random."""
    tmp = tmp_path_factory.mktemp("served")
    path, port_file = tmp / "served.ldb", tmp / "port"
    with Store(path) as store:
        author = Author(store, keypair("carol"))
        author.text("general", "history in general")
        author.text("random", "history in random")
    proc = subprocess.Popen([*CLI, "serve", path, "--listen", "127.0.0.1:0", "--port-file", port_file, "--quiet"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no port file"
            time.sleep(0.02)
        yield path, int(port_file.read_text())
    finally:
        assert stop(proc) == 0


async def first(feed, match, timeout=WAIT):
    """The first post of ``feed`` that ``match`` accepts."""

    async def scan():
        async for post in feed:
            if match(post):
                return post
        raise AssertionError("the feed ended")

    return await asyncio.wait_for(scan(), timeout)


def test_posts_from_another_peer_and_from_local_posting_reach_posts(served, stores):
    _, port = served
    alice, bob = keypair("alice"), keypair("bob")

    async def main():
        async with Peer(stores("a"), key=alice) as a, Peer(stores("b"), key=bob) as b:
            everything, general = b.posts(), b.posts("General")  # channel names are case-insensitive
            await b.connect("127.0.0.1", port)  # its catch-up is new to b's store: the feeds get it
            await a.connect("127.0.0.1", port)
            history = await first(general, lambda p: p.text == "history in general")
            assert history.author == keypair("carol").public_key and history.channel == "general"
            h = await a.post_text("general", "hi from alice")  # a -> serve -> b, over TCP
            got = await first(general, lambda p: p.hash == h)
            assert (got.text, got.author, got.type_name) == ("hi from alice", alice.public_key, "post/text")
            await a.post_text("random", "only in random")
            await first(everything, lambda p: p.text == "only in random")
            mine = await b.post_text("general", "hi from bob")  # local posting reaches the feed too
            seen = await first(general, lambda p: p.post_type == TEXT)
            assert seen.hash == mine, "#general's feed got a post of #random"
            assert (await first(everything, lambda p: p.hash == mine)).who == bob.public_key.hex()[:8]
            await b.set_name("bob")
            await b.set_topic("general", "pings")
            assert dict((await first(everything, lambda p: p.info is not None)).info) == {"name": "bob"}
            assert b.store.topic("general") == "pings"
            gone = await b.delete(mine)
            assert (await first(everything, lambda p: p.hash == gone)).deleted == (mine,)
            async with a.posts("general") as back:  # what b posted reaches a through the served peer
                await b.post_text("general", "to alice")
                assert (await first(back, lambda p: p.text == "to alice")).author == bob.public_key

    run(main())


def test_serve_sync_and_connect_between_two_embedded_peers(stores):
    async def main():
        srv, cli = stores("server"), stores("client")
        Author(srv, keypair("carol")).text("general", "held by the server")
        async with Peer(srv, key=keypair("carol")) as server, Peer(cli, key=keypair("dave")) as client:
            host, port = await server.serve()
            assert host == "127.0.0.1" and port > 0
            summary = await client.sync(host, port, channels=["general"])
            assert summary["complete"] and summary["posts_ingested"] == 1
            assert [m.text for m in cli.messages("general")] == ["held by the server"]
            incoming = server.posts("general")
            live = await client.connect(host, port)
            assert live.running
            h = await client.post_text("general", "pulled by serve")  # the server pulls from whoever connects
            assert (await first(incoming, lambda p: p.hash == h)).text == "pulled by serve"
            ended = await live.close()
            assert not live.running and ended["peer"] == f"{host}:{port}"
            with pytest.raises(TransportError):
                await client.serve(host, port)  # taken

    run(main())


def test_a_private_cabal_lets_its_members_in_and_no_one_else(stores):
    members, outsider = PrivateCabal(bytes(range(32)), keypair("ivan")), PrivateCabal(bytes(32), keypair("judy"))

    async def main():
        held = stores("private")
        Author(held, keypair("ivan")).text("general", "members only")
        async with Peer(held, cabal=members) as server:
            host, port = await server.serve()
            async with Peer(stores("member"), cabal=PrivateCabal(members.cabal_key, keypair("kim"))) as member:
                assert (await member.sync(host, port))["posts_ingested"] == 1
            async with Peer(stores("outsider"), cabal=outsider) as other:
                with pytest.raises(WrongCabalKeyError, match="does not hold this cabal key"):
                    await other.sync(host, port, timeout=WAIT)
            async with Peer(stores("plain")) as plain:  # no cabal: a plain peer is told the listener may require a key
                with pytest.raises(HandshakeRequiredError):
                    await plain.sync(host, port, timeout=WAIT)
        async with Peer(held) as unkeyed:  # the cabal's store without its key: neither served nor synced
            with pytest.raises(CabalKeyRequiredError, match="cabal_key="):
                await unkeyed.serve()
            with pytest.raises(CabalKeyRequiredError):
                await unkeyed.connect("127.0.0.1", 9)
        with pytest.raises(CabalMismatchError):
            async with Peer(held, cabal=outsider):
                pass

    run(main())


def test_lifecycle_closes_everything_it_started_and_leaves_the_store_open(served, stores):
    _, port = served
    store = stores("life")
    listeners = len(store._listeners._callbacks)

    async def main():
        before = asyncio.all_tasks()
        peer = Peer(store, key=keypair("erin"))
        with pytest.raises(PeerClosedError):
            peer.posts()
        async with peer:
            await peer.serve()
            await peer.connect("127.0.0.1", port)
            reader_feed = peer.posts()
            read = []

            async def reader():
                async for post in reader_feed:
                    read.append(post)
                return "ended"

            reading = asyncio.create_task(reader())
            cancelled = peer.posts("general")
            waiting = asyncio.create_task(cancelled.__anext__())
            await peer.join("general")
            assert (await asyncio.wait_for(waiting, WAIT)).channel == "general"
            for _ in range(WAIT * 100):  # the other reader's task gets posts too
                if read:
                    break
                await asyncio.sleep(0.01)
            assert read
            await cancelled.aclose()
            quiet = peer.posts("quiet")  # a channel no one else writes to
            pending = asyncio.create_task(quiet.__anext__())
            await asyncio.sleep(0)
            pending.cancel()  # a reader cancelled while it waits: clean, and the feed still reads
            with pytest.raises(asyncio.CancelledError):
                await pending
            h = await peer.post_text("quiet", "after the cancel")
            assert (await asyncio.wait_for(quiet.__anext__(), WAIT)).hash == h
            assert len(store._listeners._callbacks) > listeners  # the peer's nodes and the reader's feed
            with pytest.raises(TransportError):
                await peer.connect("127.0.0.1", 1)  # refused: a cablestore error, not OSError
        assert await asyncio.wait_for(reading, WAIT) == "ended"  # closing the peer ends its feeds
        assert asyncio.all_tasks() == before  # every task it started is done
        assert peer.closed and len(store._listeners._callbacks) == listeners
        with pytest.raises(PeerClosedError):
            await peer.post_text("general", "too late")
        with pytest.raises(PeerClosedError):
            async with peer:
                pass
        await peer.aclose()  # twice: nothing more

    run(main())
    assert "general" in store.channel_list()  # still open: the caller owns it


def test_cancelling_serve_connect_and_sync_leaves_no_task(served, stores):
    _, port = served

    async def main():
        before = asyncio.all_tasks()
        async with Peer(stores("c")) as peer:
            for start in (peer.serve(), peer.connect("127.0.0.1", port), peer.sync("127.0.0.1", port)):
                task = asyncio.create_task(start)
                await asyncio.sleep(0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
        assert asyncio.all_tasks() == before

    run(main())


def test_a_reader_that_falls_behind_gets_fell_behind_error_and_the_writer_never_waits(stores):
    store = stores("slow")
    kp = keypair("frank")
    posts = [Author(store, kp).post(JOIN, channel="general")]

    async def main():
        async with Peer(store, key=kp) as peer:
            feed = peer.posts(buffer=3)
            for i in range(6):  # nobody reads: the writer is never held up, the buffer never grows past 3
                posts.append(await peer.post_text("general", f"message {i}"))
            assert len(feed) == 3 and feed.missed == 3
            got = []
            with pytest.raises(FellBehindError, match="3 later posts were not queued"):
                async for post in feed:  # what it holds first, then the error
                    got.append(post.hash)
            assert got == posts[1:4]
            with pytest.raises(ArgumentError):
                peer.posts(buffer=0)
            subscribed = len(store._listeners._callbacks)
            peer.posts()  # dropped unclosed: it unsubscribes when collected
            gc.collect()
            assert len(store._listeners._callbacks) == subscribed

        async with Peer(store) as reader:
            with pytest.raises(ArgumentError, match="key"):
                await reader.post_text("general", "no key")

    run(main())
    assert len(store.messages("general")) == 6  # the store has every post the reader missed


# --- the examples, as processes ----------------------------------------------------------------


async def _start(*argv):
    proc = await asyncio.create_subprocess_exec(sys.executable, *map(str, argv), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    assert line, (await proc.stderr.read()).decode()
    return proc, line.decode()


async def _stop(proc) -> int:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), WAIT)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return proc.returncode


def test_the_echo_bot_answers_a_ping_posted_by_another_peer(served, stores, tmp_path):
    _, port = served
    bot = write_keyfile(tmp_path / "bot.key")

    async def main():
        proc, ready = await _start(ROOT / "examples" / "echo_bot.py", tmp_path / "bot.ldb", "--key", tmp_path / "bot.key", "--connect", f"127.0.0.1:{port}")
        try:
            assert ready == "echo_bot: answering !ping in #general\n"
            async with Peer(stores("pinger"), key=keypair("gina")) as peer:
                replies = peer.posts("general")
                await peer.connect("127.0.0.1", port)
                await peer.post_text("general", "!ping")
                pong = await first(replies, lambda p: p.author == bot.public_key and p.post_type == TEXT)
                assert pong.text == "pong"
        finally:
            assert await _stop(proc) == 0, (await proc.stderr.read()).decode()
        with Store(tmp_path / "bot.ldb") as kept:
            assert [m.text for m in kept.messages("general")].count("pong") == 1

    run(main())


def test_the_archiver_records_the_posts_of_every_channel(served, stores, tmp_path):
    _, port = served
    jsonl = tmp_path / "archive.jsonl"

    async def main():
        proc, ready = await _start(ROOT / "examples" / "archiver.py", tmp_path / "archive.ldb", "--connect", f"127.0.0.1:{port}", "--jsonl", jsonl)
        try:
            assert ready == f"archiver: following 127.0.0.1:{port}\n"
            async with Peer(stores("writer"), key=keypair("hal")) as peer:
                await peer.connect("127.0.0.1", port)
                await peer.post_text("random", "new in random")
                wanted = {("general", "history in general"), ("random", "history in random"), ("random", "new in random")}
                for _ in range(WAIT * 20):
                    lines = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
                    if wanted <= {(d.get("channel"), d.get("text")) for d in lines}:
                        break
                    await asyncio.sleep(0.05)
                assert wanted <= {(d.get("channel"), d.get("text")) for d in lines}
        finally:
            assert await _stop(proc) == 0, (await proc.stderr.read()).decode()
        with Store(tmp_path / "archive.ldb") as kept:
            assert {"general", "random"} <= set(kept.channel_list())

    run(main())


def test_the_examples_explain_themselves_with_help():
    for name in ("echo_bot.py", "archiver.py"):
        shown = subprocess.run([sys.executable, ROOT / "examples" / name, "--help"], capture_output=True, text=True, timeout=WAIT)
        assert shown.returncode == 0 and "--connect HOST:PORT" in shown.stdout, name


def test_the_docs_show_the_echo_bot_as_it_runs():
    """docs/embedding.md's bot is examples/echo_bot.py's ``echo``, which the test above runs."""
    example = (ROOT / "examples" / "echo_bot.py").read_text()
    core = re.search(r"# --- the bot .*?---\n(.*?)# --- end of the bot ---", example, re.S).group(1)
    doc = (ROOT / "docs" / "embedding.md").read_text()
    assert core.strip() in doc


def test_the_docs_thread_example_runs(tmp_path, monkeypatch, capsys):
    doc = (ROOT / "docs" / "embedding.md").read_text()
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", doc, re.S) if "store.subscribe" in block]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/embedding.md", "exec"), {})
    assert capsys.readouterr().out == "seen by the callback\n"


def test_the_readme_shows_lines_of_the_echo_bot():
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Embedding a peer\n.*?```python\n(.*?)```", readme, re.S).group(1)
    example = {line.strip() for line in (ROOT / "examples" / "echo_bot.py").read_text().splitlines()}
    assert [line for line in code.splitlines() if line.strip() not in example] == []
