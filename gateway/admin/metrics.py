"""Prometheus metrics: the node's plain counters turned into metric families at scrape time.

Nothing on the request path touches prometheus_client: the components keep ints
(RequestStats, TierStats, the store's, the engine's, the origin's, the Redis handle's)
and `NodeCollector.collect` reads them when /metrics is asked for. Each app has its
own CollectorRegistry, so several gateways in one process never share a number.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway import gcpauses
from gateway.admin.node import Node
from gateway.httpserver import GuardedProtocol
from gateway.s3api.stats import LATENCY_BUCKETS, SOURCE_NAMES

__all__ = ["CONTENT_TYPE_LATEST", "NodeCollector", "registry_for", "render"]

# Blocks the hot-object replication controller had this node fill or drop, by the engine counter.
REPLICATION_ACTIONS = {"replicate": "replica_fill_blocks", "drop": "replica_drop_blocks"}


class NodeCollector(Collector):
    """Maps one node's counters to the gateway_* metrics."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._cache()
        yield from self._origin()
        yield from self._shared()
        yield from self._shadow()
        yield from self._server()

    def _server(self) -> Iterator[Metric]:
        # The connection figures are the process's (gateway serve: one node per process).
        yield GaugeMetricFamily("gateway_connections_open", "Client connections open (gateway serve).",
                                value=GuardedProtocol.open_connections)
        cut = CounterMetricFamily(
            "gateway_connections_cut_total", "Client connections the server closed on a limit: refused "
            "(server.max_connections), head_timeout, head_too_large (server.max_head_size), stalled "
            "(server.stall_timeout).", labels=["reason"])
        for reason, count in (("refused", GuardedProtocol.refused), ("head_timeout", GuardedProtocol.head_timeouts),
                              ("head_too_large", GuardedProtocol.heads_too_large), ("stalled", GuardedProtocol.stalls)):
            cut.add_metric([reason], count)
        yield cut
        yield _gc_pauses()
        engine = self.node.engine
        yield GaugeMetricFamily("gateway_read_buffer_used_bytes", "Bytes of blocks held by reads in flight "
                                "(cache.read_buffer).", value=engine.budget.used)
        yield GaugeMetricFamily("gateway_read_buffer_limit_bytes", "cache.read_buffer.", value=engine.budget.limit)
        yield CounterMetricFamily("gateway_read_buffer_waits_total", "Block reads that waited for the read buffer.",
                                  value=engine.budget.waits)
        yield CounterMetricFamily("gateway_read_buffer_overdrawn_total", "Block reads that went past the read "
                                  "buffer after waiting for it too long.", value=engine.budget.overdrawn)
        peers = engine.fleet.peers if engine.fleet is not None else None
        yield CounterMetricFamily("gateway_peer_requests_total", "Block requests sent to peers (each attempt).",
                                  value=0 if peers is None else peers.requests)
        yield CounterMetricFamily("gateway_peer_failures_total", "Peer requests that got no usable answer "
                                  "(unreachable, timed out, reset).", value=0 if peers is None else peers.failures)

    def _shadow(self) -> Iterator[Metric]:
        feed = self.node.feed
        if feed is not None:
            datagrams = CounterMetricFamily(
                "gateway_node_feed_datagrams_total", "Of a node of several workers: datagrams of heat and shadow "
                "samples the other workers sent the first (sent), lost because it could not take them (dropped), "
                "and the first received (received).", labels=["outcome"])
            for outcome, count in (("sent", feed.sent), ("dropped", feed.dropped), ("received", feed.received)):
                datagrams.add_metric([outcome], count)
            yield datagrams
        shadow = self.node.shadow
        if shadow is None:
            return
        ratio = GaugeMetricFamily(
            "gateway_shadow_hit_ratio", "Estimated GET hit ratio of this node's store with its quotas scaled "
            "(store=1x, 2x, 4x), from shadow models fed a sample of the traffic (cache.shadow_rate).",
            labels=["store"])
        for name, figures in shadow.estimates()["shadows"].items():
            ratio.add_metric([name], figures["hit_ratio"])
        yield ratio

    def _requests(self) -> Iterator[Metric]:
        stats = self.node.requests
        requests = CounterMetricFamily("gateway_requests_total", "S3 requests answered, by operation and HTTP status.",
                                       labels=["operation", "status"])
        for (operation, status), count in sorted(stats.requests.items()):
            requests.add_metric([operation, str(status)], count)
        yield requests
        duration = HistogramMetricFamily(
            "gateway_request_duration_seconds",
            "Time from a request's arrival to the last byte of its answer, by operation.", labels=["operation"])
        for operation, latency in sorted(stats.latency.items()):
            duration.add_metric([operation], _cumulative(LATENCY_BUCKETS, latency.counts), latency.total)
        yield duration
        served = CounterMetricFamily(
            "gateway_served_bytes_total",
            "Object body bytes sent, by where they came from: the x-cache value of each GetObject answer "
            "(hit-mem: memory, hit-disk: disk, hit-peer: peer, miss and partial: origin) and the bytes it sent.",
            labels=["source"])
        for source in SOURCE_NAMES:
            served.add_metric([source], stats.served[source])
        yield served
        yield CounterMetricFamily("gateway_hit_path_requests_total",
                                  "Of the S3 requests, the cache hits answered below the ASGI app (server.hit_path).",
                                  value=stats.below_asgi)
        yield CounterMetricFamily("gateway_hit_path_replayed_total",
                                  "Of the hits answered below the ASGI app, the requests sent again byte for byte "
                                  "and answered as kept (nothing parsed or verified again).", value=stats.replayed)

    def _cache(self) -> Iterator[Metric]:
        tiers = self.node.tiers()
        families = {
            "hits": CounterMetricFamily("gateway_cache_hits_total", "Block reads answered by a cache tier.",
                                        labels=["tier"]),
            "evictions": CounterMetricFamily("gateway_cache_evictions_total",
                                             "Blocks evicted from a tier to make room (demoted or freed).",
                                             labels=["tier"]),
            "bad_blocks": CounterMetricFamily("gateway_cache_bad_blocks_total",
                                              "Blocks that failed their checksum or header check, dropped.",
                                              labels=["tier"]),
            "notes_sent": CounterMetricFamily(
                "gateway_cache_hit_notes_total",
                "Hits of blocks another worker of the node owns, noted to that worker's eviction policy.",
                labels=["tier"]),
            "notes_dropped": CounterMetricFamily(
                "gateway_cache_hit_notes_dropped_total",
                "Hits of blocks another worker owns whose note was lost to a full ring (its owner's policy missed them).",
                labels=["tier"]),
            "notes_taken": CounterMetricFamily(
                "gateway_cache_hit_notes_taken_total",
                "Notes of other workers' hits of this worker's blocks taken into its eviction policy (blocks still held).",
                labels=["tier"]),
        }
        used = GaugeMetricFamily("gateway_cache_tier_used_bytes", "Bytes held by a tier.", labels=["tier"])
        quota = GaugeMetricFamily("gateway_cache_tier_quota_bytes", "A tier's quota in bytes.", labels=["tier"])
        for label, tier in tiers:
            for field, family in families.items():
                family.add_metric([label], getattr(tier.stats, field))
            used.add_metric([label], tier.used)
            quota.add_metric([label], tier.quota)
        yield from families.values()
        yield used
        yield quota
        yield CounterMetricFamily("gateway_cache_misses_total",
                                  "Block reads no tier could answer (the block was fetched).", value=self.node.misses)
        yield CounterMetricFamily(
            "gateway_singleflight_waits_total",
            "Block reads that waited for a fetch of the same block already under way instead of fetching it.",
            value=self.node.engine.stats.get("block_wait", 0))
        yield CounterMetricFamily(
            "gateway_reads_cut_total",
            "GET answers cut after their headers: a block its owner said it held was lost before it was read, "
            "and the object changed at the origin meanwhile (engine/holders.py).",
            value=self.node.engine.stats.get("read_cut_changed", 0))
        events = CounterMetricFamily(
            "gateway_engine_events_total",
            "The engine's own counters, by name: what its parts did (origin block fetches, blocks lent to and "
            "taken by their owners, peer and worker exchanges and their failures, ...). For diagnosis: the "
            "names follow the code and may change between releases.", labels=["event"])
        for event, count in sorted(self.node.engine.stats.items()):
            events.add_metric([event], count)
        yield events
        yield GaugeMetricFamily("gateway_metadata_cache_entries",
                                "Object metadata entries (404s included) in this node's metadata cache.",
                                value=len(self.node.engine.meta_cache))

    def _origin(self) -> Iterator[Metric]:
        origin = self.node.engine.origin
        requests = CounterMetricFamily("gateway_origin_requests_total",
                                       "Requests sent to the origin (each attempt), by HTTP method.", labels=["method"])
        for method, count in sorted(origin.requests.items()):
            requests.add_metric([method], count)
        yield requests
        yield CounterMetricFamily("gateway_origin_errors_total",
                                  "Origin requests that got no answer (refused, reset, timed out).",
                                  value=origin.failures)

    def _shared(self) -> Iterator[Metric]:
        shared = self.node.engine.shared
        yield CounterMetricFamily("gateway_redis_errors_total", "Redis calls that failed or timed out (0 without Redis).",
                                  value=0 if shared is None else sum(shared.redis.errors.values()))
        confirmations = CounterMetricFamily(
            "gateway_invalidation_confirmations_total",
            "Writes through this node by how the other nodes confirmed the invalidation before the answer: "
            "confirmed (all within redis.invalidation_timeout), unconfirmed (the deadline passed first), "
            "unsent (Redis unreachable: the write waited the deadline).", labels=["outcome"])
        for outcome in ("confirmed", "unconfirmed", "unsent"):
            confirmations.add_metric([outcome], 0 if shared is None else shared.invalidation.confirmations[outcome])
        yield confirmations
        replication = CounterMetricFamily(
            "gateway_replication_actions_total",
            "Blocks this node filled (replicate) or dropped (drop) because the hot-object replication "
            "controller raised or lowered an object's replica count.",
            labels=["action"])
        counters = self.node.engine.stats
        for action, counter in REPLICATION_ACTIONS.items():
            replication.add_metric([action], counters[counter])
        yield GaugeMetricFamily("gateway_hot_objects", "Objects with more owners than cluster.replicas, as this "
                                "node last read them from the replication controller.",
                                value=len(fleet.hot) if (fleet := self.node.engine.fleet) is not None else 0)
        members = self.node.membership
        yield GaugeMetricFamily("gateway_fleet_members", "Members of the fleet in this node's view (1 alone); a node "
                                "of several workers shows the largest of its workers' views, so it falls only "
                                "once every worker stopped routing to a departed member.",
                                value=1 if members is None else len(members.ids))
        controller = self.node.replication
        yield GaugeMetricFamily("gateway_replication_leader", "1 while this node is the fleet's replication "
                                "controller.", value=int(controller is not None and controller.stats.leader))
        yield replication


def _gc_pauses() -> Metric:
    # The process's (gateway serve: one node per process; a node of workers sums its workers').
    pauses = HistogramMetricFamily(
        "gateway_gc_pause_seconds", "Runs of Python's cyclic garbage collector, which pause the process's "
        "event loop, by generation (2: a full collection).", labels=["generation"])
    for generation, counts in enumerate(gcpauses.PAUSES.counts):
        pauses.add_metric([str(generation)], _cumulative(gcpauses.BUCKETS, counts), gcpauses.PAUSES.seconds[generation])
    return pauses


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, int]]:
    """A histogram's per-bucket counts (the last one past every bound) as Prometheus buckets."""
    cumulative, buckets = 0, []
    for bound, count in zip((*map(str, bounds), "+Inf"), counts):
        cumulative += count
        buckets.append((bound, cumulative))
    return buckets


def registry_for(node: Node) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of everything in `registry`."""
    return generate_latest(registry)
