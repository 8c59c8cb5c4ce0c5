"""The write path: the writer (the one door of every write), ingest, the indexer and the batch it fills, the LevelDB transaction, moderation enforcement."""
