"""A worker's counts outlive it (gateway.admin.ledger): the worker after it at its index goes
on from its ledger, and the node counts a worker that does not answer with its ledger, so the
node's counters never go down; gauges are not kept, they are the worker's current state."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gateway.admin.ledger import Counts, Ledger, read
from gateway.admin.nodewide import Family, add_counts, counting, node_metrics, node_stats, sum_families
from tests.admin.test_nodewide import own


def worker_families(requests: int, used: int, seconds: float) -> list[Family]:
    """A worker's metric families as `nodewide.families` gives them: a counter, a gauge, a histogram."""
    return [
        ["gateway_requests", "S3 requests.", "counter",
         [["gateway_requests_total", {"operation": "GetObject", "status": "200"}, requests]]],
        ["gateway_cache_tier_used_bytes", "Bytes held.", "gauge",
         [["gateway_cache_tier_used_bytes", {"tier": "memory"}, used]]],
        ["gateway_request_duration_seconds", "Time.", "histogram",
         [["gateway_request_duration_seconds_bucket", {"operation": "GetObject", "le": "+Inf"}, requests],
          ["gateway_request_duration_seconds_count", {"operation": "GetObject"}, requests],
          ["gateway_request_duration_seconds_sum", {"operation": "GetObject"}, seconds]]],
    ]


def samples(families: list[Family]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(name, tuple(sorted(labels.items()))): value for family in families for name, labels, value in family[3]}


def counts(requests: int, memory: int) -> dict[str, object]:
    return {"requests": requests, "hits": requests, "misses": 0,
            "served_bytes": {"memory": memory, "disk": 0, "origin": 0, "peer": 0}}


def test_only_counters_and_histograms_are_kept():
    assert [family[0] for family in counting(worker_families(3, 100, 0.5))] == \
        ["gateway_requests", "gateway_request_duration_seconds"]


def test_families_are_summed_sample_by_sample():
    summed = samples(sum_families([worker_families(3, 100, 0.5), worker_families(4, 50, 0.25)]))
    assert summed[("gateway_requests_total", (("operation", "GetObject"), ("status", "200")))] == 7
    assert summed[("gateway_cache_tier_used_bytes", (("tier", "memory"),))] == 150
    assert summed[("gateway_request_duration_seconds_sum", (("operation", "GetObject"),))] == 0.75
    # A sample only one part has is kept as it is.
    other = [["gateway_requests", "S3 requests.", "counter", [["gateway_requests_total", {"operation": "HeadObject",
                                                                                          "status": "404"}, 2]]]]
    summed = samples(sum_families([worker_families(3, 100, 0.5), other]))
    assert summed[("gateway_requests_total", (("operation", "HeadObject"), ("status", "404")))] == 2
    assert summed[("gateway_requests_total", (("operation", "GetObject"), ("status", "200")))] == 3


def test_the_worker_after_a_killed_one_goes_on_from_its_ledger(tmp_path: Path):
    path = str(tmp_path / "counters-0")
    first = Ledger(path)
    assert first.carried == Counts() and read(path) is None
    shown = first.carry(worker_families(5, 100, 1.0), counts(5, 500))
    first.write(*shown)
    # Killed here. The next worker at its index starts from nothing of its own and carries the ledger.
    second = Ledger(path)
    assert samples(second.carried.families) == samples(counting(shown[0]))  # no gauge
    families, stats = second.carry(worker_families(2, 30, 0.25), counts(2, 200))
    found = samples(families)
    assert found[("gateway_requests_total", (("operation", "GetObject"), ("status", "200")))] == 7
    assert found[("gateway_request_duration_seconds_sum", (("operation", "GetObject"),))] == 1.25
    assert found[("gateway_cache_tier_used_bytes", (("tier", "memory"),))] == 30  # its own state only
    assert stats == counts(7, 700)
    second.write(families, stats)
    third = Ledger(path)  # and so on, whatever the number of restarts
    assert third.carry(worker_families(0, 0, 0.0), counts(0, 0))[1] == counts(7, 700)
    assert sorted(os.listdir(tmp_path)) == ["counters-0"]  # written whole, through a temporary file


def test_a_worker_that_does_not_answer_counts_with_its_ledger():
    absent = Counts(counting(worker_families(4, 999, 0.5)), counts(4, 400))
    text = node_metrics([worker_families(3, 100, 0.5)], None, 2, [absent.families])
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(
        text.decode()) for s in family.samples}
    assert found[("gateway_requests_total", (("operation", "GetObject"), ("status", "200")))] == 7
    assert found[("gateway_cache_tier_used_bytes", (("tier", "memory"),))] == 100  # its gauge is not known
    assert found[("gateway_workers_answered", ())] == 1
    stats = node_stats([{**own(0, ["a:1"]), **counts(3, 300)}], 2, [absent.stats])
    assert (stats["requests"], stats["hits"], stats["misses"]) == (7, 7, 0)
    assert stats["served_bytes"] == {"memory": 700, "disk": 0, "origin": 0, "peer": 0}
    assert stats["workers"] == {"count": 2, "answered": 1, "missing": [1]}
    assert add_counts([]) == {"requests": 0, "hits": 0, "misses": 0, "served_bytes": {}}
