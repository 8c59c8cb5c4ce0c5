"""Many private cabals on one port, and a cabal's store never served without its key: real TCP on 127.0.0.1, real keys."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from cablestore import Keypair, Store
from cablestore.authoring.author import Author
from cablestore.errors import CabalKeyRequiredError, HandshakeRequiredError, NotHandshakeError, WrongCabalKeyError
from cablestore.peer import run_server, run_sync
from cablestore.wire.responder import Message1Key, ResponderKeys

KEYS = [os.urandom(32) for _ in range(3)]


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def channels_of(store):
    return sorted(store.channel_list(0, 100))


async def _serving(pairs, **kw):
    bound = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(None, "127.0.0.1:0", cabals=pairs, stop=stop, signals=False, ready=lambda h, p: bound.set_result(p), **kw))
    await asyncio.wait([task, bound], return_when=asyncio.FIRST_COMPLETED)
    return task, stop, bound.result()


def test_three_cabals_on_one_port_each_member_gets_its_own_cabal_only(cabals, tmp_path):
    members = [Store(tmp_path / f"member{i}") for i in range(3)]
    second = [Store(tmp_path / f"second{i}") for i in range(3)]

    async def main():
        task, stop, port = await _serving(list(zip(cabals, KEYS, strict=True)))
        try:
            results = []
            for i in range(3):  # two cablestore peers per cabal, through the shared port
                results.append(await run_sync(members[i], f"127.0.0.1:{port}", cabal_key=KEYS[i], timeout=30))
                results.append(await run_sync(second[i], f"127.0.0.1:{port}", cabal_key=KEYS[i], timeout=30))
            with pytest.raises(WrongCabalKeyError):
                await run_sync(Store(tmp_path / "outsider"), f"127.0.0.1:{port}", cabal_key=os.urandom(32), timeout=30)
            started = time.monotonic()
            with pytest.raises(HandshakeRequiredError):
                await run_sync(Store(tmp_path / "plain"), f"127.0.0.1:{port}", timeout=30)
            return results, time.monotonic() - started
        finally:
            stop.set()
            summary = await task
            results_summary.append(summary)

    results_summary = []
    results, plain_seconds = run(main())
    assert all(r["complete"] for r in results), results
    for i in range(3):
        assert channels_of(members[i]) == channels_of(second[i]) == [f"secret-{i}"]  # its cabal's channel, no other
    assert plain_seconds < 3
    summary = results_summary[0]
    assert summary["handshakes_failed_key"] == 1 and summary["handshakes_failed_plain"] == 1, summary
    assert [c["handshakes"] for c in summary["cabals"]] == [2, 2, 2]
    for s in members + second:
        s.close()


def test_a_live_post_in_one_cabal_never_reaches_another_cabals_connection(cabals, tmp_path):
    a, b = Store(tmp_path / "a"), Store(tmp_path / "b")

    async def main():
        task, stop, port = await _serving(list(zip(cabals, KEYS, strict=True)))
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        try:
            live_a = asyncio.create_task(run_sync(a, f"127.0.0.1:{port}", cabal_key=KEYS[0], live=True, stop=stop_a, signals=False))
            live_b = asyncio.create_task(run_sync(b, f"127.0.0.1:{port}", cabal_key=KEYS[1], live=True, stop=stop_b, signals=False))
            await asyncio.sleep(1.5)
            Author(cabals[1], Keypair()).text("secret-1", "new in cabal 1")  # committed in cabal 1's store: pushed live
            Author(cabals[1], Keypair()).text("secret-0", "cabal 1's post in a channel named as cabal 0's")
            await asyncio.sleep(2.0)
            stop_a.set()
            stop_b.set()
            return await live_a, await live_b
        finally:
            stop.set()
            await task

    sa, sb = run(main())
    assert channels_of(a) == ["secret-0"], channels_of(a)
    # b got its cabal's live post; a, live on channel secret-0, never got cabal 1's post in a channel of that name
    assert sb["posts_ingested"] == 2 and sa["posts_ingested"] == 1, (sa, sb)
    a.close()
    b.close()


def test_a_cabal_store_is_never_served_or_synced_plain(cabals, tmp_path):
    cabals[0].join_cabal(KEYS[0])

    async def main():
        with pytest.raises(CabalKeyRequiredError, match="cabal_key="):
            await run_server(cabals[0], "127.0.0.1:0", signals=False)
        with pytest.raises(CabalKeyRequiredError):
            await run_sync(cabals[0], "127.0.0.1:9")

    run(main())


def test_a_private_sync_to_a_plain_server_is_told_at_once(cabals, tmp_path):
    async def main():
        stop = asyncio.Event()
        bound = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(run_server(cabals[1], "127.0.0.1:0", stop=stop, signals=False, ready=lambda h, p: bound.set_result(p)))
        port = await bound
        started = time.monotonic()
        try:
            with pytest.raises(NotHandshakeError, match=r"the peer does not use the Cable Handshake \(no cabal key there\?\)"):
                await run_sync(Store(tmp_path / "x"), f"127.0.0.1:{port}", cabal_key=KEYS[0], timeout=30)
            return time.monotonic() - started
        finally:
            stop.set()
            await task

    assert run(main()) < 3


def test_responder_keys_pick_the_cabal_without_dh_and_refuse_duplicates():
    from cablestore.wire.noise import HandshakeState

    keys = ResponderKeys(KEYS)
    message = HandshakeState(initiator=True, prologue=b"CABLE1.0", static_private=os.urandom(32), psk=KEYS[2]).write_message()
    index, key, _ = keys.find(message)
    assert index == 2 and key.prologue == b"CABLE1.0"
    assert ResponderKeys(KEYS[:2]).find(message) is None
    assert Message1Key(b"CABLE/1.0", KEYS[2]).try_message1(message) is None
    with pytest.raises(ValueError):
        ResponderKeys([KEYS[0], KEYS[0]])


def test_cli_generate_never_overwrites_and_plain_serve_of_a_cabal_store_exits_2(cabals, tmp_path, capsys):
    from cablestore.cli import main

    out = tmp_path / "key"
    out.write_bytes(b"precious")
    assert main(["generate", "--posts", "3", str(out)]) == 2
    assert out.read_bytes() == b"precious"
    assert "exists" in capsys.readouterr().err
    assert main(["generate", "--posts", "3", "--force", str(out)]) == 0 and out.read_bytes() != b"precious"
    cabals[0].join_cabal(KEYS[0])
    path = cabals[0].path if hasattr(cabals[0], "path") else tmp_path / "cabal0"
    cabals[0].close()
    assert main(["serve", str(path), "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CabalKeyRequiredError" in err[0] and "--cabal-key FILE" in err[0], err
