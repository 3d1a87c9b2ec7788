"""One bounded LRU (at most `size` entries, the least recently used dropped first), and the one
ordered queue it and the eviction policies keep their order in."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["LRU", "Queue"]


class Queue(OrderedDict[K, V]):
    """Keys in order, worked from the front: an OrderedDict, which drops its first entry and
    moves one to the end in O(1) (a dict emptied from its front is scanned past every slot
    deleted there). For orders that are not a bounded cache (the eviction policies' queues,
    store.policy); its operations are the OrderedDict's own, with no Python frame, since a
    policy takes several of them for each block it evicts."""

    __slots__ = ()


class LRU(Generic[K, V]):
    """At most `size` entries (none when `size` <= 0), in order of use, the oldest first.

    An entry is used when it is `put` (a new value, or the same key again) or read with `use`;
    `get` reads without using, for caches whose order is the order entries were made in (each
    made anew when it is refreshed). Past `size`, `put` drops the least recently used.
    Event loop only, or one thread: no lock. `get` is the dict's own (no Python frame), as
    it is asked on the hit path.
    """

    __slots__ = ("size", "_items", "_dropped", "get", "touch")

    def __init__(self, size: int, dropped: Callable[[K, V], None] | None = None) -> None:
        """`dropped(key, value)`: called for each entry `put` drops past `size` (to release what
        it holds); not for `pop`, `pop_oldest` or `clear`, whose caller has the entry."""
        self.size = size
        self._items: Queue[K, V] = Queue()
        self._dropped = dropped
        self.get: Callable[[K], V | None] = self._items.get
        # `use` of a key known to be held (KeyError otherwise), its value not wanted: the
        # OrderedDict's own, no Python frame (store.mapped asks it on every hit of a mapped block).
        self.touch: Callable[[K], None] = self._items.move_to_end

    def use(self, key: K) -> V | None:
        """The value of `key`, now the most recently used; None when it is not held."""
        items = self._items
        value = items.get(key, _MISSING)
        if value is _MISSING:
            return None
        items.move_to_end(key)
        return value  # type: ignore[return-value]

    def put(self, key: K, value: V) -> None:
        """Hold `value` for `key` as the most recently used; past `size`, drop the least."""
        items = self._items
        if self.size <= 0:
            return
        items[key] = value
        items.move_to_end(key)
        if len(items) > self.size:
            dropped = items.popitem(last=False)
            if self._dropped is not None:
                self._dropped(*dropped)

    def pop(self, key: K) -> V | None:
        """Drop `key`: its value, or None when it was not held."""
        return self._items.pop(key, None)

    def pop_oldest(self) -> tuple[K, V] | None:
        """Drop the least recently used entry: (its key, its value), or None when none is held
        (for holders bounded by something else than a count: bytes, a queue worked through)."""
        return self._items.popitem(last=False) if self._items else None

    def remove_where(self, doomed: Callable[[K], bool]) -> int:
        """Drop every key `doomed` says to; how many."""
        keys = [key for key in self._items if doomed(key)]
        for key in keys:
            del self._items[key]
        return len(keys)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        """The keys, the least recently used first."""
        return iter(self._items)

    def __repr__(self) -> str:
        return f"LRU(size={self.size}, held={len(self._items)})"


_MISSING = object()

