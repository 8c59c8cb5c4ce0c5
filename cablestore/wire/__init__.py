"""The bytes of Cable: posts (:mod:`cablestore.wire.codec`), their Ed25519
signatures (:mod:`cablestore.wire.crypto`) and the wire messages peers
exchange (:mod:`cablestore.wire.messages`, :mod:`cablestore.wire.decoding`).

Nothing here touches a database or a socket; this layer imports only
:mod:`cablestore.errors`.
"""
