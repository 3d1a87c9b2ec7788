"""Eviction policies (LRU, S3-FIFO) behind one interface: pure, synchronous, no store types.

The same objects drive the live tiers and an offline trace simulator: keys are strings,
sizes are ints, and the caller decides when to evict (it calls victim() until the next
object fits), so a policy never needs to know the quota it serves beyond its own sizing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.lru import Queue


def _always(key: str) -> bool:
    return True


class EvictionPolicy(Protocol):
    """What a tier asks of its eviction policy.

    insert() of a key already present updates its size and counts as an access; access()
    and remove() of an absent key do nothing. victim() chooses the next key to evict and
    forgets it; keys that `evictable` refuses (pinned) are skipped and stay. It returns
    None only when no present key is evictable.
    """

    def insert(self, key: str, size: int) -> None: ...

    def access(self, key: str) -> None: ...

    def remove(self, key: str) -> None: ...

    def victim(self, evictable: Callable[[str], bool] = _always) -> str | None: ...

    def __contains__(self, key: object) -> bool: ...

    def __len__(self) -> int: ...


class LRUPolicy:
    """Least recently used first. A refused (pinned) key met during victim() is moved to the
    most-recent end, so a large pinned set costs one pass, not one pass per eviction."""

    __slots__ = ("_order", "capacity")

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity  # unused by LRU; kept so every policy is built alike
        self._order: Queue[str, int] = Queue()

    def insert(self, key: str, size: int) -> None:
        self._order[key] = size
        self._order.move_to_end(key)

    def access(self, key: str) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def remove(self, key: str) -> None:
        self._order.pop(key, None)

    def victim(self, evictable: Callable[[str], bool] = _always) -> str | None:
        order = self._order
        for _ in range(len(order)):
            key = next(iter(order))
            if evictable(key):
                del order[key]
                return key
            order.move_to_end(key)
        return None

    def __contains__(self, key: object) -> bool:
        return key in self._order

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return f"LRUPolicy(entries={len(self._order)})"


class _Entry:
    __slots__ = ("freq", "main", "size")

    def __init__(self, size: int, main: bool) -> None:
        self.size = size
        self.freq = 0
        self.main = main


class S3FIFOPolicy:
    """S3-FIFO (Yang et al., SOSP 2023, "FIFO queues are all you need for cache eviction").

    A small FIFO (~10% of capacity in bytes) filters one-hit wonders, a main FIFO with a
    2-bit clock holds the rest, and a ghost FIFO remembers keys recently evicted from small.
    - insert: to main if the key is a ghost, else to small; freq starts at 0.
    - access: freq = min(freq + 1, 3).
    - evict from small (while small holds more than its share, or main is empty): the oldest
      entry moves to main with freq reset if it was accessed (freq > 0, the brief's threshold;
      libCacheSim's current default asks for 2 accesses), else it is the victim and a ghost.
    - evict from main: the oldest entry is reinserted with freq - 1 if freq > 0, else it is
      the victim (main victims do not become ghosts).
    The ghost queue is bounded in bytes by main's share of the capacity: as many entries as
    main holds, in the paper's equal-size terms, without forgetting ghosts while main is
    still filling. A refused (pinned) key is rotated to the back of its queue untouched.
    """

    __slots__ = ("_entries", "_ghost", "_ghost_bytes", "_main", "_small", "_small_bytes", "capacity", "ghost_limit", "small_target")

    def __init__(self, capacity: int, small_ratio: float = 0.1) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, not {capacity}")
        self.capacity = capacity
        self.small_target = int(capacity * small_ratio)
        self.ghost_limit = capacity - self.small_target
        self._small: Queue[str, None] = Queue()
        self._main: Queue[str, None] = Queue()
        self._ghost: Queue[str, int] = Queue()
        self._entries: dict[str, _Entry] = {}
        self._small_bytes = 0
        self._ghost_bytes = 0

    # --- the interface ---------------------------------------------------------------------

    def insert(self, key: str, size: int) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            if not entry.main:
                self._small_bytes += size - entry.size
            entry.size = size
            entry.freq = min(entry.freq + 1, 3)
            return
        ghost_size = self._ghost.pop(key, None)
        if ghost_size is not None:
            self._ghost_bytes -= ghost_size
            self._entries[key] = _Entry(size, main=True)
            self._main[key] = None
        else:
            self._entries[key] = _Entry(size, main=False)
            self._small[key] = None
            self._small_bytes += size

    def access(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.freq < 3:
            entry.freq += 1

    def remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            if entry.main:
                del self._main[key]
            else:
                del self._small[key]
                self._small_bytes -= entry.size
        ghost_size = self._ghost.pop(key, None)
        if ghost_size is not None:
            self._ghost_bytes -= ghost_size

    def victim(self, evictable: Callable[[str], bool] = _always) -> str | None:
        passes: tuple[Callable[[Callable[[str], bool]], str | None], ...]
        if self._small_bytes > self.small_target or not self._main:
            # Entries that _evict_small moved to main are found by the main pass after it.
            passes = (self._evict_small, self._evict_main)
        else:
            passes = (self._evict_main, self._evict_small, self._evict_main)
        for evict in passes:
            key = evict(evictable)
            if key is not None:
                return key
        return None

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"S3FIFOPolicy(small={len(self._small)}, main={len(self._main)}, ghost={len(self._ghost)})"

    # --- introspection for tests and the simulator --------------------------------------------

    def queue_of(self, key: str) -> str | None:
        """"small", "main", "ghost" or None."""
        entry = self._entries.get(key)
        if entry is not None:
            return "main" if entry.main else "small"
        return "ghost" if key in self._ghost else None

    # --- eviction ---------------------------------------------------------------------------

    def _evict_small(self, evictable: Callable[[str], bool]) -> str | None:
        small = self._small
        for _ in range(len(small)):
            key = next(iter(small))
            entry = self._entries[key]
            if not evictable(key):
                small.move_to_end(key)
                continue
            del small[key]
            self._small_bytes -= entry.size
            if entry.freq > 0:
                entry.freq = 0
                entry.main = True
                self._main[key] = None
                continue
            del self._entries[key]
            self._remember(key, entry.size)
            return key
        return None

    def _evict_main(self, evictable: Callable[[str], bool]) -> str | None:
        main = self._main
        # freq <= 3, so four passes find a victim if any entry is evictable.
        for _ in range(4 * len(main)):
            key = next(iter(main))
            entry = self._entries[key]
            if evictable(key):
                if entry.freq == 0:
                    del main[key]
                    del self._entries[key]
                    return key
                entry.freq -= 1
            main.move_to_end(key)
        return None

    def _remember(self, key: str, size: int) -> None:
        self._ghost[key] = size
        self._ghost_bytes += size
        while self._ghost_bytes > self.ghost_limit and self._ghost:
            _, old = self._ghost.popitem(last=False)
            self._ghost_bytes -= old


POLICIES: dict[str, Callable[[int], EvictionPolicy]] = {
    "lru": LRUPolicy,
    "s3fifo": S3FIFOPolicy,
}


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """A new policy by its configuration name, sized for `capacity` bytes."""
    try:
        factory = POLICIES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
    return factory(capacity)
