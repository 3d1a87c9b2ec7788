"""RequestStats: what one answered request adds to the counters."""

from __future__ import annotations

from gateway.s3api.stats import LATENCY_BUCKETS, RequestStats


def test_a_get_counts_its_status_latency_and_source():
    stats = RequestStats()
    stats.record("GetObject", 200, 0.003, cache="hit-disk", sent=100)
    stats.record("GetObject", 206, 0.5, cache="partial", sent=40)
    stats.record("GetObject", 404, 0.001)
    stats.record("PutObject", 200, 100.0)
    assert stats.requests == {("GetObject", 200): 1, ("GetObject", 206): 1, ("GetObject", 404): 1, ("PutObject", 200): 1}
    assert stats.total == 4
    assert stats.served == {"disk": 100, "origin": 40}
    latency = stats.latency["GetObject"]
    assert latency.count == 3 and abs(latency.total - 0.504) < 1e-9
    assert latency.counts[LATENCY_BUCKETS.index(0.005)] == 1 and latency.counts[LATENCY_BUCKETS.index(0.001)] == 1
    assert stats.latency["PutObject"].counts[-1] == 1  # above the last bound: +Inf
