"""The online estimate (issue 8): shadow stores fed by the live access log.

`ShadowAdvisor` is a `logging.Handler` for the `gateway.access` logger. Each GetObject line
the gateway logs is replayed, as it is logged, into shadow models of other stores (other
memory:SSD splits, other policies; `simulate.replayer`) so that at any moment it can say
which hit ratio each of them would have had on the same traffic, next to the hit ratio
the live store reported (the lines' `cache` field). A shadow of the live configuration
itself shows how far the model is from the live store on this traffic.

Cost on the gateway: every line is parsed once (orjson) and hashed; only the objects in
the SHARDS sample (`rate`, 1% by default) are replayed, into quotas scaled by the rate, so
the shadows hold about rate x their quotas / block size entries. Sizes are taken as the
offline reader takes them, but only from what was seen so far (a `size` field, a whole
read, a clamped or open range; else the largest offset read, a bound), for at most
`max_objects` sampled objects.

The live gateway feeds one with every request it answers (`Accounts.shadow`; `cache.shadow_rate`):
each answer's fields first (`observe_read`, which counts a request outside the sample), the
access-log entry only of those in it (`observe_entry`), shadowing its own store at 1x, 2x and 4x
its quotas, and shows `estimates()` in its admin stats and metrics. Offline it can be attached to
the `gateway.access` logger as a handler.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Generator, Mapping
from typing import Any

import orjson

from gateway.advisor.simulate import BlockNames, Counters, StoreSpec, replayer, sampled
from gateway.advisor.trace import _RANGE, _WRITES, Read
from gateway.lru import LRU

# The fields of an access log entry the replay reads: what a worker sends of a sampled request.
_SENT = ("operation", "status", "bucket", "key", "bytes", "cache", "size", "range")


class ShadowAdvisor(logging.Handler):
    """Shadow stores by name, fed from access log records; `estimates()` reads them."""

    def __init__(self, specs: Mapping[str, StoreSpec], *, rate: float = 0.01, max_objects: int = 100_000,
                 sends: bool = False, delay: float = 0.0) -> None:
        super().__init__(logging.INFO)
        if not specs:
            raise ValueError("a shadow advisor needs at least one store to shadow")
        self.rate = rate
        self.max_objects = max_objects
        self._names = BlockNames()
        self._feeds: dict[str, tuple[Generator[Counters, Any, None], Counters, int]] = {}
        for name, spec in specs.items():
            if sends:
                continue
            feed = replayer(spec, rate=rate, names=self._names)
            self._feeds[name] = (feed, next(feed), spec.block_size)
        # `sends` (a worker that is not its node's first): the sampled requests wait here to be
        # sent (take_share) to the first worker's shadow, which models the node's store; the
        # others are only counted here, and sent as counts.
        self._outbox: list[dict[str, Any]] | None = [] if sends else None
        # `delay` (the first worker of such a node): the sampled requests, its own and those the
        # others send, are held that long and replayed in the order they were answered, not in
        # the order they arrived (another worker's come up to a feed interval late).
        self.delay = delay
        self._held: list[tuple[float, int, dict[str, Any]]] = []
        self._order = itertools.count()
        # (bucket, key) -> [version, exact size or -1, largest end + 1]; sampled objects only
        self._objects: LRU[tuple[str, str], list[int]] = LRU(max_objects)
        self._keep: LRU[tuple[str, str], bool] = LRU(4 * max_objects)  # the oldest decided first out
        self._feed_lock = threading.Lock()
        # The GETs not sampled since estimates() last read the shadows: every shadow counts
        # them in the whole traffic (Counters.all_*), and is given them all at once then, not
        # one by one (_settle_unsampled).
        self._unsampled_reads = 0
        self._unsampled_bytes = 0
        self._unsampled_blocks = dict.fromkeys({spec.block_size for spec in specs.values()}, 0)
        self.gets = 0
        self.live_hits = 0
        self.skipped = 0

    # --- logging.Handler --------------------------------------------------------------------

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.observe(record.getMessage())
        except Exception:  # noqa: BLE001 -- an estimate must never break the access log
            self.handleError(record)

    # --- the estimate -------------------------------------------------------------------------

    def observe(self, line: str) -> None:
        """Feed one access log line (a JSON object; anything else is ignored)."""
        try:
            entry = orjson.loads(line[line.find("{"):])
        except orjson.JSONDecodeError:
            self.skipped += 1
            return
        if not isinstance(entry, dict):
            self.skipped += 1
            return
        self.observe_entry(entry)

    def observe_entry(self, entry: dict[str, Any], at: float | None = None) -> None:
        """Feed one request as the access log describes it (the line's fields, as a dict);
        `at`: when it was answered (time.monotonic(), the same clock in every process of the
        machine), when it comes from another worker (add_share)."""
        if self.observe_read(entry.get("bucket"), entry.get("key"), entry.get("operation"),
                             int(entry.get("status") or 0), int(entry.get("bytes") or 0), entry.get("cache")):
            return  # nothing to see, or counted outside the sample
        with self._feed_lock:
            if self._outbox is not None:
                self._send(entry, time.monotonic() if at is None else at)
            elif self.delay:
                heapq.heappush(self._held, (time.monotonic() if at is None else at, next(self._order), entry))
                self._replay_due()
            else:
                self._replay(entry)

    def observe_read(self, bucket: str | None, key: str | None, operation: str | None, status: int, sent: int,
                     cache: str | None) -> bool:
        """What `observe_entry` does first, from the entry's fields at hand: True when that is all
        (nothing to see, or a request outside the sample counted); False for a request to see whole
        (a GET or write of a sampled object), not counted here. What the live gateway feeds it every
        request (s3api.accounting), so that no entry is made for the requests it only counts."""
        if not bucket or not key:
            return True
        write = operation in _WRITES and 200 <= status < 300
        if not write and (operation != "GetObject" or status not in (200, 206) or sent <= 0):
            return True
        with self._feed_lock:
            if self._is_sampled(bucket, key):
                return False
            if not write:
                self.gets += 1
                self.live_hits += cache in ("hit-mem", "hit-disk")
                self._count_unsampled(sent)
            return True

    def _replay(self, entry: dict[str, Any]) -> None:
        """A sampled request into every shadow (the feed lock held)."""
        bucket, key = entry["bucket"], entry["key"]
        if entry["operation"] in _WRITES:
            state = self._state(bucket, key)
            state[0], state[1], state[2] = state[0] + 1, -1, 0
            return
        self.gets += 1
        self.live_hits += entry.get("cache") in ("hit-mem", "hit-disk")
        read = self._read(bucket, key, entry, int(entry["bytes"]))
        if read is None:
            self.skipped += 1
            return
        for feed, _, _ in self._feeds.values():
            feed.send(read)  # counts it in the whole traffic too

    def _replay_due(self) -> None:
        """The held requests answered `delay` seconds ago or more, in the order they were answered."""
        held, due = self._held, time.monotonic() - self.delay
        while held and held[0][0] <= due:
            self._replay(heapq.heappop(held)[2])

    def estimates(self) -> dict[str, Any]:
        """{"gets", "live_hit_ratio", "rate", "shadows": {name: {hit ratios, origin bytes}}}."""
        with self._feed_lock:
            self._replay_due()
            self._settle_unsampled()
            shadows = {
                name: {
                    "hit_ratio": round(c.object_hit_ratio, 4), "byte_hit_ratio": round(c.byte_hit_ratio, 4),
                    "sampled_gets": c.reads, "origin_bytes": round(c.origin_bytes * c.scale),
                }
                for name, (_, c, _) in self._feeds.items()
            }
            return {"gets": self.gets, "live_hit_ratio": round(self.live_hits / self.gets, 4) if self.gets else None,
                    "rate": self.rate, "skipped": self.skipped, "shadows": shadows}

    # --- a node of several workers (gateway.admin.nodefeed) ------------------------------------

    def take_share(self) -> dict[str, Any]:
        """What a sending shadow saw since it was last asked: its counts of the requests not
        sampled, and the sampled ones themselves (fields the replay reads), for `add_share`."""
        with self._feed_lock:
            share = {"gets": self.gets, "live_hits": self.live_hits, "reads": self._unsampled_reads,
                     "bytes": self._unsampled_bytes, "blocks": list(self._unsampled_blocks.items()),
                     "entries": self._outbox or []}
            self.gets = self.live_hits = self._unsampled_reads = self._unsampled_bytes = 0
            self._unsampled_blocks = dict.fromkeys(self._unsampled_blocks, 0)
            if self._outbox is not None:
                self._outbox = []
            return share

    def add_share(self, share: Mapping[str, Any]) -> None:
        """Another worker's share of the node's traffic (`take_share`), into this shadow."""
        with self._feed_lock:
            self.gets += int(share["gets"])
            self.live_hits += int(share["live_hits"])
            self._unsampled_reads += int(share["reads"])
            self._unsampled_bytes += int(share["bytes"])
            for block_size, blocks in share["blocks"]:
                if int(block_size) in self._unsampled_blocks:
                    self._unsampled_blocks[int(block_size)] += int(blocks)
        for entry in share["entries"]:
            if isinstance(entry, dict):
                self.observe_entry(entry, float(entry["t"]))

    def _send(self, entry: dict[str, Any], at: float) -> None:
        assert self._outbox is not None
        if len(self._outbox) < self.max_objects:  # (past that, until the next take: lost)
            sent = {name: entry[name] for name in _SENT if name in entry}
            sent["t"] = at
            self._outbox.append(sent)

    # --- helpers ------------------------------------------------------------------------------

    def _is_sampled(self, bucket: str, key: str) -> bool:
        if self.rate >= 1:
            return True
        ident = (bucket, key)
        pick = self._keep.get(ident)
        if pick is None:
            pick = sampled(bucket, key, self.rate)
            self._keep.put(ident, pick)
        return pick

    def _count_unsampled(self, sent: int) -> None:
        # The whole traffic, for SHARDS_adj (see simulate.Counters): GETs and bytes exactly;
        # blocks approximately for reads not sampled (their offsets are not worked out).
        self._unsampled_reads += 1
        self._unsampled_bytes += sent
        blocks = self._unsampled_blocks
        for block_size in blocks:
            blocks[block_size] += -(-sent // block_size)

    def _settle_unsampled(self) -> None:
        """Every shadow's whole-traffic counts brought up to date with the GETs not sampled."""
        for _, counters, block_size in self._feeds.values():
            counters.all_reads += self._unsampled_reads
            counters.all_read_bytes += self._unsampled_bytes
            counters.all_block_reads += self._unsampled_blocks[block_size]
        self._unsampled_reads = self._unsampled_bytes = 0
        self._unsampled_blocks = dict.fromkeys(self._unsampled_blocks, 0)

    def _state(self, bucket: str, key: str) -> list[int]:
        ident = (bucket, key)
        state = self._objects.use(ident)
        if state is None:
            state = [0, -1, 0]
            self._objects.put(ident, state)
        return state

    def _read(self, bucket: str, key: str, entry: dict[str, Any], sent: int) -> Read | None:
        state = self._state(bucket, key)
        if entry.get("size") is not None:
            state[1] = int(entry["size"])
        header = entry.get("range")
        match = _RANGE.fullmatch(header) if header and int(entry["status"]) == 206 else None
        if match is None or (not match[1] and not match[2]):
            start, end = 0, sent - 1
            state[1] = sent if state[1] < 0 else state[1]
        elif not match[1]:
            if state[1] < 0 and sent >= int(match[2]):
                return None  # a suffix of an object of unknown size
            size = state[1] if state[1] >= 0 else sent
            start, end = size - sent, size - 1
        else:
            start = int(match[1])
            end = start + sent - 1
            if not match[2] or sent < int(match[2]) - start + 1:
                state[1] = end + 1
        state[2] = max(state[2], end + 1)
        size = state[1] if state[1] >= 0 else state[2]
        return Read(bucket, key, state[0], start, end, max(size, end + 1), None, entry.get("cache"))

