"""Real Redis for the tests, on free loopback ports, that tests may stop and restart: one
redis-server, a 3-master Redis Cluster, and a master with a replica watched by a Sentinel."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.servers import free_port, wait_serving
from tests.waiting import wait_for


class RedisServer:
    """`redis-server` as a subprocess; `stop()` and `start()` keep the same port.

    `args` are further options (they may be changed between a stop and a start); with
    `sentinel_config` it runs as a Sentinel on that (writable) file. Its working folder is
    its own, so a replica's copy of the data (dump.rdb) is never where others start.
    """

    def __init__(self, *args: str, sentinel_config: Path | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed: apt-get install redis-server (make test does, as root)")
        self.binary = binary
        # A port chosen before it starts: redis-server cannot bind port 0 and say which it got
        # (`--port 0` turns TCP off), and `start` after `stop` must come back on the same port.
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.args = args
        self.sentinel_config = sentinel_config
        self.folder = tempfile.mkdtemp(prefix="redis-test-")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.sentinel_config is not None:
            command = [self.binary, str(self.sentinel_config), "--sentinel"]
        else:
            command = [self.binary, "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*command, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.folder, *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        def ping() -> None:
            with redis.Redis(port=self.port, socket_timeout=0.5) as r:
                r.ping()
        try:
            wait_serving(ping, self.proc, f"redis-server on port {self.port}", timeout=10,
                         errors=(redis.RedisError,), interval=0.05)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def remove(self) -> None:
        """Stop for good, and remove the working folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def flush(self) -> None:
        with redis.Redis(port=self.port) as r:
            r.flushall()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture
def clean_redis(redis_server: RedisServer) -> RedisServer:
    """The session's Redis, running and empty (a test before may have stopped it)."""
    if redis_server.proc is None:
        redis_server.start()
    redis_server.flush()
    return redis_server


REDIS_WAIT = 20.0  # seconds a Redis topology may take to settle on a loaded machine


class RedisClusterServers:
    """A Redis Cluster of three masters (no replicas), created with `redis-cli --cluster create`.

    `url` is its `redis+cluster://` seed list. `stop(i)` kills one master; `start()` restarts
    whatever is stopped (the node rejoins from its nodes.conf) and waits for cluster_state:ok.
    """

    def __init__(self, folder: Path) -> None:
        self.nodes = [
            RedisServer("--cluster-enabled", "yes", "--cluster-config-file", str(folder / f"nodes-{i}.conf"),
                        # (the bus port, chosen beforehand for the same reason as the client port)
                        "--cluster-port", str(free_port()), "--cluster-node-timeout", "1000")
            for i in range(3)
        ]
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def proc(self) -> object | None:
        """None while a node is stopped (the single server's `proc`, for fixtures that check it)."""
        return None if any(n.proc is None for n in self.nodes) else self.nodes[0].proc

    def create(self) -> None:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            pytest.skip("redis-cli is not installed: apt-get install redis-tools")
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        self._wait_ok()

    def _wait_ok(self) -> None:
        def ok() -> bool:
            return all(n.client().cluster("info")["cluster_state"] == "ok" for n in self.nodes)
        wait_for(ok, "the Redis Cluster's state is ok", within=REDIS_WAIT, ignoring=(redis.RedisError,))

    def stop(self, index: int) -> None:
        self.nodes[index].stop()

    def start(self) -> None:
        for node in self.nodes:
            if node.proc is None:
                node.start()
        self._wait_ok()

    def flush(self) -> None:
        for node in self.nodes:
            node.client().flushall()

    def masters(self) -> list[redis.Redis]:
        """A client of each master, by itself (KEYS and DBSIZE see that master's keys only)."""
        return [n.client() for n in self.nodes]

    def client(self) -> redis.RedisCluster:
        """A client of the whole cluster (each command goes to its key's master)."""
        return redis.RedisCluster(startup_nodes=[redis.cluster.ClusterNode("127.0.0.1", n.port) for n in self.nodes],
                                  socket_timeout=2)

    def shutdown(self) -> None:
        for node in self.nodes:
            node.remove()


