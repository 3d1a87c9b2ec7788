"""The node's figures as one JSON document (`GET stats`), for the CLI and the dashboard page."""

from __future__ import annotations

from typing import Any

from gateway.admin.node import Node
from gateway.s3api.stats import SOURCE_NAMES

HOT_OBJECTS = 20


def stats_document(node: Node, hot: int = HOT_OBJECTS) -> dict[str, Any]:
    """{"node", "uptime_seconds", "requests", "hits", "misses", "hit_ratio", "served_bytes",
    "tiers", "hot_objects", "members", "pinned", "shadow", "replication"}; hits and misses count
    block reads; each tier's "notes_dropped" counts the hits of other workers' blocks whose note
    to their owner was lost to a full ring (store.hitnotes); "shadow" is the estimate of the hit ratio at 1x, 2x and 4x the quotas (None
    when off, and on a worker of a node of several other than the first, which sends its
    sample there: admin.nodefeed; "hot_objects" there are empty likewise); "replication" is the hot-object replication controller (None outside a fleet).
    `hot`: how many of the hottest objects to name."""
    counts = stats_counts(node)
    hits, misses = counts["hits"], counts["misses"]
    return {
        "node": node.name,
        "uptime_seconds": round(node.uptime, 3),
        "requests": counts["requests"],
        "hits": hits,
        "misses": misses,
        "hit_ratio": hits / (hits + misses) if hits + misses else 0.0,
        "served_bytes": counts["served_bytes"],
        "tiers": [
            {"name": label, "medium": tier.medium, "used_bytes": tier.used, "quota_bytes": tier.quota,
             "blocks": len(tier), "notes_dropped": tier.stats.notes_dropped}
            for label, tier in node.tiers()
        ],
        "hot_objects": [{"bucket": bucket, "key": key, "hits": count}
                        for bucket, key, count in node.engine.heat.top(hot)],
        "members": node.members,
        "pinned": [{"bucket": bucket, "prefix": prefix} for bucket, prefix in node.pins.pins],
        "shadow": node.shadow.estimates() if node.shadow is not None else None,
        "replication": _replication(node),
    }


def stats_counts(node: Node) -> dict[str, Any]:
    """The counters of the stats document: {"requests", "hits", "misses", "served_bytes"}."""
    served = node.requests.served
    return {"requests": node.requests.total, "hits": node.hits, "misses": node.misses,
            "served_bytes": {source: served[source] for source in SOURCE_NAMES}}


def _replication(node: Node) -> dict[str, Any] | None:
    """The hot-object replication controller as this node sees it (None when off)."""
    controller, fleet = node.replication, node.engine.fleet
    if controller is None or fleet is None:
        return None
    counters = node.engine.stats
    hottest = sorted(fleet.hot.items(), key=lambda item: item[1], reverse=True)[:HOT_OBJECTS]
    return {
        "leader": controller.stats.leader,
        "rounds": controller.stats.rounds,
        "hot_objects": len(fleet.hot),
        "replicas": [{"bucket": bucket, "key": key, "replicas": n} for (bucket, key), n in hottest],
        "filled_blocks": counters["replica_fill_blocks"],
        "dropped_blocks": counters["replica_drop_blocks"],
    }
