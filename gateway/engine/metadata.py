"""Object metadata: the in-process cache (L1), the shared one in Redis (L2), revalidation
with the origin past the TTL, remembered 404s, and one origin request per miss however
many readers miss at once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.cluster.level2 import Level2
from gateway.config import MetadataSettings
from gateway.engine.coherence import Coherence, Epoch
from gateway.engine.fetch import BlockFetcher
from gateway.engine.opens import FirstBlock, Opens
from gateway.engine.flight import SingleFlight
from gateway.engine.runs import Run, Want
from gateway.engine.siblings import Told
from gateway.engine.sources import version_of
from gateway.engine.tails import ColdFlights, Tails, explain, held_whole
from gateway.errors import S3Error
from gateway.objects import Missing, ObjectMeta, decode_meta, encode_meta, meta_from_headers
from gateway.origin import BlockResponse, Origin
from gateway.store.blocks import BlockId
from gateway.store.meta import MetadataCache, MetaKey

# Metadata is always asked for with its checksums, so one cached entry serves every
# client; the handler shows checksums only to clients that asked for them.
_META_HEADERS = {"x-amz-checksum-mode": "ENABLED"}


@dataclass(frozen=True, slots=True)
class ObjectHead:
    """What `head_object` found: the metadata, whether it came from memory without asking
    the origin, and the start of the read's bytes when one GET brought both: its first block
    in hand, or the run of the origin's answer (which one reader claims)."""

    meta: ObjectMeta
    from_memory: bool = False
    first: FirstBlock | Run | None = None


@dataclass(frozen=True, slots=True)
class _Known:
    """An L1 metadata entry: the answer, and the age it already had when this node
    learnt it from the shared level (so it is not fresh for longer than anywhere else)."""

    value: ObjectMeta | Missing
    head_start: float = 0.0
    # Whether it is a remembered 404; whether its checksums are known (a 404 has none to know).
    # Worked out once: every hit asks.
    missing: bool = field(init=False)
    complete: bool = field(init=False)

    def __post_init__(self) -> None:
        missing = isinstance(self.value, Missing)
        object.__setattr__(self, "missing", missing)
        object.__setattr__(self, "complete", missing or self.value.complete)  # type: ignore[union-attr]


# (object, what the read reads (None: a HEAD), checksums, epoch, reopen)
Flight = tuple[MetaKey, "Want | None", bool, Epoch, bool]


