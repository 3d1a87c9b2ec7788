"""Which files a load covers: a table's current files (Iceberg, Delta; gateway.tables parses
them) or the objects under a prefix, filtered by partition; and the byte ranges of a file's
footer. Every byte is read through the engine (so the table's own metadata is cached as well,
and the origin's answer, AccessDenied included, is the load's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.engine import Engine, Want
from gateway.errors import S3Error
from gateway.s3api.xml import parse_list_objects
from gateway.tables import delta, iceberg
from gateway.tables.footers import TAIL, Footer, NeedMore, footer_ranges
from gateway.tables.partitions import Filter, matches
from gateway.tables.paths import TableFile, resolve, split_location

FORMATS = ("iceberg", "delta")
MAX_METADATA = 512 * 1024**2  # a table's metadata file, manifest or checkpoint read into memory at most
PARALLEL = 8  # manifests or commits read at once
T = TypeVar("T")


@dataclass
class Plan:
    """A table's files, and how many of its own metadata files were read to find them."""

    files: list[TableFile] = field(default_factory=list)
    metadata_files: int = 0


async def read_bytes(engine: Engine, bucket: str, key: str, start: int | None = None,
                     end: int | None = None, *, limit: int = MAX_METADATA) -> bytes:
    """Bytes [start, end] (inclusive; the whole object when None) of an object, read through
    the cache; raises the origin's S3Error, or EntityTooLarge past `limit` bytes."""
    return (await _read(engine, bucket, key, Want() if start is None else Want(start, end), limit))[1]


async def _read(engine: Engine, bucket: str, key: str, want: Want, limit: int) -> tuple[int, bytes]:
    """(the object's size, the bytes `want` names), as one cold GET brings both when nothing
    is cached of the object (engine.opens)."""
    opened = await engine.open_object(bucket, key, want=want)
    try:
        size = opened.meta.size
        if want.suffix is not None:
            start, end = max(0, size - want.suffix), size - 1
        else:
            start, end = want.start, size - 1 if want.end is None else min(want.end, size - 1)
        if end - start + 1 > limit:
            raise S3Error("EntityTooLarge", f"{bucket}/{key} is {size} bytes: more than a table's "
                                            f"metadata file may be ({limit})")
        if size == 0 or end < start:
            return size, b""
        async with await opened.read(start, end) as read:
            if read.body is not None:
                return size, bytes(read.body)
            assert read.chunks is not None
            return size, b"".join([bytes(chunk) async for chunk in read.chunks])
    finally:
        await opened.aclose()


async def list_objects(engine: Engine, bucket: str, prefix: str) -> AsyncIterator[tuple[str, int]]:
    """(key, size) of every object under `prefix`, page by page, through the listing cache: asked
    as the S3 API asks the engine for a client's ListObjectsV2 of the prefix (s3api.handlers: url
    encoding, 1,000 keys a page), so that an engine listing the prefix within `listing.ttl` of a
    load is answered by the load's pages."""
    token = ""
    while True:
        query = [("list-type", "2"), ("prefix", prefix), ("encoding-type", "url"), ("max-keys", "1000")]
        if token:
            query.append(("continuation-token", token))
        page = parse_list_objects(await engine.list_objects(bucket, query))
        for entry in page.contents:
            yield entry.key, entry.size
        if not page.is_truncated or not page.next_continuation_token:
            return
        token = page.next_continuation_token


async def plan_table(engine: Engine, fmt: str, bucket: str, prefix: str, *, snapshot: int | None = None,
                     filters: Iterable[Filter] = ()) -> Plan:
    """The data and delete files of an Iceberg table's snapshot, or of a Delta table's
    version (the current one unless `snapshot` says), that match `filters`."""
    try:
        plan = await (_iceberg if fmt == "iceberg" else _delta)(engine, bucket, prefix, snapshot)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field missing or of another type
        raise S3Error("InvalidRequest", f"{bucket}/{prefix} is not a table this gateway can read as {fmt} "
                                        f"({exc.__class__.__name__}: {exc})") from None
    filters = tuple(filters)
    if filters:
        plan.files = [f for f in plan.files if matches(filters, f.key, f.partition)]
    return plan


