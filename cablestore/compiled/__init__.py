"""Which per-post hot path is active: the compiled extension or pure Python.

``cablestore._speedups`` (Cython, built by ``pip install`` when a C compiler
is there) holds compiled twins of the hot functions: post decoding, the
per-post view entries and groups, ``Indexed.of`` and the
rebuild's digest fold.  ``cablestore._signatures`` checks a batch of
signatures without the GIL.  Each module keeps its pure-Python original and
uses the twin when :data:`native` is set.  Both give byte-identical stores
(``tests/test_speedups.py``).  ``CABLESTORE_PURE=1`` in the environment, or
an extension that is missing or fails to import, selects pure Python.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

from cablestore.compiled.sources import digest

PURE_ENV = "CABLESTORE_PURE"


# Every function of each extension that the package calls: an extension built from
# older sources (a checkout pulled but not rebuilt) lacks some, and is not used.
SPEEDUPS = frozenset(
    {
        "bind_codec", "bind_records", "bind_recon", "bind_recon_rows", "bind_views", "bound_prefixes", "bound_subkeys", "decode_post", "delete_some",
        "entries", "filter_set", "filter_test", "fold_entries", "groups",
        "mono", "new_indexed", "put_all", "recon_add", "recon_write", "reindex_chunk", "write_sorted",
    }
)
SIGNATURES = frozenset({"Batch"})
# Beyond the names: each extension must also carry the digest of the sources beside it
# (cablestore.compiled.sources), so one built from other sources is not used either.


def _load(name: str = "_speedups", required: frozenset[str] = SPEEDUPS) -> tuple[ModuleType | None, str]:
    if os.environ.get(PURE_ENV, "").strip() not in ("", "0"):
        return None, f"pure Python ({PURE_ENV}=1)"
    try:
        # By name: an extension module, outside the layers (it imports nothing of cablestore).
        module = importlib.import_module(f"cablestore.{name}")
    except ImportError:
        return None, "pure Python (the compiled extension is not built)"
    if not required <= set(dir(module)):
        return None, "pure Python (the compiled extension is older than the sources: rebuild it with pip install -e .)"
    expected = digest(name, Path(__file__).parent.parent)  # None: no sources here to compare with (a wheel)
    if expected is not None and getattr(module, "SOURCE_DIGEST", None) != expected:
        return None, "pure Python (the compiled extension was built from other sources: rebuild it with pip install -e .)"
    return module, "compiled (Cython)"


native, HOT_PATH = _load()
"""The compiled module (None: pure Python), and how the hot path runs, in words."""

signatures, _ = _load("_signatures", SIGNATURES)
"""The compiled batch signature check, without the GIL (None: pure Python): see cablestore.wire.crypto."""

COMPILED: bool = native is not None
"""True when the compiled hot path is in use."""

__all__ = ["COMPILED", "HOT_PATH", "PURE_ENV", "SIGNATURES", "SPEEDUPS", "native", "signatures"]
