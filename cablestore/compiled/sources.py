"""The files each compiled extension is built from, and their digest.

``setup.py`` builds the digest of an extension's sources into it
(``SOURCE_DIGEST``), loading this module by its path: it needs nothing but
the standard library.  :mod:`cablestore.compiled` compares that with the
digest of the sources beside the package, so an extension built from other
sources (a checkout pulled but not rebuilt) is not used, even when it still
has every function the package calls.  An install without the sources (a
wheel) has nothing to compare with: its extensions were built from its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SOURCES: dict[str, tuple[str, ...]] = {
    "_speedups": ("_speedups.pyx", "_source_digest.pxi", "_decoding.pxi", "_sums.pxi", "_bulk.pxi"),  # the .pyx and the sections it includes
    "_signatures": ("_signatures.pyx", "_source_digest.pxi"),
}
"""Extension name -> its source files, in ``cablestore/``."""


def digest(name: str, folder: Path) -> str | None:
    """SHA-256 (hex) of extension ``name``'s source files in ``folder``; None when one of them is not there."""
    h = hashlib.sha256()
    for file in SOURCES[name]:
        try:
            data = (folder / file).read_bytes()
        except OSError:
            return None
        h.update(file.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


__all__ = ["SOURCES", "digest"]
