"""The online estimate: shadow stores fed line by line agree with the offline replay, and a
shadow of the live configuration with what a real gateway reported."""

from __future__ import annotations

import logging

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

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


_OPERATIONS = ("GetObject", "HeadObject", "PutObject", "DeleteObject", "ListObjectsV2", None)


def _entries():  # type: ignore[no-untyped-def]
    return st.lists(st.fixed_dictionaries({  # (mostly what counts: reads of objects that were answered)
        "operation": st.sampled_from(("GetObject",) * 6 + _OPERATIONS),
        "status": st.sampled_from((200, 200, 206, 206, 304, 403, 404, 416, 500)),
        "bucket": st.sampled_from(("b",) * 8 + ("", None)),
        "key": st.sampled_from(tuple(f"k{i}" for i in range(40)) + ("", None)),
        "bytes": st.integers(0, 3 * MiB),
        "cache": st.sampled_from(("hit-mem", "hit-disk", "miss", "partial", None)),
        "range": st.sampled_from((None, "bytes=0-99", "bytes=-500", "bytes=1048576-")),
        "size": st.sampled_from((None, 3 * MiB)),
    }), min_size=20, max_size=300)


@settings(max_examples=150, deadline=None)
@given(_entries())
def test_the_cheap_look_of_the_live_gateway_estimates_what_every_entry_would(entries) -> None:  # type: ignore[no-untyped-def]
    """Fed as s3api.accounting feeds it (observe_read, then the entry only when it asks for it), a
    shadow says exactly what one fed every entry says, sampled or not, in one worker or sending."""
    specs = {"lru": StoreSpec(tiers_for(4 * MiB, 8 * MiB), "lru", 1 * MiB),
             "s3fifo": StoreSpec(tiers_for(0, 12 * MiB), "s3fifo", 1 * MiB)}
    for rate, sends in ((0.3, False), (1.0, False), (0.3, True)):
        whole, looked = (ShadowAdvisor(specs, rate=rate, sends=sends) for _ in range(2))
        for entry in entries:
            whole.observe_entry(dict(entry))
            if not looked.observe_read(entry["bucket"], entry["key"], entry["operation"], entry["status"],
                                       entry["bytes"], entry["cache"]):
                looked.observe_entry(dict(entry))
        assert looked.estimates() == whole.estimates()
        shares = [shadow.take_share() for shadow in (looked, whole)]
        for share in shares:
            for entry in share["entries"]:
                entry.pop("t")
        assert shares[0] == shares[1]
