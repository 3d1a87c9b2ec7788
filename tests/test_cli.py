"""The `gateway` command: config check, clear errors, and the demo a new user runs first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gateway.demo import DEMO_ACCESS_KEY, DEMO_SECRET_KEY, free_port

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
    for command in ([], ["serve"], ["demo"], ["config", "check"]):
        result = run(*command, "--help")
        assert result.returncode == 0 and "Usage" in result.stdout


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
