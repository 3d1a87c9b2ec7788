"""Listing pages: the origin's ListObjects answers for exactly one parameter set, cached in
process (L1) and, when shared, in Redis (L2), while fresh and trusted; without Redis, in the
worker of the node that owns the parameters (the others ask it: `_from_owner`). A page of a folder
under one whose whole page is held is read out of that page (engine.sublistings)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from gateway.cluster.level2 import Level2
from gateway.config import ListingSettings
from gateway.engine.coherence import Coherence, Epoch
from gateway.engine.flight import SingleFlight
from gateway.engine.siblings import Siblings
from gateway.engine.sublistings import narrowable, narrowed, parents
from gateway.errors import S3Error
from gateway.origin import Origin
from gateway.store.meta import ListingCache, ListingKey

# The most a listing page the origin sends may hold: S3's pages of 1,000 keys are a few MB at
# most, even of keys of 1,024 characters that each escape to several (the page is read whole).
_LARGEST_PAGE = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Page:
    """An L1 listing page and when it stops being fresh (time.monotonic)."""

    body: bytes
    expires: float


class Listings:
    """Event loop only. A page is keyed by bucket, prefix and every other parameter the
    origin receives (the one parsed query, gateway.s3api.request.parse_request), so one
    request's page is never another's. Concurrent misses of one page share one origin request
    (not across an invalidation of its bucket)."""

    def __init__(self, origin: Origin, settings: ListingSettings, coherence: Coherence, *,
                 shared: Level2 | None = None, siblings: Siblings | None = None) -> None:
        self.origin = origin
        self.settings = settings
        self.shared = shared
        self.siblings = siblings if shared is None else None  # (Redis shares the pages among the workers)
        self.cache: ListingCache[_Page] = ListingCache(settings.max_entries, ttl=settings.ttl)
        self.stats: Counter[str] = Counter()
        self._coherence = coherence
        self._flights: SingleFlight[tuple[ListingKey, Epoch], bytes] = SingleFlight()

    async def list_objects(self, bucket: str, query: list[tuple[str, str]]) -> bytes:
        """An origin listing body for exactly these parameters, from the listing cache while fresh."""
        params = dict(query)
        cache_key: ListingKey = (bucket, params.pop("prefix", ""), tuple(sorted(params.items())))
        self._coherence.catch_up()  # what the node's other workers' writes made them forget
        page = self.cache.get(cache_key)
        if page is not None and time.monotonic() < page.expires and self._coherence.trusted():
            self.stats["list_hit"] += 1
            return page.body
        epoch = self._coherence.epoch(bucket)
        below = self._read_out_of_parent(cache_key)
        if below is not None:
            return below
        ttl = self.settings.ttl
        if self.shared is not None:
            shared = await self.shared.get_listing(cache_key)
            if shared is not None and self._coherence.trusted():  # untrusted: maybe from before an unheard write
                body, age = shared
                self.stats["list_l2_hit"] += 1
                if self._coherence.epoch(bucket) == epoch:
                    self.cache.put(cache_key, _Page(body, time.monotonic() + ttl - age))
                return body
        if self.siblings is not None:
            owner = self.siblings.listing_owner(*cache_key)
            if owner is not None:
                asked = await self._from_owner(owner, cache_key, query, epoch)
                if asked is not None:
                    return asked
        if not self._coherence.trusted():  # a flight under way may have begun before an unheard write
            return await self._fetch(cache_key, query, epoch)
        return await self._flights.run((cache_key, epoch), lambda: self._fetch(cache_key, query, epoch))

    def _read_out_of_parent(self, cache_key: ListingKey) -> bytes | None:
        """The page read out of the fresh page of a folder above it that holds all of that folder
        (engine.sublistings), kept here as long as that page is; None when none is held here."""
        bucket, prefix, params = cache_key
        if not narrowable(params) or not self._coherence.trusted():
            return None
        now = time.monotonic()
        for parent in parents(prefix):
            page = self.cache.get((bucket, parent, params))
            if page is None or now >= page.expires:
                continue
            body = narrowed(page.body, prefix)
            if body is not None:
                self.stats["list_from_parent"] += 1
                self.cache.put(cache_key, _Page(body, page.expires))
                return body
        return None

    async def _fetch(self, cache_key: ListingKey, query: list[tuple[str, str]], epoch: Epoch) -> bytes:
        """The page from the origin, kept unless an invalidation of its bucket came meanwhile."""
        bucket = cache_key[0]
        self.stats["list_miss"] += 1
        response = await self.origin.get_listing(bucket, query)
        if response.status >= 300:
            raise await self.origin.error_from(response, resource=f"/{bucket}")
        body = await response.read_at_most(_LARGEST_PAGE)
        if len(body) > _LARGEST_PAGE:
            raise S3Error("ServiceUnavailable", "The origin sent a listing page too large to relay.")
        if self._coherence.epoch(bucket) == epoch:
            self.cache.put(cache_key, _Page(body, time.monotonic() + self.settings.ttl))
            if self.shared is not None:
                await self.shared.put_listing(cache_key, body, self.settings.ttl)
        return body

    async def _from_owner(self, owner: int, cache_key: ListingKey, query: list[tuple[str, str]],
                          epoch: Epoch) -> bytes | None:
        """The page as the worker owning it holds it or asks its origin, kept here with the age it
        had there unless an invalidation of the bucket came meanwhile; None when it does not answer."""
        assert self.siblings is not None
        answer = await self.siblings.listing(owner, cache_key[0], query)
        if answer is None:
            return None
        body, age = answer
        self.stats["list_from_worker"] += 1
        if self._coherence.epoch(cache_key[0]) == epoch:
            self.cache.put(cache_key, _Page(body, time.monotonic() + self.settings.ttl - age))
        return body

    async def answer_worker(self, bucket: str, query: list[tuple[str, str]]) -> tuple[bytes, float]:
        """What another worker asks the owner (`_from_owner`): the page and its age."""
        body = await self.list_objects(bucket, query)
        params = dict(query)
        page = self.cache.get((bucket, params.pop("prefix", ""), tuple(sorted(params.items()))))
        age = 0.0 if page is None or page.body is not body else max(0.0, self.settings.ttl - (page.expires - time.monotonic()))
        return body, age
