"""Honest slow peers are never cut off; a trickle is, with a summary that says which limit and which side.

The time limits are meant for hostile peers: a connection that sends no
byte of a message it began for ``frame_timeout`` ms, or trickles it below
``MIN_MESSAGE_RATE`` once it has taken that long.  A peer whose bytes keep
arriving (a loaded machine, a throttled link) finishes, however long a
message takes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.peer import PeerLimits, run_server, run_sync
from cablestore.peer.inbox import Inbox
from cablestore.peer.limits import MIN_MESSAGE_RATE
from cablestore.wire.messages import DEFAULT_LIMITS, DEPLOYED

MESSAGE = bytes([0x80, 0x40]) + bytes(8192)  # a msg_len of 8,192, then the body (only its arrival matters here)


def test_a_message_making_progress_is_never_slow_however_long_it_takes():
    inbox = Inbox(DEPLOYED, DEFAULT_LIMITS)
    inbox.feed(MESSAGE[:100], now=0)
    for t in range(1, 60):  # 59 s for 5,900 bytes: 100 bytes a second... under the rate floor only once past frame_timeout
        inbox.feed(MESSAGE[100 * t : 100 * t + 100], now=t * 1000)
        assert inbox.too_slow(t * 1000, frame_timeout=60_000, min_rate=MIN_MESSAGE_RATE) is None
    assert inbox.partial_bytes == 6000


def test_no_byte_for_frame_timeout_or_a_trickle_below_the_floor_is_slow():
    inbox = Inbox(DEPLOYED, DEFAULT_LIMITS)
    inbox.feed(MESSAGE[:10], now=0)
    assert inbox.too_slow(999, frame_timeout=1000, min_rate=MIN_MESSAGE_RATE) is None
    assert "no byte of a message for 1001 ms" in inbox.too_slow(1001, frame_timeout=1000, min_rate=MIN_MESSAGE_RATE)
    trickle = Inbox(DEPLOYED, DEFAULT_LIMITS)
    for t in range(0, 5000, 500):  # 10 bytes every 500 ms: progress, but 20 bytes a second
        trickle.feed(MESSAGE[t // 50 : t // 50 + 10], now=t)
    assert "MIN_MESSAGE_RATE" in trickle.too_slow(4600, frame_timeout=1000, min_rate=MIN_MESSAGE_RATE)


async def _throttle(target_port: int, rate: int):
    """A loopback proxy that forwards each direction at ``rate`` bytes a second, in 20 ms steps."""
    step = max(1, rate // 50)

    async def pump(reader, writer):
        try:
            while data := await reader.read(65536):
                for i in range(0, len(data), step):
                    writer.write(data[i : i + step])
                    await writer.drain()
                    await asyncio.sleep(0.02)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(client_r, client_w):
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        try:
            await asyncio.gather(pump(client_r, server_w), pump(server_r, client_w))
        except asyncio.CancelledError:
            pass

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_a_throttled_sync_on_a_busy_machine_completes(tmp_path):
    """A peer throttled to ~60 KB/s (a few hundred posts a second), the machine busy with a CPU burner:
    with frame_timeout 500 ms a post response takes several times that to arrive, and the sync still completes."""
    posts = generate(seed=11, posts=600)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with Store(tmp_path / "src") as src, Store(tmp_path / "dst") as dst:
            src.ingest_many(posts)
            policy = PeerLimits(frame_timeout=500)

            async def scenario():
                ready, stop, port = asyncio.Event(), asyncio.Event(), []
                server = asyncio.create_task(run_server(src, "127.0.0.1:0", ready=lambda h, p: (port.append(p), ready.set()), stop=stop, pull=False))
                await asyncio.wait_for(ready.wait(), 10)
                proxy = await _throttle(port[0], 60_000)
                try:
                    return await run_sync(dst, f"127.0.0.1:{proxy.sockets[0].getsockname()[1]}", timeout=120, policy=policy)
                finally:
                    proxy.close()
                    stop.set()
                    await asyncio.wait_for(server, 30)

            summary = asyncio.run(scenario())
            assert summary["complete"], summary["reason"]
            assert dst.channel_list() == src.channel_list() and len(src.channel_list()) > 1
            for channel in src.channel_list():  # every message of every channel came, in the same order
                assert dst.channel_time_range(channel) == src.channel_time_range(channel)
    finally:
        burner.kill()
        burner.wait()


def test_a_peer_that_stops_mid_message_is_cut_and_the_summary_says_which_limit_and_side(tmp_path):
    async def scenario(store):
        async def handle(reader, writer):
            await reader.read(100)  # the channel list request: answer with half a message, then nothing
            writer.write(bytes([0x80, 0x40, 0x07]))
            await writer.drain()
            await asyncio.sleep(5)
            writer.close()

        silent = await asyncio.start_server(handle, "127.0.0.1", 0)
        try:
            return await run_sync(store, f"127.0.0.1:{silent.sockets[0].getsockname()[1]}", timeout=30, policy=PeerLimits(frame_timeout=300))
        finally:
            silent.close()

    with Store(tmp_path / "dst") as dst:
        summary = asyncio.run(scenario(dst))
    assert not summary["complete"]
    reason = summary["reason"]
    assert "this side closed it" in reason and "frame_timeout" in reason and "a rerun resumes from the cursor" in reason