class RedisSentinelServers:
    """A master and its replica, watched by one Sentinel (quorum 1) that fails over within a
    second or two of the master going down.

    `url` is the `redis+sentinel://` URL; `fail_over()` kills the master, waits until the
    Sentinel promoted the replica, and brings the old master back as the new one's replica
    (`master.stop()` and `promoted()` do it in two steps).
    """

    name = "gw-master"
    quick_sync = ("--repl-diskless-sync-delay", "0")  # a replica syncs at once, not after 5 s

    def __init__(self, folder: Path) -> None:
        self.master = RedisServer(*self.quick_sync)
        self.replica = RedisServer(*self.quick_sync, "--replicaof", "127.0.0.1", str(self.master.port))
        config = folder / "sentinel.conf"
        config.write_text(
            f"sentinel monitor {self.name} 127.0.0.1 {self.master.port} 1\n"
            f"sentinel down-after-milliseconds {self.name} 1000\n"
            f"sentinel failover-timeout {self.name} 2000\n"
            f"sentinel parallel-syncs {self.name} 1\n")
        self.sentinel = RedisServer(sentinel_config=config)
        self.url = f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{self.name}/0"

    @property
    def proc(self) -> object | None:
        return self.master.proc

    def start(self) -> None:
        for server in (self.master, self.replica):
            if server.proc is None:
                server.start()
        if self.sentinel.proc is None:  # once the replica is in sync: the Sentinel sees it at once
            wait_for(lambda: self.replica.client().info("replication")["master_link_status"] == "up",
                     "the replica syncs", within=REDIS_WAIT, ignoring=(redis.RedisError,))
            self.sentinel.start()
        self._wait_ready()

    def _wait_ready(self) -> None:
        """The Sentinel names the master, and knows a replica that is in sync with it.

        On a loaded machine the Sentinel may fail over on its own (the master missed its pings
        for `down-after-milliseconds`): then the two servers swap roles here, as they did there.
        """
        sentinel = self.sentinel.client()

        def ready() -> bool:
            _host, port = sentinel.sentinel_get_master_addr_by_name(self.name)
            if int(port) == self.replica.port:  # the old master follows at once, not at the Sentinel's next look
                self._swap_roles()
                self.replica.client().replicaof("127.0.0.1", self.master.port)
            replicas = sentinel.sentinel_slaves(self.name)
            return (int(port) == self.master.port and len(replicas) == 1
                    and replicas[0]["is_slave"] and not replicas[0]["is_sdown"]
                    and replicas[0].get("master-link-status") == "ok"
                    and self.replica.client().info("replication").get("master_link_status") == "up")
        wait_for(ready, "the Sentinel sees the master and an in-sync replica", within=30, ignoring=(redis.RedisError,))

    def _swap_roles(self) -> None:
        """The replica is the master now; the old master restarts as its replica."""
        self.master, self.replica = self.replica, self.master
        self.master.args = self.quick_sync
        self.replica.args = (*self.quick_sync, "--replicaof", "127.0.0.1", str(self.master.port))

    def fail_over(self) -> None:
        self.master.stop()
        self.promoted()

    def promoted(self) -> None:
        """After the master was stopped: wait until the Sentinel promoted the replica, then
        start the old master again as the new one's replica."""
        old, new = self.master, self.replica
        sentinel = self.sentinel.client()
        wait_for(lambda: int(sentinel.sentinel_get_master_addr_by_name(self.name)[1]) == new.port,
                 "the Sentinel promotes the replica", within=REDIS_WAIT, ignoring=(redis.RedisError,))
        wait_for(lambda: new.client().info("replication")["role"] == "master", "the replica is master",
                 within=REDIS_WAIT, ignoring=(redis.RedisError,))
        self._swap_roles()
        old.start()
        self._wait_ready()

    def flush(self) -> None:
        self.master.client().flushall()
        wait_for(lambda: self.replica.client().dbsize() == 0, "the replica follows the flush",
                 within=REDIS_WAIT, ignoring=(redis.RedisError,))

    def shutdown(self) -> None:
        for server in (self.sentinel, self.replica, self.master):
            server.remove()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"))
    try:
        servers.create()
        yield servers
    finally:
        servers.shutdown()


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinelServers]:
    servers = RedisSentinelServers(tmp_path_factory.mktemp("redis-sentinel"))
    try:
        servers.start()
        yield servers
    finally:
        servers.shutdown()


@pytest.fixture
def clean_redis_cluster(redis_cluster: RedisClusterServers) -> RedisClusterServers:
    """The session's Redis Cluster, every master running and empty."""
    redis_cluster.start()
    redis_cluster.flush()
    return redis_cluster


@pytest.fixture
def clean_redis_sentinel(redis_sentinel: RedisSentinelServers) -> RedisSentinelServers:
    """The session's Sentinel setup, running and empty."""
    redis_sentinel.start()
    redis_sentinel.flush()
    return redis_sentinel
