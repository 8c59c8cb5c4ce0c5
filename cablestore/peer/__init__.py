"""A Cable peer.

* sans I/O (in the manner of h11): a :class:`Node` owns the state its
  connections share (:mod:`cablestore.peer.state`) and makes one
  :class:`Connection` per remote peer (:mod:`cablestore.peer.protocol`:
  bytes in, bytes out, events); a connection serves requests
  (:mod:`cablestore.peer.serving`, :mod:`cablestore.peer.forwarding`) and
  makes its own (:mod:`cablestore.peer.requesting`);
* :class:`Sync` pulls what a remote peer has (:mod:`cablestore.peer.sync`);
* the asyncio TCP transport: :func:`run_server` (``cablestore serve``, which
  also keeps connections to the peers it is given: :func:`keep_dialing`,
  reconnecting with :class:`Backoff`; :func:`run_dialer` without a listener),
  :func:`run_sync` and :func:`sync_path` (``cablestore sync``), plain or
  over the Cable Handshake with a cabal key (:class:`PrivateCabal`,
  :mod:`cablestore.peer.secure`);
* a peer inside an asyncio program: :class:`Peer` (serve, connect, sync,
  new posts as an async iterator, posting; :mod:`cablestore.peer.embedded`);
* every limit, settable or fixed: :mod:`cablestore.peer.limits`
  (:class:`PeerLimits` holds the settable ones).
"""

from cablestore.peer.dialer import keep_dialing, run_dialer
from cablestore.peer.dialing import Backoff
from cablestore.peer.embedded import LiveSync, Peer
from cablestore.peer.limits import DEFAULT_POLICY, LIMITS, PeerLimits
from cablestore.peer.live import STATE_TYPES
from cablestore.peer.node import Node
from cablestore.peer.postfeed import PostFeed
from cablestore.peer.protocol import Connection
from cablestore.peer.secure import PrivateCabal
from cablestore.peer.state import PeerState
from cablestore.peer.sync import Sync
from cablestore.peer.table import Concluded, Job, Refused
from cablestore.peer.transport import PeerServer, parse_address, run_server, run_sync, sync_path

__all__ = [
    "Peer",
    "LiveSync",
    "PostFeed",
    "Node",
    "Connection",
    "PeerState",
    "PeerLimits",
    "DEFAULT_POLICY",
    "LIMITS",
    "Job",
    "Concluded",
    "Refused",
    "STATE_TYPES",
    "Sync",
    "PeerServer",
    "PrivateCabal",
    "run_server",
    "run_sync",
    "run_dialer",
    "keep_dialing",
    "Backoff",
    "sync_path",
    "parse_address",
]
