"""Recovering a damaged store: LevelDB's own file formats read leniently (:mod:`cablestore.recovery.leveldb`),
salvage of every record that proves itself (:mod:`cablestore.recovery.salvage`) and ``recover``, which
salvages, migrates and repairs a store in place (:mod:`cablestore.recovery.recovering`).

It uses the store (above :mod:`cablestore.store`, beside :mod:`cablestore.rebuild`); its LevelDB readers are
pure byte parsers that the store's opening also uses (the manifest check), so they sit low.
"""
