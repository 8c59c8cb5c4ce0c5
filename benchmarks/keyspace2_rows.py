"""The candidate keyspaces of issue 38, as functions from today's rows to theirs.

Each candidate is a :class:`Keyspace`: given one batch of the rows a real
Store wrote (``(key, value)`` in key order, ``None`` for a delete) and the
reads that batch made of LevelDB (``("get", key)``, ``("last", prefix)``: a
reverse seek for a group's latest candidate, ``("scan", prefix)``), it gives
the rows and the reads the candidate keyspace would make for the same posts.
Today's rows are a function of the posts (the store's own indexing made
them), so each candidate is one too; the transforms only move, drop or
shorten rows.  :mod:`benchmarks.keyspace2` writes them to a fresh LevelDB
and measures.

A candidate also says how the read paths it changes would look
(:meth:`Keyspace.key` maps a key of today to its own; :meth:`Keyspace.rev_fields`
and :meth:`Keyspace.is_head` answer the reverse lookups).
"""

from __future__ import annotations

import msgpack

from cablestore.keyspace.keys import AUTHOR, CHANNEL, CHAT, LINKS, POSTS, REVERSE, STATE, next_prefix
from cablestore.wire.codec import CHANNEL_TYPES, decode_post

HEADS = LINKS + b"h"
_TERM = b"\x00\x01"
_CHANNEL_KEYED = (CHAT, STATE, CHANNEL, HEADS)
CHANNEL_IDS = b"!chanid!"  # (d): <escaped channel> -> varint id, and back under CHANNEL_IDS + b"#"


def is_own_rev(key: bytes) -> bool:
    """``!rev!<hash>``: a post's reverse entry (not a linker row ``!rev!<target>l<hash>``)."""
    return len(key) == len(REVERSE) + 32 and key.startswith(REVERSE)


def channel_end(key: bytes, start: int) -> int:
    """Where the escaped channel starting at ``start`` ends (after its ``00 01``), or -1."""
    end = key.find(_TERM, start)
    return -1 if end < 0 else end + 2


def membership_parts(key: bytes):
    """``(escaped channel, sub-index byte, rest)`` of a ``!channel!`` key, or None."""
    if not key.startswith(CHANNEL):
        return None
    end = channel_end(key, len(CHANNEL))
    if end < 0 or end >= len(key):
        return None
    return key[len(CHANNEL) : end], key[end : end + 1], key[end + 1 :]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Keyspace:
    """A keyspace: today's (the baseline) unless a subclass changes rows."""

    name = "today"
    what = "today's keyspace (format 1), the real store's rows replayed"
    options: dict = {}

    def rows(self, writes: list) -> list:
        return writes

    def reads(self, reads: list) -> list:
        return reads

    def key(self, key: bytes) -> bytes:
        """Today's key (or prefix) as this keyspace spells it."""
        return key

    def rev_fields(self, db, h: bytes):
        """What a removal needs of a post (timestamp, type, author, channels), read this keyspace's way."""
        value = db.get(REVERSE + h)
        return None if value is None else msgpack.unpackb(value)

    def is_head(self, db, h: bytes) -> bool:
        """Is nothing linking to the stored post ``h``?  (The links group's winner is the post itself.)"""
        it = db.iterator(reverse=True, start=REVERSE + h, stop=next_prefix(REVERSE + h), include_value=False)
        try:
            return next(it, None) == REVERSE + h
        finally:
            it.close()


class Chain(Keyspace):
    """Several transforms applied in order (the combination)."""

    def __init__(self, name: str, what: str, parts: list, options: dict | None = None):
        self.name, self.what, self.parts = name, what, parts
        self.options = options or {}

    def rows(self, writes):
        for part in self.parts:
            writes = part.rows(writes)
        return writes

    def reads(self, reads):
        for part in self.parts:
            reads = part.reads(reads)
        return reads

    def key(self, key):
        for part in self.parts:
            key = part.key(key)
        return key

    def rev_fields(self, db, h):
        owner = next((p for p in self.parts if type(p).rev_fields is not Keyspace.rev_fields), Keyspace())
        return owner.rev_fields(db, h)

    def is_head(self, db, h):
        owner = next((p for p in self.parts if type(p).is_head is not Keyspace.is_head), Keyspace())
        return owner.is_head(db, h)


