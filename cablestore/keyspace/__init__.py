"""How a store lays out its keys: fixed-width timestamps, escaped channel
names (:mod:`cablestore.keyspace.keys`), the records one ingest produces
(:mod:`cablestore.keyspace.records`) and the facts a block keeps
(:mod:`cablestore.keyspace.facts`).

Pure functions of bytes; the views (``cablestore.views``) build their keys
from these.  ``KEYSPACE.md`` at the repository root lists every prefix.
"""
