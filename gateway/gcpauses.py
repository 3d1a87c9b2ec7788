"""CPython's cyclic garbage collector in a serving process: run less often, and timed.

The collector stops the event loop while it runs, and with its defaults it ran often and long
in a gateway process: a young collection after every 700 new container objects (net of those
freed; about 46 per cold 1 MiB read), and every so often a full one that walked every object the process
holds, the ~60,000 of the modules, classes and functions loaded at start included: 0.40 s of
8 s of cold reads in collections, with pauses up to 67 ms (docs/benchmarks.md, "The garbage
collector"). `collect_less_often`, once the app is built:

- `gc.freeze()`, after one collection (no garbage is kept for good): what exists by then is
  left out of every later collection (it lives as long as the process anyway), which takes a
  full collection from ~31 ms to well under 1 ms;
- a young collection after 10,000 new container objects: most of a request's objects are
  freed by their reference counts before any collection sees them.

Cycles made while serving are still collected, only in larger batches. Every collection's
duration is recorded, by generation, for the gateway_gc_pause_seconds histogram.
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_left
from typing import Any

__all__ = ["BUCKETS", "PAUSES", "collect_less_often"]

YOUNG_THRESHOLD = 10_000  # new container objects between two young collections (CPython: 700)
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)  # seconds


class Pauses:
    """Collections of this process by generation: how many, for how long (a histogram)."""

    def __init__(self) -> None:
        self.counts = [[0] * (len(BUCKETS) + 1) for _ in range(3)]  # per generation, per bucket (+Inf last)
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = info["generation"]
        self.seconds[generation] += took
        self.counts[generation][bisect_left(BUCKETS, took)] += 1


PAUSES = Pauses()


def collect_less_often() -> None:
    """Freeze what exists now (garbage collected first, so none of it is kept for good), raise
    the young generation's threshold, and time every collection from now on (once per process)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    if PAUSES not in gc.callbacks:
        gc.callbacks.append(PAUSES)
