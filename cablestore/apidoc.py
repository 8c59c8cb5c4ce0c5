"""The API reference: which modules are public, and their HTML pages built from the docstrings.

``python -m cablestore.apidoc [DIR]`` writes the reference with pdoc
(``pip install -e '.[docs]'``) to ``DIR`` (default ``docs/api``).
``tests/test_api_docs.py`` checks that every public name of these modules has
a docstring and type hints.
"""

from __future__ import annotations

import os
import pkgutil
import sys
from pathlib import Path

# The machinery behind the public API: the write transaction, the view
# modules (one shared shape, documented in KEYSPACE.md), the rebuild's
# engines, and the command line (described by ``--help``).
INTERNAL_PREFIXES = (
    "cablestore.__main__",
    "cablestore.cli",
    "cablestore.store.txn",
    "cablestore.keyspace.reverse",
    "cablestore.views",
    "cablestore.rebuild.",
)


def public_modules() -> list[str]:
    """Names of the public modules: every module of the package but the internal ones."""
    import cablestore
    import cablestore.rebuild
    import cablestore.views

    names = {"cablestore", "cablestore.rebuild"}
    for pkg in (cablestore, cablestore.views, cablestore.rebuild):
        names.update(m.name for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."))
    return sorted(n for n in names if not n.startswith(INTERNAL_PREFIXES))


def build(out: str | os.PathLike = "docs/api") -> Path:
    """Write the HTML reference of :func:`public_modules` to ``out``; return its index page."""
    try:
        import pdoc
    except ImportError as exc:
        from cablestore.errors import CableError

        raise CableError("pdoc is not installed: pip install -e '.[docs]'") from exc
    out = Path(out)
    pdoc.pdoc(*public_modules(), output_directory=out)
    return out / "index.html"


if __name__ == "__main__":  # pragma: no cover
    print(build(sys.argv[1] if len(sys.argv) > 1 else "docs/api"))
