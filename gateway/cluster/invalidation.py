"""The cluster's invalidation channel: writes drop shared entries and tell every node, which confirm.

Read-after-write across nodes (`invalidate`, `listening`): a write is acknowledged once every
node subscribed to the invalidation channel when it was published confirmed it applied it (an
ack on the writer's own channel), or after `redis.invalidation_timeout`. A node trusts what it
cached only while the channel answered a PING it sent less than that long ago: Redis delivers
a subscriber's messages and PING replies in order on its one connection, so a node whose last
PONG answers a PING sent at t has applied every invalidation published before t. A node that
did not confirm within the deadline (held back, hung, cut off) has therefore stopped trusting
its caches by the time the write is acknowledged; a node killed meanwhile costs the writer the
deadline at most.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import orjson
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway import log
from gateway.cluster.level2 import Level2
from gateway.cluster.redis_handle import RedisHandle, as_text
from gateway.periodic import stop_if_cancelled
from gateway.retry import FOREVER, ExponentialBackoff, Retry

__all__ = ["Confirmation", "Invalidations", "OnInvalidate"]

OnInvalidate = Callable[[str, "str | None"], None]

_MAX_PENDING = 10_000  # invalidations waiting for Redis; beyond it, whole buckets
_PINGS_PER_DEADLINE = 4  # PINGs through the channel per redis.invalidation_timeout
_RETRY_UNSENT = 0.05  # seconds between two tries of an invalidation Redis did not take
_BACK_HOME_AFTER = 4  # on a cluster: retry_intervals on another node before trying the channel's master again


class Confirmation:
    """The nodes' confirmations that they applied one invalidation. Event loop only.

    `expected` is how many subscribers the message reached (None: it was not sent, Redis
    being unreachable); `wait()` returns once that many confirmed, or at `until` (monotonic
    time), whichever comes first, True when every node confirmed.
    """

    __slots__ = ("expected", "confirmed", "until", "_event", "_done")

    def __init__(self, done: Callable[[bool], None] = lambda complete: None) -> None:
        self.expected: int | None = None
        self.confirmed = 0
        self.until = 0.0
        self._event = asyncio.Event()
        self._done = done

    def expect(self, expected: int | None, until: float) -> None:
        self.expected, self.until = expected, until
        self._check()

    def add(self) -> None:
        self.confirmed += 1
        self._check()

    def _check(self) -> None:
        if self.expected is not None and self.confirmed >= self.expected:
            self._event.set()

    @property
    def complete(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> bool:
        try:
            left = self.until - time.monotonic()
            if not self._event.is_set() and left > 0:
                with suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._event.wait()
            return self._event.is_set()
        finally:
            self._done(self._event.is_set())


class _BackHome(Exception):
    """On a cluster: listening on another node than the channel's master for long enough."""


