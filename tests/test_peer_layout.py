"""The peer's shape: no import circle among its modules, deferred and ``TYPE_CHECKING``
imports included; a connection never imports the node that made it; nothing in the peer touches
``store.db`` or another object's underscore members of the shared state; ``cablestore.peer`` exports
its public API; the sync cursor is written under the store's write lock."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import cablestore.peer
from cablestore.store import Store

PEER = Path(cablestore.peer.__file__).parent
MODULES = {p.stem: p for p in PEER.glob("*.py") if p.stem != "__init__"}
CONNECTION_MODULES = ("protocol", "serving", "forwarding", "requesting", "table", "state", "limits", "inbox")


def _peer_imports(path: Path) -> set[str]:
    """The peer modules ``path`` imports anywhere: at module level, in a function or under TYPE_CHECKING."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("cablestore.peer."):
                out.add(node.module.split(".")[2])
            elif node.module == "cablestore.peer":
                out.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("cablestore.peer."))
    return out - {path.stem}


GRAPH = {name: _peer_imports(path) for name, path in MODULES.items()}


def test_no_import_circle_among_the_peer_modules():
    def reach(start: str) -> set[str]:
        seen, todo = set(), list(GRAPH[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(GRAPH.get(name, ()))
        return seen

    assert [name for name in GRAPH if name in reach(name)] == []


def test_a_connection_reaches_nothing_above_it():
    for name in CONNECTION_MODULES:
        assert GRAPH[name] <= set(CONNECTION_MODULES), f"{name} imports {GRAPH[name] - set(CONNECTION_MODULES)}"


def test_the_peer_never_touches_leveldb_nor_the_states_private_members():
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                assert node.attr != "db", f"{name}.py reads store.db (line {node.lineno}): use a Store method"
                owner = node.value
                if node.attr.startswith("_") and not node.attr.startswith("__"):
                    held = isinstance(owner, ast.Name) and owner.id in ("state", "peer", "node", "store")
                    held = held or (isinstance(owner, ast.Attribute) and owner.attr in ("state", "node", "store"))
                    assert not held, f"{name}.py reads {ast.unparse(node)} (line {node.lineno})"


def test_the_package_exports_its_public_api():
    for name in cablestore.peer.__all__:
        assert getattr(cablestore.peer, name) is not None
    assert {"Node", "Connection", "PeerLimits", "Job", "Sync", "run_server", "run_sync", "sync_path"} <= set(cablestore.peer.__all__)
    from cablestore.peer import protocol

    assert not hasattr(protocol, "Node") and not hasattr(protocol, "PeerLimits") and not hasattr(protocol, "Job")


def test_the_sync_cursor_is_written_under_the_stores_write_lock(tmp_path):
    """Regression: the peer's sync wrote its cursor with ``store.db.put`` outside the store's write lock."""
    with Store(tmp_path / "s") as store:
        done = threading.Event()
        with store.writer.lock:
            writer = threading.Thread(target=lambda: (store.set_sync_cursor("peer", "general", 5_000), done.set()))
            writer.start()
            assert not done.wait(0.3)  # it waits for the lock a commit holds
            assert store.sync_cursor("peer", "general") is None
        writer.join(10)
        assert done.is_set() and store.sync_cursor("peer", "general") == 5_000
        store.set_sync_cursor("peer", "general", 4_000)  # never backwards
        assert store.sync_cursor("peer", "general") == 5_000