async def _iceberg(engine: Engine, bucket: str, prefix: str, snapshot_id: int | None) -> Plan:
    plan = Plan()
    if prefix.endswith((".metadata.json", ".metadata.json.gz")):
        location = prefix  # the metadata file itself: exact, whatever a catalog would say
    else:
        folder = prefix.rstrip("/") + "/metadata/"
        names = [key[len(folder):] async for key, _ in list_objects(engine, bucket, folder)]
        name = iceberg.current_metadata(names)
        if name is None:
            raise S3Error("InvalidRequest", f"no Iceberg metadata file under {bucket}/{folder}: not an Iceberg table")
        location = folder + name

    async def read(where: tuple[str, str]) -> bytes:
        plan.metadata_files += 1
        return await read_bytes(engine, *where)

    where = f"{bucket}/{location}"
    metadata = iceberg.parse_metadata(await read((bucket, location)), where)
    chosen = iceberg.snapshot(metadata, snapshot_id, where)
    if chosen is None:
        return plan
    if "manifest-list" in chosen:
        manifests = iceberg.manifest_list(await read(split_location(chosen["manifest-list"])),
                                          chosen["manifest-list"])
    else:  # format version 1 may list the manifests in the snapshot itself
        manifests = [str(path) for path in chosen.get("manifests") or ()]

    async def entries(manifest: str) -> list[tuple[str, int, dict[str, object]]]:
        return await asyncio.to_thread(iceberg.manifest_entries, await read(split_location(manifest)), manifest)

    seen: set[tuple[str, str]] = set()
    for found in await _bounded(entries, manifests):
        for path, size, partition in found:
            file_bucket, key = split_location(path)
            if (file_bucket, key) not in seen:  # a file may be named by a data and a delete manifest alike
                seen.add((file_bucket, key))
                plan.files.append(TableFile(file_bucket, key, size, partition))
    return plan


async def _delta(engine: Engine, bucket: str, prefix: str, version: int | None) -> Plan:
    plan = Plan()
    table = prefix.rstrip("/") + "/"
    folder = table + delta.LOG
    names = [key[len(folder):] async for key, _ in list_objects(engine, bucket, folder)]
    if not names:
        raise S3Error("InvalidRequest", f"nothing under {bucket}/{folder}: not a Delta table")
    log = delta.Log(names, version)

    async def read(name: str) -> bytes:
        plan.metadata_files += 1
        return await read_bytes(engine, bucket, folder + name)

    replay = delta.Replay()
    for name, data in zip(log.checkpoint, await _bounded(read, log.checkpoint)):
        await asyncio.to_thread(replay.checkpoint, data, f"{bucket}/{folder}{name}")
    for name, data in zip(log.commits, await _bounded(read, log.commits)):  # in order: the last action wins
        replay.commit(data, f"{bucket}/{folder}{name}")
    for path, size, partition, vectors in replay.live():
        file_bucket, key = resolve(bucket, table, path, escaped=True)
        plan.files.append(TableFile(file_bucket, key, size, partition))
        for vector in vectors:  # a deletion vector goes with its file, whatever the filter says of it
            plan.files.append(TableFile(*resolve(bucket, table, vector), None, partition))
    return plan


async def _bounded(work: Callable[[str], Awaitable[T]], items: list[str]) -> list[T]:
    """work(item) for every item, PARALLEL at a time, the answers in the items' order."""
    gate = asyncio.Semaphore(PARALLEL)

    async def one(item: str) -> T:
        async with gate:
            return await work(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def footer(engine: Engine, bucket: str, key: str, size: int | None = None) -> tuple[int, int, Footer]:
    """(size, where the bytes read start, footer ranges) of a columnar file, found by reading its
    tail through the cache as an engine does (its last TAIL bytes, then from where the footer
    starts if it is longer): those reads load the file's last blocks; the caller loads what of
    the ranges lies before them. With the `size` the table recorded, the tail's blocks are
    fetched whole (a suffix read keeps only the last one)."""
    if size == 0:
        return 0, 0, Footer(None)
    want = Want(suffix=TAIL) if size is None else Want(max(0, size - TAIL), max(0, size - 1))
    size, tail = await _read(engine, bucket, key, want, TAIL)
    start = size - len(tail)
    for _ in range(2):
        try:
            return size, start, await asyncio.to_thread(footer_ranges, tail, size)  # a read per ORC stripe
        except NeedMore as more:
            if not 0 <= more.start < start:
                break
            tail = await read_bytes(engine, bucket, key, more.start, start - 1, limit=MAX_METADATA) + tail
            start = more.start
    return size, start, Footer(None)
