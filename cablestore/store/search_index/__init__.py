"""The store's full-text index: its postings (what a post writes) and the searcher (keeping the index, answering queries)."""
