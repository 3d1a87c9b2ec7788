"""Real servers for the tests: moto's S3 server as the origin and the gateway on uvicorn."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import httpx
import pytest
from hypothesis import settings as hypothesis_settings

from gateway.demo import moto_server
from tests.support import RunningGateway, base_settings, client

pytest_plugins = ["tests.redis_fixtures"]

# The machine is shared: a slow example is not a failure (speed lives in bench/).
hypothesis_settings.register_profile("gateway", deadline=None)
hypothesis_settings.load_profile("gateway")


@pytest.fixture(scope="session")
def origin_endpoint() -> Iterator[str]:
    """moto's S3 server, started once for the session."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def clean_origin(origin_endpoint: str, gateway: RunningGateway) -> str:
    """The origin, emptied before the test; the session gateway forgets what it cached of it."""
    httpx.post(origin_endpoint + "/moto-api/reset", timeout=10).raise_for_status()
    gateway.purge_caches()
    return origin_endpoint


@pytest.fixture(scope="session")
def gateway(origin_endpoint: str) -> Iterator[RunningGateway]:
    with RunningGateway(base_settings(origin_endpoint)) as running:
        yield running


@pytest.fixture
def start_gateway(origin_endpoint: str) -> Iterator[Callable[..., RunningGateway]]:
    """Start a gateway with changed settings: start_gateway(server=..., auth=...)."""
    started: list[RunningGateway] = []

    def start(**sections: object) -> RunningGateway:
        settings = dataclasses.replace(base_settings(origin_endpoint), **sections)  # type: ignore[arg-type]
        running = RunningGateway(settings).__enter__()
        started.append(running)
        return running

    yield start
    for running in started:
        running.__exit__()


@pytest.fixture
def s3(gateway: RunningGateway, clean_origin: str):  # type: ignore[no-untyped-def]
    """boto3 through the gateway, as the admin user, on an empty origin and an empty cache."""
    return client(gateway.endpoint)


@pytest.fixture
def direct(clean_origin: str):  # type: ignore[no-untyped-def]
    """boto3 straight to the origin (moto), for comparisons."""
    return client(clean_origin, ("origin-key", "origin-secret"))
