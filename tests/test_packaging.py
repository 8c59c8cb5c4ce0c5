"""views/, rebuild/ and recovery/ install as cablestore.views, cablestore.rebuild and cablestore.recovery, normal and editable."""

from __future__ import annotations

import configparser
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOTS = {"cablestore": ROOT / "cablestore", "cablestore.views": ROOT / "views", "cablestore.rebuild": ROOT / "rebuild", "cablestore.recovery": ROOT / "recovery"}
# The builds below check what is built and from which sources, not how fast it runs: compiled unoptimized (the
# default -O3 -g makes gcc take ~10x longer on the 1 MB of generated C). CFLAGS come after Python's own, so they win.
QUICK_BUILD = {**os.environ, "CFLAGS": "-O0 -g0"}


def test_setup_cfg_lists_every_package_of_the_source_tree():
    """A package missing from the list is missing from every non-editable install (cablestore.moderation was)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    packages = config["options"]["packages"].split()
    listed = set(packages)
    assert sorted(packages) == sorted(listed), "a package listed twice"
    found = set()
    for name, folder in PACKAGE_ROOTS.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            if "__pycache__" not in rel:
                found.add(".".join((name, *rel)))
    assert found == listed


def test_wheel_maps_views_and_rebuild_into_the_package(tmp_path):
    # Built from a copy without build/: setuptools reuses what a build/lib of an
    # earlier build holds, which once hid a package missing from setup.cfg.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git", "*.so", "venv", ".venv", ".benchmarks", ".hypothesis", ".*_cache"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
        env=QUICK_BUILD,
    )
    [wheel] = (tmp_path / "dist").glob("cablestore-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"cablestore/views/chat.py", "cablestore/rebuild/spark_engine.py", "cablestore/recovery/salvage.py", "cablestore/wire/codec.py", "cablestore/py.typed"} <= names
    assert not any(n.startswith(("views/", "rebuild/", "tests/")) for n in names)

    # a normal install of that wheel imports both subpackages from site-packages
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True)
    # -S: no .pth files, so an editable install of this checkout cannot lend the wheel a package it lacks;
    # the dependencies come from site-packages, after the wheel.
    deps = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if p]
    code = (f"import sys; sys.path += {deps!r}; "
            "import cablestore.views.chat as v, cablestore.rebuild.spark_engine as r, cablestore.moderation as m; from cablestore import Store; "
            "from cablestore import compiled; print(v.__file__); print(r.__file__); print(m.__file__); print(compiled.COMPILED)")
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": ""},
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 4 and all(p.startswith(str(target)) for p in out[:3]), out
    # The wheel's extensions were built from its own sources: their digest check (cablestore.compiled.sources) passes.
    assert out[3] == str(any(n.startswith("cablestore/_speedups.") and n.endswith(".so") for n in names)), (out, names)


def test_editable_install_imports_from_the_checkout():
    code = "import cablestore.views as v, cablestore.rebuild as r; print(v.__file__); print(r.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(ROOT / "views" / "__init__.py"), str(ROOT / "rebuild" / "__init__.py")]


NON_EDITABLE = "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "


def test_running_from_the_checkout_root_finds_views_and_rebuild_without_the_editable_mapping():
    """``python -m benchmarks`` from the root with a non-editable install: the checkout's cablestore/ comes first on sys.path."""
    code = NON_EDITABLE + "import cablestore.views as v, cablestore.rebuild as r, cablestore; print(cablestore.__file__); print(v.__file__); print(r.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(ROOT / "cablestore" / "__init__.py"), str(ROOT / "views" / "__init__.py"), str(ROOT / "rebuild" / "__init__.py")]


def test_benchmarks_and_interop_start_from_the_root_without_the_editable_mapping():
    for module in ("benchmarks", "cablestore"):
        code = NON_EDITABLE + f"import runpy; sys.argv = ['{module}', '--help']; runpy.run_module('{module}', run_name='__main__')"
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "usage:" in proc.stdout
    code = NON_EDITABLE + "import runpy; sys.argv = ['interop/run.py', '--help']; sys.path.insert(0, 'interop'); runpy.run_path('interop/run.py', run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_a_c_file_left_from_other_sources_is_not_compiled(tmp_path):
    """Regression: cythonize kept a generated .c newer than its (restored, older) sources, and the build compiled it
    under the digest of the current sources, so the digest check (cablestore.compiled.sources) passed stale code."""
    from Cython.Build import cythonize  # a test dependency (setup.cfg), as it is the build's

    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".git", "*.so", "*.c", "venv", ".venv", ".benchmarks", ".hypothesis", ".*_cache")
    shutil.copytree(ROOT, source, ignore=ignore)
    section = source / "cablestore" / "_bulk.pxi"
    original = section.read_bytes()
    section.write_bytes(original + b"\n\ndef only_in_the_old_sources():\n    return 1\n")
    cythonize([str(source / "cablestore" / "_speedups.pyx")], compiler_directives={"language_level": "3"}, quiet=True)
    section.write_bytes(original)  # the section restored, older than the .c (as cp -p, rsync -a or tar leave it)
    os.utime(section, (1_500_000_000, 1_500_000_000))
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=source, check=True, capture_output=True, env=QUICK_BUILD)
    code = NON_EDITABLE + f"sys.path.insert(0, {str(source)!r}); import cablestore.compiled as c; print(c.COMPILED, hasattr(c.native, 'only_in_the_old_sources'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "False"], (out.stdout, out.stderr[-2000:])
