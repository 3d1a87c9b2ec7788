"""Readiness: whether the origin answers and, when configured, Redis (`GET readyz`, and the
checks `gateway serve` makes before it listens)."""

from __future__ import annotations

import asyncio

from gateway.cluster.connection import redis_client
from gateway.config import Settings, redacted_url
from gateway.engine import Engine
from gateway.errors import S3Error
from gateway.origin import Origin

ORIGIN_TIMEOUT = 2.0  # seconds; a probe must answer well within a load balancer's own timeout


async def readiness(engine: Engine) -> dict[str, str]:
    """{"origin": "ok" | why not, "redis": ... (only with Redis)}; ready when all are "ok"."""
    checks = [_origin(engine)]
    if engine.shared is not None:
        checks.append(_redis(engine))
    results = await asyncio.gather(*checks)
    return dict(zip(("origin", "redis"), results))


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
        client = redis_client(settings.redis)
        try:
            async with asyncio.timeout(settings.redis.socket_timeout):
                await client.ping()
        except Exception as exc:  # refused, unresolvable, timed out, auth: all mean "not usable"
            problems.append(f"Redis at {redacted_url(settings.redis.url)} does not answer: "
                            f"{exc or exc.__class__.__name__}")
        finally:
            await client.aclose()
    return problems
