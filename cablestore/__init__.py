"""cablestore: an embeddable LevelDB store for Cable posts and their views.

The names a program needs are here: :class:`Store` (open a store, ingest,
query, read, check), :class:`Keypair` and :func:`make_post` (sign posts),
:func:`decode_post`, :func:`encode_post` and :func:`post_hash` (the codec),
the post type numbers, and :class:`Peer` (a Cable peer inside an asyncio
program: serve, connect, follow new posts, post).  Serving and syncing over TCP are in
:mod:`cablestore.peer.transport` (:func:`cablestore.peer.transport.run_server`,
:func:`cablestore.peer.transport.sync_path`); writing posts as the local
user in :mod:`cablestore.authoring.author`; the rebuild in
:mod:`cablestore.rebuild`.

Every refusal raises a subclass of :class:`CableError` and leaves the store
unchanged; no exception of another library crosses the API.  The classes,
all importable from ``cablestore`` (defined in :mod:`cablestore.errors`), are listed
below.
"""

__version__ = "0.1.0"

# In a checkout, views/, rebuild/ and recovery/ sit beside this package and an install
# maps them in as cablestore.views, cablestore.rebuild and cablestore.recovery (setup.cfg).  When
# this package is imported from the checkout itself (a script or
# ``python -m benchmarks`` run from the repository root, which puts the root
# first on sys.path) with a non-editable install, nothing maps them: a finder
# that knows just those three names does, after every other finder.
import importlib.util as _util  # noqa: E402
import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_CHECKOUT = _Path(__file__).resolve().parent.parent


class _CheckoutFinder:
    """Finds ``cablestore.views``, ``cablestore.rebuild`` and ``cablestore.recovery`` in the checkout's folders of those names."""

    @staticmethod
    def find_spec(name, path=None, target=None):  # noqa: ANN001, ANN205 - the importlib protocol
        if name not in ("cablestore.views", "cablestore.rebuild", "cablestore.recovery"):
            return None
        init = _CHECKOUT / name.split(".")[1] / "__init__.py"
        return _util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])


if not (_Path(__file__).resolve().parent / "views").is_dir() and (_CHECKOUT / "views" / "__init__.py").is_file() and (_CHECKOUT / "setup.cfg").is_file():
    _sys.meta_path.append(_CheckoutFinder)

from cablestore.errors import *  # noqa: E402,F401,F403
from cablestore.errors import CableError  # noqa: E402
from cablestore.errors import error_classes as _error_classes  # noqa: E402

__doc__ += "\n" + "\n".join(f"- ``{c.__name__}`` ({c.__bases__[0].__name__}): {(c.__doc__ or '').strip().splitlines()[0]}" for c in _error_classes())

from cablestore.wire.codec import (  # noqa: E402
    DELETE,
    INFO,
    JOIN,
    LEAVE,
    POST_TYPE_NAMES,
    TEXT,
    TOPIC,
    Post,
    decode_post,
    encode_post,
    post_hash,
)
from cablestore.wire.crypto import Keypair, make_post, sign_post, verify_post  # noqa: E402

__all__ = [
    "CableError",
    "Keypair",
    "Post",
    "decode_post",
    "encode_post",
    "make_post",
    "post_hash",
    "sign_post",
    "verify_post",
    "TEXT",
    "DELETE",
    "INFO",
    "TOPIC",
    "JOIN",
    "LEAVE",
    "POST_TYPE_NAMES",
]

from cablestore.store.store import IngestResult, Store  # noqa: E402

__all__ += ["Store", "IngestResult"]

from cablestore.peer.embedded import Peer  # noqa: E402

__all__ += ["Peer"]
