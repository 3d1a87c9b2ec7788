"""Counters kept by each tier; updated on the event loop only."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class TierStats:
    """Per-tier counters. Every error a tier swallows increments one of them."""

    hits: int = 0
    page_cache_hits: int = 0  # of the hits, disk blocks read on the event loop from the page cache
    misses: int = 0
    evictions: int = 0
    rejected: int = 0  # puts not stored: larger than the quota, no evictable room, tier unhealthy
    bad_blocks: int = 0  # checksum, header or length mismatch found on read or at open
    read_errors: int = 0
    write_errors: int = 0
    # A tier shared by a node's workers (store.hitnotes): hits of other workers' blocks noted to
    # their owners, those lost to a full ring, and the notes this worker took into its policy.
    notes_sent: int = 0
    notes_dropped: int = 0
    notes_taken: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
