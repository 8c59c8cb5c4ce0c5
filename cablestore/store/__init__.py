"""The LevelDB store: opening (:mod:`cablestore.store.lifecycle.opening`), one atomic
write per ingest (:mod:`cablestore.store.write.txn`,
:mod:`cablestore.store.write.indexer`), the queries a peer answers from
(:mod:`cablestore.store.read.hashes`), decoded reading
(:mod:`cablestore.store.read.decoded`), recovery of a damaged directory
(:mod:`cablestore.recovery.recovering`), and :class:`Store`, which holds them
together.
"""

from cablestore.store.store import IngestResult, Store, wall_clock_ms

__all__ = ["Store", "IngestResult", "wall_clock_ms"]
