"""One exception hierarchy for everything cablestore refuses.

Callers catch :class:`CableError` to handle any refusal; the subclasses say
which rule a post broke so a peer can decide whether to log, drop or ban.
"""


class CableError(Exception):
    """Base class of every error cablestore raises on purpose."""


class DecodeError(CableError):
    """The bytes are not a well-formed Cable post."""


class TruncatedError(DecodeError):
    """A field runs past the end of the buffer (or a declared length does)."""


class TrailingBytesError(DecodeError):
    """Bytes remain after the post's last field."""


class VarintError(DecodeError):
    """A varint is longer than 10 bytes, overflows u64, or is not minimal."""


class Utf8Error(DecodeError):
    """A string field is not valid UTF-8."""


class UnknownPostTypeError(DecodeError):
    """The post type is not one of the six Cable 1.0 types."""


class LimitError(CableError):
    """A field is outside the limits the spec sets (length, count, range)."""


class SignatureError(CableError):
    """The Ed25519 signature does not verify for the post's public key."""


class FutureTimestampError(CableError):
    """The post claims a timestamp at or beyond now + 7 days."""


class UnauthorizedDeleteError(CableError):
    """A post/delete targets a stored post written by someone else."""


class DeletedPostError(CableError):
    """The post was deleted by its author; the store refuses it again."""


class StoreError(CableError):
    """The store cannot be used as asked (locked, closed, missing)."""


class StoreLockedError(StoreError):
    """Another process (or another Store object) holds the database lock."""


class CorruptRecordError(StoreError):
    """A stored record (a tombstone, say) is damaged; ``check --repair`` removes it."""


class StoreClosedError(StoreError):
    """The store was closed."""


class NotFoundError(CableError, KeyError):
    """No post with that hash is stored."""


class RebuildError(CableError):
    """The rebuild could not run (bad snapshot, missing Java, bad options)."""


class QueryError(CableError, ValueError):
    """A query argument is invalid (negative limit, malformed hash, ...)."""


# --- wire messages and peers (cablestore.wire.messages, cablestore.peer) ---------


class MessageError(CableError):
    """A Cable wire message is malformed; the message is dropped, the connection kept."""


class FramingError(MessageError):
    """The byte stream cannot be split into messages any more; the connection is closed."""


class MessageTooLargeError(FramingError):
    """A message declares a length above the cap; nothing of it is buffered."""


class UnknownMessageTypeError(MessageError):
    """The message type is not one this peer can parse (the spec says: discard it)."""


class TtlError(MessageError):
    """A request's ``ttl`` is above 16."""


class PeerError(CableError):
    """A remote peer sent something well-formed that this peer refuses."""


class UnknownRequestError(PeerError):
    """A response names a ``req_id`` this peer has no live request for."""


class DuplicateRequestError(PeerError):
    """A request reuses a ``req_id`` that is already alive here (a loop or a replay)."""


class UnsolicitedPostError(PeerError):
    """A post response carries a post this peer did not ask for."""


class RequestTableFullError(PeerError):
    """The table of live requests is full; the request is refused."""


class TransportError(CableError):
    """A network connection failed (refused, reset, timed out)."""


class SparkUnavailableError(RebuildError):
    """Spark could not start or run the job (its own output is in the log file named)."""


class SparkMasterUnreachableError(SparkUnavailableError):
    """The ``--master`` given cannot be reached, or did not accept the application in time."""


# --- authoring (cablestore.authoring.author, cablestore.authoring.keyfile) ----------------------


class PostFieldError(CableError, ValueError):
    """A post is being built with a missing field or a field of the wrong type."""


class NotYourPostError(UnauthorizedDeleteError):
    """An author asked to delete a post that is not theirs (or is not stored, so not provably theirs)."""


class KeyFileError(CableError):
    """A key file cannot be used: missing, unreadable, malformed, or readable by others."""


class PostsFileError(CableError):
    """A file given as a posts file is not one, or is truncated or damaged."""


# --- opening, closing and damaged stores (cablestore.store.opening, cablestore.store.recovery) ---


class StoreNotFoundError(StoreError):
    """No cablestore store is at the path (missing, or an empty directory)."""


class NotAStoreError(StoreError):
    """The path holds something else: a file, a snapshot, another program's data."""


class StoreCorruptError(StoreError):
    """LevelDB found damaged files (log, table, manifest); ``cablestore recover`` repairs them."""


class StoreIOError(StoreError):
    """The operating system refused a read or write of the store's files."""


class DiskFullError(StoreIOError):
    """A write failed for lack of space (or a file size limit)."""
