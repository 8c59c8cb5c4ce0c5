"""The LevelDB store: opening (:mod:`cablestore.store.opening`), one atomic
write per ingest (:mod:`cablestore.store.txn`,
:mod:`cablestore.store.indexer`), the queries a peer answers from
(:mod:`cablestore.store.queries`), decoded reading
(:mod:`cablestore.store.reading`), recovery of a damaged directory
(:mod:`cablestore.store.recovery`), and :class:`Store`, which holds them
together.
"""

from cablestore.store.store import IngestResult, Store, wall_clock_ms

__all__ = ["Store", "IngestResult", "wall_clock_ms"]
