"""The API reference: which modules are public, and their HTML pages built from the docstrings.

``python -m cablestore.apidoc [DIR]`` writes the reference with pdoc
(``pip install -e '.[docs]'``) to ``DIR`` (default ``docs/api``).
``tests/test_api_docs.py`` checks that every public name of these modules has
a docstring and type hints.
"""

from __future__ import annotations

import os
import pkgutil
import re
import sys
from pathlib import Path

from cablestore.errors import CableError

# The machinery behind the public API: the write transaction, the view
# modules (one shared shape, documented in KEYSPACE.md), the rebuild's
# engines, and the command line (described by ``--help``).
INTERNAL_PREFIXES = (
    "cablestore.__main__",
    "cablestore.cli",
    "cablestore.store.write.txn",
    "cablestore.store.write.batch",
    "cablestore.views",
    "cablestore.rebuild.",
)
PUBLIC_EXCEPTIONS = ("cablestore.rebuild.reindex", "cablestore.rebuild.migration")  # under an internal prefix, but public


def public_modules() -> list[str]:
    """Names of the public modules: every module of the package but the internal ones."""
    import cablestore
    import cablestore.rebuild
    import cablestore.views

    names = {"cablestore", "cablestore.rebuild"}
    for pkg in (cablestore, cablestore.views, cablestore.rebuild):
        names.update(m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
    return sorted(n for n in names if n in PUBLIC_EXCEPTIONS or not n.startswith(INTERNAL_PREFIXES))


def build(out: str | os.PathLike = "docs/api") -> Path:
    """Write the HTML reference of :func:`public_modules` to ``out``; return its index page."""
    try:
        import pdoc
    except ImportError as exc:
        raise CableError("pdoc is not installed: pip install -e '.[docs]'") from exc
    out = Path(out)
    pdoc.pdoc(*_specs(pdoc.extract.walk_specs), output_directory=out)
    return out / "index.html"


def _specs(walk) -> list[str]:
    """pdoc's module specifications for exactly :func:`public_modules`, none repeated.

    pdoc walks a package without ``__all__`` into every submodule, and warns
    when a later specification names one of those again: a module is given
    only when no package given before covers it, and whatever a walk adds
    that is not public is taken out again (a ``!`` pattern).
    """
    public = public_modules()
    specs: list[str] = []
    covered: set[str] = set()
    for name in public:
        if name not in covered:
            specs.append(name)
            covered.update(walk([name]))
    return specs + [f"!{re.escape(name)}$" for name in sorted(covered - set(public))]


def main(argv: list[str] | None = None) -> int:
    """``python -m cablestore.apidoc [DIR]``: build the reference, print its index page."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cablestore.apidoc", description="Write the HTML API reference with pdoc.")
    parser.add_argument("dir", nargs="?", default="docs/api", help="output directory (default: docs/api)")
    args = parser.parse_args(argv)
    try:
        print(build(args.dir))
    except CableError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
