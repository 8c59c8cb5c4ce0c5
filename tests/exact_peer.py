"""A peer as cable-core.js 0.2.1 behaves, for the interop-shaped tests: it compares channel names
exactly, only answers (it never asks anything and never pushes a post it was not asked for),
keeps live requests open, and files every post under its own ``channel`` field as spelled."""

from __future__ import annotations

import asyncio

from cablestore.wire import messages as M
from cablestore.wire.codec import DELETE, JOIN, LEAVE, TEXT, TOPIC, decode_post, post_hash
from cablestore.wire.decoding import Decoder


class ExactPeer:
    """Sans-I/O: :meth:`receive` takes bytes, returns the bytes to send back."""

    def __init__(self, posts=()):
        self.posts: dict[bytes, bytes] = {}
        self.live: dict[bytes, M.Message] = {}
        self.decoder = Decoder()
        self.asked: list[M.Message] = []
        for buf in posts:
            self.add(buf)

    def add(self, buf: bytes) -> bytes:
        """Hold a post; return the live answers it leads to (hash responses to open live requests)."""
        h = post_hash(buf)
        self.posts[h] = buf
        p = decode_post(buf)
        out = b""
        for rid, req in self.live.items():
            if isinstance(req, M.TimeRangeRequest) and p.post_type == TEXT and p.channel == req.channel:
                out += M.encode(M.HashResponse(rid, (h,)))
            elif isinstance(req, M.ChannelStateRequest) and p.post_type in (TOPIC, JOIN, LEAVE) and p.channel == req.channel:
                out += M.encode(M.HashResponse(rid, (h,)))
        return out

    def channels(self) -> list[str]:
        return sorted({p.channel for p in map(decode_post, self.posts.values()) if p.post_type in (TEXT, TOPIC, JOIN, LEAVE)})

    def receive(self, data: bytes) -> bytes:
        out = b""
        for m in self.decoder.feed(data):
            self.asked.append(m)
            out += self.answer(m)
        return out

    def answer(self, m) -> bytes:
        decoded = {h: decode_post(b) for h, b in self.posts.items()}
        if isinstance(m, M.ChannelListRequest):
            return M.encode(M.ChannelListResponse(m.req_id, tuple(self.channels())))
        if isinstance(m, M.TimeRangeRequest):
            hs = [h for h, p in sorted(decoded.items(), key=lambda kv: -kv[1].timestamp)
                  if p.post_type in (TEXT, DELETE) and getattr(p, "channel", None) == m.channel and p.timestamp >= m.time_start
                  and (m.time_end == 0 or p.timestamp < m.time_end)]
            out = M.encode(M.HashResponse(m.req_id, tuple(hs))) if hs else b""
            if m.time_end == 0:
                self.live[m.req_id] = m
                return out
            return out + M.encode(M.HashResponse(m.req_id))
        if isinstance(m, M.ChannelStateRequest):
            hs = [h for h, p in decoded.items() if p.post_type in (TOPIC, JOIN, LEAVE) and p.channel == m.channel]
            out = M.encode(M.HashResponse(m.req_id, tuple(hs))) if hs else b""
            if m.future == 1:
                self.live[m.req_id] = m
                return out
            return out + M.encode(M.HashResponse(m.req_id))
        if isinstance(m, M.PostRequest):
            held = tuple(self.posts[h] for h in m.hashes if h in self.posts)
            return (M.encode(M.PostResponse(m.req_id, held)) if held else b"") + M.encode(M.PostResponse(m.req_id))
        if isinstance(m, M.ModerationStateRequest):
            return M.encode(M.HashResponse(m.req_id))
        if isinstance(m, M.CancelRequest):
            self.live.pop(m.cancel_id, None)
            return b""
        if isinstance(m, M.PostResponse):  # answers to nothing it asked: ignored, as cable-core.js does
            return b""
        return b""


class ExactPeerClient:
    """An :class:`ExactPeer` dialled into a TCP peer (asyncio): it answers what it is asked, nothing more."""

    def __init__(self, peer: ExactPeer):
        self.peer = peer
        self.reader = self.writer = None
        self._task = None

    async def connect(self, host: str, port: int) -> ExactPeerClient:
        self.reader, self.writer = await asyncio.open_connection(host, port)
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            data = await self.reader.read(65536)
            if not data:
                return
            out = self.peer.receive(data)
            if out:
                self.writer.write(out)
                await self.writer.drain()

    def post(self, buf: bytes) -> None:
        """Write a post locally: only the live requests it holds learn of it (as cable-core.js)."""
        out = self.peer.add(buf)
        if out:
            self.writer.write(out)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.writer.close()
        await asyncio.gather(self.writer.wait_closed(), return_exceptions=True)
