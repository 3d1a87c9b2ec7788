"""The `gateway` command: config check and clear errors (the demo a new user runs first: tests/test_demo.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import click
from click.testing import CliRunner

from gateway.admin.ready import REDIS_START_TIMEOUT
from gateway.cli import main
from tests.servers import free_port

GATEWAY = [sys.executable, "-m", "gateway.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY, *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


def test_config_check_prints_settings_without_secrets():
    result = run("config", "check", "--config", "deploy/gateway.example.toml")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["origin"]["secret_key"] == "***"
    assert "secret-change-me" not in result.stdout and "origin-secret-example" not in result.stdout
    assert "change-me-admin-token" not in result.stdout and shown["admin"]["token"] == "***"


def test_bad_config_is_one_clear_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[server]\nport = "eighty"\n')
    result = run("config", "check", "--config", str(bad))
    assert result.returncode != 0
    assert "server.port" in result.stderr and "Traceback" not in result.stderr


def test_help_on_every_command():
    def paths(group: click.Group, prefix: list[str]) -> list[list[str]]:
        found = [prefix]
        for name, command in group.commands.items():
            found += paths(command, [*prefix, name]) if isinstance(command, click.Group) else [[*prefix, name]]
        return found

    commands = paths(main, [])
    assert {"serve", "demo", "load", "stats", "evict", "pin", "unpin"} <= {c[0] for c in commands if c}
    for command in commands:
        result = CliRunner().invoke(main, [*command, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output, command


def test_serve_refuses_to_start_without_its_origin_or_redis():
    closed = free_port()  # nothing listens there
    env = {"GATEWAY_ORIGIN_ENDPOINT": f"http://127.0.0.1:{closed}", "GATEWAY_ORIGIN_CONNECT_TIMEOUT": "1",
           "GATEWAY_ORIGIN_RETRIES": "0", "GATEWAY_SERVER_PORT": "0"}
    result = run("serve", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"the origin http://127.0.0.1:{closed} is unreachable" in result.stderr
    assert "--skip-checks" in result.stderr


def test_serve_names_a_redis_that_does_not_answer(origin_endpoint):
    closed = free_port()  # nothing listens there
    env = {"GATEWAY_ORIGIN_ENDPOINT": origin_endpoint, "GATEWAY_SERVER_PORT": "0",
           "GATEWAY_REDIS_URL": f"redis://user:hunter2@127.0.0.1:{closed}/0", "GATEWAY_REDIS_SOCKET_TIMEOUT": "1"}
    result = run("serve", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"Redis at redis://user:***@127.0.0.1:{closed}/0 does not answer" in result.stderr
    assert "hunter2" not in result.stderr and "origin" not in result.stderr.split("Redis")[0]


def test_serve_waits_for_a_slow_redis_at_start_and_says_how_long(origin_endpoint):
    """The start check is one PING, given REDIS_START_TIMEOUT (not redis.socket_timeout, a data-path
    budget): a Redis that takes its time on a busy machine is waited for; one that never answers is
    named with how long it was given (no bare exception name or empty reason)."""
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        env = {"GATEWAY_ORIGIN_ENDPOINT": origin_endpoint, "GATEWAY_SERVER_PORT": "0",
               "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{port}/0", "GATEWAY_REDIS_SOCKET_TIMEOUT": "0.1"}
        started = time.monotonic()
        result = run("serve", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"does not answer: no answer within {REDIS_START_TIMEOUT:g} s" in result.stderr, result.stderr
    assert time.monotonic() - started >= REDIS_START_TIMEOUT  # not the 0.1 s of the data path
