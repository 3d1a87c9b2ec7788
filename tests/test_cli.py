"""The `gateway` command: config check, clear errors, and the demo a new user runs first."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from gateway.cli import main
from gateway.demo import DEMO_ACCESS_KEY, DEMO_SECRET_KEY
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


def test_demo_serves_the_sample_bucket():
    port = free_port()
    proc = subprocess.Popen([*GATEWAY, "demo", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "demo did not start"
                time.sleep(0.2)
        aws = Path(sys.executable).with_name("aws")
        env = dict(os.environ, AWS_ACCESS_KEY_ID=DEMO_ACCESS_KEY, AWS_SECRET_ACCESS_KEY=DEMO_SECRET_KEY,
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
        listing = subprocess.run([str(aws) if aws.exists() else "aws", "s3", "ls", "--recursive", "s3://demo",
                                  "--endpoint-url", f"http://127.0.0.1:{port}"],
                                 capture_output=True, text=True, env=env, timeout=60)
        assert listing.returncode == 0, listing.stderr
        assert "hello.txt" in listing.stdout and "blobs/1MiB.bin" in listing.stdout
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    assert "aws s3 ls" in output  # the line to try was printed
    # Stopping the demo stops its moto too.
    moto_port = int(re.search(r"origin \(moto\): http://127.0.0.1:(\d+)", output).group(1))  # type: ignore[union-attr]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{moto_port}/", timeout=2)


def test_serve_refuses_to_start_without_its_origin_or_redis():
    closed = free_port()  # nothing listens there
    env = {"GATEWAY_ORIGIN_ENDPOINT": f"http://127.0.0.1:{closed}", "GATEWAY_ORIGIN_CONNECT_TIMEOUT": "1",
           "GATEWAY_ORIGIN_RETRIES": "0", "GATEWAY_SERVER_PORT": str(free_port())}
    result = run("serve", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"the origin http://127.0.0.1:{closed} is unreachable" in result.stderr
    assert "--skip-checks" in result.stderr


def test_serve_names_a_redis_that_does_not_answer(origin_endpoint):
    closed = free_port()
    env = {"GATEWAY_ORIGIN_ENDPOINT": origin_endpoint, "GATEWAY_SERVER_PORT": str(free_port()),
           "GATEWAY_REDIS_URL": f"redis://user:hunter2@127.0.0.1:{closed}/0", "GATEWAY_REDIS_SOCKET_TIMEOUT": "1"}
    result = run("serve", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"Redis at redis://user:***@127.0.0.1:{closed}/0 does not answer" in result.stderr
    assert "hunter2" not in result.stderr and "origin" not in result.stderr.split("Redis")[0]
