"""Pre-loading a prefix into the cache (Alluxio's `distributedLoad`): every object under it is
read once through the block cache, several at a time, so later reads are hits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.engine import Engine, Want
from gateway.errors import S3Error
from gateway.s3api.xml import parse_list_objects


@dataclass
class LoadProgress:
    """Where a load stands; `failed` holds "key: reason" for every object that could not be read."""

    bucket: str
    prefix: str
    objects: int = 0  # found under the prefix so far
    loaded: int = 0
    bytes: int = 0
    listed: bool = False  # the listing is complete: `objects` is the total
    failed: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.listed and self.loaded + len(self.failed) == self.objects

    def as_dict(self) -> dict[str, object]:
        return {"bucket": self.bucket, "prefix": self.prefix, "objects": self.objects, "loaded": self.loaded,
                "bytes": self.bytes, "listed": self.listed, "failed": self.failed}


async def load_prefix(engine: Engine, bucket: str, prefix: str, *, replicas: int | None = None,
                      concurrency: int = 8, report_every: float = 0.5) -> AsyncIterator[LoadProgress]:
    """Load every object under `prefix` into the cache; yields the progress every
    `report_every` seconds and once more at the end. A listing that fails raises S3Error;
    an object that fails is counted in `failed` and the load goes on.

    Alone, the node reads each object through its cache. In a fleet, each object's blocks
    are fetched by their owners, all at once (`replicas`: that many owners per block
    instead of the object's count); this node only lists and hands out the work.
    """
    load = _Load(engine, bucket, prefix, replicas=replicas, concurrency=concurrency)
    workers = [asyncio.create_task(load.worker()) for _ in range(concurrency)]
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
    """One load's shared state: its progress, the queue of keys from the lister to the
    workers (None: no more), and the event set once it is finished or its listing failed."""

    def __init__(self, engine: Engine, bucket: str, prefix: str, *, replicas: int | None, concurrency: int) -> None:
        self.engine = engine
        self.bucket = bucket
        self.prefix = prefix
        self.replicas = replicas
        self.concurrency = concurrency
        self.progress = LoadProgress(bucket, prefix)
        self.keys: asyncio.Queue[str | None] = asyncio.Queue(maxsize=4 * concurrency)
        self.settled = asyncio.Event()
        self.in_fleet = engine.fleet is not None

    async def load_one(self, key: str) -> None:
        engine, bucket, progress = self.engine, self.bucket, self.progress
        try:
            if self.in_fleet:
                head = await engine.head_object(bucket, key)
                await engine.spread(bucket, key, head.meta, replicas=self.replicas)
                progress.bytes += head.meta.size
            else:
                await self.read_through(key)
            progress.loaded += 1
        except S3Error as err:
            progress.failed.append(f"{key}: {err.code}")
        except Exception as exc:  # a load reports every object; one failure must not stop the others
            progress.failed.append(f"{key}: {exc.__class__.__name__}")
        if progress.finished:
            self.settled.set()

    async def read_through(self, key: str) -> None:
        engine, bucket, progress = self.engine, self.bucket, self.progress
        opened = await engine.open_object(bucket, key, want=Want())
        try:
            async with await opened.read() as read:
                if read.body is not None:
                    progress.bytes += len(read.body)
                else:
                    assert read.chunks is not None
                    async for chunk in read.chunks:
                        progress.bytes += len(chunk)
        finally:
            await opened.aclose()

    async def worker(self) -> None:
        while (key := await self.keys.get()) is not None:
            await self.load_one(key)

    async def lister(self) -> None:
        progress, token = self.progress, ""
        try:
            while True:
                query = [("list-type", "2"), ("encoding-type", "url"), ("prefix", self.prefix)]
                if token:
                    query.append(("continuation-token", token))
                page = parse_list_objects(await self.engine.list_objects(self.bucket, query))
                for entry in page.contents:
                    progress.objects += 1
                    await self.keys.put(entry.key)
                if not page.is_truncated or not page.next_continuation_token:
                    break
                token = page.next_continuation_token
            progress.listed = True
            for _ in range(self.concurrency):
                await self.keys.put(None)
        finally:
            if progress.finished or not progress.listed:
                self.settled.set()
