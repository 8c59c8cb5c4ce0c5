# Included by each compiled extension (cablestore/compiled/sources.py lists it among their sources).

cdef extern from *:
    """
    #ifndef CABLESTORE_SOURCE_DIGEST
    #define CABLESTORE_SOURCE_DIGEST ""
    #endif
    """
    const char* CABLESTORE_SOURCE_DIGEST

SOURCE_DIGEST = CABLESTORE_SOURCE_DIGEST.decode("ascii")
"""The digest of the sources this extension was built from (setup.py; cablestore.compiled.sources)."""
