"""docs/fleet.md run as written: Redis with a password, moto as the origin, three `gateway serve`
nodes of two workers each, nginx in front of them, reads through every node, and stopping it all.

The files marked `<!-- fleet-file: PATH -->` are written where they say (in the walk-through's
folder, under a HOME of the test's own), and the blocks marked `<!-- fleet: NAME -->` run in order
in one bash session, as a user pastes them; only the port numbers change, to free ones. The
Trino catalog is compared with the one tests/engines runs Trino with (no Trino runs here), and the
persistent Redis configuration is started on its own to show that it keeps what it was given.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.support import hive_catalog
from tests.servers import free_port, port_for_later
from tests.support import client_env, need_binary
from tests.waiting import wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "fleet.md"
PORTS = (6379, 9000, 8080, 8081, 8082, 8083)
STEPS = ["secrets", "redis", "origin", "nodes", "members", "balancer", "read", "stop"]
BLOCK_TIMEOUT = 150  # seconds for one block (the nodes' start is the longest: six workers on a shared machine)
USER = ("AKIAFLEETANALYST0001", "fleet-analyst-secret-change-me")


def blocks(kind: str) -> dict[str, str]:
    """NAME -> text of every `<!-- KIND: NAME -->` block of the doc, in order."""
    found = re.findall(rf"<!-- {kind}: ([\w./-]+) -->\n```\w+\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    assert len({name for name, _ in found}) == len(found), "a marker is used twice"
    return dict(found)


class Shell:
    """One bash session fed the doc's blocks one at a time, as a user pastes them."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, script: str) -> str:
        """The block's output; fails, with it, when the block fails or does not finish in time."""
        assert self.proc.stdin is not None
        marker = f"--end of block {uuid.uuid4().hex}--"
        self.proc.stdin.write(f"{script}\necho \"{marker} $?\"\n")
        self.proc.stdin.flush()
        output: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=BLOCK_TIMEOUT)
            except queue.Empty:
                raise AssertionError(f"not done in {BLOCK_TIMEOUT}s:\n{script}\n--- output:\n{''.join(output)}") from None
            if line is None:
                raise AssertionError(f"the shell ended:\n{script}\n--- output:\n{''.join(output)}")
            if line.startswith(marker):
                status = int(line.split()[-1])
                assert status == 0, f"exit {status}:\n{script}\n--- output:\n{''.join(output)}"
                return "".join(output)
            output.append(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _renumber(text: str, ports: dict[int, int]) -> str:
    return re.sub(r"\b(" + "|".join(map(str, PORTS)) + r")\b", lambda m: str(ports[int(m.group(1))]), text)


def _stop_leftovers(folder: Path) -> None:
    """What a failed run left running: every process named in a pid file of the walk-through."""
    nginx = folder / "balancer" / "nginx.pid"
    for pidfile in [*folder.glob("*.pid"), folder / "redis" / "redis.pid", nginx]:
        try:
            pid = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        try:
            os.kill(pid, signal.SIGKILL if pidfile == nginx else signal.SIGTERM)
        except ProcessLookupError:
            pass


def _logs(folder: Path) -> str:
    """The nodes' logs, for a failure's message (a read through a node that went to the origin)."""
    return "".join(f"\n--- node{n}.log\n" + (folder / f"node{n}.log").read_text(errors="replace")[-4000:]
                   for n in (1, 2, 3) if (folder / f"node{n}.log").exists())


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[tuple[Shell, Path, dict[int, int]]]:
    for program in ("redis-server", "redis-cli", "nginx", "curl", "openssl"):
        need_binary(program, f"apt-get install {'redis-server' if program.startswith('redis') else program}")
    ports = {port: port_for_later() for port in PORTS}  # written into the walk-through's files before anything starts
    folder = tmp_path / "gateway-fleet"
    for name, text in blocks("fleet-file").items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(_renumber(text, ports) + "\n")
    env = {k: v for k, v in client_env().items() if not k.startswith("GATEWAY_")}
    env.update(HOME=str(tmp_path), PATH=f"{os.path.dirname(sys.executable)}:{env['PATH']}:/usr/sbin:/sbin")
    shell = Shell(tmp_path, env)
    try:
        yield shell, folder, ports
    finally:
        shell.close()
        _stop_leftovers(folder)


@pytest.mark.timeout(900)
def test_the_walk_through_runs_as_written(walk: tuple[Shell, Path, dict[int, int]]) -> None:
    shell, folder, ports = walk
    steps = blocks("fleet")
    assert list(steps) == STEPS
    out = {}
    for name in STEPS:
        try:
            out[name] = shell.run(_renumber(steps[name], ports))
        except AssertionError as exc:  # (with what the nodes said: a node that never got ready, say)
            raise AssertionError(f"{exc}{_logs(folder)}") from None
        if name == "members":  # every node sees all within a heartbeat of the last one's start, as the doc says
            for _ in range(10):
                if out[name].count("members   node1, node2, node3") == 3:
                    break
                out[name] = shell.run("sleep 1\n" + _renumber(steps[name], ports))
            assert out[name].count("members   node1, node2, node3") == 3, out[name]
            assert out[name].count("workers   2 of 2 answered") == 3, out[name]
        if name == "read":
            for port in (8081, 8082, 8083):
                assert f"same bytes through {ports[port]}" in out[name], out[name]
            served = re.findall(r"^served +(.*)$", out[name], re.MULTILINE)  # nodes 8081, 8082, 8083
            assert len(served) == 3 and "origin 0 B" not in served[0], out[name]
            assert all("origin 0 B" in line and "peer 0 B" not in line for line in served[1:]), \
                out[name] + _logs(folder)
    secrets = (folder / "secrets.env").read_text()
    assert (folder / "secrets.env").stat().st_mode & 0o077 == 0 and "GATEWAY_CLUSTER_SECRET=" in secrets
    for n in (1, 2, 3):  # each node made its own cache folder
        assert (folder / f"node{n}" / "cache").is_dir(), n
    assert "requirepass" not in (folder / "redis" / "redis.conf").read_text()


def test_the_trino_catalog_is_the_tested_one() -> None:
    catalog = blocks("fleet-file")["trino/etc/catalog/warehouse.properties"]
    properties = dict(line.split("=", 1) for line in catalog.splitlines() if line and not line.startswith("#"))
    expected = hive_catalog("http://127.0.0.1:8080", USER)
    expected.pop("s3.streaming.part-size")  # the tests' minimum, to make multipart uploads; the default here
    assert properties == expected


def test_every_node_file_differs_only_in_its_own_lines() -> None:
    files = {name: text for name, text in blocks("fleet-file").items() if re.fullmatch(r"node\d\.toml", name)}
    assert sorted(files) == ["node1.toml", "node2.toml", "node3.toml"]
    def common(text: str) -> list[str]:  # the lines marked "per node", and the title, left out
        return [line for line in text.splitlines() if "per node" not in line and "of 3" not in line]
    assert common(files["node1.toml"]) == common(files["node2.toml"]) == common(files["node3.toml"])


def test_redis_kept_on_disk_keeps_what_it_was_given(tmp_path: Path) -> None:
    """The persistent configuration, started as the doc starts the other: a key written before a
    restart is there after it."""
    server, cli = need_binary("redis-server", "apt-get install redis-server"), shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed: apt-get install redis-tools")
    port = free_port()  # written into the configuration file redis-server reads (it cannot say a port it chose)
    (tmp_path / "redis").mkdir()
    conf = _renumber(blocks("fleet-file")["redis/redis-persistent.conf"], {6379: port, **{p: p for p in PORTS[1:]}})
    (tmp_path / "redis" / "redis-persistent.conf").write_text(conf + "\n")
    (tmp_path / "redis" / "password.conf").write_text("requirepass kept-secret\n")
    env = dict(os.environ, REDISCLI_AUTH="kept-secret")

    def redis(*args: str) -> str:
        return subprocess.run([cli, "-p", str(port), *args], capture_output=True, text=True, env=env,
                              timeout=10).stdout.strip()

    for attempt in ("write", "read"):
        proc = subprocess.Popen([server, "redis/redis-persistent.conf"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            def answers() -> bool:
                assert proc.poll() is None, "redis-server did not start"  # noqa: B023 (answers() runs at once, in this round)
                return redis("ping") == "PONG"
            wait_for(answers, "redis-server answers", within=20)
            if attempt == "write":
                assert redis("set", "pinned", "yes") == "OK"
            else:
                assert redis("get", "pinned") == "yes"
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    assert (tmp_path / "redis" / "appendonlydir").is_dir()
