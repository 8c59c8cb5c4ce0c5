"""A byte-counting TCP proxy for the sync benchmark: ``python -m benchmarks.wirecount TARGET_HOST:PORT``.

Listens on 127.0.0.1 (a free port; the first line it prints is
``listening on HOST:PORT``), relays every connection to the target, and
prints one JSON line per connection once both sides closed: the bytes each
way (``up``: from the dialler to the target, ``down``: back) and the round
trips, counted as the times the dialler sent after the target had answered
since its last send (a request, its answer, the next request: one round).
A process of its own, so its copying does not share the measured
processes' event loops; it stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys


class _Counts:
    def __init__(self) -> None:
        self.up = self.down = self.rounds = 0
        self._answered = True  # the first send of the dialler starts the first round

    def sent(self, n: int) -> None:
        self.up += n
        if self._answered:
            self.rounds += 1
            self._answered = False

    def answered(self, n: int) -> None:
        self.down += n
        self._answered = True


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count) -> None:
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            count(len(data))
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()


async def _relay(target: tuple[str, int], reader, writer) -> None:
    counts = _Counts()
    try:
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer, counts.sent), _pipe(up_reader, writer, counts.answered))
    for w in (writer, up_writer):
        w.close()
    print(json.dumps({"up": counts.up, "down": counts.down, "round_trips": counts.rounds}), flush=True)


async def _main(target: str) -> None:
    host, port = target.rsplit(":", 1)
    server = await asyncio.start_server(lambda r, w: _relay((host, int(port)), r, w), "127.0.0.1", 0)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
