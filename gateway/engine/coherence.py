"""When this node may answer from what it cached: invalidation epochs and the channel's liveness."""

from __future__ import annotations

from collections import Counter

from gateway.cluster.invalidation import Invalidations

Epoch = tuple[int, int]


class Coherence:
    """What metadata, listings and writes agree on. Event loop only.

    - `epoch(bucket)` changes whenever anything cached about the bucket is invalidated
      (a write, an event, a purge): an answer fetched across a change is returned but
      not cached, since it may predate the write.
    - `trusted()`: with Redis, cached answers are trusted only while this node is known
      to have heard every invalidation acknowledged writes sent (Invalidations.listening:
      Redis down or hung, not subscribed yet, or the listener behind all mean no); then
      the origin is asked instead.
    """

    def __init__(self, shared: Invalidations | None) -> None:
        self.shared = shared
        self._epochs: Counter[str] = Counter()
        self._purges = 0

    def epoch(self, bucket: str) -> Epoch:
        return self._purges, self._epochs[bucket]

    def invalidated(self, bucket: str) -> None:
        self._epochs[bucket] += 1

    def purged(self) -> None:
        self._purges += 1

    def trusted(self) -> bool:
        return self.shared is None or self.shared.listening()
