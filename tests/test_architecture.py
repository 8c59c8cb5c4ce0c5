"""The layers of docs/architecture.md hold: no module imports a higher layer, and no import circle.

The layers are read from the table in ``docs/architecture.md`` and the
allowed exceptions from its "Deferred imports" table, so the picture and the
check cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGE_DIRS = {"cablestore": ROOT / "cablestore", "cablestore.views": ROOT / "views", "cablestore.rebuild": ROOT / "rebuild", "cablestore.recovery": ROOT / "recovery"}
ERRORS = "cablestore.errors"  # the one exception hierarchy: beneath every module, its own layer's siblings included


def _layers() -> dict[str, int]:
    """``{package or module prefix: layer number}`` from the layer table."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|([^|]+)\|", line)
        if m:
            for name in re.findall(r"`([a-z_.]+)`", m.group(2)):
                out[name] = int(m.group(1))
    return out


def _exceptions() -> set[tuple[str, str]]:
    """``(importing module, imported module)`` pairs the deferred-imports table allows."""
    text = DOC.read_text().split("## Deferred imports", 1)[1]
    return {(a, b) for a, b in re.findall(r"\|\s*`([a-z_.]+)`\s*\|\s*`([a-z_.]+)`\s*\|", text)}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in PACKAGE_DIRS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "cablestore" and parts[:1] in (["views"], ["rebuild"]):
                continue
            mods[name] = path
    return mods


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """``(imported module, how)`` for every cablestore import of one module.

    ``how``: ``"module"`` (at module level), ``"deferred"`` (inside a
    function) or ``"typing"`` (under ``if TYPE_CHECKING:``).  All three count:
    a circle closed by a deferred or a type-only import is still a circle.
    """
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rsplit(".", 1)[0]
    found = []

    def resolve(mod: str, names=()):
        targets = []
        for n in names:
            if f"{mod}.{n}" in modules:
                targets.append(f"{mod}.{n}")
        return targets or ([mod] if mod in modules else [])

    def walk(node, how: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                walk(child, "typing")
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.startswith("cablestore"):
                        found.extend((t, how) for t in resolve(a.name))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    anchor = base.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    mod = ".".join(anchor + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.startswith("cablestore"):
                    found.extend((t, how) for t in resolve(mod, [a.name for a in child.names]))
            inner = how
            if how == "module" and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "deferred"
            walk(child, inner)

    walk(tree, "module")
    return found


def _db_uses(path: Path) -> list[int]:
    """Lines of ``path`` reading an attribute named ``db`` (a Store's or a Txn's LevelDB handle)."""
    return sorted({n.lineno for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute) and n.attr == "db"})


def _db_allowed() -> set[str]:
    """Modules outside ``cablestore.store`` that docs/architecture.md "Direct LevelDB access" lets use ``.db``."""
    text = DOC.read_text().split("## Direct LevelDB access", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\|\s*`([a-z_.]+)`\s*\|", text, re.M))


def _layer_of(module: str, layers: dict[str, int]) -> tuple[str, int]:
    best = max((p for p in layers if module == p or module.startswith(p + ".")), key=len)
    return best, layers[best]


def test_every_module_has_a_layer():
    layers = _layers()
    assert layers, "no layer table in docs/architecture.md"
    unplaced = [m for m in _modules() if not any(m == p or m.startswith(p + ".") for p in layers)]
    assert unplaced == []


def test_no_module_imports_a_higher_layer_or_a_sibling_package():
    layers, allowed, modules = _layers(), _exceptions(), _modules()
    bad = []
    for name, path in modules.items():
        own, mine = _layer_of(name, layers)
        for target, _ in _imports(name, path, modules):
            other, theirs = _layer_of(target, layers)
            if (name, target) in allowed or target == ERRORS:
                continue
            if theirs > mine or (theirs == mine and other != own and mine != max(layers.values())):
                bad.append(f"{name} (layer {mine}) imports {target} (layer {theirs})")
    assert bad == []


def test_the_errors_module_imports_nothing_of_cablestore():
    """Every module may import cablestore.errors (even a sibling of layer 0), so it imports none of them: no circle through it."""
    modules = _modules()
    assert _imports(ERRORS, modules[ERRORS], modules) == []


def test_the_allowed_exceptions_are_still_needed():
    """A deferred import listed in the doc that no longer exists is removed from it."""
    modules = _modules()
    present = {(n, t) for n, p in modules.items() for t, _ in _imports(n, p, modules)}
    assert _exceptions() <= present


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or one importing itself): every import circle."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(n):
        index[n] = low[n] = counter[0]
        counter[0] += 1
        stack.append(n)
        on.add(n)
        for t in sorted(graph.get(n, ())):
            if t not in index:
                visit(t)
                low[n] = min(low[n], low[t])
            elif t in on:
                low[n] = min(low[n], index[t])
        if low[n] == index[n]:
            comp = []
            while True:
                m = stack.pop()
                on.discard(m)
                comp.append(m)
                if m == n:
                    break
            if len(comp) > 1 or n in graph.get(n, ()):
                out.append(sorted(comp))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return out


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every import (module level, deferred and TYPE_CHECKING), but those the deferred-imports table declares.

    A package's ``__init__`` importing its own modules counts too: harmless
    alone, it closes a circle as soon as one of those modules imports a name
    of the package back, even inside a function (a command module taking
    the dispatcher from ``cablestore.cli``).
    """
    allowed = _exceptions()
    return {n: {t for t, _ in _imports(n, p, modules) if (n, t) not in allowed} for n, p in modules.items()}


def test_no_import_circle_deferred_and_type_only_imports_included():
    circles = _circles(_import_graph(_modules()))
    assert circles == []


def test_a_circle_through_a_package_init_is_found(tmp_path):
    """A package re-exporting its module, which imports a name of the package inside a function: a circle."""
    init, mod = tmp_path / "__init__.py", tmp_path / "network.py"
    init.write_text("from cablestore.cli import network\n\ndef run_served():\n    pass\n")
    mod.write_text("def serve():\n    from cablestore.cli import run_served\n")
    assert _circles(_import_graph({"cablestore.cli": init, "cablestore.cli.network": mod})) == [["cablestore.cli", "cablestore.cli.network"]]


def test_cli_command_modules_import_only_the_args_module_and_the_library():
    """A command module (one the cli package registers) imports cablestore.cli.args, never another command module
    nor the cli package itself, at import or at call time: what it needs from the dispatcher is handed to it."""
    modules = _modules()
    commands = {t for t, _ in _imports("cablestore.cli", modules["cablestore.cli"], modules) if t.startswith("cablestore.cli.")}
    assert len(commands) >= 9  # the command groups cablestore.cli registers
    bad = {
        (name, target)
        for name in commands
        for target, _ in _imports(name, modules[name], modules)
        if (target == "cablestore.cli" or target.startswith("cablestore.cli.")) and target != "cablestore.cli.args"
    }
    assert bad == set()


def test_no_module_above_the_store_touches_leveldb():
    """``.db`` (a Store's plyvel handle) is used only in cablestore.store and the modules docs/architecture.md declares."""
    allowed = _db_allowed()
    assert allowed, 'no "Direct LevelDB access" table in docs/architecture.md'
    bad = {}
    for name, path in _modules().items():
        if name.startswith("cablestore.store.") or name == "cablestore.store" or name in allowed:
            continue
        if lines := _db_uses(path):
            bad[name] = lines
    assert bad == {}


def test_the_declared_leveldb_users_still_use_it():
    modules = _modules()
    assert {m for m in _db_allowed() if not _db_uses(modules[m])} == set()


def test_the_checker_sees_a_violation(tmp_path):
    """The import walk finds module-level, deferred and TYPE_CHECKING imports (so a passing run means something)."""
    p = tmp_path / "m.py"
    p.write_text(
        "from typing import TYPE_CHECKING\nfrom cablestore.store import store\n\nif TYPE_CHECKING:\n    from cablestore.peer import node\n\n"
        "def f():\n    from cablestore.rebuild import verify\n"
    )
    mods = {"cablestore.store.store": p, "cablestore.rebuild.verify": p, "cablestore.peer.node": p, "cablestore.x": p}
    assert _imports("cablestore.x", p, mods) == [
        ("cablestore.store.store", "module"),
        ("cablestore.peer.node", "typing"),
        ("cablestore.rebuild.verify", "deferred"),
    ]


def test_the_checker_sees_a_deferred_circle_and_a_db_use(tmp_path):
    """Two modules importing each other only inside functions, or under TYPE_CHECKING, make a circle; ``x.db`` is found."""
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("import cablestore.b\n")
    b.write_text("def f(store):\n    from cablestore import a\n    return store.db.get(b'k')\n")
    c.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cablestore.c\n")
    mods = {"cablestore.a": a, "cablestore.b": b, "cablestore.c": c}
    graph = {n: {t for t, _ in _imports(n, p, mods)} for n, p in mods.items()}
    assert _circles(graph) == [["cablestore.a", "cablestore.b"], ["cablestore.c"]]
    assert _db_uses(b) == [3] and _db_uses(a) == []


def _library_error_strings(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string literal inside a ``raise`` or an error constructed in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.endswith("Error"):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    out.append((sub.lineno, sub.value))
    return out


def test_library_errors_name_no_command_line_flag():
    """A library error says what is wrong in the library's terms; the CLI spells its flags (cablestore.cli.args.error_message)."""
    flag = re.compile(r"(^|[\s(`'\"])--[a-z]")
    bad = [
        f"{name}:{line}: {text!r}"
        for name, path in _modules().items()
        if not name.startswith("cablestore.cli")
        for line, text in _library_error_strings(path)
        if flag.search(text)
    ]
    assert bad == []
