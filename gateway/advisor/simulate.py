"""Replay a trace through a model of the tiered store, block by block.

The model keeps no bytes, only block names and sizes, but it makes the same moves as
`gateway.store.tiers.TieredStore` over `MemoryTier`/`DiskTier`, with the same eviction
policy objects (`gateway.store.policy.make_policy`) and the same block names and block
arithmetic (`gateway.store.blocks`):

- a tier refuses a block larger than its quota; otherwise it asks its policy for victims
  (`victim()`) until the block fits, and the victims go down to the next tier (demotion)
  that takes them, the last tier's victims are freed;
- a read looks from the top tier down; a hit below the top is copied into the top tier
  when `promote` is on (CACHE_PROMOTE), the lower copy stays; a miss fetches the block
  from the origin and puts it into the top tier that takes it;
- the answer of each GET is classified as the gateway's `x-cache` is, before its blocks
  are read: hit-mem (every block in memory), hit-disk (every block cached), partial, miss;
- origin requests as `gateway.engine.reads` makes them: one for a read that misses blocks, which
  brings the blocks held between the first and the last it misses again (their hits counted);
- readahead as in `gateway.engine.reads`: a GET that starts right after the previous GET of
  the same object ended (4096 objects remembered) has the first stretch of blocks not held
  among the next `readahead` fetched ahead in one request, and a Parquet/ORC read that does
  not reach the object's last block has that block (its footer) fetched.

A node of several workers (`StoreSpec.workers` N > 1, `server.workers`) is modelled as the node
is built (gateway.app.build_store): N stores, each with 1/N of every quota (rounded down as the
workers round it), and each block in the store of the worker that owns it, by the node's own
placement (`gateway.node.workers.placement`, the function the workers use); a GET's blocks are
looked up each in its owner's store, and its answer, origin requests and readahead are the
node's. The node's hits reach their owners' policies (store.hitnotes), so each part sees every
hit of its blocks, as here.

Not modelled: pins and TTLs, the metadata cache, concurrency (reads are applied in trace
order, one at a time), a fleet's peers (one node), which worker served a GET (readahead's
sequential readers are spotted over the whole node here, by each worker alone there), and the
parts of blocks a memory tier keeps (gateway.store.pieces; a lone worker's, or one a node's
workers share on tmpfs): there a read of part of a block larger than 64 KiB fetches its bytes
rounded out to 64 KiB and keeps them as the block's piece, where the model fetches and keeps the
whole block. With blocks of 64 KiB (or no memory tier) the two are the same; with larger blocks
the model's origin bytes are an upper bound, and a later read of another part of such a block is
a hit in the model where the gateway fetches what the piece lacks.

Sampling (SHARDS, Waldspurger et al., FAST 2015, fixed rate): with `rate` R < 1 only the
objects whose hash of (bucket, key) falls below R are replayed, into quotas scaled by R.
Ratios come straight from the sample; totals are scaled back by 1/R.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.config import CacheSettings
from gateway.lru import LRU
from gateway.node.workers import placement
from gateway.store.blocks import BlockId, block_span
from gateway.store.policy import EvictionPolicy, make_policy

ORIGIN = "origin"
_FOOTER_FIRST_SUFFIXES = (".parquet", ".orc")  # as gateway.engine.reads
_SEQUENTIAL_READERS = 4096  # as gateway.engine.reads
_HASH_SPACE = 1 << 64


@dataclass(frozen=True, slots=True)
class TierSpec:
    """One level: `medium` is memory, ssd or hdd (what prices and latencies are looked up by)."""

    name: str
    medium: str
    quota: int


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """What the simulated store is: its levels from the top, policy, block size, promotion."""

    tiers: tuple[TierSpec, ...]
    policy: str = "s3fifo"
    block_size: int = 1024**2
    promote: bool = True
    readahead: int = 16
    workers: int = 1  # the node's workers: each keeps the blocks it owns in 1/workers of every quota

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"a node has at least one worker, not {self.workers}")

    def scaled(self, rate: float) -> StoreSpec:
        """The same store with every quota scaled by `rate` (for a SHARDS sample)."""
        tiers = tuple(TierSpec(t.name, t.medium, int(t.quota * rate)) for t in self.tiers)
        return dataclasses.replace(self, tiers=tiers)

    def part(self) -> StoreSpec:
        """One worker's store: 1/workers of every quota, rounded down as gateway.app.build_store does."""
        tiers = tuple(TierSpec(t.name, t.medium, t.quota // self.workers) for t in self.tiers)
        return dataclasses.replace(self, tiers=tiers, workers=1)


class SimTier:
    """A tier's bookkeeping without its bytes: names -> sizes under a quota, one policy."""

    __slots__ = ("evictions", "hits", "medium", "name", "policy", "quota", "rejected", "sizes", "used")

    def __init__(self, spec: TierSpec, policy: str) -> None:
        self.name = spec.name
        self.medium = spec.medium
        self.quota = spec.quota
        self.policy: EvictionPolicy = make_policy(policy, spec.quota)
        self.sizes: dict[str, int] = {}
        self.used = 0
        self.hits = 0
        self.evictions = 0
        self.rejected = 0

    def put(self, name: str, size: int) -> list[tuple[str, int]]:
        """As MemoryTier.put / DiskTier._put: the victims evicted to make room."""
        if name in self.sizes:
            return []
        if size > self.quota:
            self.rejected += 1
            return []
        victims: list[tuple[str, int]] = []
        sizes = self.sizes
        while self.used + size > self.quota:
            victim = self.policy.victim()
            if victim is None:
                break
            victim_size = sizes.pop(victim)
            self.used -= victim_size
            self.evictions += 1
            victims.append((victim, victim_size))
        if self.used + size > self.quota:
            self.rejected += 1
            return victims
        sizes[name] = size
        self.used += size
        self.policy.insert(name, size)
        return victims


class SimStore:
    """TieredStore's get/put over SimTiers (see the module docstring)."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.levels = [SimTier(tier, spec.policy) for tier in spec.tiers if tier.quota > 0]
        self.promote = spec.promote
        # The memory level's blocks, for the x-cache answer hit-mem (None: no memory level).
        top = self.levels[0] if self.levels and self.levels[0].medium == "memory" else None
        self.top: dict[str, int] | None = None if top is None else top.sizes
        self.promotions = 0
        self.demotions = 0
        self.freed = 0

    def __contains__(self, name: str) -> bool:
        return any(name in tier.sizes for tier in self.levels)

    def get(self, name: str) -> int:
        """The level that answered (after a promotion, if any), or -1 for a miss."""
        levels = self.levels
        for level, tier in enumerate(levels):
            size = tier.sizes.get(name)
            if size is None:
                continue
            tier.policy.access(name)
            tier.hits += 1
            if self.promote and level > 0 and name not in levels[0].sizes:
                self.promotions += 1
                self._store_at(0, name, size)
            return level
        return -1

    def put(self, name: str, size: int) -> None:
        self._sink(0, name, size)

    def _sink(self, level: int, name: str, size: int) -> None:
        levels = self.levels
        for lower in range(level, len(levels)):
            if name in levels[lower].sizes:
                return
            if self._store_at(lower, name, size):
                return

    def _store_at(self, level: int, name: str, size: int) -> bool:
        tier = self.levels[level]
        victims = tier.put(name, size)
        last = level == len(self.levels) - 1
        for victim, victim_size in victims:
            if last:
                self.freed += 1
            else:
                self.demotions += 1
                self._sink(level + 1, victim, victim_size)
        return name in tier.sizes


@dataclass(slots=True)
class Counters:
    """What one replay measured. Byte and read counts are of the replayed (sampled) stream;
    `scale` (1/R) turns them into estimates for the whole trace."""

    tiers: list[TierSpec]
    scale: float = 1.0
    reads: int = 0  # GETs
    read_bytes: int = 0  # bytes the GETs asked for
    block_reads: int = 0
    block_hits: list[int] = field(default_factory=list)  # per level
    hit_bytes: list[int] = field(default_factory=list)  # bytes of the GETs served by each level
    miss_blocks: int = 0
    miss_bytes: int = 0  # bytes of the GETs that came from the origin
    demand_fetch_bytes: int = 0  # whole blocks fetched from the origin for GETs
    origin_requests: int = 0  # origin GETs: one per read that missed blocks, one per readahead
    origin_bytes: int = 0  # bytes fetched from the origin, readahead included
    prefetches: int = 0
    answers: dict[str, int] = field(default_factory=lambda: {"hit-mem": 0, "hit-disk": 0, "partial": 0, "miss": 0})
    slowest: list[int] = field(default_factory=list)  # GETs by the slowest source they touched (levels, origin)
    promotions: int = 0
    demotions: int = 0

    def __post_init__(self) -> None:
        n = len(self.tiers)
        self.block_hits = self.block_hits or [0] * n
        self.hit_bytes = self.hit_bytes or [0] * n
        self.slowest = self.slowest or [0] * (n + 1)

    # The whole trace, sampled or not: SHARDS_adj divides the sample's misses by the share
    # of these that a perfect sample would hold (R x them) instead of by what the sample
    # happened to hold, which takes out most of the error of sampling or missing a very hot
    # object (Waldspurger et al., FAST 2015, section 4.2).
    all_reads: int = 0
    all_read_bytes: int = 0
    all_block_reads: int = 0

    def _hit_ratio(self, misses: int, sampled: int, everything: int) -> float:
        if self.scale == 1:
            return 1 - misses / sampled if sampled else 0.0
        expected = everything / self.scale
        return min(1.0, max(0.0, 1 - misses / expected)) if expected else 0.0

    @property
    def byte_hit_ratio(self) -> float:
        return self._hit_ratio(self.miss_bytes, self.read_bytes, self.all_read_bytes)

    @property
    def block_hit_ratio(self) -> float:
        return self._hit_ratio(self.miss_blocks, self.block_reads, self.all_block_reads)

    @property
    def object_hit_ratio(self) -> float:
        """GETs answered wholly from the cache (x-cache hit-mem or hit-disk)."""
        misses = self.answers["partial"] + self.answers["miss"]
        return self._hit_ratio(misses, self.reads, self.all_reads)


def sampled(bucket: str, key: str, rate: float) -> bool:
    """SHARDS's spatial filter: a uniform 64-bit hash of the object below rate * 2**64."""
    if rate >= 1:
        return True
    digest = hashlib.blake2b(f"{bucket}\0{key}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < rate * _HASH_SPACE


class BlockNames(dict):  # type: ignore[type-arg]
    """BlockId names by (bucket, key, version, index), computed once and shared by the
    replays of one sweep (computing a name is a third of a replay's time); and the blocks'
    places among a node's workers (`place`), likewise."""

    def __init__(self) -> None:
        super().__init__()
        self.places: dict[tuple[str, str, int], int] = {}

    def __missing__(self, ident: tuple[str, str, str, int]) -> str:
        name = self[ident] = BlockId(*ident).name
        return name

    def place(self, bucket: str, key: str, index: int) -> int:
        """gateway.node.workers.placement of the block: its owner is this modulo the workers."""
        place = self.places.get((bucket, key, index))
        if place is None:
            place = self.places[(bucket, key, index)] = placement(bucket, key, index)
        return place


class SimNode:
    """The stores of a node's workers (one store for one worker): each block in its owner's."""

    def __init__(self, spec: StoreSpec) -> None:
        self.spec = spec
        self.count = spec.workers
        self.parts = [SimStore(spec.part()) for _ in range(spec.workers)]
        self.tiers = [tier for tier in self.parts[0].spec.tiers if tier.quota > 0]

    @property
    def promotions(self) -> int:
        return sum(part.promotions for part in self.parts)

    @property
    def demotions(self) -> int:
        return sum(part.demotions for part in self.parts)

    def owners(self, bucket: str, key: str, span: range, names: BlockNames) -> list[SimStore]:
        """The store of each block of the span."""
        if self.count == 1:
            return self.parts * len(span)
        parts, count = self.parts, self.count
        return [parts[names.place(bucket, key, index) % count] for index in span]

    def owner(self, bucket: str, key: str, index: int, names: BlockNames) -> SimStore:
        return self.parts[0] if self.count == 1 else self.parts[names.place(bucket, key, index) % self.count]


def replay(
    reads: Iterable, spec: StoreSpec, *, rate: float = 1.0, names: BlockNames | None = None,  # type: ignore[type-arg]
    trail: list[str] | None = None,
) -> Counters:
    """Run `reads` (trace.Read-like: bucket, key, version, start, end, size) through a
    SimStore built from `spec` (quotas scaled by `rate` when sampling). `names`: a name
    cache to share with other replays of the same reads; `trail`: gets each replayed
    GET's x-cache answer, in order."""
    feed = replayer(spec, rate=rate, names=names, trail=trail)
    counters = next(feed)
    for read in reads:
        feed.send(read)
    return counters


# long: the replay's hot loop, one generator frame whose state lives in locals: no call per read or block
def replayer(
    spec: StoreSpec, *, rate: float = 1.0, names: BlockNames | None = None, trail: list[str] | None = None,
) -> Generator[Counters, Any, None]:
    """`replay` one read at a time: `next()` gives the Counters (updated in place), then
    `send(read)` each read as it comes (the online estimate feeds it from the access log)."""
    if not 0 < rate <= 1:
        raise ValueError(f"sampling rate must be in (0, 1], not {rate}")
    node = SimNode(spec.scaled(rate) if rate < 1 else spec)
    counters = Counters(node.tiers, scale=1 / rate)
    block_size = spec.block_size
    readahead = spec.readahead
    read_ends: LRU[tuple[str, str, int], int] = LRU(_SEQUENTIAL_READERS)
    keep: dict[tuple[str, str], bool] = {}
    block_names = BlockNames() if names is None else names
    origin_level = len(node.tiers)
    answers = counters.answers
    block_hits, hit_bytes, slowest = counters.block_hits, counters.hit_bytes, counters.slowest

    def prefetch(bucket: str, key: str, version: str, index: int, size: int) -> bool:
        """Fetch a block nobody asked for yet unless held: whether it was fetched."""
        name = block_names[(bucket, key, version, index)]
        store = node.owner(bucket, key, index, block_names)
        if name in store:
            return False
        counters.prefetches += 1
        length = min(block_size, size - index * block_size)
        counters.origin_bytes += length
        store.put(name, length)
        return True

    while True:
        counters.promotions = node.promotions
        counters.demotions = node.demotions
        read = yield counters
        bucket, key = read.bucket, read.key
        if rate < 1:
            counters.all_reads += 1
            counters.all_read_bytes += read.end - read.start + 1
            counters.all_block_reads += read.end // block_size - read.start // block_size + 1
            pick = keep.get((bucket, key))
            if pick is None:
                pick = keep[(bucket, key)] = sampled(bucket, key, rate)
            if not pick:
                continue
        start, end, size = read.start, read.end, read.size
        version = str(read.version)
        span = block_span(start, end, block_size)
        read_names = [block_names[(bucket, key, version, index)] for index in span]
        stores = node.owners(bucket, key, span, block_names)
        counters.reads += 1
        counters.read_bytes += end - start + 1
        # The x-cache answer, as gateway.engine.reads describes a read before it starts.
        if all(store.top is not None and name in store.top for name, store in zip(read_names, stores)):
            answer = "hit-mem"
        else:
            cached = sum(1 for name, store in zip(read_names, stores) if name in store)
            answer = "hit-disk" if cached == len(read_names) else "partial" if cached else "miss"
        answers[answer] += 1
        if trail is not None:
            trail.append(answer)
        worst = -1
        lengths: list[int] = []
        missed: list[int] = []  # (positions in the span)
        for index, name, store in zip(span, read_names, stores):
            first = index * block_size
            length = min(block_size, size - first) if size > 0 else block_size
            lengths.append(length)
            wanted = min(end + 1, first + block_size) - max(start, first)
            counters.block_reads += 1
            level = store.get(name)
            if level < 0:
                counters.miss_blocks += 1
                counters.miss_bytes += wanted
                counters.demand_fetch_bytes += length
                counters.origin_bytes += length
                missed.append(len(lengths) - 1)
                store.put(name, length)
                worst = origin_level
            if level >= 0:
                block_hits[level] += 1
                hit_bytes[level] += wanted
                worst = max(worst, level)
        if missed:  # one origin request (a run), which brings the held blocks between its misses again
            counters.origin_requests += 1
            counters.origin_bytes += sum(lengths[missed[0]:missed[-1] + 1]) - sum(lengths[i] for i in missed)
        slowest[worst] += 1
        if size > 0:
            if key.endswith(_FOOTER_FIRST_SUFFIXES) and span[-1] < (size - 1) // block_size:
                counters.origin_requests += prefetch(bucket, key, version, (size - 1) // block_size, size)
            stream = (bucket, key, read.version)
            if readahead and read_ends.get(stream) == start - 1:
                # The first stretch of blocks not held among the next `readahead`, in one run.
                after = span[-1] + 1
                fetched = False
                for index in range(after, min(after + readahead, (size - 1) // block_size + 1)):
                    if prefetch(bucket, key, version, index, size):
                        fetched = True
                    elif fetched:
                        break
                counters.origin_requests += fetched
            read_ends.put(stream, end)


def tiers_for(memory: int, ssd: int, hdd: int = 0) -> tuple[TierSpec, ...]:
    """Levels as the gateway names them: mem, then disk0 (ssd), then disk1 (hdd); empty ones left out."""
    tiers: list[TierSpec] = []
    if memory > 0:
        tiers.append(TierSpec("mem", "memory", memory))
    for medium, quota in (("ssd", ssd), ("hdd", hdd)):
        if quota > 0:
            tiers.append(TierSpec(f"disk{len(tiers) - (1 if memory > 0 else 0)}", medium, quota))
    return tuple(tiers)


def spec_from_settings(cache: CacheSettings, *, policy: str | None = None, workers: int = 1) -> StoreSpec:
    """The StoreSpec of a gateway's `cache.*` settings, as gateway.app.build_store builds it for a
    node of `workers` workers."""
    tiers = [TierSpec("mem", "memory", cache.memory_quota)] if cache.memory_quota > 0 else []
    tiers += [TierSpec(f"disk{i}", disk.medium, disk.quota) for i, disk in enumerate(cache.disk)]
    return StoreSpec(tuple(tiers), policy or cache.policy, cache.block_size, cache.promote, cache.readahead_blocks,
                     workers)
