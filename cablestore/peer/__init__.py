"""A Cable peer: the sans-I/O protocol (:mod:`cablestore.peer.protocol`:
bytes in, bytes out), pulling what a remote peer has
(:mod:`cablestore.peer.sync`), and the asyncio TCP transport
(:mod:`cablestore.peer.transport`: :func:`cablestore.peer.transport.run_server`,
:func:`cablestore.peer.transport.sync_path`).
"""
