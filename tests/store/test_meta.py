"""store.meta: bounded, expiring metadata and listing caches."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.store.meta import ExpiringLRU, ListingCache, MetadataCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lru_bound_and_order():
    lru: ExpiringLRU[str, int] = ExpiringLRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a").value == 1  # a is now the most recent
    lru.put("c", 3)
    assert lru.get("b") is None and lru.get("a") is not None and len(lru) == 2


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers()), max_size=60), st.integers(min_value=0, max_value=5))
def test_lru_never_exceeds_its_bound(puts, bound):
    lru: ExpiringLRU[str, int] = ExpiringLRU(bound)
    for key, value in puts:
        lru.put(key, value)
        assert len(lru) <= bound
        if bound:
            assert lru.get(key).value == value


def test_age_and_touch():
    clock = Clock()
    cache: MetadataCache[str] = MetadataCache(10, ttl=5, negative_ttl=1, clock=clock)
    cache.put(("b", "k", ""), "meta")
    clock.now = 4
    (found, missing) = cache.get(("b", "k", ""))
    assert found.age == 4 and not missing
    cache.touch(("b", "k", ""))
    clock.now = 6
    assert cache.get(("b", "k", ""))[0].age == 2


def test_metadata_invalidation_scopes():
    cache: MetadataCache[str] = MetadataCache(10, ttl=5, negative_ttl=1)
    for key in (("b", "k", ""), ("b", "k", "v1"), ("b", "k2", ""), ("b", "dir/x", ""), ("c", "k", "")):
        cache.put(key, "m")
    assert cache.invalidate("b", "k") == 2  # every version of the key
    assert cache.invalidate("b", prefix="dir/") == 1
    assert cache.get(("b", "k2", "")) is not None and cache.get(("c", "k", "")) is not None
    assert cache.invalidate("b") == 1
    assert cache.get(("c", "k", "")) is not None


def test_listing_expiry_and_invalidation_by_prefix():
    clock = Clock()
    cache: ListingCache[bytes] = ListingCache(10, ttl=10, clock=clock)
    cache.put(("b", "", ()), b"root")
    cache.put(("b", "a/", (("delimiter", "/"),)), b"a")
    cache.put(("b", "z/", ()), b"z")
    assert cache.invalidate("b", "a/new") == 2  # the root listing and a/ can both hold a/new
    assert cache.get(("b", "z/", ())) == b"z"
    clock.now = 11
    assert cache.get(("b", "z/", ())) is None
