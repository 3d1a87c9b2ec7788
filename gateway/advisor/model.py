"""From replay counters to what a split costs and how fast it serves, and a recommendation.

Latency model (rough, and meant to compare splits with one another, not to predict a
percentile): a GET waits for the slowest source it touches (its fixed latency: memory,
SSD, HDD or the origin), then for the bytes from each source at that source's bandwidth;
bytes from the origin are whole blocks (the gateway fetches blocks), bytes from a tier
the part of each block the GET asked for. Readahead fetches are off the GET's path.

Cost: capacity (quota in GiB x price per GiB-month per medium) and a fixed price per
node (`node`, 0 by default: what the machine costs besides its cache), plus, when prices for
them are given and the trace says how long it covers, origin GETs and origin bytes
extrapolated to a 30-day month. The cost-performance figure is GETs per second (one
client, 1 / mean latency) per dollar a month: higher is better.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gateway.advisor.simulate import (
    ORIGIN,
    BlockNames,
    Counters,
    StoreSpec,
    replay,
    tiers_for,
)
from gateway.config import ConfigError, parse_duration, parse_size

GiB = 1024**3
MONTH = 30 * 86400.0

# $ per GiB-month for capacity; $ per 1000 origin GETs and per GB from the origin.
DEFAULT_PRICES = {"mem": 3.00, "ssd": 0.10, "hdd": 0.03, "get": 0.0, "gb": 0.0, "node": 0.0}
# Per-access latency (seconds) and bandwidth (bytes/s) of each source.
DEFAULT_LATENCY = {"mem": 0.00005, "ssd": 0.0001, "hdd": 0.008, ORIGIN: 0.020}
DEFAULT_BANDWIDTH = {"mem": 10e9, "ssd": 2e9, "hdd": 150e6, ORIGIN: 80e6}
_MEDIUM_KEY = {"memory": "mem", "ssd": "ssd", "hdd": "hdd"}


def parse_pairs(text: str, allowed: Iterable[str], parse: type[float] | object, what: str) -> dict[str, float]:
    """`mem=3,ssd=0.1` -> {"mem": 3.0, "ssd": 0.1}; ConfigError naming a bad pair."""
    allowed = tuple(allowed)
    pairs: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip().lower()
        if not sep or name not in allowed:
            raise ConfigError(f"{what}: expected NAME=VALUE with NAME one of {', '.join(allowed)}, got {item!r}")
        try:
            pairs[name] = parse(value.strip())  # type: ignore[operator]
        except (ConfigError, ValueError):
            raise ConfigError(f"{what}: not a value for {name}: {value.strip()!r}") from None
    return pairs


def parse_bandwidth(text: str) -> float:
    """`80MB/s`, `2GiB/s`, `150e6` -> bytes per second."""
    return float(parse_size(re.sub(r"(?i)/s$", "", text.strip()), "bandwidth"))


def parse_latency(text: str) -> float:
    return parse_duration(text, "latency")


@dataclass(frozen=True, slots=True)
class Model:
    prices: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    latency: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LATENCY))
    bandwidth: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_BANDWIDTH))
    period: float | None = None  # seconds the trace covers, for origin costs per month


@dataclass(frozen=True, slots=True)
class Outcome:
    """One (policy, split) evaluated."""

    policy: str
    memory: int
    ssd: int
    hdd: int
    counters: Counters
    mean_latency: float  # seconds per GET
    capacity_cost: float  # $ per month
    origin_cost: float  # $ per month (0 unless priced and the period is known)
    origin_requests_saved: float  # against every GET going to the origin once, whole trace
    origin_bytes_saved: float

    @property
    def cost(self) -> float:
        return self.capacity_cost + self.origin_cost

    @property
    def perf_per_dollar(self) -> float:
        """GETs per second of one client per $ a month."""
        if self.mean_latency <= 0:
            return 0.0
        return (1 / self.mean_latency) / self.cost if self.cost > 0 else float("inf")

    def as_dict(self) -> dict[str, object]:
        c = self.counters
        return {
            "policy": self.policy, "memory_bytes": self.memory, "ssd_bytes": self.ssd, "hdd_bytes": self.hdd,
            "byte_hit_ratio": round(c.byte_hit_ratio, 5), "object_hit_ratio": round(c.object_hit_ratio, 5),
            "block_hit_ratio": round(c.block_hit_ratio, 5), "answers": dict(c.answers),
            "origin_requests_saved": round(self.origin_requests_saved), "origin_bytes_saved": round(self.origin_bytes_saved),
            "mean_latency_ms": round(self.mean_latency * 1000, 4), "capacity_cost": round(self.capacity_cost, 4),
            "origin_cost": round(self.origin_cost, 4), "cost": round(self.cost, 4),
            "perf_per_dollar": round(self.perf_per_dollar, 4),
        }


def _source_key(tier_medium: str) -> str:
    return _MEDIUM_KEY.get(tier_medium, tier_medium)


def evaluate(counters: Counters, policy: str, memory: int, ssd: int, hdd: int, model: Model) -> Outcome:
    keys = [_source_key(t.medium) for t in counters.tiers] + [ORIGIN]
    reads = counters.reads
    if reads:
        hit_reads = reads - counters.slowest[-1]
        hit_time = sum(n * model.latency[k] for n, k in zip(counters.slowest[:-1], keys))
        hit_time += sum(b / model.bandwidth[k] for b, k in zip(counters.hit_bytes, keys))
        origin_time = counters.slowest[-1] * model.latency[ORIGIN] + counters.demand_fetch_bytes / model.bandwidth[ORIGIN]
        if counters.scale == 1 or not counters.all_reads:
            mean_latency = (hit_time + origin_time) / reads
        else:
            # SHARDS_adj again: the GETs that touch the origin, and their time, are estimated
            # from the sample (x 1/R) over the whole trace's GETs; the rest are hits that
            # take what the sample's hits took on average.
            origin_share = min(1.0, counters.slowest[-1] * counters.scale / counters.all_reads)
            mean_latency = origin_time * counters.scale / counters.all_reads
            if hit_reads:
                mean_latency += (1 - origin_share) * hit_time / hit_reads
    else:
        mean_latency = 0.0
    prices = model.prices
    capacity = (memory * prices["mem"] + ssd * prices["ssd"] + hdd * prices["hdd"]) / GiB + prices["node"]
    scale = counters.scale
    origin_cost = 0.0
    if model.period and (prices["get"] or prices["gb"]):
        per_trace = (counters.origin_requests * scale / 1000 * prices["get"]
                     + counters.origin_bytes * scale / 1e9 * prices["gb"])
        origin_cost = per_trace * MONTH / model.period
    # Against every GET going to the origin once for the bytes it asked. Sampled: the whole
    # trace's GETs and bytes are known exactly, only the origin's share is estimated (x 1/R).
    gets, asked = (counters.reads, counters.read_bytes) if scale == 1 else (counters.all_reads, counters.all_read_bytes)
    return Outcome(
        policy, memory, ssd, hdd, counters, mean_latency, capacity, origin_cost,
        origin_requests_saved=gets - counters.origin_requests * scale,
        origin_bytes_saved=asked - counters.origin_bytes * scale,
    )


def splits(budget: int, fractions: Sequence[float]) -> list[tuple[int, int]]:
    """(memory, ssd) quotas for each memory fraction of the budget."""
    return [(int(budget * f), budget - int(budget * f)) for f in fractions]


DEFAULT_FRACTIONS = (0.0, 1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)


def sweep(
    reads: Sequence, budget: int, *, policies: Sequence[str] = ("lru", "s3fifo"),  # type: ignore[type-arg]
    fractions: Sequence[float] = DEFAULT_FRACTIONS, hdd: int = 0, block_size: int = 1024**2,
    promote: bool = True, readahead: int = 16, rate: float = 1.0, model: Model | None = None, workers: int = 1,
) -> list[Outcome]:
    """Every (policy, memory:SSD split of `budget`) replayed and evaluated, on a node of `workers`
    workers (the budget shared out among them as the node does: simulate.SimNode)."""
    model = model or Model()
    names = BlockNames()
    outcomes = []
    for policy in policies:
        for memory, ssd in splits(budget, fractions):
            spec = StoreSpec(tiers_for(memory, ssd, hdd), policy, block_size, promote, readahead, workers)
            outcomes.append(evaluate(replay(reads, spec, rate=rate, names=names), policy, memory, ssd, hdd, model))
    return outcomes


def miss_ratio_curve(
    reads: Sequence, sizes: Sequence[int], policy: str, *, block_size: int = 1024**2,  # type: ignore[type-arg]
    readahead: int = 16, rate: float = 1.0, names: BlockNames | None = None, workers: int = 1,
) -> list[tuple[int, float, float]]:
    """(cache size, byte miss ratio, GET miss ratio) of a one-tier cache of each size (on a node of
    `workers` workers, each with its share of it)."""
    curve = []
    names = BlockNames() if names is None else names
    for size in sizes:
        spec = StoreSpec(tiers_for(0, size), policy, block_size, True, readahead, workers)
        c = replay(reads, spec, rate=rate, names=names)
        curve.append((size, 1 - c.byte_hit_ratio, 1 - c.object_hit_ratio))
    return curve


def recommend(outcomes: Sequence[Outcome]) -> Outcome:
    """The best cost-performance figure; ties (within 1%) go to the lower mean latency."""
    best = max(o.perf_per_dollar for o in outcomes)
    close = [o for o in outcomes if o.perf_per_dollar >= best * 0.99]
    return min(close, key=lambda o: (o.mean_latency, o.cost))


def fastest(outcomes: Sequence[Outcome]) -> Outcome:
    return min(outcomes, key=lambda o: (o.mean_latency, o.cost))
