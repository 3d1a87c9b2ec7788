"""Shared test helpers: the test users, a gateway running in a thread, boto3 clients."""

from __future__ import annotations

import dataclasses
import threading
import time

import boto3
import uvicorn
from botocore.config import Config

from gateway.app import create_app
from gateway.config import AuthSettings, Grant, OriginSettings, ServerSettings, Settings, User
from gateway.demo import free_port

ADMIN = ("AKIAADMIN0000000001", "admin-secret-0000000000000000000000000001")
READER = ("AKIAREADER000000001", "reader-secret-000000000000000000000000001")
TEAM = ("AKIATEAM00000000001", "team-secret-00000000000000000000000000001")
REGION = "us-east-1"



def base_settings(origin_endpoint: str) -> Settings:
    return Settings(
        origin=OriginSettings(endpoint=origin_endpoint, access_key="origin-key", secret_key="origin-secret",
                              read_timeout=10, connect_timeout=2, retries=1),
        server=ServerSettings(host="127.0.0.1", port=0, domain="s3.gateway.test"),
        auth=AuthSettings(
            users=(
                User(*ADMIN, grants=(), admin=True),
                User(*READER, grants=(Grant("shared", "", "read"),)),
                User(*TEAM, grants=(Grant("shared", "team/", "readwrite"),)),
            ),
            anonymous_read=("public",),
        ),
    )


class RunningGateway:
    """A gateway served by uvicorn in a thread of this process."""

    def __init__(self, settings: Settings) -> None:
        port = free_port()
        self.settings = dataclasses.replace(settings, server=dataclasses.replace(settings.server, port=port))
        self.endpoint = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(create_app(self.settings), host="127.0.0.1", port=port, loop="asyncio",
                                http="httptools", lifespan="on", access_log=False, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> RunningGateway:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("gateway did not start")
            time.sleep(0.02)
        return self

    def purge_caches(self) -> None:
        """Forget what the gateway cached: the origin under it was reset between tests."""
        app = self.server.config.app
        if app.s3 is not None:
            app.s3.engine.purge()

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def client(endpoint: str, key: tuple[str, str] = ADMIN, **config: object):  # type: ignore[no-untyped-def]
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key[0], aws_secret_access_key=key[1],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, **config),  # type: ignore[arg-type]
    )


