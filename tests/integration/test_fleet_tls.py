"""A fleet whose nodes serve TLS: peers are reached over https and verified against
cluster.peer_ca_file; a node that cannot verify its peer never trusts it (the origin is
asked instead, so reads stay right)."""

from __future__ import annotations

import os
import shutil
import time

import httpx
import pytest

from gateway.cluster.placement import owners, placement_name
from tests.waiting import wait_for
from tests.support import GatewayProcess
from tests.test_tls import https_client, make_certificate

TOKEN = "tls-fleet-token"


def node(origin: str, redis_url: str, cert, key, ca: str) -> GatewayProcess:  # type: ignore[no-untyped-def]
    gateway = GatewayProcess(origin, scheme="https", GATEWAY_SERVER_TLS_CERT_FILE=str(cert),
                             GATEWAY_SERVER_TLS_KEY_FILE=str(key), GATEWAY_ADMIN_TOKEN=TOKEN,
                             GATEWAY_REDIS_URL=redis_url, GATEWAY_CLUSTER_SECRET="tls-fleet-secret",
                             GATEWAY_CLUSTER_HEARTBEAT_INTERVAL="0.2", GATEWAY_CLUSTER_MEMBER_TTL="3",
                             GATEWAY_CLUSTER_PEER_CA_FILE=ca)
    return gateway.start(ready=lambda: httpx.get(f"{gateway.endpoint}/_gateway/healthz", verify=str(cert),
                                                 timeout=2).raise_for_status())


def stats(gateway: GatewayProcess, cert) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return httpx.get(f"{gateway.endpoint}/_gateway/stats", verify=str(cert), timeout=5,
                     headers={"authorization": f"Bearer {TOKEN}"}).json()


def fleet_changes(nodes: list[GatewayProcess]) -> list[str]:
    """What each node logged about the fleet's members and its reach of Redis (a worker that
    cannot reach Redis keeps its last view of the members), for a failure's message."""
    return [line for n in nodes for line in n.printed() if "fleet members" in line or "Redis " in line]


def sees_all(node_stats: dict, ids: list[str]) -> bool:  # type: ignore[type-arg]
    """Every worker of the node answered, and every one sees every member."""
    return sorted(node_stats["members"]) == sorted(ids) and not node_stats.get("workers", {}).get("missing")


@pytest.mark.parametrize("trusted", [True, False], ids=["peer-ca", "no-ca"])
def test_peers_over_https_are_verified(trusted, clean_origin, clean_redis, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates: apt-get install openssl")
    cert, key = make_certificate(tmp_path, "fleet")
    nodes = [node(clean_origin, clean_redis.url, cert, key, str(cert) if trusted else "") for _ in range(2)]
    try:
        ids = [f"127.0.0.1:{n.port}" for n in nodes]
        for n in nodes:  # both see both (every worker of each: the node's members are those all see)
            wait_for(lambda n=n: sees_all(stats(n, cert), ids), "the node sees both", within=10)
        owner = ids.index(owners(placement_name("bkt", "k", 0), ids)[0])
        other = 1 - owner
        body = os.urandom(100_000)
        s3 = [https_client(n.port, cert) for n in nodes]
        s3[owner].create_bucket(Bucket="bkt")
        s3[owner].put_object(Bucket="bkt", Key="k", Body=body)
        assert s3[owner].get_object(Bucket="bkt", Key="k")["Body"].read() == body  # the owner caches it
        assert sees_all(stats(nodes[other], cert), ids), fleet_changes(nodes)
        got = s3[other].get_object(Bucket="bkt", Key="k")
        assert got["Body"].read() == body
        x_cache = got["ResponseMetadata"]["HTTPHeaders"]["x-cache"]
        metrics = httpx.get(f"{nodes[other].endpoint}/_gateway/metrics", verify=str(cert), timeout=5,
                            headers={"authorization": f"Bearer {TOKEN}"}).text
        failures = next(float(line.split()[-1]) for line in metrics.splitlines()
                        if line.startswith("gateway_peer_failures_total"))
        origin_gets = next((float(line.split()[-1]) for line in metrics.splitlines()
                            if line.startswith('gateway_origin_requests_total{method="GET"}')), 0.0)
        # On a failure: the reader's view of hot objects too (an object with 2 replicas is its own).
        seen = (x_cache, failures, origin_gets, fleet_changes(nodes), stats(nodes[other], cert).get("replication"))
        if trusted:
            assert x_cache == "hit-peer" and failures == 0 and origin_gets == 0, seen
        else:  # the peer's certificate is not trusted: nothing is read from it; the origin answers
            assert failures > 0 and origin_gets == 1, seen
        # SIGTERM: a node whose peer keeps an idle TLS connection to it still stops at once.
        for n in nodes:
            started = time.monotonic()
            n.stop()
            assert time.monotonic() - started < 5
    finally:
        for n in nodes:
            n.stop()
