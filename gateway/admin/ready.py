"""Readiness: whether the origin answers, when configured Redis, and in a node of several
workers whether every worker came up (`GET readyz`, and the checks `gateway serve` makes
before it listens)."""

from __future__ import annotations

import asyncio
import dataclasses

from redis.exceptions import TimeoutError as RedisTimeout

from gateway.cluster.connection import redis_client
from gateway.config import Settings, redacted_url
from gateway.engine import Engine
from gateway.errors import S3Error
from gateway.node.workers import WorkerSet
from gateway.origin import Origin

ORIGIN_TIMEOUT = 2.0  # seconds; a probe must answer well within a load balancer's own timeout
# Seconds `gateway serve` gives Redis to answer its first PING, connection and AUTH included: a
# question asked once, at start, on a machine that may be busy starting much else (several nodes,
# their workers), not a call of the data path (redis.socket_timeout), which may be far shorter.
REDIS_START_TIMEOUT = 5.0
SIBLINGS_TIMEOUT = 60.0  # seconds a starting worker waits for its siblings (server.worker_start_timeout's default)
SIBLINGS_POLL = 0.05  # seconds between looks while it waits


async def readiness(engine: Engine, workers: WorkerSet | None = None) -> dict[str, str]:
    """{"origin": "ok" | why not, "redis": ... (only with Redis), "workers": ... (only in a
    node of several workers)}; ready when all are "ok".

    A node of several workers is ready once every one of its workers served: the supervisor
    says so when the last one reported that it serves (WorkerSet.node_served). Before that,
    the first workers up would take the whole node's traffic while every read of a block
    owned by a worker still starting goes to the origin, and the node's stats miss it.

    A worker restarted after that (killed, crashed) leaves the node ready. The kernel hands
    new connections only to the workers that accept, so the node serves through the others
    meanwhile (the restarting worker's blocks are read from the origin: slower, not wrong),
    and the supervisor starts it again (at once, or after a pause of up to 30 s while it keeps
    dying). A Kubernetes readiness probe asks whether the pod can take traffic, and it can:
    failing it would move all of the node's clients to the other nodes at every restart, and
    keep a node with one worker in a crash loop out of the Service although its other workers
    serve (the supervisor logs each of that worker's failures as an error). A node whose
    workers never all came up is not ready: that is a start that failed."""
    checks = [_origin(engine)]
    if engine.shared is not None:
        checks.append(_redis(engine))
    results = dict(zip(("origin", "redis"), await asyncio.gather(*checks)))
    if workers is not None and not workers.alone:
        results["workers"] = "ok" if workers.node_served() else \
            f"the node's {workers.count} workers are starting: not every one serves yet"
    return results


async def siblings_up(workers: WorkerSet, *, timeout: float = SIBLINGS_TIMEOUT) -> bool:
    """Wait until every worker of the node served once (at once after the node's start: a
    worker restarted later finds its siblings serving); False after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not workers.node_served():  # a stat on tmpfs, some µs: the loop goes on meanwhile
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(SIBLINGS_POLL)
    return True


async def _origin(engine: Engine) -> str:
    """A ListBuckets with the gateway's credentials: any answer below 500 (a 403 too) means
    the origin is there."""
    try:
        async with asyncio.timeout(ORIGIN_TIMEOUT):
            status = await engine.origin.probe()
    except TimeoutError:
        return f"no answer within {ORIGIN_TIMEOUT:g} s"
    except S3Error as error:
        return error.message
    if status >= 500:
        return f"answered HTTP {status}"
    return "ok"


async def _redis(engine: Engine) -> str:
    assert engine.shared is not None
    return "ok" if await engine.shared.redis.ping() else "no answer to PING"


async def startup_problems(settings: Settings) -> list[str]:
    """What `gateway serve` checks before it listens: the origin answers (anything below
    500), and Redis answers PING when configured. One line for each thing that does not."""
    problems = []
    origin = Origin(settings.origin)
    try:
        async with asyncio.timeout(settings.origin.connect_timeout + ORIGIN_TIMEOUT):
            status = await origin.probe()
        if status >= 500:
            problems.append(f"the origin {settings.origin.endpoint} answered HTTP {status}")
    except TimeoutError:
        problems.append(f"the origin {settings.origin.endpoint} did not answer in time")
    except S3Error as error:
        problems.append(f"the origin {settings.origin.endpoint} is unreachable: {error.message}")
    finally:
        await origin.aclose()
    if settings.redis.url:
        problem = await _redis_at_start(settings)
        if problem:
            problems.append(f"Redis at {redacted_url(settings.redis.url)} does not answer: {problem}")
    return problems


async def _redis_at_start(settings: Settings) -> str:
    """Why Redis cannot be used, or "" when it answers PING within REDIS_START_TIMEOUT (or the
    configured redis.socket_timeout, if longer)."""
    timeout = max(settings.redis.socket_timeout, REDIS_START_TIMEOUT)
    client = redis_client(dataclasses.replace(settings.redis, socket_timeout=timeout))
    try:
        async with asyncio.timeout(timeout):
            await client.ping()
    except (TimeoutError, RedisTimeout):  # asyncio's, or the client's own socket timeout
        return f"no answer within {timeout:g} s"
    except Exception as exc:  # refused, unresolvable, auth: all mean "not usable"
        return str(exc) or exc.__class__.__name__
    finally:
        await client.aclose()
    return ""
