"""cablestore: an embeddable LevelDB store for Cable posts and their views."""

__version__ = "0.1.0"

from cablestore.errors import *  # noqa: E402,F401,F403
from cablestore.errors import CableError  # noqa: E402
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
