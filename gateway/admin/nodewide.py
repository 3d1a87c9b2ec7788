"""The figures of a node of several workers: each worker's own `stats` document and metrics
together, as one answer (gateway.admin.siblings asks the siblings for theirs).

What each figure becomes: counts (requests, hits, misses, bytes, tier use, quotas and
blocks, every counter and histogram) are summed over the workers, and ratios are worked
out again from the sums; the uptime is the oldest worker's; what every worker knows
alike (the node's name, the replication controller's view) is taken from the
lowest-numbered worker that answered, and gauges of such shared views are the largest any
worker reports rather than a sum. The fleet's members are those every worker that answered
sees: each worker keeps its own view (its own heartbeats), which may trail another's by a
heartbeat, or longer while that worker cannot reach Redis, and a worker does not ask a
member missing from its view for blocks.

The node's counters (counter and histogram families, the stats' requests, hits, misses and
served bytes) never go down while the node runs: each worker's count goes on from its
predecessors' (gateway.admin.ledger), and a worker that did not answer counts with what it
last wrote to its ledger. Its other figures are missing from the answer, which `workers`
(stats) and `gateway_workers_answered` (metrics) make visible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.admin.stats import HOT_OBJECTS

__all__ = ["COUNTS", "Family", "add_counts", "counting", "families", "node_metrics", "node_shadow", "node_stats",
           "sum_families", "workers_figure"]

# A metric family as data: [name, help, type, [[sample name, labels, value], ...]].
Family = list[Any]
# The counters of a `stats` document: plain counts, and served_bytes by source.
COUNTS = ("requests", "hits", "misses", "served_bytes")
# Metric types whose samples only grow (a histogram's buckets, count and sum of durations too).
_COUNTING = frozenset({"counter", "histogram", "summary"})

# Gauges of something every worker sees alike (the fleet's hot objects, the controller's
# leadership, held by one worker): the node's value is the largest, not the sum.
_SHARED_GAUGES = frozenset({"gateway_hot_objects", "gateway_replication_leader", "gateway_fleet_members"})
_SHADOW_RATIO = "gateway_shadow_hit_ratio"


def node_stats(documents: list[dict[str, Any]], count: int, absent: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """The node's `stats` from its workers' own documents (stats_document plus "worker",
    its index), one per worker that answered; `workers` says which did. `absent`: the
    COUNTS of the workers that did not answer, as their ledgers hold them."""
    documents = sorted(documents, key=lambda document: int(document["worker"]))
    first = documents[0]
    counts = add_counts([*documents, *absent])
    hits, misses = counts["hits"], counts["misses"]
    return {
        "node": first["node"],
        "uptime_seconds": max(d["uptime_seconds"] for d in documents),
        "requests": counts["requests"],
        "hits": hits,
        "misses": misses,
        "hit_ratio": hits / (hits + misses) if hits + misses else 0.0,
        "served_bytes": {source: counts["served_bytes"].get(source, 0) for source in first["served_bytes"]},
        "tiers": _tiers(documents),
        "hot_objects": _hottest(documents),
        "members": sorted(set.intersection(*(set(d["members"]) for d in documents))),
        "pinned": sorted({(p["bucket"], p["prefix"]): p for d in documents for p in d["pinned"]}.values(),
                         key=lambda pin: (pin["bucket"], pin["prefix"])),
        "shadow": node_shadow([d["shadow"] for d in documents]),
        "replication": next((d["replication"] for d in documents if d["replication"] is not None), None),
        "workers": workers_figure(documents, count),
    }


def add_counts(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The COUNTS of `parts` (stats documents, or ledgers' counts) summed."""
    served: Counter[str] = Counter()
    totals = {"requests": 0, "hits": 0, "misses": 0}
    for part in parts:
        for figure in totals:
            totals[figure] += part[figure]
        served.update(part["served_bytes"])
    return {**totals, "served_bytes": dict(served)}


def workers_figure(answers: Iterable[dict[str, Any]], count: int) -> dict[str, Any]:
    """How many of the node's `count` workers are in a node-wide answer, from their own
    answers (each names its "worker"), and which are missing."""
    answered = {int(answer["worker"]) for answer in answers}
    return {"count": count, "answered": len(answered), "missing": sorted(set(range(count)) - answered)}


