"""LevelDB's own file formats, read leniently: tables (:mod:`.tables`), write-ahead logs (:mod:`.log`),
the manifest and the directory's files (:mod:`.manifest`), and posts found in raw bytes (:mod:`.loose`)."""
