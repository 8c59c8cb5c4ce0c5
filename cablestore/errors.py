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


class ArgumentError(CableError, TypeError, ValueError):
    """A library call got an argument of the wrong type or out of range (``ingest("text")``, ``Store(p, cache_mb=-1)``).

    A caller's mistake, raised before anything is read or written; it is a
    ``TypeError`` and a ``ValueError`` too, so code that catches either keeps working.
    """


class QueryError(ArgumentError):
    """A query argument is invalid (negative limit, malformed hash, ...)."""


class ChannelNotFoundError(QueryError):
    """The store holds no channel of that name (the CLI's commands that show one channel say so instead of printing nothing)."""


class UserNotFoundError(QueryError):
    """A user named by a name or a key's hex prefix is no user the store knows, or more than one (the message lists the candidates)."""


# --- wire messages and peers (cablestore.wire.messages, cablestore.peer) ---------


class MessageError(CableError):
    """A Cable wire message is malformed; the message is dropped, the connection kept."""


class FramingError(MessageError):
    """The byte stream cannot be split into messages any more; the connection is closed."""


class MessageTooLargeError(FramingError):
    """A message declares a length above the cap; nothing of it is buffered."""


class UnknownMessageTypeError(MessageError):
    """The message type is not one this peer can parse (the spec says: discard it)."""


class ReconcileError(MessageError):
    """A set reconciliation message is malformed, over its limits, or the exchange did not end within its rounds."""


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


class ResourceLimitError(PeerError):
    """A remote peer went over its share of a resource (see :mod:`cablestore.peer.limits`); only what it asked is refused."""


class RequestTableFullError(ResourceLimitError):
    """The table of live (or forwarded) requests is full for this peer; the request is refused."""


class TooManyConnectionsError(ResourceLimitError):
    """The peer holds ``max_connections`` connections already; a new one is closed at once."""


class SlowPeerError(ResourceLimitError):
    """A remote peer was closed: idle too long, too slow to send one message, or not reading its answers."""


class PolicyError(CableError, ValueError):
    """A resource policy (:class:`cablestore.peer.limits.PeerLimits`) is invalid: a limit out of range, or a memory budget too small."""


class TransportError(CableError):
    """A network connection failed (refused, reset, timed out)."""


class HandshakeError(TransportError):
    """The Cable Handshake failed (wrong cabal key, garbage, too slow) or the channel it set up broke (a MAC, a length); the connection is closed."""


class NotHandshakeError(HandshakeError):
    """The other side speaks plain Cable, not the Cable Handshake: a private peer met a plain one (no cabal key on one side)."""


class WrongCabalKeyError(HandshakeError):
    """The Cable Handshake failed on message 1: the two sides do not hold the same cabal key."""


class HandshakeRequiredError(TransportError):
    """A plain connection was closed before any Cable answer: the peer may be a private listener that requires a cabal key."""


class PeerClosedError(TransportError):
    """An embedded peer (:class:`cablestore.peer.embedded.Peer`) was used before ``async with`` entered it or after it closed."""


class FellBehindError(CableError):
    """A reader of ``Peer.posts()`` did not keep up: its bounded buffer filled, and the posts after it were not queued (read them from the store)."""


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


# --- opening, closing and damaged stores (cablestore.store.lifecycle.opening, cablestore.recovery.recovering) ---


class StoreNotFoundError(StoreError):
    """No cablestore store is at the path (missing, or an empty directory)."""


class NotAStoreError(StoreError):
    """The path holds something else: a file, a snapshot, another program's data."""


class StoreExistsError(StoreError):
    """Something is already at the path where a new store is to be built (``cablestore demo --dir``); nothing was changed."""


class StoreCorruptError(StoreError):
    """LevelDB found damaged files (log, table, manifest); ``cablestore recover`` repairs them."""


class MigrationNeededError(StoreError):
    """The store is in an older keyspace format (``cablestore-1``): ``cablestore migrate STORE`` (or ``Store.migrate``) upgrades it; the refused open wrote nothing."""


class StoreIOError(StoreError):
    """The operating system refused a read or write of the store's files."""


class DiskFullError(StoreIOError):
    """A write failed for lack of space (or a file size limit)."""


class ReadOnlyStoreError(StoreError):
    """A write to a store opened with ``readonly=True`` (``Store(path, readonly=True)``, the read-only commands); nothing was written."""


class SearchNotEnabledError(StoreError):
    """A search of a store that keeps no search index (``Store(path, search=True)`` or ``Store.enable_search()`` builds it)."""


# --- moderation (cablestore.moderation, cablestore.store.read.moderation) ---


class LocalUserError(StoreError):
    """The store belongs to another local user than the one given, or the key given is not a public key."""


class CabalMismatchError(StoreError):
    """The store belongs to another cabal than the cabal key given: two cabals are never mixed in one store."""


class CabalKeyRequiredError(CabalMismatchError):
    """The store belongs to a private cabal and was about to be served or synced without its cabal key: nothing was served."""


class ModerationRefusalError(CableError):
    """The moderation state in effect keeps this post out (moderation.md §4.4.6, §4.6); nothing was written."""


class DroppedError(ModerationRefusalError):
    """The post, or its channel, is dropped by an applied moderation action."""


class BlockedError(ModerationRefusalError):
    """The post's author is blocked for the local user, or blocks the local user (a notified block)."""


def error_classes() -> list[type]:
    """Every exception class of the hierarchy, in the order this module defines them (for the package page)."""
    return [c for c in globals().values() if isinstance(c, type) and issubclass(c, CableError)]
