"""The store's one write door (cablestore.store.write.writer): every mutation takes the writer's lock, commits
through it and tells subscribers what it added and removed; nothing else in the library writes to LevelDB."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.errors import ReadOnlyStoreError
from cablestore.moderation import format_seed
from cablestore.rebuild.reindex import reindex
from cablestore.wire.codec import ADMIN, post_hash

from .conftest import NOW
from .moderation_helpers import ALEPH, URSULA, XU, block, text

ROOT = Path(__file__).resolve().parents[1]
CABAL_KEY = bytes(range(32))


def _moderated(tmp_path, local_user=URSULA.public_key):
    """X's text, and Aleph's drop=1 block of X that counts only once Aleph is an admin (or the local user)."""
    s = Store(tmp_path / "s", now=lambda: NOW, local_user=local_user)
    x = text(XU, NOW - 10, "general", "hello")[0]
    s.ingest_many([x, block(ALEPH, XU, NOW - 5, drop=1)[0]])
    return s, post_hash(x)


def test_set_seed_that_makes_a_block_stand_tells_subscribers_what_it_removed(tmp_path):
    """Regression: set_seed removed the blocked user's posts and subscribers heard nothing."""
    s, x = _moderated(tmp_path)
    with s:
        assert len(s) == 2
        events = []
        s.subscribe(events.append)
        s.set_seed(format_seed({ALEPH.public_key: ADMIN}))
        assert len(s) == 1 and s.get(x) is None
        assert [e.removed for e in events] == [(x,)]


def _ingest(s, _):
    post = text(URSULA, NOW - 1, "general", "new")[0]
    s.ingest(post)
    return {"added": {post_hash(post)}}


def _ingest_many(s, _):
    post = text(URSULA, NOW - 1, "general", "many")[0]
    s.ingest_many([post])
    return {"added": {post_hash(post)}}


def _ingest_batches(s, _):
    post = text(URSULA, NOW - 1, "general", "batches")[0]
    list(s.ingest_batches([[post]]))
    return {"added": {post_hash(post)}}


def _delete(s, x):
    s.delete(x)
    return {"removed": {x}}


def _purge_author(s, x):
    s.purge_author(XU.public_key)
    return {"removed": {x}}


def _set_seed(s, x):
    s.set_seed(format_seed({ALEPH.public_key: ADMIN}))
    return {"removed": {x}}


def _clear_seed(s, x):
    s.clear_seed()  # no seed: nothing changes
    return {}


def _learn_listing(s, x):
    s.learn_listing("general", [x])  # not a delete: nothing to re-list
    return {}


def _enable_search(s, _):
    s.enable_search()
    return {}


def _disable_search(s, _):
    s.enable_search()
    s.disable_search()
    return {}


def _join_cabal(s, _):
    s.join_cabal(CABAL_KEY)
    return {}


def _set_sync_cursor(s, _):
    s.set_sync_cursor("peer", "general", 5)
    return {}


def _check_fix(s, _):
    s.check(fix=True)
    return {}


def _remember_lost(s, x):
    s.remember_lost([{"hash": bytes(32).hex()}])  # no post removed or added: a local row
    return {}


def _reindex(s, _):
    reindex(s)
    return {}


# Every public Store method that writes, with what it must tell subscribers.
MUTATIONS = {
    "ingest": _ingest,
    "ingest_many": _ingest_many,
    "ingest_batches": _ingest_batches,
    "delete": _delete,
    "purge_author": _purge_author,
    "set_seed": _set_seed,
    "clear_seed": _clear_seed,
    "learn_listing": _learn_listing,
    "enable_search": _enable_search,
    "disable_search": _disable_search,
    "join_cabal": _join_cabal,
    "set_sync_cursor": _set_sync_cursor,
    "check": _check_fix,
    "remember_lost": _remember_lost,
    "reindex (cablestore.rebuild)": _reindex,
}

