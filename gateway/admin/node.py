"""What the admin API reads about this node: one object over the engine, the request
counters and the pins, so metrics and the stats page agree on every number."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gateway.admin.nodefeed import NodeFeed
from gateway.advisor.shadow import ShadowAdvisor
from gateway.cluster.membership import Membership
from gateway.cluster.pins import RuntimePins
from gateway.cluster.replication import Replication
from gateway.engine import Engine
from gateway.s3api.stats import RequestStats
from gateway.store.tiers import Tier


@dataclass(slots=True)
class Node:
    """This node, as the admin API sees it. Read on the event loop, at request time."""

    name: str
    engine: Engine
    requests: RequestStats
    pins: RuntimePins
    started: float = field(default_factory=time.monotonic)
    membership: Membership | None = None  # in a fleet
    shadow: ShadowAdvisor | None = None  # what 2x and 4x the quotas would have hit (cache.shadow_rate)
    replication: Replication | None = None  # in a fleet with cluster.hot_replication
    feed: NodeFeed | None = None  # in a node of several workers: heat and shadow gathered in the first

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started

    @property
    def members(self) -> list[str]:
        """The live members of the fleet as this node last saw them (ids); alone: itself."""
        return [self.name] if self.membership is None else list(self.membership.ids)

    def tiers(self) -> list[tuple[str, Tier]]:
        """(label, tier) from the top: "memory", then the disk tiers' names (disk0, ...)."""
        store = self.engine.store
        if store is None:
            return []
        return [("memory" if tier.medium == "memory" else tier.name, tier) for tier in store.levels]

    @property
    def hits(self) -> int:
        """Block reads answered by a tier."""
        return sum(tier.stats.hits for _, tier in self.tiers())

    @property
    def misses(self) -> int:
        """Block reads no tier could answer (the block came from the origin)."""
        store = self.engine.store
        return 0 if store is None else store.misses
