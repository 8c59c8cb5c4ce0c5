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
PACKAGE_DIRS = {"cablestore": ROOT / "cablestore", "cablestore.views": ROOT / "views", "cablestore.rebuild": ROOT / "rebuild"}


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


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """``(imported module, at module level)`` for every cablestore import of one module, TYPE_CHECKING blocks left out."""
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

    def walk(node, top: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.startswith("cablestore"):
                        found.extend((t, top) for t in resolve(a.name))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    anchor = base.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    mod = ".".join(anchor + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.startswith("cablestore"):
                    found.extend((t, top) for t in resolve(mod, [a.name for a in child.names]))
            walk(child, top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, True)
    return found


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
            if (name, target) in allowed:
                continue
            if theirs > mine or (theirs == mine and other != own and mine != max(layers.values())):
                bad.append(f"{name} (layer {mine}) imports {target} (layer {theirs})")
    assert bad == []


def test_the_allowed_exceptions_are_still_needed():
    """A deferred import listed in the doc that no longer exists is removed from it."""
    modules = _modules()
    present = {(n, t) for n, p in modules.items() for t, _ in _imports(n, p, modules)}
    assert _exceptions() <= present


def test_no_import_circle_at_module_level():
    modules = _modules()
    graph = {n: {t for t, top in _imports(n, p, modules) if top and t != n} for n, p in modules.items()}
    # A package's __init__ importing its own submodules is how a package re-exports: not a circle.
    for n in graph:
        graph[n] = {t for t in graph[n] if not (t.startswith(n + ".") and modules[n].name == "__init__.py")}
    state, cycles = {}, []

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for t in sorted(graph.get(n, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])
    assert cycles == []


def test_the_checker_sees_a_violation(tmp_path):
    """The import walk finds module-level and deferred imports (so a passing run means something)."""
    p = tmp_path / "m.py"
    p.write_text("from cablestore.store import store\n\ndef f():\n    from cablestore.rebuild import verify\n")
    mods = {"cablestore.store.store": p, "cablestore.rebuild.verify": p, "cablestore.x": p}
    assert _imports("cablestore.x", p, mods) == [("cablestore.store.store", True), ("cablestore.rebuild.verify", False)]
