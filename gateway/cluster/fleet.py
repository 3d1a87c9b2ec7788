"""This node's part in the fleet: who is live, who owns a block, and how to ask them."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.cluster.membership import Member, Membership
from gateway.cluster.peers import PeerClient
from gateway.cluster.placement import owners, placement_name
from gateway.config import ClusterSettings
from gateway.lru import LRU

__all__ = ["Fleet", "Route"]

_ROUTES_KEPT = 4096  # blocks whose route is remembered


@dataclass(frozen=True, slots=True)
class Route:
    """Where a block of a read comes from when it is not held here.

    `ask`: the owners to ask first, in rendezvous order (empty: this node is the first
    owner and fetches from the origin itself). `keep`: whether this node keeps the block
    once it has it (it is an owner, or `cluster.passive_cache` is on).
    """

    ask: tuple[Member, ...]
    keep: bool


class Fleet:
    """Membership, placement and the peer client together, for the block reader. Event loop only."""

    def __init__(self, settings: ClusterSettings, membership: Membership, peers: PeerClient) -> None:
        self.settings = settings
        self.membership = membership
        self.peers = peers
        # Owners per hot object, set by the replication controller (cluster/replication.py);
        # every other object has `settings.replicas`.
        self.hot: dict[tuple[str, str], int] = {}
        # Routes worked out lately (rendezvous hashing costs a digest per member), for the members
        # they were worked out for: a change of membership makes a new `ids`, and forgets them.
        self._routes: LRU[tuple[str, str, int, int], Route] = LRU(_ROUTES_KEPT)  # the oldest worked out first out
        self._routes_for: tuple[str, ...] = ()

    @property
    def me(self) -> Member:
        return self.membership.me

    def replicas(self, bucket: str, key: str, override: int | None = None) -> int:
        """How many owners each block of the object has (more for hot objects); `override`,
        when given, instead (a load with `--replicas`)."""
        return override if override is not None else self.hot.get((bucket, key), self.settings.replicas)

    def owns(self, bucket: str, key: str, index: int, replicas: int | None = None) -> bool:
        """Whether this node is one of the block's owners (with `replicas` owners, if given)."""
        n = self.replicas(bucket, key, replicas)
        return self.me.id in owners(placement_name(bucket, key, index), self.membership.ids, n)

    def owners_of_object(self, bucket: str, key: str, blocks: int, replicas: int | None = None) -> dict[Member, int]:
        """Every live member that owns blocks of the object's first `blocks`, with how many."""
        n = self.replicas(bucket, key, replicas)
        counts: dict[Member, int] = {}
        for index in range(blocks):
            for member_id in owners(placement_name(bucket, key, index), self.membership.ids, n):
                member = self.membership.member(member_id)
                if member is not None:
                    counts[member] = counts.get(member, 0) + 1
        return counts

    def route(self, bucket: str, key: str, index: int, replicas: int | None = None) -> Route:
        """The owners of block `index` of the object to ask, and whether to keep it here.

        A node that is not an owner asks every owner in order; an owner asks those ranked
        above it (so with `replicas` > 1 the block still comes from the origin once, to
        the first owner) and keeps what it gets. `replicas`: the owners to assume
        instead of the object's count (a load with `--replicas`).
        """
        members = self.membership
        n = self.replicas(bucket, key, replicas)
        if members.ids is not self._routes_for:
            self._routes.clear()
            self._routes_for = members.ids
        found = (bucket, key, index, n)
        route = self._routes.get(found)
        if route is None:
            route = self._work_out(bucket, key, index, n)
            self._routes.put(found, route)
        return route

    def _work_out(self, bucket: str, key: str, index: int, n: int) -> Route:
        members = self.membership
        ranked = owners(placement_name(bucket, key, index), members.ids, n)
        me = members.me.id
        if me in ranked:
            above = ranked[:ranked.index(me)]
            return Route(tuple(m for m in (members.member(i) for i in above) if m is not None), True)
        return Route(tuple(m for m in (members.member(i) for i in ranked) if m is not None),
                     self.settings.passive_cache)

    async def aclose(self) -> None:
        await self.peers.aclose()
