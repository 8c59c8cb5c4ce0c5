"""Build the optional compiled hot path (cablestore/_speedups.pyx, cablestore/_signatures.pyx) with Cython.

Everything else is declared in setup.cfg and pyproject.toml.  The extension
is optional: without Cython or a C compiler, or if its build fails, the
install still succeeds and cablestore runs in pure Python (see
cablestore/compiled/).  CABLESTORE_PURE_BUILD=1 skips the build.
"""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the pure-Python path is always there."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure leaves the pure path
            print(f"cablestore: compiled hot path not built ({exc}); using pure Python", file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"cablestore: compiled hot path not built ({exc}); using pure Python", file=sys.stderr)


def extensions():
    if os.environ.get("CABLESTORE_PURE_BUILD", "").strip() not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("cablestore: Cython not available; using pure Python", file=sys.stderr)
        return []
    try:
        # force: always C from the sources as they are now, whatever a .c left beside them says (its
        # modification time can be newer than an older source's), so the digest below names what is compiled.
        built = cythonize(
            ["cablestore/_speedups.pyx", "cablestore/_signatures.pyx"], compiler_directives={"language_level": "3"}, quiet=True, force=True
        )
    except Exception as exc:  # noqa: BLE001
        print(f"cablestore: cythonize failed ({exc}); using pure Python", file=sys.stderr)
        return []
    # Each extension carries the digest of the sources it was built from (cablestore/compiled/sources.py).
    sources = _extension_sources()
    for ext in built:
        name = ext.name.rsplit(".", 1)[-1]
        ext.define_macros.append(("CABLESTORE_SOURCE_DIGEST", f'"{sources.digest(name, Path(__file__).parent / "cablestore")}"'))
    return built


def _extension_sources():
    """cablestore/compiled/sources.py, loaded by its path: the package itself may not import yet."""
    spec = importlib.util.spec_from_file_location("_cablestore_extension_sources", Path(__file__).parent / "cablestore" / "compiled" / "sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