def _tiers(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tier by name (the workers have the same ones): every worker's share summed."""
    tiers: dict[str, dict[str, Any]] = {}
    for document in documents:
        for tier in document["tiers"]:
            total = tiers.setdefault(tier["name"], {"name": tier["name"], "medium": tier["medium"], "used_bytes": 0,
                                                    "quota_bytes": 0, "blocks": 0, "notes_dropped": 0})
            for figure in ("used_bytes", "quota_bytes", "blocks", "notes_dropped"):
                total[figure] += tier.get(figure, 0)  # (a worker of the release before has no notes)
    return list(tiers.values())


def _hottest(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hottest objects of the node: its first worker counts every worker's GETs (the others
    send it theirs, admin.nodefeed, and show none themselves); summed, so that the GETs of a
    worker of the release before, which counted only its own, still count."""
    hits: Counter[tuple[str, str]] = Counter()
    for document in documents:
        for hot in document["hot_objects"]:
            hits[(hot["bucket"], hot["key"])] += hot["hits"]
    return [{"bucket": bucket, "key": key, "hits": count} for (bucket, key), count in hits.most_common(HOT_OBJECTS)]


def node_shadow(estimates: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The shadow estimates of the workers together (ShadowAdvisor.estimates). In a node of
    this release only its first worker has one, fed every worker's sample (admin.nodefeed):
    that is the node's. Several (workers of the release before, each over its own share): GETs
    and bytes summed, ratios weighted by the GETs behind them. None when no worker runs one."""
    found = [estimate for estimate in estimates if estimate is not None]
    if not found:
        return None
    gets = sum(e["gets"] for e in found)
    live = sum((e["live_hit_ratio"] or 0.0) * e["gets"] for e in found)
    shadows: dict[str, dict[str, Any]] = {}
    for name in found[0]["shadows"]:
        parts = [e["shadows"][name] for e in found if name in e["shadows"]]
        sampled = sum(p["sampled_gets"] for p in parts)
        shadows[name] = {
            "hit_ratio": _weighted(parts, "hit_ratio", sampled),
            "byte_hit_ratio": _weighted(parts, "byte_hit_ratio", sampled),
            "sampled_gets": sampled,
            "origin_bytes": sum(p["origin_bytes"] for p in parts),
        }
    return {"gets": gets, "live_hit_ratio": round(live / gets, 4) if gets else None, "rate": found[0]["rate"],
            "skipped": sum(e["skipped"] for e in found), "shadows": shadows}


def _weighted(parts: list[dict[str, Any]], figure: str, total: int) -> float:
    return round(sum(p[figure] * p["sampled_gets"] for p in parts) / total, 4) if total else 0.0


def families(registry: CollectorRegistry) -> list[Family]:
    """A worker's metric families as data, to send to the worker that answers for the node."""
    return [[metric.name, metric.documentation, metric.type, [[s.name, s.labels, s.value] for s in metric.samples]]
            for metric in registry.collect()]


def counting(parts: list[Family]) -> list[Family]:
    """Of metric families, those that only count up (counters, histograms): what a worker's
    ledger keeps (gauges, such as a tier's use, are its current state and go with it)."""
    return [family for family in parts if family[2] in _COUNTING]


def sum_families(parts: Iterable[list[Family]]) -> list[Family]:
    """Metric families of several workers (or of one worker and its predecessors) as one:
    one family per name, each sample summed over the parts, or the largest for a gauge of
    a shared view (see the module docstring)."""
    merged: dict[str, Family] = {}
    index: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], int]] = {}
    for part in parts:
        for name, documentation, kind, samples in part:
            family = merged.get(name)
            if family is None:
                family = merged[name] = [name, documentation, kind, []]
                index[name] = {}
            held, at = family[3], index[name]
            shared = name in _SHARED_GAUGES
            for sample, labels, value in samples:
                key = (sample, tuple(sorted(labels.items())))
                where = at.get(key)
                if where is None:
                    at[key] = len(held)
                    held.append([sample, labels, value])
                else:
                    held[where][2] = max(held[where][2], value) if shared else held[where][2] + value
    return list(merged.values())


def node_metrics(parts: list[list[Family]], shadow: dict[str, Any] | None, count: int,
                 absent: Iterable[list[Family]] = ()) -> bytes:
    """The node's Prometheus text from its workers' families (`families`, one list per
    worker that answered; `absent`: the counting families of those that did not, as their
    ledgers hold them): one family per name, each sample summed over the workers (see
    the module docstring for the exceptions), and gateway_workers / gateway_workers_answered."""
    merged: list[Metric] = []
    for name, documentation, kind, samples in sum_families([*parts, *absent]):
        family = Metric(name, documentation, kind)
        for sample, labels, value in samples:
            family.add_sample(sample, labels, value)
        merged.append(family)
    ratio = next((family for family in merged if family.name == _SHADOW_RATIO), None)
    if ratio is not None and shadow is not None:
        estimated = shadow["shadows"]
        ratio.samples = [s._replace(value=estimated[s.labels["store"]]["hit_ratio"]) if s.labels.get("store") in estimated
                         else s for s in ratio.samples]
    workers = [GaugeMetricFamily("gateway_workers", "Worker processes of this node (server.workers).", value=count),
               GaugeMetricFamily("gateway_workers_answered", "Of this node's workers, those whose figures this answer "
                                 "holds (the others did not answer in time).", value=len(parts))]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families([*merged, *workers]))
    return generate_latest(registry)


class _Families(Collector):
    """Metric families already made, for generate_latest."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)
