"""A format-1 store and the answers it gives, kept in tests/data for the migration to format 2.

    python -m tests.format1_fixture          # rewrites tests/data/format1-store.tar.gz and format1-answers.json.gz

:func:`build` writes a small but complete store with the code of the commit
running it: posts of every type (cable.js 0.2.1's workload, the project's
own, a moderated cabal), deletes, refusals, a local user, a seed cleared and
set again, a sync cursor, the author's clock, a repaired damaged post under
``!quarantine!``, a dropped-by-block user's fact and the search view.  It is
saved compacted as a tar.gz; :func:`answers` is every public read of
:class:`cablestore.Store` on it, as JSON-ready data (bytes as hex), and
``format1-answers.json.gz`` holds what the format-1 code answered.  The tests
(tests/test_migrate.py) migrate a copy of the store and compare the migrated
store's :func:`answers` with that file: the query answers, never the derived
keys' bytes, so the comparison holds whatever rows format 2 writes.

Written only once, by format-1 code: running this again after the format
changed would write a format-2 store.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from cablestore import DELETE, Store
from cablestore.authoring.author import Author
from cablestore.authoring.workload import generate, read_posts
from cablestore.errors import CableError, DroppedError
from cablestore.wire.codec import decode_post

from . import moderation_helpers as mh
from .conftest import NOW, keypair, post

DATA = Path(__file__).resolve().parent / "data"
TARBALL = DATA / "format1-store.tar.gz"
ANSWERS = DATA / "format1-answers.json.gz"
STORE_DIR = "format1-store"  # the directory the tarball holds
WORKLOAD_POSTS = 400  # of cable.js 0.2.1's 2,000 (every type but 6-9; deletes, deletes of deletes)


def build(path: Path) -> None:
    """Write the fixture store at ``path`` (as tests/test_docs.py's ``populated`` store, smaller) and compact it."""
    with Store(path, now=lambda: NOW, search=True) as s:
        s.ingest_many(read_posts(DATA / "cablejs-0.2.1-s7-2000/posts.bin")[:WORKLOAD_POSTS])
        s.ingest_many(generate(seed=3, posts=150))
        Author(s, keypair("docs"), now=lambda: NOW).text("general", "written here")  # the local clock
        s.set_sync_cursor("127.0.0.1:7000", "general", NOW)
    with Store(path, now=lambda: NOW, local_user=mh.URSULA.public_key) as s:
        results = s.ingest_many(mh.cabal())  # roles, hides, drops, blocks with drop, unblocks
        assert all(r.ok or isinstance(r.error, DroppedError) for r in results)
        stored = s.channel_time_range("dev")[0]  # a delete of someone else's post: refused, its author kept
        assert not s.ingest_many([post(keypair("forger"), DELETE, NOW, hashes=(stored,))])[0].ok
        gone = keypair("gone")
        s.ingest_many([mh.block(keypair("notifier"), mh.URSULA, NOW - 5, notify=1)[0], mh.block(mh.URSULA, gone, NOW - 4, drop=1)[0]])
        assert not s.ingest_many([mh.info(gone, NOW - 3, name="gone")[0]])[0].ok  # only a fact of it is kept
        s.set_seed(b"\x01" + keypair("seeded").public_key)
        s.clear_seed()
        s.set_seed(b"\x00" + keypair("seeded").public_key)
        s.db.put(b"!post!" + bytes(32), b"a damaged post")  # the repair quarantines it
        assert s.check(fix=True, record=True).consistent
        s.db.compact_range()


def unpack(into: Path) -> Path:
    """Extract the saved fixture store under ``into``; return its directory."""
    with tarfile.open(TARBALL) as tar:
        tar.extractall(into, filter="data")
    return into / STORE_DIR


def _plain(value: Any) -> Any:
    """JSON-ready data: bytes as hex, dict keys as text, sets sorted, objects by their ``to_dict``."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {(k.hex() if isinstance(k, bytes) else str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "to_dict"):
        return _plain(value.to_dict())
    if dataclasses.is_dataclass(value):  # a Tombstone; its fields added since the golden answers show only when set
        later = {"retired": False, "keeps": ()}
        return _plain({f.name: getattr(value, f.name) for f in dataclasses.fields(value) if later.get(f.name, object()) != getattr(value, f.name)})
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _ask(fn, *args, **kw) -> Any:
    """The answer of one read, or the class of the CableError it raised (an answer too)."""
    try:
        return _plain(fn(*args, **kw))
    except CableError as exc:
        return {"error": type(exc).__name__}


SEARCHES = ("hello", "uber", "ti*", '"hello world"', "sync -gossip", "from:grace hello", "in:general tea", "日本", "rude", "buy")


def answers(s: Store) -> dict[str, Any]:
    """Every public read of ``s``, in a fixed order, as JSON-ready data (the same store gives the same data)."""
    out: dict[str, Any] = {}
    channels = s.channel_list() + ["junk", "no such channel"]  # a dropped channel and an unknown one too
    out["channel_list"] = _ask(s.channel_list)
    out["channel_list_page"] = _ask(s.channel_list, 1, 2)
    out["channels"] = _ask(s.channels)
    stats = s.stats().to_dict()
    out["stats"] = {k: v for k, v in stats.items() if k not in ("path", "bytes_on_disk", "hot_path")}
    out["listed_spellings"] = _ask(s.listed_spellings, channels)
    hashes: set[bytes] = set()
    authors: set[bytes] = set()
    for ch in channels:
        a = out.setdefault("channel", {}).setdefault(ch, {})
        a["time_range"] = _ask(s.channel_time_range, ch)
        a["time_range_window"] = _ask(s.channel_time_range, ch, 1_700_000_000_000, 1_700_100_000_000, 7)
        a["state"] = _ask(s.channel_state, ch)
        a["state_historic"] = _ask(s.channel_state, ch, True)
        a["state_answer"] = _ask(s.channel_state_answer, ch)
        a["page"] = _ask(s.time_range_page, ch, 0, 0, None, 5)
        a["members"] = _ask(s.members, ch)
        a["topic"] = _ask(s.topic, ch)
        a["heads"] = _ask(s.heads, ch)
        a["messages"] = _ask(s.messages, ch)
        a["messages_hidden"] = _ask(s.messages, ch, include_hidden=True)
        a["post_count"] = _ask(s.channel_post_count, ch)
        a["posts"] = _ask(lambda c: list(s.posts(c)), ch)
        a["roles"] = _ask(s.roles, ch)
        a["hidden_users"] = _ask(s.hidden_users, ch)
        a["dropped"] = _ask(s.channel_dropped, ch)
        for key in ("time_range", "state_historic", "heads"):
            if isinstance(a[key], list):
                hashes.update(bytes.fromhex(h) for h in a[key])
    out["all_posts"] = _ask(lambda: list(s.posts()))
    for key, blob in s.items(b"!post!"):
        hashes.add(key[6:])
        try:
            authors.add(decode_post(blob).public_key)
        except CableError:
            pass
    for key, _ in s.items(b"!deleted!"):
        hashes.update((key[9:41], key[41:73]))
    ordered = sorted(hashes)
    out["get_many"] = _ask(s.get_many, ordered)
    out["tombstoned"] = _ask(s.tombstoned, ordered)
    out["shareable"] = _ask(s.shareable, ordered)
    for h in ordered:
        p = out.setdefault("post", {}).setdefault(h.hex(), {})
        p["post"] = _ask(s.post, h)
        p["deleted"] = _ask(s.is_deleted, h)
        p["tombstones"] = _ask(s.tombstones, h)
        p["links"] = _ask(s.links, h)
        p["reverse_links"] = _ask(s.reverse_links, h)
        p["dropped"] = _ask(s.is_dropped, h)
    authors.update(bytes.fromhex(pk) for pk in _ask(s.roles))
    for pk in sorted(authors):
        u = out.setdefault("user", {}).setdefault(pk.hex(), {})
        u["name"] = _ask(s.name, pk)
        u["info"] = _ask(s.user_info, pk)
        u["posts"] = _ask(s.author_posts, pk)
        u["by_type"] = [_ask(s.author_posts, pk, t) for t in range(10)]
        u["newest"] = _ask(s.newest_timestamp, pk)
        u["known"] = _ask(s.known_user, pk)
        u["shunned"] = _ask(s.shunned, pk)
    out["user_labels"] = _ask(s.user_labels, sorted(authors))
    out["users"] = _ask(s.users)
    out["local_user"] = _plain(s.local_user)
    out["seed"] = _ask(s.seed)
    out["roles_from_seed"] = _ask(s.roles_from_seed)
    tables = ("roles", "hidden_users", "hidden_posts", "dropped_posts", "dropped_channels", "blocks", "kept_out", "unblocks", "blocked_by")
    for name in (*tables, "moderation_summary", "moderation_posts"):
        out[name] = _ask(getattr(s, name))
    out["moderation_state"] = _ask(s.moderation_state, [c for c in channels if c != "no such channel"], 0)
    out["moderation_state_cabal"] = _ask(s.moderation_state)
    out["has_posts"] = _ask(s.has_posts)
    out["sync_cursor"] = _ask(s.sync_cursor, "127.0.0.1:7000", "general")
    out["search_enabled"] = _ask(lambda: s.search_enabled)
    out["search"] = {q: _ask(s.search, q, limit=1000) for q in SEARCHES}
    out["search_hidden"] = {q: _ask(s.search, q, limit=1000, include_hidden=True) for q in SEARCHES}
    return out


def encode(data: dict[str, Any]) -> str:
    """The answers as the JSON text the golden file holds, gzipped (sorted keys: the same answers, the same text)."""
    return json.dumps(data, sort_keys=True, indent=0, ensure_ascii=True) + "\n"


def golden() -> str:
    """The JSON text of the answers the format-1 code gave (``format1-answers.json.gz``)."""
    return gzip.decompress(ANSWERS.read_bytes()).decode()


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="cablestore-format1-"))
    try:
        path = work / STORE_DIR
        build(path)
        with Store(path, readonly=True) as s:
            ANSWERS.write_bytes(gzip.compress(encode(answers(s)).encode(), mtime=0))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for f in sorted(path.iterdir()):
                if f.name not in ("LOCK", "LOG", "LOG.old"):
                    tar.add(f, arcname=f"{STORE_DIR}/{f.name}")
        TARBALL.write_bytes(buf.getvalue())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {TARBALL} ({TARBALL.stat().st_size} bytes) and {ANSWERS} ({ANSWERS.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
