"""Pre-loading into the cache (Alluxio's `distributedLoad`): every object under a prefix, or the
files of a table's current snapshot (Iceberg, Delta), optionally only the partitions a filter
keeps and only the footers engines read first; each read once through the block cache, several
at a time, so later reads are hits. Or only the plan: which files, how many bytes."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.admin.tableplan import list_objects, plan_table, read_bytes
from gateway.admin.tableplan import footer as find_footer
from gateway.engine import Engine, Want
from gateway.errors import S3Error
from gateway.retry import ExponentialBackoff, Retry
from gateway.tables.partitions import Filter, matches
from gateway.tables.paths import TableFile


@dataclass(frozen=True)
class LoadRequest:
    """What to load: the objects under `prefix`, or the table there (`table`: "iceberg" or
    "delta"; `snapshot`: an Iceberg snapshot id or a Delta version instead of the current
    one); only files whose partitions pass every filter; only their footers (`footers`); or
    nothing, only the plan (`plan`)."""

    bucket: str
    prefix: str = ""
    table: str | None = None
    snapshot: int | None = None
    filters: tuple[Filter, ...] = ()
    footers: bool = False
    plan: bool = False
    replicas: int | None = None


@dataclass
class LoadProgress:
    """Where a load stands; `failed` holds "key: reason" for every object that could not be read;
    `files` the plan's (bucket/key, size; None when the table does not record it) with `plan`."""

    request: LoadRequest
    objects: int = 0  # found (and kept by the filters) so far
    loaded: int = 0
    bytes: int = 0  # read through the cache (with `plan`: the files' sizes)
    listed: bool = False  # the listing (or the table's plan) is complete: `objects` is the total
    failed: list[str] = field(default_factory=list)
    metadata_files: int = 0  # a table's own files read to find its data files
    footer_reads: int = 0  # with `footers`: ranges read before a file's tail (page indexes, stripe footers)
    files: list[tuple[str, int | None]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.listed and (self.request.plan or self.loaded + len(self.failed) == self.objects)

    def as_dict(self) -> dict[str, object]:
        request = self.request
        document: dict[str, object] = {
            "bucket": request.bucket, "prefix": request.prefix, "objects": self.objects, "loaded": self.loaded,
            "bytes": self.bytes, "listed": self.listed, "failed": self.failed}
        if request.table:
            document.update(table=request.table, metadata_files=self.metadata_files)
        if request.filters:
            document["partitions"] = [str(condition) for condition in request.filters]
        if request.footers:
            document.update(footers=True, footer_reads=self.footer_reads)
        if request.plan:
            document["plan"] = True
            if self.finished:  # the files once, in the last document: a plan of a large table is long
                document["files"] = [[name, size] for name, size in self.files]
        return document


async def load_prefix(engine: Engine, request: LoadRequest, *, concurrency: int = 8,
                      report_every: float = 0.5) -> AsyncIterator[LoadProgress]:
    """Load what `request` names into the cache; yields the progress every `report_every`
    seconds and once more at the end. A listing or a table that cannot be read raises
    S3Error; an object that fails is counted in `failed` and the load goes on.

    Alone, the node reads each object through its cache. In a fleet, each object's blocks
    are fetched by their owners, all at once (`replicas`: that many owners per block
    instead of the object's count); this node only lists and hands out the work. Footers
    are read through this node's cache in either case: in a fleet the blocks it brings from
    the origin are offered to their owners (engine.lending), each fetched once.
    """
    load = _Load(engine, request, concurrency=concurrency)
    workers = [asyncio.create_task(load.worker()) for _ in range(0 if request.plan else concurrency)]
    listing = asyncio.create_task(load.lister())
    try:
        while not load.settled.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(load.settled.wait(), report_every)
            if not load.settled.is_set():
                yield load.progress
        await listing  # raises the listing's error, if it failed
        await asyncio.gather(*workers)
    finally:
        for task in [listing, *workers]:
            task.cancel()
        await asyncio.gather(listing, *workers, return_exceptions=True)
    yield load.progress


class _Load:
    """One load's shared state: its progress, the queue of files from the lister to the
    workers (None: no more), and the event set once it is finished or its listing failed."""

    def __init__(self, engine: Engine, request: LoadRequest, *, concurrency: int) -> None:
        self.engine = engine
        self.request = request
        self.concurrency = concurrency
        self.progress = LoadProgress(request)
        self.files: asyncio.Queue[TableFile | None] = asyncio.Queue(maxsize=4 * concurrency)
        self.settled = asyncio.Event()
        self.in_fleet = engine.fleet is not None

    async def load_one(self, file: TableFile) -> None:
        progress = self.progress
        try:
            if self.request.footers:
                await self.footer(file)
            elif self.in_fleet:
                await self.spread(file)
            else:
                await self.read_through(file)
            progress.loaded += 1
        except S3Error as err:
            progress.failed.append(f"{self.name(file)}: {err.code}")
        except Exception as exc:  # a load reports every object; one failure must not stop the others
            progress.failed.append(f"{self.name(file)}: {exc.__class__.__name__}")
        if progress.finished:
            self.settled.set()

    async def spread(self, file: TableFile) -> None:
        """A file's blocks fetched by their owners in the fleet. An owner that did not answer
        (ServiceUnavailable: it died, or it is overloaded) is asked again, with pauses, until the
        fleet has had time to notice a dead member (cluster.member_ttl and a heartbeat); its blocks
        then go to their new owners."""
        engine = self.engine

        async def once() -> None:
            # (with the checksums: an origin HEAD, not a GET of the tail, which would bring a block here)
            head = await engine.head_object(file.bucket, file.key, checksums=True)
            try:
                await engine.spread(file.bucket, file.key, head.meta, replicas=self.request.replicas)
            except S3Error as err:
                if err.code != "ServiceUnavailable":
                    raise
                raise _OwnerDown(err) from None
            self.progress.bytes += head.meta.size

        try:
            await _owner_retry(engine).call(once)
        except _OwnerDown as down:
            raise down.error from None

    def name(self, file: TableFile) -> str:
        """A file as `failed` and the plan name it: its key, with its bucket when not the load's."""
        return file.key if file.bucket == self.request.bucket else f"{file.bucket}/{file.key}"

    async def read_through(self, file: TableFile) -> None:
        opened = await self.engine.open_object(file.bucket, file.key, want=Want())
        try:
            async with await opened.read() as read:
                if read.body is not None:
                    self.progress.bytes += len(read.body)
                else:
                    assert read.chunks is not None
                    async for chunk in read.chunks:
                        self.progress.bytes += len(chunk)
        finally:
            await opened.aclose()

    async def footer(self, file: TableFile) -> None:
        """The file's tail read as an engine reads it (which loads its last blocks, and more
        when the footer is longer), then the footer's ranges before that (page indexes, ORC
        stripe footers) that the cache can keep apart (`kept_apart`), in order, one read each:
        at most one origin request each. A file neither Parquet nor ORC has no footer: its tail
        is all that is loaded of it."""
        size, read_from, found = await find_footer(self.engine, file.bucket, file.key, file.size)
        fetch = self.engine.fetch
        ranges = [(start, min(end, read_from)) for start, end in found.ranges if start < read_from]
        if fetch is not None and fetch.granule is not None:
            ranges = kept_apart(ranges, read_from, size, fetch.settings.block_size, fetch.granule)
        for start, end in ranges:
            await read_bytes(self.engine, file.bucket, file.key, start, end - 1, limit=end - start)
            self.progress.bytes += end - start
            self.progress.footer_reads += 1
        self.progress.bytes += size - read_from

    async def worker(self) -> None:
        while (file := await self.files.get()) is not None:
            await self.load_one(file)

    async def found(self, file: TableFile) -> None:
        progress = self.progress
        progress.objects += 1
        if self.request.plan:
            progress.files.append((f"{file.bucket}/{file.key}", file.size))
            progress.bytes += file.size or 0
        else:
            await self.files.put(file)

    async def lister(self) -> None:
        progress, request = self.progress, self.request
        try:
            if request.table is not None:
                plan = await plan_table(self.engine, request.table, request.bucket, request.prefix,
                                        snapshot=request.snapshot, filters=request.filters)
                progress.metadata_files = plan.metadata_files
                for file in plan.files:
                    await self.found(file)
            else:
                async for key, size in list_objects(self.engine, request.bucket, request.prefix):
                    if matches(request.filters, key):
                        await self.found(TableFile(request.bucket, key, size))
            progress.listed = True
            for _ in range(0 if request.plan else self.concurrency):
                await self.files.put(None)
        finally:
            if progress.finished or not progress.listed:
                self.settled.set()


def kept_apart(ranges: list[tuple[int, int]], tail: int, size: int, block_size: int,
               granule: int) -> list[tuple[int, int]]:
    """Of the ranges [start, end) before `tail` (where the file's tail read began), those worth
    reading. The cache keeps one contiguous piece of a block (store.pieces); a read of part of a
    block is asked of the origin rounded out to the `granule`, and one that neither overlaps nor
    touches the block's piece replaces it. So a range is read only when no other range shares a
    block with it, and, in the tail's first block, only when it touches the tail's piece (which it
    then extends). Ranges several to a block (ORC stripes smaller than a block) are left out:
    each would push out the one before, and reading them all would read the blocks whole."""
    def span(start: int, end: int) -> tuple[int, int]:
        return start // granule * granule, min(-(-end // granule) * granule, size)

    def blocks(low: int, high: int) -> set[int]:
        return {low // block_size, (high - 1) // block_size}

    spans = [span(start, end) for start, end in ranges]
    shared = Counter(block for low, high in spans for block in blocks(low, high))
    tail_low, _ = span(tail, size)
    kept = []
    for (start, end), (low, high) in zip(ranges, spans):
        alone = all(shared[block] == 1 for block in blocks(low, high))
        if alone and (tail_low // block_size not in blocks(low, high) or high >= tail_low):
            kept.append((start, end))
    return kept


class _OwnerDown(Exception):
    """An owner of a file's blocks did not load them (its ServiceUnavailable, as `error`)."""

    def __init__(self, error: S3Error) -> None:
        super().__init__(error.message)
        self.error = error


def _owner_retry(engine: Engine) -> Retry:
    """Retry of a spread whose owner did not answer: pauses from 0.25 s doubling up to a
    heartbeat, as many as it takes to outlast cluster.member_ttl and a heartbeat."""
    assert engine.fleet is not None
    cluster = engine.fleet.settings
    backoff = ExponentialBackoff(0.25, cap=cluster.heartbeat_interval)
    waited, retries = 0.0, 0
    while waited < cluster.member_ttl + cluster.heartbeat_interval:
        retries += 1
        waited += backoff.compute(retries)
    return Retry(backoff, retries, (_OwnerDown,))
