"""Where a block this worker does not hold comes from before the origin: the other workers of this
node (engine.siblings) and the other nodes of the fleet (engine.peers), behind one protocol that the
block fetcher asks in order; and what the two share: an owner's open answer checked, an owner's
refusal taken as this worker's answer, failures logged at most every few seconds."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

from gateway.cluster.peers import OpenAnswer, PeerError, PeerRefused
from gateway.objects import ObjectChanged, ObjectMeta, block_version, decode_meta
from gateway.store.blocks import BlockId

# The block from a source's owners, and the x-cache word of how they had it ("hit-mem", "hit-disk",
# "hit-peer"; "miss": an owner fetched it from its origin for this ask); or Unanswered.
Got = tuple[bytes, str]
Ask = Callable[[], Awaitable[Got]]


class Part(NamedTuple):
    """What BlockFetcher.part brings: bytes of a block, where in the block they start, and how
    the node had them (x-cache's word: hit-mem, hit-disk, hit-peer, miss)."""

    data: bytes
    at: int
    source: str


class Unanswered(Exception):
    """None of a source's owners answered (each failed, or sent what does not add up): the asker
    goes on to its next source, and to the origin after the last."""


class BlockSource(Protocol):
    """Owners elsewhere of a block this worker does not hold (BlockFetcher.block asks them in order)."""

    # Whether a block asked of it is this worker's miss (False: the owner asked counts it).
    counts_miss: bool

    def asking(self, block: BlockId, meta: ObjectMeta, *, from_peers: bool, replicas: int | None) -> Ask | None:
        """How to ask for the block: a call that returns its bytes and how they were had (Got), raises Unanswered, or raises an
        owner's refusal (take_refusal); None when none of this source's owners is asked for it
        (`from_peers` False: what another node asked of this one, never asked of a third)."""


class FirstBlock:
    """A block that came together with the object's metadata, in hand: from one ranged GET of
    the origin (`from_origin`, a cold read), or from a cache, when an open another worker or
    node just did answers this one too (x-cache then says hit, not miss)."""

    __slots__ = ("block", "data", "from_origin")

    def __init__(self, block: BlockId, data: bytes, *, from_origin: bool) -> None:
        self.block = block
        self.data = data
        self.from_origin = from_origin


Opened = tuple[ObjectMeta, FirstBlock]


def version_of(meta: ObjectMeta) -> str:
    """What names the blocks of this object version (objects.block_version)."""
    return block_version(meta.version_id, meta.etag)


def length_of(index: int, block_size: int, meta: ObjectMeta) -> int:
    """The bytes of block `index` of the object `meta` describes."""
    first = index * block_size
    return min(first + block_size, meta.size) - first


def opened_from(answer: OpenAnswer, bucket: str, key: str, index: int, block_size: int,
                in_file: Callable[[BlockId], bytes | None]) -> Opened | None:
    """The metadata and block `index` an owner's open answered, the block read from the node's
    shared memory tier (`in_file`) when the answer left it there; None when it was evicted from
    there meanwhile. Raises PeerError for an answer that does not add up."""
    meta = decode_meta(answer.meta)
    if not isinstance(meta, ObjectMeta):
        raise PeerError("an open answer without metadata")
    block = BlockId(bucket, key, version_of(meta), index)
    data = answer.data if answer.data is not None else in_file(block)
    if data is None:
        return None
    if len(data) != length_of(index, block_size, meta):
        raise PeerError("an open answer that does not add up")
    return meta, FirstBlock(block, data, from_origin=not answer.cached)


async def take_refusal(bucket: str, key: str, refused: PeerRefused, on_changed: Callable[[str, str], Awaitable[None]]) -> None:
    """An owner's origin said no: that answer is ours too, unless it is the origin failing
    (5xx), which another owner or the origin may get past (the caller goes on)."""
    if refused.changed:
        await on_changed(bucket, key)
        raise ObjectChanged()
    if refused.error.status < 500:
        refused.error.resource = f"/{bucket}/{key}"
        raise refused.error


class Failures:
    """Failures of the owners a source asks: each counted (`counter` in `stats`), and logged at most
    once every `every` seconds for each owner. Event loop only."""

    def __init__(self, logger: logging.Logger, stats: Counter[str], counter: str, *, every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._stats = stats
        self._counter = counter
        self._every = every
        self._clock = clock
        self._logged: dict[str, float] = {}

    def failed(self, owner: str, exc: Exception, instead: str) -> None:
        """`owner` (as the log names it) gave no usable answer; `instead`: what is done instead."""
        self._stats[self._counter] += 1
        now = self._clock()
        if now - self._logged.get(owner, now - self._every) >= self._every:
            self._logged[owner] = now
            self._logger.warning("%s did not answer (%s); %s", owner, exc, instead)
