"""The store's readers: posts by hash and channels' time ranges (hashes), decoded posts, users, links, moderation, the peer's reads, channel spellings."""