class DropRev(Keyspace):
    """(a) No ``!rev!<hash>``: a removal reads the post it removes; a head is "post stored, no linker"."""

    name = "a: drop !rev!<hash>"
    what = "no reverse entry; removal decodes the post; heads: a seek of the linker rows and a point read of the post"

    def rows(self, writes):
        return [(k, v) for k, v in writes if not is_own_rev(k)]

    def reads(self, reads):
        out = []
        for op, key in reads:
            if op == "get" and is_own_rev(key):
                out.append(("get", POSTS + key[len(REVERSE) :]))  # the post instead (nearly always read anyway)
            elif op == "last" and is_own_rev(key):
                out.append(("last", key + b"l"))
                out.append(("get", POSTS + key[len(REVERSE) :]))
            else:
                out.append((op, key))
        return out

    def rev_fields(self, db, h):
        blob = db.get(POSTS + h)
        if blob is None:
            return None
        post = decode_post(blob)
        return [post.timestamp, post.post_type, post.public_key, [post.channel] if post.post_type in CHANNEL_TYPES else []]

    def is_head(self, db, h):
        it = db.iterator(reverse=True, start=REVERSE + h + b"l", stop=next_prefix(REVERSE + h + b"l"), include_value=False)
        try:
            linked = next(it, None) is not None
        finally:
            it.close()
        return not linked and db.get(POSTS + h) is not None


class FoldCandidates(Keyspace):
    """(b) No ``!channel!<ch>a`` rows: the ``!author!`` row of a channel post carries its channel.

    The latest membership candidate of ``(ch, pubkey)`` is then found by
    walking back the author's join, text, topic and leave rows until one of
    that channel (the ``walk`` read: a real walk in the candidate's DB).
    """

    name = "b: fold !channel!a into !author!"
    what = "membership candidates read from the author rows (value: the channel)"

    def rows(self, writes):
        channel_of: dict[bytes, bytes] = {}  # mono -> escaped channel, from this batch's candidate rows
        out = []
        for k, v in writes:
            parts = membership_parts(k)
            if parts is not None and parts[1] == b"a":
                if v is not None:
                    channel_of[parts[2][32:]] = parts[0]
                continue
            out.append((k, v))
        if channel_of:
            out = [(k, channel_of.get(k[-40:], v) if v is not None and k.startswith(AUTHOR) else v) for k, v in out]
        return out

    def reads(self, reads):
        out = []
        for op, key in reads:
            parts = membership_parts(key)
            if op in ("last", "scan") and parts is not None and parts[1] == b"a":
                pubkey = parts[2][:32]
                for t in sorted(CHANNEL_TYPES):
                    out.append(("walk", AUTHOR + pubkey + bytes([t]), parts[0]))
            else:
                out.append((op, key))
        return out


class MembershipChanges(Keyspace):
    """(c) ``!channel!<ch>m<pubkey>`` written only when its value changes (the previous one known, not read)."""

    name = "c: !channel!m only on change"
    what = "skip a membership row rewrite of the same value (an upper bound: the value is assumed known)"

    def __init__(self):
        self.current: dict[bytes, bytes] = {}

    def rows(self, writes):
        out = []
        for k, v in writes:
            parts = membership_parts(k)
            if parts is not None and parts[1] == b"m":
                if self.current.get(k) == v:
                    continue
                if v is None:
                    self.current.pop(k, None)
                else:
                    self.current[k] = v
            out.append((k, v))
        return out


class ShortKeys(Keyspace):
    """(d) A varint channel id instead of the escaped name; an 8-byte hash prefix in membership candidates.

    The ids are assigned in order of first appearance (``!chanid!`` rows map
    both ways, one pair per channel).  Channel order is then id order, not
    name order: a channel list sorts the names it reads (a few dozen).
    """

    name = "d: channel id, hash prefix"
    what = "varint channel id in chat/state/channel/heads keys; 8-byte hash prefix in !channel!a keys"

    def __init__(self):
        self.ids: dict[bytes, bytes] = {}
        self.new: list = []

    def _id(self, escaped: bytes) -> bytes:
        found = self.ids.get(escaped)
        if found is None:
            found = self.ids[escaped] = varint(len(self.ids))
            self.new += [(CHANNEL_IDS + escaped, found), (CHANNEL_IDS + b"#" + found, escaped)]
        return found

    def key(self, key):
        for prefix in _CHANNEL_KEYED:
            if key.startswith(prefix):
                end = channel_end(key, len(prefix))
                if end < 0:
                    return key
                rest = key[end:]
                if prefix == CHANNEL and rest[:1] == b"a" and len(rest) == 1 + 32 + 40:
                    rest = rest[:-32] + rest[-32:-24]  # the mono's hash cut to 8 bytes: it only breaks ties
                return prefix + self._id(key[len(prefix) : end]) + rest
        return key

    def rows(self, writes):
        out = []
        for k, v in writes:
            if v is not None and k.startswith(AUTHOR) and v.endswith(_TERM):
                v = self._id(v)  # (b)'s channel value
            out.append((self.key(k), v))
        out += self.new
        self.new = []
        out.sort(key=lambda kv: kv[0])
        return out

    def reads(self, reads):
        out = []
        for op, key, *more in reads:
            if op == "walk":
                out.append((op, key, self._id(more[0])))
            else:
                out.append((op, self.key(key)))
        return out  # ids a read names first are written with the next rows


