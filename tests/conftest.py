"""Real servers for the tests: moto's S3 server as the origin and the gateway on uvicorn."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Iterator

import httpx
import pytest
from hypothesis import settings as hypothesis_settings

from tests.servers import CountingProxy, moto_server
from tests.support import RunningGateway, base_settings, client

pytest_plugins = ["tests.redis_fixtures"]

# The machine is shared: a slow example is not a failure (speed lives in bench/).
hypothesis_settings.register_profile("gateway", deadline=None)
hypothesis_settings.load_profile("gateway")


# Programs some tests drive, beyond what `pip install -e '.[test]'` brings; what is missing is
# named in one line at the start of the run (their tests skip). scripts/install-test-tools.sh (run by
# `make test` and .ci/run) installs them all.
_PROGRAMS = {
    "redis-server": "redis-server", "rclone": "rclone", "s3cmd": "s3cmd", "chromium": "chromium",
    "chromedriver": "chromium-driver", "node": "nodejs npm", "go": "golang", "mvn": "maven",
}


def pytest_report_header(config: pytest.Config) -> str:
    missing = [name for name in _PROGRAMS if shutil.which(name) is None and not os.path.exists(f"/usr/bin/{name}")]
    if not missing:
        return "every program the tests drive is installed"
    packages = " ".join(dict.fromkeys(_PROGRAMS[name] for name in missing))
    return (f"missing: {', '.join(missing)} (their tests skip or fail); "
            f"apt-get install {packages}, or run bash scripts/install-test-tools.sh as root, which installs them")


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


@pytest.fixture(scope="module")
def counted(origin_endpoint: str) -> Iterator[CountingProxy]:
    """The origin behind a proxy that counts its requests by kind (a module's own, for its gateways' origin)."""
    proxy = CountingProxy(origin_endpoint)
    yield proxy
    proxy.close()
