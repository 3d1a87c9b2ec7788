"""Counters of the requests the S3 endpoint answered; read by the admin API at scrape time."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

from gateway.hitanswers import ASGI, REPLAYED

# Upper bounds (seconds) of the latency histogram's buckets; +Inf is implied.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Where the bytes of an answer came from, by its x-cache value. "partial" (some blocks
# cached, at least one fetched) counts as origin: which bytes came from where is not
# known at this level.
SOURCES = {"hit-mem": "memory", "hit-disk": "disk", "hit-peer": "peer", "miss": "origin", "partial": "origin"}
SOURCE_NAMES = ("memory", "disk", "origin", "peer")


@dataclass(slots=True)
class Latency:
    """One operation's latency histogram: per-bucket (not cumulative) counts, sum, count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0


class RequestStats:
    """Per-request counters kept by S3App. Event loop only; `record` is a few dict updates.

    - `requests[(operation, status)]`: answers by operation name and HTTP status.
    - `latency[operation]`: time from the request's arrival to its last byte sent.
    - `served[source]`: body bytes of answers that carried x-cache, by source (SOURCES).
    - `below_asgi`: of those requests, the hits answered by the hit path (s3api.hits).
    - `replayed`: of those, the requests sent again byte for byte and answered as kept (s3api.replays).

    (The access heat of objects is the engine's: Engine.heat.)
    """

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()
        self.latency: dict[str, Latency] = {}
        self.served: Counter[str] = Counter()
        self.below_asgi = 0
        self.replayed = 0

    def record(self, operation: str, status: int, seconds: float, cache: str | None = None,
               sent: int = 0, way: int = ASGI) -> None:
        """One answer: `sent` bytes of body, x-cache `cache`, made in `seconds` the `way` it was
        (gateway.hitanswers: by the app, below it, as a kept request)."""
        self.requests[(operation, status)] += 1
        if way != ASGI:
            self.below_asgi += 1
            if way == REPLAYED:
                self.replayed += 1
        latency = self.latency.get(operation)
        if latency is None:
            latency = self.latency[operation] = Latency()
        latency.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency.total += seconds
        latency.count += 1
        if cache is not None:
            source = SOURCES.get(cache)
            if source is not None:
                self.served[source] += sent

    @property
    def total(self) -> int:
        return sum(self.requests.values())
