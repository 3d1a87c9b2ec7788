"""The node's feed (gateway.admin.nodefeed): what the other workers read reaches the first
worker's heat and shadow whole, over a real unix datagram socket, and sending never waits."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

import orjson

from gateway.admin.nodefeed import NodeFeed
from gateway.advisor.shadow import ShadowAdvisor
from gateway.advisor.simulate import StoreSpec, tiers_for
from gateway.advisor.synth import zipf_reads
from gateway.heat import HeatCounter, HeatSender
from gateway.node.workers import WorkerSet
from tests.waiting import eventually

MiB = 1024**2
SPECS = {"1x": StoreSpec(tiers_for(8 * MiB, 0), "lru"), "2x": StoreSpec(tiers_for(16 * MiB, 0), "s3fifo")}


def entries(count: int, seed: int) -> list[dict[str, Any]]:
    return [{"operation": "GetObject", "bucket": r.bucket, "key": r.key, "range": None, "status": 200,
             "bytes": r.size, "cache": "hit-mem" if i % 3 else "miss"}
            for i, r in enumerate(zipf_reads(count, 700, object_size=(64 * 1024, 1024 * 1024), seed=seed))]


def workers(run_dir: str, index: int) -> WorkerSet:
    return WorkerSet(index, 2, run_dir, b"s" * 32)


def test_a_workers_reads_reach_the_first_workers_heat_and_shadow() -> None:
    reads = entries(3000, seed=4)
    alone = ShadowAdvisor(SPECS, rate=0.3)  # one gateway that served every GET
    for entry in reads:
        alone.observe_entry(entry)

    async def node() -> tuple[dict[str, Any], list[tuple[str, str, int]], NodeFeed]:
        with tempfile.TemporaryDirectory(prefix="gw-") as run_dir:
            heat, sender_heat = HeatCounter(), HeatSender()
            shadow = ShadowAdvisor(SPECS, rate=0.3, delay=0.0)
            sends = ShadowAdvisor(SPECS, rate=0.3, sends=True)
            first, other = NodeFeed(workers(run_dir, 0), heat, shadow), NodeFeed(workers(run_dir, 1), sender_heat, sends)
            first.open()
            other.open()
            try:
                for entry in reads:  # every GET served by the other worker
                    sender_heat.hit(entry["bucket"], entry["key"])
                    sends.observe_entry(entry)
                other.send()  # several datagrams: 700 objects' heat, some 900 sampled GETs
                assert other.sent > 2 and other.dropped == 0
                await eventually(lambda: first.received == other.sent, "every datagram received")
                return shadow.estimates(), heat.top(1000), other
            finally:
                other.close()
                first.close()

    estimate, top, other = asyncio.run(node())
    expected: dict[tuple[str, str], int] = {}
    for entry in reads:
        expected[entry["bucket"], entry["key"]] = expected.get((entry["bucket"], entry["key"]), 0) + 1
    assert {(bucket, key): hits for bucket, key, hits in top} == expected
    assert estimate == alone.estimates()  # the same GETs, in the same order: the same estimate


def test_the_first_worker_replays_its_own_and_the_others_requests_in_the_order_they_were_answered() -> None:
    reads = entries(400, seed=6)
    alone = ShadowAdvisor(SPECS, rate=1.0)
    for entry in reads:
        alone.observe_entry(entry)
    first = ShadowAdvisor(SPECS, rate=1.0, delay=1e9)  # held until the estimate (delay 0 below)
    other = ShadowAdvisor(SPECS, rate=1.0, sends=True)
    answered = [(n / 1000, entry) for n, entry in enumerate(reads)]  # (monotonic seconds)
    for at, entry in answered[1::2]:  # the other worker's: they arrive after all of the first's own
        other.observe_entry(entry, at=at)
    for at, entry in answered[::2]:
        first.observe_entry(entry, at=at)
    first.add_share(orjson.loads(orjson.dumps(other.take_share())))  # as a datagram carries it
    first.delay = 0.0
    assert first.estimates() == alone.estimates()


def test_sending_with_no_first_worker_loses_the_datagram_and_counts_it() -> None:
    async def alone() -> NodeFeed:
        with tempfile.TemporaryDirectory(prefix="gw-") as run_dir:
            heat = HeatSender()
            feed = NodeFeed(workers(run_dir, 1), heat, None)
            feed.open()
            heat.hit("bkt", "k")
            feed.send()  # no socket there (the first worker restarting): never waits, never raises
            feed.send()  # nothing new: nothing sent
            feed.close()
            assert not os.path.exists(feed.path)
            return feed

    feed = asyncio.run(alone())
    assert (feed.sent, feed.dropped) == (0, 1)


def test_long_keys_are_sent_in_datagrams_a_socket_takes() -> None:
    # 700 KiB of heat, S3's longest keys: more datagrams than a receiver often queues (10), the
    # rest sent in the sender's next rounds.
    keys = [f"{n:04d}".ljust(1000, "k") for n in range(700)]

    async def node() -> tuple[list[tuple[str, str, int]], NodeFeed]:
        with tempfile.TemporaryDirectory(prefix="gw-") as run_dir:
            heat, sender_heat = HeatCounter(), HeatSender()
            first, other = NodeFeed(workers(run_dir, 0), heat, None), NodeFeed(workers(run_dir, 1), sender_heat, None)
            first.open()
            other.open()
            try:
                for key in keys:
                    sender_heat.hit("bkt", key)

                def arrived() -> bool:  # a worker's round: it sends what the queue had no room for before
                    other.send()
                    return not other.waiting and first.received == other.sent

                await eventually(arrived, "every datagram received")
                return heat.top(1000), other
            finally:
                other.close()
                first.close()

    top, other = asyncio.run(node())
    assert sorted(key for _, key, _ in top) == keys and other.dropped == 0
    assert 12 <= other.sent <= 18  # about 48 KiB of heat each