class Metadata:
    """Object metadata for reads. Event loop only.

    Entries come from L1 while fresh, else from L2 when shared; past their TTL the origin
    is asked with a conditional HEAD (a 304 keeps the entry). An answer fetched while an
    invalidation of its bucket happened is returned but not cached (Coherence.epoch). A
    cold read (`want`) gets its metadata and its bytes from one GET (Opens.open)
    instead of a HEAD and then a GET; a cold HEAD from a GET of the object's tail (engine.tails),
    which the reads that follow it find kept. `clock` ages the L1 entries (tests move their own).
    """

    def __init__(self, origin: Origin, settings: MetadataSettings, coherence: Coherence, *,
                 shared: Level2 | None = None, fetch: BlockFetcher | None = None, opens: Opens | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.origin = origin
        self.settings = settings
        self.shared = shared
        self.fetch = fetch
        self.opens = opens
        self.cache: MetadataCache[_Known] = MetadataCache(
            settings.max_entries, ttl=settings.ttl, negative_ttl=settings.negative_ttl, clock=clock)
        self.stats: Counter[str] = Counter()
        self.tails = Tails(fetch, settings.head_tail, self.stats) if fetch is not None and settings.head_tail else None
        self._cold: ColdFlights[ObjectHead] | None = None if self.tails is None else ColdFlights(self.tails.asked)
        self._coherence = coherence
        self._flights: SingleFlight[Flight, ObjectHead] = SingleFlight()
        self._telling: set[asyncio.Task[None]] = set()  # told the owner worker (_tell_owner), under way

    async def head_object(self, bucket: str, key: str, *, version_id: str | None = None,
                          headers: dict[str, str] | None = None, checksums: bool = False,
                          want: Want | None = None, reopen: bool = False) -> ObjectHead:
        """Metadata of one object (version); raises S3Error (NoSuchKey, NoSuchBucket, ...).

        `headers` are the client's object-read headers (encryption keys, payer, ...);
        a request carrying any of them bypasses the cache, since its answer is its own.
        `checksums`: the answer must include the object's checksums. `want`: what the
        caller will read of the object; when the metadata has to come from the origin, one
        GET then brings it and those bytes together (with checksums only for the whole object).
        `reopen`: the version described last changed under a read: that GET is asked even when
        blocks of the object are held (its bytes cannot change under the read: no If-Match).
        """
        query = [("versionId", version_id)] if version_id else []
        if headers:
            return ObjectHead(await self._fetch_meta(bucket, key, query, headers))
        cache_key = (bucket, key, version_id or "")
        epoch = self._coherence.epoch(bucket)
        found = self._from_l1(cache_key)
        if found is not None and self._usable(found, checksums):
            self.stats["meta_hit"] += 1
            return ObjectHead(_answer(found[0]), from_memory=True)
        # L1 missed or is past its TTL: another node may have a fresh answer. (Strict
        # mode asks the origin about every positive entry anyway.)
        if self.shared is not None and (found is None or found[0].missing or not self.settings.strict):
            shared = await self._from_l2(cache_key)
            if shared is not None:
                known = shared[0]
                if self._coherence.epoch(bucket) == epoch:
                    self.cache.put(cache_key, known, missing=known.missing)
                if self._usable(shared, checksums):
                    self.stats["meta_l2_hit"] += 1
                    return ObjectHead(_answer(known), from_memory=True)
                found = shared
        # Without Redis, a worker that is not the object's owner asks the owner once: a HEAD what it knows
        # or asks its origin (one flight for the node), a read what it knows (the read's own GET brings the
        # metadata otherwise, and the owner is not asked again for the first block: Opens.open). Not a read
        # asked again because the version changed under it (`reopen`): the owner may know the old one.
        asked = self._owner(cache_key) if (found is None or found[0].missing) and (want is None or not reopen) \
            else None
        if asked is not None:
            answer = await self._from_owner(cache_key, epoch, checksums, cached=want is not None)
            if answer is not None:
                return answer
        if found is None or found[0].missing or (checksums and not found[0].complete):
            # A whole read lacking only the checksums of an object whose metadata a HEAD's tail brought here, not
            # held whole: its GET brings them and the bytes, held or not (`reopen`), not a HEAD first. (Metadata a
            # ranged read brought: a HEAD for the checksums, and the blocks held serve the read, as before.)
            if found is not None and isinstance(described := found[0].value, ObjectMeta) and want is not None \
                    and want.whole and self.tails is not None and self.tails.brought(cache_key, described):
                reopen = reopen or self.fetch is not None and not held_whole(self.fetch, bucket, key, described)
            return await self._miss(cache_key, query, epoch, want if want is None or want.whole or not checksums
                                    else None, checksums, reopen, asked)
        meta = found[0].value
        assert isinstance(meta, ObjectMeta)
        return ObjectHead(await self._revalidate(cache_key, query, meta, found[1], epoch))

    async def _miss(self, cache_key: MetaKey, query: list[tuple[str, str]], epoch: Epoch,
                    want: Want | None, checksums: bool = False, reopen: bool = False,
                    asked: int | None = None) -> ObjectHead:
        """One origin request however many readers miss at once: they share the flight until
        its answer is cached. (Not across an invalidation: a read that started after a write
        must not get an answer asked for before it.) `asked`: the owner worker that said it knows
        nothing of the object (Opens.open does not ask it again)."""
        self.stats["meta_miss"] += 1
        if self.fetch is None:
            want = None
        flight = (cache_key, want, checksums, epoch, reopen)
        if not self._coherence.trusted():  # another node's write may have come unheard since a flight began
            return await self._fetch_missing(cache_key, query, epoch, want, checksums, reopen, asked)
        cold_flights = self._cold if not checksums and not reopen else None
        joined = None if cold_flights is None else await cold_flights.joined(cache_key, epoch, want)
        if joined is not None or self._flights.joined(flight) is not None:
            self.stats["meta_miss_shared"] += 1
        if joined is not None:  # a cold read's GET answers a HEAD; a HEAD's tail a read of a suffix
            return ObjectHead(joined)
        started = self._flights.start(flight, lambda: self._fetch_missing(cache_key, query, epoch, want, checksums,
                                                                         reopen, asked))
        if cold_flights is not None:
            cold_flights.opening(cache_key, epoch, want, started)
        return await asyncio.shield(started)

    async def _fetch_missing(self, cache_key: MetaKey, query: list[tuple[str, str]], epoch: Epoch,
                             want: Want | None, checksums: bool, reopen: bool = False,
                             asked: int | None = None) -> ObjectHead:
        """Metadata the caches (and the owner worker, head_object) do not have: from the origin, cached
        before the flight ends. An object some blocks of which are held here (after a restart; or lent
        by another worker) is not read from the origin with its metadata: its metadata comes alone (a
        HEAD), and the blocks serve the read; unless the read is asked again because the version changed
        under it (`reopen`). Nor is a HEAD answered from a GET of the object's tail then (`_by_tail`)."""
        held = self.fetch is not None and self.fetch.store.holds_object(cache_key[0], cache_key[1])
        if want is not None:
            opened = await self._open(cache_key, query, want, epoch, checksums, run=not held or reopen, asked=asked)
            if opened is not None:
                return opened
        elif self.tails is not None and not checksums and not held:
            return await self._by_tail(cache_key, query, epoch)
        return ObjectHead(await self._fetch_and_cache(cache_key, query, epoch))

    async def _by_tail(self, cache_key: MetaKey, query: list[tuple[str, str]], epoch: Epoch) -> ObjectHead:
        """A HEAD's metadata from a GET of the object's tail (Tails.head), which goes on into the
        block cache; from a HEAD where that GET cannot answer for it."""
        assert self.tails is not None
        try:
            got = await self.tails.head(cache_key[0], cache_key[1], query)
        except S3Error as error:
            if error.status == 404:
                await self._remember(cache_key, Missing.of(error), epoch)
            raise
        if got is None or isinstance(got, S3Error):
            return ObjectHead(await self._fetch_and_cache(cache_key, query, epoch, refused=got))
        meta, run = got
        self.tails.learnt.put(cache_key, meta)
        await self._remember(cache_key, meta, epoch, run=run)
        return ObjectHead(meta)

    def fresh_aged(self, bucket: str, key: str, version_id: str | None = None) -> tuple[ObjectMeta, float] | None:
        """`fresh_now`, and the entry's age (seconds since the origin said it, wherever it was learnt)."""
        found = self._from_l1((bucket, key, version_id or ""))
        if found is None or found[0].missing or not self._usable(found):
            return None
        return found[0].value, found[1]  # type: ignore[return-value]

    async def _open(self, cache_key: MetaKey, query: list[tuple[str, str]], want: Want,
                    epoch: Epoch, checksums: bool, *, run: bool, asked: int | None = None) -> ObjectHead | None:
        """The metadata and the bytes of a cold read from one GET (see Opens.open);
        None when a HEAD must be asked instead."""
        assert self.opens is not None
        try:
            opened = await self.opens.open(cache_key[0], cache_key[1], query, want, checksums=checksums, run=run,
                                           asked=asked)
        except S3Error as error:
            if error.status == 404:
                await self._remember(cache_key, Missing.of(error), epoch)
            raise
        if opened is None:
            return None
        meta, first = opened
        self.stats["meta_opened_with_get"] += 1
        # (an open the owner worker answered from what it holds: it knows the metadata already)
        await self._remember(cache_key, meta, epoch, tell=not isinstance(first, FirstBlock) or first.from_origin,
                             run=first if isinstance(first, Run) else None)
        return ObjectHead(meta, first=first)

    def fresh_now(self, bucket: str, key: str, version_id: str | None = None, *,
                  checksums: bool = False) -> ObjectMeta | None:
        """The metadata head_object would answer from L1 now, without an await (the hit path
        below ASGI asks this way), or None. Counts nothing: the answer made from it counts the
        hit (`stats["meta_hit"]`, Engine.answered)."""
        found = self._from_l1((bucket, key, version_id or ""))
        if found is None or found[0].missing or not self._usable(found, checksums):
            return None
        return found[0].value  # type: ignore[return-value]

    def _from_l1(self, cache_key: MetaKey) -> tuple[_Known, float] | None:
        self._coherence.catch_up()  # what the node's other workers' writes made them forget
        found = self.cache.get_aged(cache_key)
        if found is None:
            return None
        known, age, _ = found
        return known, age + known.head_start

    async def _from_l2(self, cache_key: MetaKey) -> tuple[_Known, float] | None:
        assert self.shared is not None
        shared = await self.shared.get_meta(cache_key)
        if shared is None:
            return None
        payload, age = shared
        value = decode_meta(payload)
        if value is None:  # written by another version of the gateway: a miss
            return None
        return _Known(value, head_start=age), age

    def _usable(self, found: tuple[_Known, float], checksums: bool = False) -> bool:
        """Whether an entry of this age may be answered without asking the origin."""
        if not self._coherence.trusted():
            return False
        known, age = found
        if known.missing:
            return age <= self.settings.negative_ttl
        return age <= self.settings.ttl and not self.settings.strict and (known.complete or not checksums)

    async def _remember(self, cache_key: MetaKey, value: ObjectMeta | Missing, epoch: Epoch, *,
                        tell: bool = True, run: Run | None = None) -> None:
        """Cache an answer the origin just gave, here and in the shared level (without Redis: and
        with the worker owning the object, `_tell_owner`, unless it gave it: not `tell`; `run`: the
        read's run that came with it, which may lend that worker the object's first block)."""
        published = self._coherence.journal.published if self._coherence.journal is not None else 0
        if self._coherence.epoch(cache_key[0]) != epoch:
            self.stats["meta_not_cached_raced"] += 1
            return
        missing = isinstance(value, Missing)
        self.cache.put(cache_key, _Known(value), missing=missing)
        if self.shared is not None:
            await self.shared.put_meta(cache_key, encode_meta(value),
                                       self.settings.negative_ttl if missing else self.settings.ttl)
        if tell:
            self._tell_owner(cache_key, value, published, run)

    async def _revalidate(self, cache_key: MetaKey, query: list[tuple[str, str]], meta: ObjectMeta, age: float,
                          epoch: Epoch) -> ObjectMeta:
        """A conditional HEAD: 304 keeps the entry (no data is fetched again)."""
        self.stats["meta_revalidate"] += 1
        try:
            response = await self.origin.head(cache_key[0], cache_key[1], query=query,
                                              headers={"if-none-match": meta.etag, **_META_HEADERS})
        except S3Error:
            if age <= self.settings.ttl + self.settings.stale_if_error:
                self.stats["meta_stale_served"] += 1
                return meta
            raise
        if response.status == 304:
            await response.aclose()
            self.stats["meta_not_modified"] += 1
            await self._remember(cache_key, meta, epoch)  # its age starts again, here and shared
            return meta
        if response.status >= 500 and age <= self.settings.ttl + self.settings.stale_if_error:
            await response.aclose()
            self.stats["meta_stale_served"] += 1
            return meta
        return await self._cache_answer(cache_key, query, response, epoch)

    async def _fetch_and_cache(self, cache_key: MetaKey, query: list[tuple[str, str]], epoch: Epoch, *,
                               refused: S3Error | None = None) -> ObjectMeta:  # refused: a GET's (Tails.head)
        response = await self.origin.head(cache_key[0], cache_key[1], query=query, headers=_META_HEADERS)
        return await self._cache_answer(cache_key, query, response, epoch, refused)

    async def _cache_answer(self, cache_key: MetaKey, query: list[tuple[str, str]], response: BlockResponse,
                            epoch: Epoch, refused: S3Error | None = None) -> ObjectMeta:
        bucket, key, _ = cache_key
        await response.aclose()
        if response.status < 300:
            meta = meta_from_headers(response.header_items)
            await self._remember(cache_key, meta, epoch)
            return meta
        error = refused if refused is not None and refused.status == response.status else \
            await explain(self.origin, bucket, key, query, _META_HEADERS, response.status)
        if error.status == 404:
            await self._remember(cache_key, Missing.of(error), epoch)
        raise error

    async def _fetch_meta(self, bucket: str, key: str, query: list[tuple[str, str]], headers: dict[str, str]) -> ObjectMeta:
        response = await self.origin.head(bucket, key, query=query, headers=headers)
        await response.aclose()
        if response.status >= 300:
            raise await explain(self.origin, bucket, key, query, headers, response.status)
        return meta_from_headers(response.header_items)

    # Without Redis, the workers of a node share metadata through the worker owning each object's
    # first block (Opens.open_block's owner): a HEAD that misses here asks it, and it answers from
    # its cache or asks the origin once (its flights); an answer this worker's origin gave (a cold
    # GET opened here) is told to it. TTLs count from the origin's answer, wherever it is kept.

    def _owner(self, cache_key: MetaKey) -> int | None:
        """The worker to ask about the object, or None (this one, Redis shares, or no other worker)."""
        siblings = self.fetch.siblings if self.fetch is not None else None
        if siblings is None or self.shared is not None:
            return None
        return siblings.owner(cache_key[0], cache_key[1], 0)

    async def _from_owner(self, cache_key: MetaKey, epoch: Epoch, checksums: bool, *,
                          cached: bool = False) -> ObjectHead | None:
        """The owner worker's answer, kept here with the age it had there unless an invalidation of
        the bucket came meanwhile (an answer from before a write is returned, not kept); None when
        it does not answer (`cached`: or does not know it fresh; it does not ask its origin then)."""
        owner = self._owner(cache_key)
        assert owner is not None and self.fetch is not None and self.fetch.siblings is not None
        answer = await self.fetch.siblings.meta(owner, *cache_key, checksums, cached)
        value = None if answer is None else decode_meta(answer[0])
        if answer is None or value is None:
            return None
        known = _Known(value, head_start=answer[1])
        if self._coherence.epoch(cache_key[0]) == epoch:
            self.cache.put(cache_key, known, missing=known.missing)
        else:
            self.stats["meta_not_cached_raced"] += 1
        self.stats["meta_from_worker"] += 1
        return ObjectHead(_answer(known))

    async def answer_worker(self, bucket: str, key: str, version_id: str, checksums: bool,
                            cached: bool = False) -> tuple[bytes, float] | None:
        """What another worker asks the owner (`_from_owner`): the metadata in the shared form (a
        404's too) and its age; raises any other S3Error. `cached`: what this worker knows fresh, or
        None; the origin is not asked."""
        cache_key = (bucket, key, version_id)
        if cached:
            known = self._from_l1(cache_key)
            return None if known is None or not self._usable(known, checksums) else (encode_meta(known[0].value),
                                                                                       known[1])
        value: ObjectMeta | Missing
        try:
            value = (await self.head_object(bucket, key, version_id=version_id or None, checksums=checksums)).meta
        except S3Error as error:
            if error.status != 404:
                raise
            value = Missing.of(error)
        found = self._from_l1(cache_key)
        age = found[1] if found is not None and found[0].value == value else 0.0
        return encode_meta(value), age

    def _tell_owner(self, cache_key: MetaKey, value: ObjectMeta | Missing, published: int,
                    run: Run | None = None) -> None:
        """Tell the owner worker an answer this worker's origin gave (in a task: the read does not
        wait), with the journal's records published before this worker checked its epoch; told with
        the object's first block when `run` brings it whole (engine.lending lends it to that same
        worker: one request for both), else alone, or when the run ends without lending it."""
        owner = self._owner(cache_key)
        if owner is None or self._coherence.journal is None:
            return
        assert self.fetch is not None and self.fetch.siblings is not None
        told = (cache_key[2], encode_meta(value), published)
        if run is not None and isinstance(value, ObjectMeta) and run.first == 0 and \
                run.last >= min(self.fetch.settings.block_size, value.size) - 1:
            first = BlockId(cache_key[0], cache_key[1], version_of(value), 0)
            lending = self.fetch.lending
            lending.tell_with(first, told)
            run.pump.add_done_callback(lambda _: self._tell_alone(owner, cache_key, lending.untold(first)))
            return
        self._tell_alone(owner, cache_key, told)

    def _tell_alone(self, owner: int, cache_key: MetaKey, told: Told | None) -> None:
        if told is None:  # (told with the block)
            return
        assert self.fetch is not None and self.fetch.siblings is not None
        task = asyncio.create_task(self.fetch.siblings.tell_meta(owner, cache_key[0], cache_key[1], *told))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    def told(self, bucket: str, key: str, version_id: str, payload: bytes, published: int) -> None:
        """Another worker's origin answered this (owner) worker's object: kept when no write was
        published since the asker last checked (`published`) and no usable entry is here."""
        journal = self._coherence.journal
        value = decode_meta(payload)
        if journal is None or journal.published != published or value is None:
            self.stats["meta_told_not_kept"] += 1
            return
        cache_key = (bucket, key, version_id)
        found = self._from_l1(cache_key)
        if found is not None and self._usable(found):
            return
        known = _Known(value)
        self.cache.put(cache_key, known, missing=known.missing)
        self.stats["meta_told"] += 1


def _answer(known: _Known) -> ObjectMeta:
    if isinstance(known.value, Missing):
        raise known.value.error()
    return known.value
