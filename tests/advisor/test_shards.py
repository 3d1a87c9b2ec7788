"""SHARDS sampling against the exact simulation on a synthetic Zipf trace.

Stated bound, for this trace (100k GETs over 20k one-block objects, Zipf alpha 0.9,
R = 0.1, so ~2000 sampled objects, and caches of 5% and 20% of the objects, i.e. 100 and
400 blocks once scaled): |sampled - exact| <= 0.07 for every hit ratio, and <= 0.05 on
average. The error shrinks with the number of sampled objects: on 1M GETs over 200k
objects (docs/advisor.md) it stays within 0.014 at R = 0.1 and 0.054 at R = 0.01. Seed 5
is the worst of seeds 1-6 here (0.065); most seeds stay under 0.03. The estimates built
on them, with a memory tier of 1/8 of the cache: mean latency within 15% (observed 8-12%),
origin bytes saved within 20% (observed 4-14%).
"""

from __future__ import annotations

import pytest

from gateway.advisor.model import Model, evaluate
from gateway.advisor.simulate import BlockNames, StoreSpec, replay, sampled, tiers_for
from gateway.advisor.synth import zipf_reads

BLOCK = 64 * 1024
OBJECTS = 20_000


def test_sampling_is_by_object_and_near_the_rate() -> None:
    keys = [f"k{i}" for i in range(20_000)]
    picked = [k for k in keys if sampled("b", k, 0.1)]
    assert abs(len(picked) / len(keys) - 0.1) < 0.01
    assert picked == [k for k in keys if sampled("b", k, 0.1)]  # a hash, not a coin
    assert all(sampled("b", k, 1.0) for k in keys[:100])


@pytest.fixture(scope="module")
def zipf():  # type: ignore[no-untyped-def]
    return zipf_reads(100_000, OBJECTS, alpha=0.9, object_size=BLOCK, seed=5), BlockNames()


def test_sampled_hit_ratios_are_within_the_bound_of_exact_ones(zipf) -> None:  # type: ignore[no-untyped-def]
    reads, names = zipf
    errors = []
    for policy, share in (("lru", 0.05), ("s3fifo", 0.05), ("lru", 0.2)):
        spec = StoreSpec(tiers_for(0, int(OBJECTS * BLOCK * share)), policy, BLOCK, readahead=0)
        exact = replay(reads, spec, names=names)
        estimate = replay(reads, spec, rate=0.1, names=names)
        assert estimate.scale == pytest.approx(10)
        assert 0.07 < estimate.reads / exact.reads < 0.2
        errors += [abs(estimate.byte_hit_ratio - exact.byte_hit_ratio),
                   abs(estimate.object_hit_ratio - exact.object_hit_ratio)]
    assert max(errors) <= 0.07, errors
    assert sum(errors) / len(errors) <= 0.05, errors


def test_sampled_latency_and_origin_savings_are_within_the_bound(zipf) -> None:  # type: ignore[no-untyped-def]
    reads, names = zipf
    for policy, share in (("lru", 0.05), ("s3fifo", 0.05)):
        cache = int(OBJECTS * BLOCK * share)
        spec = StoreSpec(tiers_for(cache // 8, cache - cache // 8), policy, BLOCK, readahead=0)
        exact = evaluate(replay(reads, spec, names=names), policy, cache // 8, cache - cache // 8, 0, Model())
        estimate = evaluate(replay(reads, spec, rate=0.1, names=names), policy, cache // 8, cache - cache // 8, 0, Model())
        assert estimate.mean_latency == pytest.approx(exact.mean_latency, rel=0.15)
        assert estimate.origin_bytes_saved == pytest.approx(exact.origin_bytes_saved, rel=0.2)
