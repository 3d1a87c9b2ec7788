"""The online estimate: shadow stores fed line by line agree with the offline replay, and a
shadow of the live configuration with what a real gateway reported."""

from __future__ import annotations

import logging

import orjson

from gateway.advisor.shadow import ShadowAdvisor
from gateway.advisor.simulate import StoreSpec, replay, tiers_for
from gateway.advisor.synth import zipf_reads
from gateway.advisor.trace import read_access_log

MiB = 1024**2


def log_lines(reads) -> list[str]:  # type: ignore[no-untyped-def]
    return [orjson.dumps({"operation": "GetObject", "method": "GET", "bucket": r.bucket, "key": r.key,
                          "range": None, "status": 200, "bytes": r.size, "cache": "miss"}).decode() for r in reads]


def test_online_equals_offline_without_sampling() -> None:
    reads = zipf_reads(5000, 800, object_size=(64 * 1024, 3 * MiB), seed=9)
    specs = {"lru 64+192": StoreSpec(tiers_for(64 * MiB, 192 * MiB), "lru"),
             "s3fifo 0+256": StoreSpec(tiers_for(0, 256 * MiB), "s3fifo")}
    shadow = ShadowAdvisor(specs, rate=1.0)
    lines = log_lines(reads)
    for line in lines:
        shadow.observe(line)
    trace = read_access_log(lines)
    got = shadow.estimates()
    assert got["gets"] == 5000 and got["live_hit_ratio"] == 0
    for name, spec in specs.items():
        offline = replay(trace.reads, spec)
        assert got["shadows"][name]["hit_ratio"] == round(offline.object_hit_ratio, 4)
        assert got["shadows"][name]["byte_hit_ratio"] == round(offline.byte_hit_ratio, 4)


def test_sampled_online_estimate_and_the_handler() -> None:
    reads = zipf_reads(60_000, 10_000, object_size=64 * 1024, seed=4)
    spec = StoreSpec(tiers_for(0, 10_000 * 64 * 1024 // 10), "s3fifo", 64 * 1024, readahead=0)
    shadow = ShadowAdvisor({"s3fifo": spec}, rate=0.2)
    logger = logging.getLogger("gateway.advisor.test-shadow")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(shadow)
    try:
        for line in log_lines(reads):
            logger.info(line)
        logger.info("not json")  # ignored
    finally:
        logger.removeHandler(shadow)
    offline = replay(reads, spec, rate=0.2).object_hit_ratio
    exact = replay(reads, spec).object_hit_ratio
    estimate = shadow.estimates()["shadows"]["s3fifo"]
    assert estimate["hit_ratio"] == round(offline, 4)  # the same sample, the same SHARDS_adj
    assert abs(estimate["hit_ratio"] - exact) <= 0.03, (estimate, exact)
    assert shadow.estimates()["skipped"] == 1
    assert 0.1 < estimate["sampled_gets"] / 60_000 < 0.35


def test_reading_the_estimates_along_the_way_changes_none_of_them() -> None:
    """The GETs not sampled are given to every shadow's whole-traffic counts when the estimates
    are read (ShadowAdvisor._settle_unsampled): read often or once, with shadows of different
    block sizes, the estimates are the same, and the offline replay's of the same sample."""
    reads = zipf_reads(20_000, 3_000, object_size=(4 * 1024, 3 * MiB), seed=7)
    specs = {"64 KiB blocks": StoreSpec(tiers_for(0, 64 * MiB), "lru", 64 * 1024, readahead=0),
             "1 MiB blocks": StoreSpec(tiers_for(16 * MiB, 48 * MiB), "s3fifo", MiB, readahead=0)}
    often, once = ShadowAdvisor(specs, rate=0.25), ShadowAdvisor(specs, rate=0.25)
    for number, line in enumerate(log_lines(reads)):
        often.observe(line)
        once.observe(line)
        if number % 997 == 0:
            often.estimates()
    assert often.estimates() == once.estimates()
    for name, spec in specs.items():
        offline = replay(reads, spec, rate=0.25)
        assert once.estimates()["shadows"][name]["hit_ratio"] == round(offline.object_hit_ratio, 4)
        assert once.estimates()["shadows"][name]["byte_hit_ratio"] == round(offline.byte_hit_ratio, 4)