class ValueCarrying(Keyspace):
    """(e) One row instead of a pair: ``!channel!<ch>m<pubkey>`` carries the winner (type + mono), no ``a`` rows.

    The membership row becomes a max register, rewritten whenever a newer
    candidate arrives (so a settle reads it instead of seeking candidates);
    the ``!author!`` row carries the channel, for the rare removal of a
    group's winner (a walk, as in b).
    """

    name = "e: value-carrying !channel!m"
    what = "membership row holds the latest candidate's type and mono; no candidate rows"

    def __init__(self):
        self.groups: dict[bytes, dict[bytes, int]] = {}  # m key -> {mono: type} of live candidates
        self.best: dict[bytes, bytes | None] = {}  # m key -> the winner's mono
        self.fold = FoldCandidates()

    def rows(self, writes):
        touched: dict[bytes, bytes | None] = {}
        base = []
        for k, v in writes:
            parts = membership_parts(k)
            if parts is not None and parts[1] == b"a":
                m, mono = CHANNEL + parts[0] + b"m" + parts[2][:32], parts[2][32:]
                live = self.groups.setdefault(m, {})
                before = self.best.get(m)
                if v is None:
                    live.pop(mono, None)
                    after = (max(live) if live else None) if mono == before else before  # rare: the winner removed
                else:
                    live[mono] = v[0]
                    after = mono if before is None or mono > before else before
                if after != before or (v is not None and mono == after):
                    self.best[m] = after
                    touched[m] = None if after is None else bytes([live[after]]) + after
                base.append((k, v))
            elif parts is not None and parts[1] == b"m":
                continue  # rewritten below, from the candidates
            else:
                base.append((k, v))
        out = self.fold.rows(base)
        out += list(touched.items())
        out.sort(key=lambda kv: kv[0])
        return out

    def reads(self, reads):
        out = []
        for op, key in reads:
            parts = membership_parts(key)
            if op in ("last", "scan") and parts is not None and parts[1] == b"a":
                out.append(("get", CHANNEL + parts[0] + b"m" + parts[2][:32]))
            else:
                out.append((op, key))
        return out


def candidates() -> list[Keyspace]:
    """Every single candidate of the issue, in the table's order (fresh: some keep state across batches)."""
    return [
        Keyspace(),
        DropRev(),
        FoldCandidates(),
        MembershipChanges(),
        ShortKeys(),
        ValueCarrying(),
        Chain(
            "f1: 64 MB tables, 128 MB write buffer",
            "LevelDB options: max_file_size 64 MB, write_buffer_size 128 MB",
            [],
            {"max_file_size": 64 << 20, "write_buffer_size": 128 << 20},
        ),
        Chain("f2: no compression", "LevelDB options: compression None", [], {"compression": None}),
        Chain(
            "f3: bloom 16 bits, restart interval 32",
            "LevelDB options: bloom_filter_bits 16, block_restart_interval 32",
            [],
            {"bloom_filter_bits": 16, "block_restart_interval": 32},
        ),
    ]


def combination(cost: dict[str, float], options: dict[str, dict]) -> Chain:
    """(g): a and d, the cheaper membership layout (b with c, or e), and the cheapest option set if it beats today's.

    ``cost``: a figure to minimize per candidate letter (``today`` included);
    ``options``: each f candidate's options.
    """
    parts, names = [DropRev()], ["a"]
    inf = float("inf")
    if cost.get("e", inf) <= cost.get("b", inf):  # e when neither ran (``--only``)
        parts.append(ValueCarrying())
        names.append("e")
    else:
        parts += [FoldCandidates(), MembershipChanges()]
        names += ["b", "c"]
    parts.append(ShortKeys())
    names.append("d")
    ran = [f for f in options if f in cost]
    best_f = min(ran, key=cost.__getitem__) if ran else None
    chosen = {}
    if best_f is not None and cost[best_f] < cost["today"]:
        chosen = options[best_f]
        names.append(best_f)
    return Chain("g: " + " + ".join(names), "the combination", parts, chosen)
