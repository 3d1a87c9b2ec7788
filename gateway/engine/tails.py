"""A HEAD of an object this worker knows nothing of, answered from one GET of the object's last
bytes (metadata.head_tail) instead of an origin HEAD.

The GET's headers are the metadata the HEAD answers with (objects.meta_from_ranged_get: the
whole object's length, no Content-Range, no checksums), and the HEAD is answered as soon as they
are in; its body, the object's tail, goes on into the block cache in the background (a run
without a reader: engine.runs, its blocks kept and lent as a cold read's are). Engines read the
footer right after a HEAD, by a suffix range (Trino's Parquet and ORC readers, Spark's S3A,
PyArrow and DuckDB read the last 64 KiB or less), and a small object whole: the footer read is a
hit, and so is a small object's data read; HEAD, footer GET and data GET of a small file cost the
origin one request instead of three. A read of those bytes that arrives while they stream waits
for them (the fetches of the run's whole blocks; BlockFetcher.arriving_parts for a part of a block)
instead of asking the origin again.

A HEAD is asked instead where a GET cannot stand for it: an object whose GET is refused while its
HEAD is not (403: an archived object, InvalidObjectState; an SSE-KMS key the gateway may not
use), and an empty object at an origin that refuses a suffix range of it (416; S3 answers 200).
A 404's body says which it is (NoSuchKey, NoSuchBucket), where a bodiless HEAD's 404 needs a
GET more to tell (`explain`, for the HEADs still asked).

The metadata of a ranged GET has no checksums: a whole read that asks for them (boto3's do) asks a
HEAD for them when the object is held whole (`held_whole`), else the GET that brings its bytes too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Generic, Protocol, TypeVar

from gateway.engine.coherence import Epoch
from gateway.engine.fetch import BlockFetcher
from gateway.engine.runs import Run, Want
from gateway.engine.sources import version_of
from gateway.errors import S3Error
from gateway.lru import LRU
from gateway.objects import ObjectMeta
from gateway.origin import Origin, error_for_status
from gateway.store.blocks import BlockId, block_bounds
from gateway.store.meta import MetaKey


_LEARNT = 4096  # objects whose metadata a HEAD's tail brought, remembered (Tails.brought)


class _Described(Protocol):
    """What a cold flight answers (Metadata's ObjectHead): the object's metadata, at least."""

    @property
    def meta(self) -> ObjectMeta: ...


V = TypeVar("V", bound=_Described)


class Tails:
    """Cold HEADs of one worker answered from their objects' tails. Event loop only.

    `size`: the tail asked for (metadata.head_tail); the origin is asked for at least what a
    cold read of a suffix asks (Want.origin_range: the granule, or a block where the store keeps
    whole blocks only), so that what it brings is kept as a cold read's bytes are.
    """

    def __init__(self, fetch: BlockFetcher, size: int, stats: Counter[str]) -> None:
        self.fetch = fetch
        self.want = Want(suffix=size)
        self.asked = max(size, fetch.granule or fetch.settings.block_size)
        self.stats = stats
        self.learnt: LRU[MetaKey, ObjectMeta] = LRU(_LEARNT)  # metadata the tails brought (`brought`)

    def brought(self, cache_key: MetaKey, meta: ObjectMeta) -> bool:
        """Whether `meta` is the metadata a HEAD's tail brought here (not a read's GET, another worker's)."""
        return self.learnt.use(cache_key) is meta

    async def head(self, bucket: str, key: str, query: list[tuple[str, str]]
                   ) -> tuple[ObjectMeta, Run] | S3Error | None:
        """The object's metadata from a GET of its tail, and the run keeping the tail (started,
        in the background); the origin's 403 (its HEAD may answer otherwise: ask it, and answer
        this when it refuses too); None when the origin refused the range (416: an empty object,
        at an origin that answers so): ask with a HEAD. Raises the origin's other errors."""
        fetch = self.fetch
        try:
            opened = await fetch.open_run(bucket, key, query, self.want, reader=False)
        except S3Error as error:
            if error.status != 403:
                raise
            self.stats["meta_head_tail_refused"] += 1
            return error
        if opened is None:
            self.stats["meta_head_tail_refused"] += 1
            return None
        meta, run = opened
        self.stats["meta_head_by_tail"] += 1
        fetch.spawn(run.pump)
        if run.last - run.first + 1 > self.asked:  # the origin ignored the range: a HEAD is no download
            await asyncio.sleep(0)  # (the pump has the answer now: closing the run closes it)
            await run.aclose()
            return meta, run
        self._note_parts(bucket, key, meta, run)
        return meta, run

    def _note_parts(self, bucket: str, key: str, meta: ObjectMeta, run: Run) -> None:
        """The parts of blocks the run brings and keeps, for the reads that want them meanwhile
        (BlockFetcher.part; its whole blocks' fetches are registered already: Run)."""
        fetch, size = self.fetch, self.fetch.settings.block_size
        for index in run.indexes:
            lo, hi = run.bounds(index)
            block = BlockId(bucket, key, version_of(meta), index)
            if (lo, hi) != block_bounds(index, size, meta.size) and fetch.keeps_part(block):
                fetch.arriving_parts.add(block.name, lo - index * size, hi + 1 - index * size, run.pump)


class ColdFlights(Generic[V]):
    """The last cold HEAD or read (without checksums) of each object whose origin GET is under
    way, by the bucket's epoch (Metadata._miss's flights, whose answers `V` carry the metadata),
    so that a HEAD and a read of the same object at once cost one origin request (see `joined`).
    Event loop only."""

    def __init__(self, tail: int) -> None:
        self.tail = tail  # what a HEAD's GET brings of the object's end at least (Tails.asked)
        self._cold: dict[tuple[MetaKey, Epoch], tuple[Want | None, asyncio.Future[V]]] = {}

    async def joined(self, cache_key: MetaKey, epoch: Epoch, want: Want | None) -> ObjectMeta | None:
        """The metadata a flight under way brings to a cold HEAD or read (`want`) of the object,
        instead of its own origin request: to a HEAD, any cold read's (its GET's headers are the
        metadata); to a read of a suffix within the tail, a HEAD's (its tail brings the read's bytes,
        kept: the read finds them). None: no such flight; or the read's failed otherwise than with
        a 404 (a HEAD may answer an archived object, say: it asks for itself). Raises as it raised."""
        cold = self._cold.get((cache_key, epoch))
        if cold is None or want is not None and (cold[0] is not None or want.suffix is None or
                                                 want.suffix > self.tail):
            return None
        try:
            return (await asyncio.shield(cold[1])).meta
        except S3Error as error:
            if want is not None or error.status == 404:
                raise
            return None

    def opening(self, cache_key: MetaKey, epoch: Epoch, want: Want | None, flight: asyncio.Future[V]) -> None:
        """A cold HEAD's or read's flight begun (see `joined`)."""
        key = (cache_key, epoch)
        self._cold[key] = (want, flight)

        def landed(_: asyncio.Future[V]) -> None:
            if key in self._cold and self._cold[key][1] is flight:
                del self._cold[key]

        flight.add_done_callback(landed)


def held_whole(fetch: BlockFetcher, bucket: str, key: str, meta: ObjectMeta) -> bool:
    """Whether this node's tiers hold every block of the version `meta` describes."""
    version, size = version_of(meta), fetch.settings.block_size
    return all(fetch.missing_here(BlockId(bucket, key, version, index)) is False
               for index in range(-(-meta.size // size)))


async def explain(origin: Origin, bucket: str, key: str, query: list[tuple[str, str]], headers: dict[str, str],
                  status: int) -> S3Error:
    """A HEAD error has no body (NoSuchKey and NoSuchBucket look alike): ask with a GET."""
    resource = f"/{bucket}/{key}"
    if status < 400:
        return S3Error("PreconditionFailed" if status == 412 else "InternalError", status=status, resource=resource)
    response = await origin.send("GET", bucket, key, query=query, headers=dict(headers, range="bytes=0-0"))
    if response.status == status:
        return await origin.error_from(response, resource=resource)
    # The GET was answered otherwise (the object appeared meanwhile, or an origin refuses a
    # HEAD it serves as a GET, as moto does with ?versionId=null): the HEAD's own error is
    # the answer, never one of the gateway's making.
    await response.aclose()
    return error_for_status(status, resource)