class Invalidations:
    """This node's side of the invalidation channel: sending (`invalidate`), hearing and
    confirming (`listen`), and whether what it cached may be trusted (`listening`).

    Invalidations that could not be written are kept (bounded) and replayed by the
    listener once Redis is back, so a write acknowledged during an outage still reaches
    the other nodes. `confirmations` counts writes by how the other nodes confirmed them.

    Event loop only (plain dicts, no locks).
    """

    def __init__(self, redis: RedisHandle, level2: Level2, *, node_id: str | None = None) -> None:
        self.settings = redis.settings
        self.node_id = node_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.subscribed = asyncio.Event()  # set while the invalidation channel is listened to
        self.confirmations: Counter[str] = Counter()  # confirmed, unconfirmed, unsent
        # For tests and drills: the listener handles nothing until this time.monotonic().
        self.hold_listener_until = 0.0
        self._redis = redis
        self._level2 = level2
        self._channel = redis.key("invalidate")
        self._pubsub_turn = 0  # on a cluster: which node the invalidation channel is heard on
        self._pending: dict[tuple[str, str | None], int] = {}  # invalidation -> sequence number
        self._sequence = itertools.count()
        self._ack_channel = self._acks_of(self.node_id)
        self._ids = itertools.count()
        self._waiting: dict[str, Confirmation] = {}  # invalidation id -> its confirmations
        self._current_until = 0.0  # monotonic: cached answers may be trusted until then ...
        self._trusted_from = 0.0  # ... and from then (after a gap, once unsent writes went out)
        self._replayer: asyncio.Task[None] | None = None

    async def aclose(self) -> None:
        """Stop replaying (the handle, closed by its owner, is not closed here)."""
        if self._replayer is not None:
            self._replayer.cancel()
            await asyncio.gather(self._replayer, return_exceptions=True)

    async def invalidate(self, bucket: str, key: str | None) -> Confirmation:
        """Drop the shared metadata of `key` (of the whole bucket when None) and every
        listing page that can contain it, then tell the other nodes to do the same.

        The shared entries go before the message, so a node that refills its own cache
        on receiving it cannot find the old entry here. Without Redis the invalidation
        waits (bounded) and the listener replays it when Redis is back.

        Returns the nodes' confirmations: the write may be acknowledged once its `wait()`
        returned (see the module docstring). Unsent (Redis unreachable from here), it
        waits until `invalidation_timeout` after this node found Redis unreachable: by
        then no node still trusts its caches, unless Redis answers it but not this node.
        """
        ident = str(next(self._ids))
        confirmation = Confirmation(lambda complete: self._settled(ident, complete))
        self._waiting[ident] = confirmation
        deadline = self.settings.invalidation_timeout
        reached: int | None = None
        try:
            # Tried even while the circuit is open, as long as the channel is heard: a
            # skipped invalidation would leave the other nodes trusting what it changes.
            reached = await self._redis.call("invalidate", lambda: self._invalidate_now(bucket, key, ident),
                                             probe=self.listening())
            if reached is None:
                # Unsent. Every node stops trusting its caches within the deadline of Redis
                # hanging (their PINGs go unanswered; this node noticed it at `down_since`,
                # or a quarter deadline after at worst, when the failure before was another
                # one); if Redis answers again before then, the invalidation must go out.
                until = (self._redis.down_since or time.monotonic()) + deadline * (1 + 1 / _PINGS_PER_DEADLINE)
                while reached is None and time.monotonic() < until:
                    await asyncio.sleep(min(_RETRY_UNSENT, max(0.0, until - time.monotonic())))
                    reached = await self._redis.call("invalidate",
                                                     lambda: self._invalidate_now(bucket, key, ident), probe=True)
        except BaseException:  # cancelled: nobody will wait for it
            self._waiting.pop(ident, None)
            raise
        finally:  # also when cancelled: the write it follows may have happened
            if reached is not None:
                self._pending.pop((bucket, key), None)  # an older one waiting is done with it
                confirmation.expect(reached, time.monotonic() + deadline)
            else:
                self._pending[(bucket, key)] = next(self._sequence)
                self._bound_pending()
                self._replay_soon()
                self.confirmations["unsent"] += 1
                confirmation.expect(None, 0.0)
        return confirmation

    async def _invalidate_now(self, bucket: str, key: str | None, ident: str) -> int:
        """Returns how many subscribers the message reached."""
        message: dict[str, Any] = {"n": self.node_id, "b": bucket, "k": key, "i": ident}
        level2 = self._level2
        if key is None:
            message["g"] = await level2.new_generation(bucket)
            await level2.forget_pages(bucket, None)
            return await self._publish(self._channel, orjson.dumps(message))
        meta_key = await level2.meta_key(bucket, key)
        if self._redis.is_cluster:  # keys of two slots; the message goes to the channel's node
            await level2.forget_pages(bucket, key)
            await level2.forget_meta(meta_key)
            return await self._publish(self._channel, orjson.dumps(message))
        return await level2.forget_key_and_publish(bucket, key, meta_key, self._channel, orjson.dumps(message))

    async def _publish(self, channel: str, message: bytes | str) -> int:
        """On a cluster, to the master of the invalidation channel's slot, where the nodes
        listen unless it failed them: delivered from there at once, not after a hop over the
        cluster bus (which still brings it to those listening elsewhere). Returns how many
        subscribers it reached (on a cluster: on the node it was published on)."""
        client = self._redis.client
        if isinstance(client, RedisCluster):
            home = client.get_node_from_key(self._channel)
            if home is None:
                raise RedisConnectionError("no node holds the invalidation channel's slot")
            try:
                return int(await client.publish(channel, message, target_nodes=home))
            except (ConnectionError, RedisConnectionError):  # that node is down: any other one
                others = [node for node in client.get_nodes() if node.name != home.name]
                if not others:
                    raise
                await client.publish(channel, message, target_nodes=random.choice(others))
                return 0  # whoever hears it there: not on the master, so not trusting their caches
        return int(await client.publish(channel, message))

    def listening(self) -> bool:
        """Whether this node has applied every invalidation published more than
        `invalidation_timeout` ago: subscribed, and the channel answered a PING sent less
        than that long ago (on a cluster, through the channel's master, where writes
        publish). While not, cached metadata and listings, here or in Redis, must not be
        answered unasked.

        After a gap (a new subscription, or PINGs answered late), also not for
        `invalidation_timeout` + `socket_timeout`: writes acknowledged meanwhile whose
        invalidation could not be sent are sent again as soon as Redis answers, and the
        shared entries they drop must not be trusted before."""
        now = time.monotonic()
        return self.subscribed.is_set() and self._trusted_from <= now < self._current_until

    def _after_gap(self, on_resync: Callable[[], None] | None) -> None:
        self._trusted_from = time.monotonic() + self.settings.invalidation_timeout + self.settings.socket_timeout
        if on_resync is not None:
            try:
                on_resync()
            except Exception:
                log.cluster.exception("resync after a gap in %s failed", self._channel)

    def _settled(self, ident: str, complete: bool) -> None:
        confirmation = self._waiting.pop(ident, None)
        if confirmation is not None and confirmation.expected is not None:
            self.confirmations["confirmed" if complete else "unconfirmed"] += 1
            if not complete:
                log.cluster.info("invalidation %s: %d of %d nodes confirmed within %.1f s", ident,
                                 confirmation.confirmed, confirmation.expected, self.settings.invalidation_timeout)

    def _acks_of(self, node: str) -> str:
        return self._redis.key(f"ack:{node}")

    def _bound_pending(self) -> None:
        if len(self._pending) > _MAX_PENDING:  # a long outage under writes: whole buckets instead
            buckets = dict.fromkeys(bucket for bucket, _ in self._pending)
            self._pending = {(bucket, None): next(self._sequence) for bucket in buckets}

    async def _replay(self, *, probe: bool = False) -> None:
        for item, sequence in list(self._pending.items()):
            bucket, key = item
            ident = f"r{next(self._ids)}"  # nobody waits for it: its acks are dropped
            if await self._redis.call("invalidate", lambda: self._invalidate_now(bucket, key, ident),  # noqa: B023
                                      probe=probe) is None:
                return
            if self._pending.get(item) == sequence:  # not failed again meanwhile
                del self._pending[item]

    def _replay_soon(self) -> None:
        """Unsent invalidations go out as soon as Redis answers, within `_RETRY_UNSENT`: the
        other nodes distrust their caches for a while after a gap in the channel (see
        `listening`), and the replay must come within it."""
        if self._replayer is None or self._replayer.done():
            self._replayer = asyncio.get_running_loop().create_task(self._replay_until_sent(),
                                                                    name="gateway-invalidation-replay")

    async def _replay_until_sent(self) -> None:
        while self._pending:
            await asyncio.sleep(_RETRY_UNSENT)
            await self._replay(probe=True)
            stop_if_cancelled()

    async def listen(self, on_invalidate: OnInvalidate, on_resync: Callable[[], None] | None = None) -> None:
        """Call `on_invalidate(bucket, key)` for every invalidation published by another node,
        and confirm it to that node once applied.

        Runs until cancelled, resubscribing with backoff whenever the connection fails or
        stops answering the PINGs sent through it (`listening`). `on_resync` is called each
        time the subscription is (re)established: messages may have been missed before it,
        so the caller should drop what they could have invalidated. Pending invalidations of
        this node are replayed from here.

        A cancellation lost inside a Redis call (see `periodic.stop_if_cancelled`) is noticed
        at the next turn of the loops here, so the listener always stops once cancelled.
        """
        # Jittered exponential backoff, capped low: a reconnect attempt is cheap.
        interval = self.settings.retry_interval
        retry = Retry(ExponentialBackoff(interval, cap=4 * interval, jitter=0.5), FOREVER)
        while True:  # a subscription after another; failures in a row pause longer and longer
            await retry.call(lambda: self._subscription(on_invalidate, on_resync), failed=self._lost)

    async def _subscription(self, on_invalidate: OnInvalidate, on_resync: Callable[[], None] | None) -> None:
        """One subscription's life; returns when the listener should subscribe again at once,
        on the channel's master (a cluster's), raises when it fails."""
        stop_if_cancelled()
        pubsub: PubSub | None = None
        try:
            async with asyncio.timeout(self.settings.socket_timeout):
                pubsub, home = await self._pubsub()
                asked = time.monotonic()
                # The acks channel first: confirmed by the time writes can come from here.
                await pubsub.subscribe(self._ack_channel, self._channel)
            await self._hear(pubsub, home, asked, on_invalidate, on_resync)
        except _BackHome:
            self.subscribed.clear()
            self._pubsub_turn = 0
        finally:
            if pubsub is not None:
                with suppress(Exception):
                    async with asyncio.timeout(self.settings.socket_timeout):
                        await pubsub.aclose()

    async def _lost(self, failures: int, error: BaseException | None) -> None:
        """A subscription failed: counted; the next one, on fresh connections (a cluster's next node)."""
        assert isinstance(error, Exception)  # what the listener's Retry retries
        self.subscribed.clear()
        self._redis.failed("listen", error)
        self._pubsub_turn += 1
        await self._redis.drop_idle_connections()

    async def _hear(self, pubsub: PubSub, home: bool, asked: float, on_invalidate: OnInvalidate,
                    on_resync: Callable[[], None] | None) -> None:
        """One subscription's life: messages, acks, and PINGs through the channel every
        quarter of the deadline; raises when it fails or stops answering."""
        every = self.settings.invalidation_timeout / _PINGS_PER_DEADLINE
        sent: dict[int, float] = {}  # PINGs in flight: number -> time.monotonic() when sent
        numbers = itertools.count()
        connected = next_ping = time.monotonic()
        while True:
            stop_if_cancelled()
            held = self.hold_listener_until - time.monotonic()
            if held > 0:
                await asyncio.sleep(held)
                continue
            if self.subscribed.is_set() and self._pending and self._redis.usable():
                await self._replay()
            now = time.monotonic()
            if now >= next_ping:
                await self._ping(pubsub, sent, numbers, now)
                next_ping = now + every
            if not home and now - connected > _BACK_HOME_AFTER * self.settings.retry_interval:
                raise _BackHome
            message = await pubsub.get_message(timeout=max(0.0, next_ping - time.monotonic()))
            if message is None:
                continue
            held = self.hold_listener_until - time.monotonic()
            if held > 0:  # (the test hook holds back a message that came meanwhile too)
                await asyncio.sleep(held)
            await self._heard(message, sent, home, asked, on_invalidate, on_resync)

    async def _ping(self, pubsub: PubSub, sent: dict[int, float], numbers: Iterator[int], now: float) -> None:
        """A PING through the channel; raises when one sent before went unanswered too long."""
        give_up = self.settings.invalidation_timeout + self.settings.socket_timeout  # then reconnect
        if sent and now - min(sent.values()) > give_up:
            raise TimeoutError("Redis did not answer a PING on the invalidation channel")
        number = next(numbers)
        sent[number] = now
        async with asyncio.timeout(self.settings.socket_timeout):
            await pubsub.ping(str(number))

    async def _heard(self, message: dict[str, Any], sent: dict[int, float], home: bool, asked: float,
                     on_invalidate: OnInvalidate, on_resync: Callable[[], None] | None) -> None:
        """One message of the subscription: an invalidation, an ack, a PONG or its start."""
        deadline = self.settings.invalidation_timeout
        kind = message["type"]
        if kind == "message":
            if as_text(message["channel"]) == self._ack_channel:
                waiting = self._waiting.get(as_text(message["data"]))
                if waiting is not None:
                    waiting.add()
            else:
                await self._deliver(message["data"], on_invalidate)
        elif kind == "pong":
            try:
                number = int(as_text(message["data"]))
            except ValueError:
                return
            at = sent.pop(number, None)
            for older in [n for n in sent if n < number]:
                del sent[older]
            if at is not None:
                self._redis.recovered()
                if home:
                    if time.monotonic() >= self._current_until:  # lapsed meanwhile: a gap
                        self._after_gap(on_resync)
                    self._current_until = max(self._current_until, at + deadline)
        elif kind == "subscribe" and as_text(message["channel"]) == self._channel:
            self._subscribed(on_resync)
            self._trusted_from = time.monotonic() + deadline + self.settings.socket_timeout
            if home:
                self._current_until = asked + deadline

    async def _pubsub(self) -> tuple[PubSub, bool]:
        """A pub/sub connection, and whether it is to where invalidations are published. On a
        cluster, to the master of the channel's slot; after each failure to the next node: a
        classic PUBLISH reaches every node of a cluster, so any live node will do to hear
        them, but only on the master are they ordered with this node's PINGs (elsewhere the
        node hears them but does not trust its caches, and goes back to the master later)."""
        client = self._redis.client
        if isinstance(client, RedisCluster):
            await client.initialize()  # reads the slot map again if a node failed since
            home = client.get_node_from_key(self._channel)
            if home is None:
                raise RedisConnectionError("no node holds the invalidation channel's slot")
            nodes = [home, *(node for node in client.get_nodes() if node.name != home.name)]
            turn = self._pubsub_turn % len(nodes)
            return client.pubsub(node=nodes[turn]), turn == 0
        return client.pubsub(), True

    def _subscribed(self, on_resync: Callable[[], None] | None) -> None:
        self._level2.forget_generations()
        self.subscribed.set()
        self._redis.recovered()
        if on_resync is not None:
            try:
                on_resync()
            except Exception:
                log.cluster.exception("resync after subscribing to %s failed", self._channel)

    async def _deliver(self, data: bytes, on_invalidate: OnInvalidate) -> None:
        """Apply another node's invalidation, then confirm it to that node (this node's own
        confirm themselves: its engine invalidated before publishing)."""
        try:
            message = orjson.loads(data)
            node, bucket, key = message["n"], message["b"], message["k"]
            if not isinstance(bucket, str) or not (key is None or isinstance(key, str)):
                raise TypeError(bucket, key)
            generation, ident = message.get("g"), message.get("i")
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self._redis.errors["bad_message"] += 1
            return
        if node == self.node_id:
            waiting = self._waiting.get(ident) if isinstance(ident, str) else None
            if waiting is not None:
                waiting.add()
            return
        if isinstance(generation, int):
            self._level2.note_generation(bucket, generation)
        try:
            on_invalidate(bucket, key)
        except Exception:  # confirmed anyway: nothing better will come of not confirming
            log.cluster.exception("invalidating %s/%s on a message from %s failed", bucket, key, node)
        if isinstance(ident, str) and isinstance(node, str):
            await self._redis.call("ack", lambda: self._publish(self._acks_of(node), ident), probe=True)
