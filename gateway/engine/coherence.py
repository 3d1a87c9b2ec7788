"""When this node may answer from what it cached: invalidation epochs, the channel's
liveness, and the node's journal (what the other workers of this node forgot)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from gateway.cluster.invalidation import Invalidations
from gateway.node.journal import Journal

Epoch = tuple[int, int]


def _nothing(*args: object) -> None:
    return None


class Coherence:
    """What metadata, listings and writes agree on. Event loop only.

    - `epoch(bucket)` changes whenever anything cached about the bucket is invalidated
      (a write, an event, a purge): an answer fetched across a change is returned but
      not cached, since it may predate the write.
    - `trusted()`: with Redis, cached answers are trusted only while this node is known
      to have heard every invalidation acknowledged writes sent (Invalidations.listening:
      Redis down or hung, not subscribed yet, or the listener behind all mean no); then
      the origin is asked instead.
    - `catch_up()`: with several workers, what another worker's write made it forget
      (its Writes appended it to `journal` before acknowledging the write) is forgotten
      here too, before `epoch()` answers and before every L1 lookup (metadata and
      listings, the hit path's included), so the next request after an acknowledged
      write sees it whichever worker takes it.
    """

    def __init__(self, shared: Invalidations | None, journal: Journal | None = None) -> None:
        self.shared = shared
        self.journal = journal
        self._epochs: Counter[str] = Counter()
        self._purges = 0
        self._apply: Callable[[str, str | None], None] = _nothing
        self._forget: Callable[[], None] = _nothing

    def follow(self, apply: Callable[[str, str | None], None], forget: Callable[[], None]) -> None:
        """How a record of the journal is applied here: Writes.invalidate_local and
        Writes.forget_everything, which do not append again."""
        self._apply, self._forget = apply, forget

    def catch_up(self) -> None:
        if self.journal is not None:
            self.journal.catch_up(self._apply, self._forget)

    def epoch(self, bucket: str) -> Epoch:
        self.catch_up()
        return self._purges, self._epochs[bucket]

    def invalidated(self, bucket: str) -> None:
        self._epochs[bucket] += 1

    def purged(self) -> None:
        self._purges += 1

    def trusted(self) -> bool:
        return self.shared is None or self.shared.listening()
