"""Readiness: whether the origin answers and, when configured, Redis (`GET readyz`)."""

from __future__ import annotations

import asyncio

from gateway.engine import Engine
from gateway.errors import S3Error

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
            response = await engine.origin.send("GET")
            await response.aclose()
    except TimeoutError:
        return f"no answer within {ORIGIN_TIMEOUT:g} s"
    except S3Error as error:
        return error.message
    if response.status >= 500:
        return f"answered HTTP {response.status}"
    return "ok"


async def _redis(engine: Engine) -> str:
    assert engine.shared is not None
    return "ok" if await engine.shared.ping() else "no answer to PING"
