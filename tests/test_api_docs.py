"""Every public name of the library has a docstring and type hints; the package says it is typed.

Public: each module :func:`cablestore.apidoc.public_modules` names (the ones
the API reference documents).  In a module
with ``__all__`` the names listed there; otherwise the functions and classes
defined in it whose names do not start with ``_``; for a class, its public
methods and properties (and ``__init__``'s hints).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import cablestore
from cablestore.apidoc import public_modules


def public_objects(module) -> list[tuple[str, object]]:
    if hasattr(module, "__all__"):
        names = list(module.__all__)
    else:
        names = [
            n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module.__name__
        ]
    out = []
    for name in names:
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue  # constants: documented where they are defined
        out.append((f"{module.__name__}.{name}", obj))
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if inspect.isfunction(func):
                    out.append((f"{module.__name__}.{name}.{attr}", func))
    return out


def _all():
    for name in public_modules():
        module = importlib.import_module(name)
        yield name, module, public_objects(module)


def test_the_walk_finds_the_main_api():
    names = {qualname for _, _, objs in _all() for qualname, _ in objs}
    assert {
        "cablestore.Store", "cablestore.store.Store.ingest", "cablestore.store.read.decoded.Reading.messages",
        "cablestore.store.read.hashes.Queries.channel_time_range", "cablestore.rebuild.rebuild", "cablestore.wire.codec.decode_post",
    } <= names
    assert not any(".txn." in n or ".views." in n for n in names)


def test_every_public_module_and_name_has_a_docstring():
    missing = []
    for name, module, objs in _all():
        if not (module.__doc__ or "").strip():
            missing.append(name)
        missing += [q for q, obj in objs if not q.endswith(".__init__") and not (inspect.getdoc(obj) or "").strip()]
    assert missing == []


def test_every_public_function_has_type_hints():
    unhinted = []
    for _, _, objs in _all():
        for qualname, obj in objs:
            if inspect.isclass(obj):
                continue
            sig = inspect.signature(obj)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
            if any(p.annotation is inspect.Parameter.empty for p in params):
                unhinted.append(qualname)
            elif sig.return_annotation is inspect.Signature.empty and not qualname.endswith(".__init__"):
                unhinted.append(qualname + " (return)")
    assert unhinted == []


def test_the_package_ships_a_py_typed_marker():
    root = Path(cablestore.__file__).parent
    assert (root / "py.typed").is_file()
    setup = (root.parent / "setup.cfg").read_text()
    assert "py.typed" in setup.split("[options.package_data]", 1)[1].split("[", 1)[0]


def test_the_reference_builds_a_page_per_public_module_without_a_warning(tmp_path):
    import warnings

    from cablestore.apidoc import build

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index = build(tmp_path / "api")
    assert [str(w.message) for w in caught] == []  # pdoc's "a module with this name has already been added", for one
    assert index.is_file()
    pages = {p.relative_to(tmp_path / "api").with_suffix("").as_posix().replace("/", ".") for p in (tmp_path / "api").rglob("*.html")}
    assert pages - {"index"} == set(public_modules())  # every public module, and no internal one
    reading = (tmp_path / "api" / "cablestore" / "store" / "read" / "decoded.html").read_text()
    assert "decoded, newest first" in reading  # a docstring, rendered
    store_page = (tmp_path / "api" / "cablestore" / "store" / "store.html").read_text()
    assert "Store.messages" in store_page and "decoded, newest first" in store_page  # a delegation shows its component's docstring


ROLE = re.compile(r":(?:class|func|mod|meth|attr|data|exc):`(~?)([\w.]+)`")


def _resolves(target: str) -> bool:
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_every_cross_reference_in_a_public_docstring_resolves():
    """pdoc links ``:class:`cablestore.X``` when X exists; a ``~`` or a stale name renders literally."""
    bad = []
    for name, module, objs in _all():
        docs = [(name, module.__doc__ or "")] + [(q, inspect.getdoc(o) or "") for q, o in objs]
        for where, doc in docs:
            for tilde, target in ROLE.findall(doc):
                if tilde or (target.startswith("cablestore") and not _resolves(target)):
                    bad.append(f"{where}: {tilde}{target}")
    assert bad == []


def test_a_stale_reference_is_caught():
    assert _resolves("cablestore.peer.protocol.Connection")
    assert not _resolves("cablestore.peer.protocol.Node")  # it lives in cablestore.peer.node


def test_the_reference_command_takes_help_as_a_flag_not_a_directory(tmp_path):
    """``python -m cablestore.apidoc --help`` once wrote the reference into a folder named ``--help``."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "cablestore.apidoc", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage:" in proc.stdout
    assert list(tmp_path.iterdir()) == []
