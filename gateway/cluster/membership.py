"""Who is in the fleet: each node's heartbeat in Redis, and this node's view of the live members."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway import log
from gateway.cluster.redis_handle import RedisHandle
from gateway.config import Settings
from gateway.periodic import run_every

__all__ = ["Member", "Membership", "identity"]

# KEYS: the members' sorted set (score: last heartbeat, ms on Redis's clock) and the hash of
# their URLs. ARGV: this node's id ("" to only read), its URL, the member TTL in ms.
# Members not heard of within the TTL are pruned on the way; returns [id, url, id, url, ...]
# of the live ones. Both keys share a hash tag (one Redis Cluster slot) and expire when the
# whole fleet has been silent for a while.
_BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if ARGV[1] ~= '' then
    redis.call('ZADD', KEYS[1], now, ARGV[1])
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
for _, id in ipairs(gone) do redis.call('HDEL', KEYS[2], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local url = redis.call('HGET', KEYS[2], id)
    if url then
        out[#out + 1] = id
        out[#out + 1] = url
    end
end
redis.call('PEXPIRE', KEYS[1], ttl * 10)
redis.call('PEXPIRE', KEYS[2], ttl * 10)
return out
"""


@dataclass(frozen=True, slots=True, order=True)
class Member:
    """A node of the fleet: its id (what placement hashes) and the URL peers reach it at."""

    id: str
    url: str


def identity(settings: Settings) -> Member:
    """This node as the fleet sees it: `cluster.node_id` and `cluster.advertise_url`, or
    what they default to (`http(s)://<server.host>:<server.port>`, https when the node
    serves TLS, and its host:port)."""
    url = settings.cluster.advertise_url.rstrip("/")
    if not url:
        host = settings.server.host
        if host in ("", "0.0.0.0", "::"):  # listening everywhere: peers need a name
            host = socket.gethostname()
        scheme = "https" if settings.server.tls_cert_file else "http"
        url = f"{scheme}://{host}:{settings.server.port}"
    return Member(settings.cluster.node_id or urlsplit(url).netloc, url)


class Membership:
    """This node's registration in Redis and its view of the live members. Event loop only.

    Every `heartbeat_interval` the node renews its entry (a sorted set of last-seen
    times, on Redis's clock) and reads the live members back in the same script, which
    also prunes those not heard of for `member_ttl`: a clean departure is seen within a
    heartbeat, a crash within `member_ttl` plus a heartbeat. Redis down: the last view
    is kept (its peers may be gone; asking them then fails over to the origin), and the
    first heartbeat after Redis is back registers the node again. The view always
    contains this node.
    """

    def __init__(self, redis: RedisHandle, me: Member, *, interval: float, ttl: float) -> None:
        self.me = me
        self.interval = interval
        self.ttl = ttl
        self.beats = 0  # heartbeats Redis took
        self._redis = redis
        self._beat = redis.client.register_script(_BEAT)
        self._keys = [redis.key("fleet:{members}"), redis.key("fleet:{members}:urls")]
        self._members: tuple[Member, ...] = (me,)
        self._ids: tuple[str, ...] = (me.id,)
        self._urls: dict[str, Member] = {me.id: me}

    @property
    def members(self) -> tuple[Member, ...]:
        """The live members as last seen, sorted by id."""
        return self._members

    @property
    def ids(self) -> tuple[str, ...]:
        return self._ids

    def member(self, member_id: str) -> Member | None:
        return self._urls.get(member_id)

    async def heartbeat(self, *, register: bool = True) -> bool:
        """Renew this node's entry (unless not `register`) and refresh the view; False when
        Redis did not answer (the view is kept)."""
        args: list[str | int] = [self.me.id if register else "", self.me.url, max(1, int(self.ttl * 1000))]
        found = await self._redis.call("membership", lambda: self._beat(keys=self._keys, args=args))
        if found is None:
            return False
        if register:
            self.beats += 1
        pairs = [(bytes(found[i]).decode(), bytes(found[i + 1]).decode()) for i in range(0, len(found) - 1, 2)]
        self._update({Member(member_id, url) for member_id, url in pairs if member_id != self.me.id})
        return True

    def _update(self, others: set[Member]) -> None:
        members = tuple(sorted(others | {self.me}))
        if members == self._members:
            return
        before = set(self._members)
        joined = [m.id for m in members if m not in before]
        left = [m.id for m in self._members if m not in set(members)]
        log.cluster.info("fleet members: %d (joined: %s; left: %s)", len(members),
                         ", ".join(joined) or "-", ", ".join(left) or "-")
        self._members = members
        self._ids = tuple(m.id for m in members)
        self._urls = {m.id: m for m in members}

    async def run(self) -> None:
        """Heartbeat every `interval` seconds until cancelled."""
        async def beat() -> None:
            await self.heartbeat()

        await run_every(self.interval, beat, "fleet heartbeat")

    async def leave(self) -> None:
        """Deregister (clean shutdown), so the others stop asking this node at their next heartbeat."""
        member, client = self.me.id, self._redis.client

        async def remove() -> bool:
            async with client.pipeline(transaction=True) as pipe:
                pipe.zrem(self._keys[0], member)
                pipe.hdel(self._keys[1], member)
                await pipe.execute()
            return True

        await self._redis.call("membership", remove)
