"""In-process (L1) caches of object metadata and listing pages: bounded, with expiry.

Values are opaque to this module (the engine stores its ObjectMeta, origin listing
bodies, or a remembered 404). Event loop only: plain dicts, no locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.lru import LRU

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Cached(Generic[V]):
    value: V
    age: float  # seconds since the value was stored or last revalidated


class ExpiringLRU(Generic[K, V]):
    """At most `max_entries` values, least recently used out first, each with its age."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._items: LRU[K, tuple[V, float]] = LRU(max_entries)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> Cached[V] | None:
        found = self.get_aged(key)
        return None if found is None else Cached(*found)

    def get_aged(self, key: K) -> tuple[V, float] | None:
        """`get` as a plain (value, age) pair, with no Cached to build: MetadataCache asks this
        way on every hit."""
        item = self._items.use(key)
        if item is None:
            return None
        return item[0], self._clock() - item[1]

    def put(self, key: K, value: V) -> None:
        self._items.put(key, (value, self._clock()))

    def touch(self, key: K) -> None:
        """The value was confirmed current: its age starts again (and it counts as used)."""
        item = self._items.get(key)
        if item is not None:
            self._items.put(key, (item[0], self._clock()))

    def pop(self, key: K) -> None:
        self._items.pop(key)

    def clear(self) -> None:
        self._items.clear()

    def remove_where(self, predicate: Callable[[K], bool]) -> int:
        return self._items.remove_where(predicate)


MetaKey = tuple[str, str, str]  # bucket, key, version id ("" for the current version)


class MetadataCache(Generic[V]):
    """Object metadata by (bucket, key, version), plus remembered 404s with a shorter life."""

    def __init__(self, max_entries: int, *, ttl: float, negative_ttl: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self._entries: ExpiringLRU[MetaKey, tuple[bool, V]] = ExpiringLRU(max_entries, clock)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: MetaKey) -> tuple[Cached[V], bool] | None:
        """(value with its age, whether it is a 404) or None; expiry is the caller's decision."""
        found = self.get_aged(key)
        if found is None:
            return None
        value, age, missing = found
        return Cached(value, age), missing

    def get_aged(self, key: MetaKey) -> tuple[V, float, bool] | None:
        """`get` as a plain (value, age, whether it is a 404), for the lookups of every hit."""
        found = self._entries.get_aged(key)
        if found is None:
            return None
        (missing, value), age = found
        return value, age, missing

    def put(self, key: MetaKey, value: V, *, missing: bool = False) -> None:
        self._entries.put(key, (missing, value))

    def touch(self, key: MetaKey) -> None:
        self._entries.touch(key)

    def clear(self) -> None:
        self._entries.clear()

    def invalidate(self, bucket: str, key: str | None = None, *, prefix: str | None = None) -> int:
        """Forget every version of one key, of every key under a prefix, or of a whole bucket."""
        if key is not None:
            return self._entries.remove_where(lambda k: k[0] == bucket and k[1] == key)
        start = prefix or ""
        return self._entries.remove_where(lambda k: k[0] == bucket and k[1].startswith(start))


ListingKey = tuple[str, str, tuple[tuple[str, str], ...]]  # bucket, prefix, every other parameter


class ListingCache(Generic[V]):
    """Listing pages keyed by their full parameter set; a write drops every page that could hold it."""

    def __init__(self, max_entries: int, *, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._pages: ExpiringLRU[ListingKey, V] = ExpiringLRU(max_entries, clock)

    def get(self, key: ListingKey) -> V | None:
        found = self._pages.get(key)
        if found is None or found.age > self.ttl:
            return None
        return found.value

    def put(self, key: ListingKey, page: V) -> None:
        self._pages.put(key, page)

    def clear(self) -> None:
        self._pages.clear()

    def invalidate(self, bucket: str, key: str | None = None) -> int:
        """Drop the pages whose prefix contains `key` (every page of the bucket when None)."""
        if key is None:
            return self._pages.remove_where(lambda k: k[0] == bucket)
        return self._pages.remove_where(lambda k: k[0] == bucket and key.startswith(k[1]))