# Public methods that only read (or, like ``migrate``, act on a closed store's directory).
READS = {
    "any_member", "author_posts", "cabal_digest", "resolve_user", "blocked_by", "blocks", "channel_dropped", "channel_list", "channel_post_count", "channel_state",
    "channel_state_answer", "channel_time_range", "channels", "check_relayed", "close", "closed", "db", "dropped_channels",
    "dropped_posts", "get", "get_many", "has_posts", "heads", "hidden_posts", "hidden_users", "in_flight", "is_deleted", "is_dropped",
    "items", "kept_out", "known_user", "links", "listed_spellings", "local_user", "local_value", "lost_posts", "members", "messages", "migrate",
    "moderation_posts", "moderation_state", "moderation_summary", "name", "newest_timestamp", "path", "post", "posts", "range_items", "range_sum", "readonly",
    "reverse_links", "roles", "roles_from_seed", "search", "search_enabled", "seed", "shareable", "shunned", "stats", "subscribe",
    "sync", "sync_cursor", "time_range_page", "tombstoned", "tombstones", "tombstones_made_by", "topic", "unblocks", "user_info",
    "user_labels", "users", "validate", "verify_signatures", "verify_workers", "writer",
}


def test_every_public_method_is_either_a_read_or_in_the_mutation_table():
    public = {n for n in dir(Store) if not n.startswith("_")}
    assert public - READS - set(MUTATIONS) - {"set_local_user"} == set()


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutation_waits_for_the_writer_and_notifies_its_changes(tmp_path, name):
    s, x = _moderated(tmp_path)
    with s:
        events, done, errors = [], threading.Event(), []
        s.subscribe(events.append)

        def run():
            try:
                expected.update(MUTATIONS[name](s, x))
            except BaseException as exc:  # reported below
                errors.append(exc)
            done.set()

        expected: dict = {}
        with s.writer.lock:  # the door is closed: the mutation must wait at it
            worker = threading.Thread(target=run)
            worker.start()
            assert not done.wait(0.3), f"{name} wrote without the writer's lock"
        worker.join(30)
        assert done.is_set() and errors == []
        added = {h for e in events for h, _ in e.added}
        removed = {h for e in events for h in e.removed}
        assert added == expected.get("added", set()) and removed == expected.get("removed", set())


def test_set_local_user_waits_for_the_writer_and_notifies_what_it_removes(tmp_path):
    s, x = _moderated(tmp_path, local_user=None)
    with s:
        events = []
        s.subscribe(events.append)
        s.set_local_user(ALEPH.public_key)  # Aleph's own block of X now stands
        assert s.get(x) is None and [e.removed for e in events] == [(x,)]


def test_a_read_only_store_refuses_every_mutation_before_writing(tmp_path):
    s, x = _moderated(tmp_path)
    s.close()
    with Store(tmp_path / "s", readonly=True) as r:
        before = list(r.items())
        for mutate in MUTATIONS.values():
            with pytest.raises(ReadOnlyStoreError):
                mutate(r, x)
        assert list(r.items()) == before


# --- nothing but the writer writes ------------------------------------------------
# Modules that may write LevelDB themselves, each for a reason.
WRITES_ALLOWED = {
    "cablestore/store/write/writer.py": "the door: Lease, the bulk jobs' bounded WriteBatches",
    "cablestore/store/write/txn.py": "Txn.commit writes the one WriteBatch the writer's door commits",
    "cablestore/store/lifecycle/opening.py": "stamps the format of a store it has just created (no Store exists yet)",
}
# Folders of code that writes a LevelDB directory no Store has open (a salvage's new database, a recovered store's format).
WRITES_ALLOWED_UNDER = ("recovery/", "recovery/salvage.py", "recovery/recovering.py")


def _db_writes(path: Path) -> list[int]:
    """Lines calling ``.write_batch(``, ``.put(`` or ``.delete(`` on something named ``db`` (a plyvel DB, by this code base's naming)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver = node.func.value
        named = receiver.id if isinstance(receiver, ast.Name) else receiver.attr if isinstance(receiver, ast.Attribute) else ""
        if node.func.attr in ("write_batch", "put", "delete") and named in ("db", "_db"):
            lines.append(node.lineno)
    return lines


def _library_files():
    for folder in ("cablestore", "views", "rebuild", "recovery"):
        yield from (ROOT / folder).rglob("*.py") if (ROOT / folder).is_dir() else ()


def test_only_the_writer_writes_to_leveldb():
    bad = {}
    for path in _library_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in WRITES_ALLOWED or rel.startswith(WRITES_ALLOWED_UNDER):
            continue
        if lines := _db_writes(path):
            bad[rel] = lines
    assert bad == {}


def test_the_write_rule_sees_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(store):\n    store.db.put(b'k', b'v')\n    with store.db.write_batch() as wb:\n        wb.put(b'k', b'v')\n")
    assert _db_writes(bad) == [2, 3]
