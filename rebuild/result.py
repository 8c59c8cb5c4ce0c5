"""What an engine hands back: digests per (view, bucket), counts, faults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class EngineResult:
    engine: str
    partitions: int
    posts: int
    tombstones: int
    faults: list
    recomputed_digests: dict  # (view, bucket) -> blake3 hex
    live_digests: dict
    recomputed_counts: dict  # view -> entries
    live_counts: dict
    fetch: Callable = field(repr=False)  # set of (view, bucket) -> (recomputed, live) dicts

    def differing_buckets(self) -> set:
        every = set(self.recomputed_digests) | set(self.live_digests)
        return {b for b in every if self.recomputed_digests.get(b) != self.live_digests.get(b)}
