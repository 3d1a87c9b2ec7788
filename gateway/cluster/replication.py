"""The hot-object replication controller: hot objects get more owners, up to every node.

Every `heat_interval` each node
1. publishes its hottest objects (the request heat, decayed by `heat_half_life`) to Redis;
2. tries to hold the controller lease (a Redis key with expiry: one controller at a time,
   another node takes over within a lease after the controller stops). The controller
   sums the heat the live members published, sets a replica count per object
   (`replica_counts`) and writes the counts to Redis;
3. reads the counts back and hands them to the fleet (`Fleet.hot`, which placement
   reads), then tells the node which objects' counts changed: it fills the blocks it now
   owns and drops those it no longer owns.

Redis down: the node keeps the counts it last read, until Redis is back. Everything
lives under one hash tag (`{ctl}`), so each call touches one Redis Cluster slot.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import orjson

from gateway import log
from gateway.cluster.fleet import Fleet
from gateway.cluster.redis_handle import RedisHandle
from gateway.config import ClusterSettings
from gateway.heat import HeatCounter, ObjectKey
from gateway.periodic import run_every

__all__ = ["Replication", "replica_counts"]

# KEYS[1]: the lease. ARGV: this node's id, the lease in ms. 1 when this node holds it now.
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if not holder then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
"""
_RESIGN = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""



@dataclass(frozen=True, slots=True)
class Change:
    """An object's replica count went from `was` to `now`."""

    name: ObjectKey
    was: int
    now: int


OnChange = Callable[[list[Change]], Awaitable[None]]

HYSTERESIS = 1.5  # a replica earned at heat h is kept down to heat h / 1.5


def replica_counts(heat: Iterable[tuple[ObjectKey, float]], members: int, settings: ClusterSettings,
                   previous: Mapping[ObjectKey, int] | None = None) -> dict[ObjectKey, int]:
    """The owners each hot object gets: ceil(members * heat / hot_threshold), at most
    `max_replicas` (0: every member) and only for the `hot_objects` hottest. Objects that
    would get no more than `replicas` are left out (they have the default).

    Hysteresis: an object keeps its `previous` count until its heat falls a third below
    what earned it (HYSTERESIS), so heat wavering around a step does not fill and drop
    the same blocks round after round.
    """
    ceiling = min(members, settings.max_replicas or members)
    previous = previous or {}
    hottest = sorted(heat, key=lambda item: item[1], reverse=True)[:settings.hot_objects]
    counts: dict[ObjectKey, int] = {}
    for name, value in hottest:
        wanted = math.ceil(members * value / settings.hot_threshold)
        kept = min(previous.get(name, 0), math.ceil(members * value * HYSTERESIS / settings.hot_threshold))
        n = min(ceiling, max(wanted, kept))
        if n > settings.replicas:
            counts[name] = n
    return counts


@dataclass(slots=True)
class ReplicationStats:
    rounds: int = 0
    leader: bool = False  # this node was the controller in its last round


class Replication:
    """This node's part in hot-object replication (see the module). Event loop only.

    `on_change(changes)`: the objects whose replica count changed; the node fills the
    blocks it now owns and drops those it no longer owns (Engine.rebalance).
    """

    def __init__(self, settings: ClusterSettings, redis: RedisHandle, fleet: Fleet, heat: HeatCounter,
                 on_change: OnChange) -> None:
        self.settings = settings
        self.stats = ReplicationStats()
        self._redis = redis
        self._fleet = fleet
        self._heat = heat
        self._on_change = on_change
        self._lead = redis.client.register_script(_LEAD)
        self._resign = redis.client.register_script(_RESIGN)
        self._lease_key = redis.key("fleet:{ctl}:leader")
        self._heat_key = redis.key("fleet:{ctl}:heat")
        self._counts_key = redis.key("fleet:{ctl}:replicas")

    @property
    def lease_ms(self) -> int:
        return max(1, int(3 * self.settings.heat_interval * 1000))

    async def round(self) -> None:
        """Publish, lead if this node may, and apply the counts (each step skipped while Redis is down)."""
        self.stats.rounds += 1
        await self._publish()
        self.stats.leader = bool(await self._redis.call(
            "replication", lambda: self._lead(keys=[self._lease_key], args=[self._fleet.me.id, self.lease_ms])))
        if self.stats.leader:
            await self._decide()
        client = self._redis.client

        async def read() -> tuple[bytes | str | None]:
            return (await client.get(self._counts_key),)

        found = await self._redis.call("replication", read)
        if found is not None:  # else Redis is down: the counts last read stay
            await self.apply(_decode_counts(found[0]))

    async def apply(self, counts: dict[ObjectKey, int]) -> None:
        """Make `counts` the fleet's view, and hand the objects whose count changed to the node."""
        fleet, default = self._fleet, self.settings.replicas
        before, fleet.hot = fleet.hot, counts
        changes = [Change(name, before.get(name, default), counts.get(name, default))
                   for name in sorted(before.keys() | counts.keys()) if before.get(name) != counts.get(name)]
        if changes:
            await self._on_change(changes)

    async def run(self) -> None:
        await run_every(self.settings.heat_interval, self.round, "hot-object replication")

    async def leave(self) -> None:
        """Hand the lease over at once and take this node's heat out (clean shutdown)."""
        me = self._fleet.me.id
        await self._redis.call("replication", lambda: self._resign(keys=[self._lease_key], args=[me]))
        await self._redis.call("replication", lambda: self._redis.client.hdel(self._heat_key, me))

    async def _publish(self) -> None:
        top = self._heat.top(self.settings.hot_objects)
        payload = orjson.dumps([[bucket, key, count] for bucket, key, count in top])
        await self._redis.call("replication",
                               lambda: self._redis.client.hset(self._heat_key, self._fleet.me.id, payload))

    async def _decide(self) -> None:
        """The controller's round: sum the members' heat, rank, write the counts."""
        client = self._redis.client
        members = list(self._fleet.membership.ids)
        reported = await self._redis.call("replication", lambda: client.hgetall(self._heat_key))
        if reported is None:
            return
        heat: dict[ObjectKey, float] = {}
        gone = []
        for member, payload in reported.items():
            member = member.decode() if isinstance(member, bytes) else member
            if member not in members:
                gone.append(member)
                continue
            try:
                for bucket, key, count in orjson.loads(payload):
                    heat[(bucket, key)] = heat.get((bucket, key), 0) + count
            except (orjson.JSONDecodeError, ValueError, TypeError):
                log.cluster.warning("unreadable heat from %s ignored", member)
        counts = replica_counts(heat.items(), len(members), self.settings, previous=self._fleet.hot)
        payload = orjson.dumps([[bucket, key, n] for (bucket, key), n in counts.items()])
        life = max(1, int(10 * self.settings.heat_interval * 1000))  # no controller for long: defaults again
        await self._redis.call("replication", lambda: client.set(self._counts_key, payload, px=life))
        if gone:
            await self._redis.call("replication", lambda: client.hdel(self._heat_key, *gone))


def _decode_counts(raw: bytes | str | None) -> dict[ObjectKey, int]:
    if raw is None:
        return {}
    try:
        return {(bucket, key): int(n) for bucket, key, n in orjson.loads(raw)}
    except (orjson.JSONDecodeError, ValueError, TypeError):
        log.cluster.warning("unreadable replica counts in Redis ignored")
        return {}
