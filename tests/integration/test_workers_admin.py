"""The admin API of a node of several workers: whichever worker a request lands on answers
for the node (stats and metrics of every worker together; purge, pins and events carried
out by every worker), and the calls between workers are signed with the node's secret.

Two gateways in this process are worker 0 and worker 1 of one node, each on its own TCP
port (standing for the node's one port, which the kernel shares out) and on its unix socket.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from click.testing import CliRunner

from gateway.admin.stats import stats_document
from gateway.cli import main
from gateway.cluster.peers import encode_query, sign
from gateway.config import AdminSettings, RedisSettings
from gateway.node.workers import WorkerSet
from tests.admin.test_dashboard import browser, open_page, page_shows, text  # noqa: F401 (browser: a fixture)
from tests.support import GatewayProcess, RunningGateway, base_settings, client
from tests.waiting import wait_for

TOKEN = "admin-token-for-tests"
KEYS = [f"dir/k{n}" for n in range(8)]


def admin(gateway: RunningGateway, method: str, route: str, **kwargs: object) -> httpx.Response:
    return httpx.request(method, f"{gateway.endpoint}/_gateway{route}", headers={"authorization": f"Bearer {TOKEN}"},
                         timeout=10, **kwargs)  # type: ignore[arg-type]


def signed(workers: WorkerSet, index: int, method: str, route: str, params: list[tuple[str, str]]) -> httpx.Response:
    """A call between workers, as a sibling makes it, over worker `index`'s unix socket."""
    path = f"/_gateway/local{route}"
    query = encode_query(params)
    return on_socket(workers, index, method, f"{path}?{query}",
                     {"x-gateway-worker": sign(workers.secret, method, path, query)})


def on_socket(workers: WorkerSet, index: int, method: str, target: str,
              headers: dict[str, str | bytes]) -> httpx.Response:
    """A request to worker `index` over its unix socket."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=workers.socket_path(index)), timeout=10) as worker:
        return worker.request(method, f"http://worker{target}", headers=headers)


@pytest.fixture
def node(clean_origin: str) -> Iterator[tuple[RunningGateway, RunningGateway]]:
    with two_workers(clean_origin) as workers:
        yield workers


@contextlib.contextmanager
def two_workers(origin: str, **sections: object) -> Iterator[tuple[RunningGateway, RunningGateway]]:
    run_dir = tempfile.mkdtemp(prefix="gw-")  # short: a unix socket's path has at most 107 bytes
    secret = os.urandom(32)
    base = base_settings(origin)
    settings = dataclasses.replace(base, admin=AdminSettings(token=TOKEN),  # type: ignore[arg-type]
                                   metadata=dataclasses.replace(base.metadata, ttl=3600.0), **sections)
    workers = [RunningGateway(settings, workers=WorkerSet(i, 2, run_dir, secret)) for i in range(2)]
    try:
        for worker in workers:
            worker.__enter__()
        with open(WorkerSet(0, 2, run_dir, secret).serving_path, "x"):  # as the supervisor, once both serve
            pass
        yield workers[0], workers[1]
    finally:
        for worker in workers:
            worker.__exit__()
        shutil.rmtree(run_dir, ignore_errors=True)


def own_stats(gateway: RunningGateway) -> dict[str, object]:
    """A worker's own figures, read in this process."""
    return stats_document(gateway.server.config.app.admin.node)


def counted(gateway: RunningGateway, requests: int) -> None:
    """Wait for a worker to have counted `requests` S3 requests (each is counted once its
    answer is sent, a moment after the client has it)."""
    wait_for(lambda: own_stats(gateway)["requests"] == requests, f"{requests} requests counted")


def held(gateway: RunningGateway, bucket: str) -> int:
    """Blocks of `bucket` this worker holds (owns) in its tiers."""
    store = gateway.server.config.app.s3.engine.store
    return sum(1 for tier in store.levels for block in tier if block.bucket == bucket)


def fill(w0: RunningGateway, w1: RunningGateway) -> None:
    """Objects written through worker 0 and read through both."""
    s3 = client(w0.endpoint)
    s3.create_bucket(Bucket="bkt")
    for key in KEYS:
        s3.put_object(Bucket="bkt", Key=key, Body=key.encode() * 100)
    for worker in (w0, w1):
        reader = client(worker.endpoint)
        for key in KEYS:
            assert reader.get_object(Bucket="bkt", Key=key)["Body"].read() == key.encode() * 100


def test_stats_and_metrics_are_every_workers_figures_together(node):
    w0, w1 = node
    fill(w0, w1)
    client(w1.endpoint).list_objects_v2(Bucket="bkt")
    counted(w0, 1 + 2 * len(KEYS))
    counted(w1, len(KEYS) + 1)
    # The node's heat is the first worker's, worker 1 sending it its reads (admin.nodefeed).
    heat = w0.server.config.app.s3.engine.heat
    wait_for(lambda: sorted(hits for _, _, hits in heat.top()) == [2] * len(KEYS), "worker 1's reads in the heat")
    parts = [own_stats(w0), own_stats(w1)]
    for asked in (w0, w1):
        stats = admin(asked, "GET", "/stats").json()
        assert stats["workers"] == {"count": 2, "answered": 2, "missing": []}
        assert stats["node"] == parts[0]["node"]
        assert stats["members"] == sorted(set(parts[0]["members"]) & set(parts[1]["members"]))
        assert stats["requests"] == parts[0]["requests"] + parts[1]["requests"]
        assert stats["hits"] == parts[0]["hits"] + parts[1]["hits"]
        assert stats["misses"] == parts[0]["misses"] + parts[1]["misses"]
        assert stats["hit_ratio"] == pytest.approx(stats["hits"] / (stats["hits"] + stats["misses"]))
        assert stats["served_bytes"] == {source: parts[0]["served_bytes"][source] + parts[1]["served_bytes"][source]
                                         for source in parts[0]["served_bytes"]}
        assert sum(stats["served_bytes"].values()) == 2 * sum(len(k.encode() * 100) for k in KEYS)
        [tier] = stats["tiers"]
        assert tier["blocks"] == parts[0]["tiers"][0]["blocks"] + parts[1]["tiers"][0]["blocks"] > 0
        assert tier["quota_bytes"] == parts[0]["tiers"][0]["quota_bytes"] + parts[1]["tiers"][0]["quota_bytes"]
        assert stats["uptime_seconds"] >= max(p["uptime_seconds"] for p in parts)
        assert sorted(hot["key"] for hot in stats["hot_objects"]) == KEYS
        assert all(hot["hits"] == 2 for hot in stats["hot_objects"])  # one GET through each worker

        text = admin(asked, "GET", "/metrics").text
        names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
        assert len(names) == len(set(names))  # one family each
        found = {(s.name, frozenset(s.labels.items())): s.value
                 for family in text_string_to_metric_families(text) for s in family.samples}
        assert found[("gateway_workers", frozenset())] == 2 and found[("gateway_workers_answered", frozenset())] == 2
        gets = frozenset({("operation", "GetObject"), ("status", "200")})
        assert found[("gateway_requests_total", gets)] == 2 * len(KEYS)
        assert found[("gateway_requests_total", frozenset({("operation", "ListObjectsV2"), ("status", "200")}))] == 1
        assert found[("gateway_request_duration_seconds_count", frozenset({("operation", "GetObject")}))] == 16
        assert found[("gateway_cache_tier_used_bytes", frozenset({("tier", "memory")}))] == tier["used_bytes"]
        assert found[("gateway_cache_hits_total", frozenset({("tier", "memory")}))] == stats["hits"]


def test_purge_asked_of_one_worker_evicts_every_workers_blocks(node, direct):
    w0, w1 = node
    fill(w0, w1)
    before = held(w0, "bkt") + held(w1, "bkt")
    assert before > 0
    direct.put_object(Bucket="bkt", Key=KEYS[0], Body=b"changed behind the gateway")
    answer = admin(w1, "POST", "/purge?bucket=bkt&prefix=dir/").json()
    assert answer == {"bucket": "bkt", "blocks_removed": before,
                      "workers": {"count": 2, "answered": 2, "missing": []}}
    assert held(w0, "bkt") == held(w1, "bkt") == 0
    for worker in (w0, w1):  # the metadata too (cached for an hour): every worker asks the origin again
        assert client(worker.endpoint).get_object(Bucket="bkt", Key=KEYS[0])["Body"].read() == \
            b"changed behind the gateway"


def test_pins_asked_of_one_worker_apply_on_every_worker(node):
    w0, w1 = node
    stores = [worker.server.config.app.s3.engine.store for worker in node]
    answer = admin(w0, "POST", "/pin?bucket=bkt&prefix=hot/").json()
    assert answer == {"bucket": "bkt", "prefix": "hot/", "pinned": True, "shared": True,
                      "workers": {"count": 2, "answered": 2, "missing": []}}
    assert all(store.pinned == [("bkt", "hot/")] for store in stores)
    assert admin(w1, "GET", "/stats").json()["pinned"] == [{"bucket": "bkt", "prefix": "hot/"}]
    assert admin(w1, "DELETE", "/pin?bucket=bkt&prefix=hot/").status_code == 200
    assert all(store.pinned == [] for store in stores)
    assert admin(w0, "DELETE", "/pin?bucket=bkt&prefix=hot/").status_code == 404
    # A pin only one worker holds (without Redis a restarted worker has lost its own) is unpinned all the same.
    assert signed(w0.server.config.app.workers, 1, "POST", "/pin", [("bucket", "bkt"), ("prefix", "p/")]).json() == \
        {"was": False, "shared": True, "worker": 1}
    assert admin(w0, "GET", "/stats").json()["pinned"] == [{"bucket": "bkt", "prefix": "p/"}]
    assert admin(w0, "DELETE", "/pin?bucket=bkt&prefix=p/").status_code == 200
    assert all(store.pinned == [] for store in stores)


def test_a_restarted_worker_takes_the_runtime_pins_its_siblings_hold(node):
    """Without Redis, runtime pins live in each worker: a worker that starts again asks its siblings."""
    w0, w1 = node
    assert admin(w0, "POST", "/pin?bucket=bkt&prefix=hot/").status_code == 200
    w1.__exit__()
    with RunningGateway(w1.settings, workers=w1.server.config.app.workers) as again:
        store = again.server.config.app.s3.engine.store
        wait_for(lambda: store.pinned == [("bkt", "hot/")], "the restarted worker takes its siblings' pins")
        assert again.server.config.app.admin.node.pins.is_runtime(("bkt", "hot/"))


def test_with_redis_pins_and_purges_still_apply_on_every_worker_at_once(clean_origin, clean_redis):
    with two_workers(clean_origin, redis=RedisSettings(url=clean_redis.url, socket_timeout=0.5)) as (w0, w1):
        stores = [worker.server.config.app.s3.engine.store for worker in (w0, w1)]
        answer = admin(w1, "POST", "/pin?bucket=bkt&prefix=hot/").json()
        assert answer["shared"] is True and answer["workers"]["answered"] == 2
        assert all(store.pinned == [("bkt", "hot/")] for store in stores)  # not only after the next refresh
        fill(w0, w1)
        before = held(w0, "bkt") + held(w1, "bkt")
        assert admin(w0, "POST", "/purge?bucket=bkt").json()["blocks_removed"] == before > 0
        assert admin(w0, "GET", "/stats").json()["requests"] == 1 + 3 * len(KEYS)


def test_an_event_asked_of_one_worker_is_forgotten_by_every_worker(node, direct):
    w0, w1 = node
    fill(w0, w1)
    for key in KEYS[:2]:
        direct.put_object(Bucket="bkt", Key=key, Body=b"changed behind the gateway")
    event = orjson.dumps({"Records": [{"s3": {"bucket": {"name": "bkt"}, "object": {"key": KEYS[0]}}}]})
    assert admin(w0, "POST", "/events", content=event).json() == {"invalidated": 1}
    for worker in (w0, w1):
        s3 = client(worker.endpoint)
        assert s3.head_object(Bucket="bkt", Key=KEYS[0])["ContentLength"] == len(b"changed behind the gateway")
        assert s3.head_object(Bucket="bkt", Key=KEYS[1])["ContentLength"] == len(KEYS[1]) * 100  # not named: cached


def test_a_load_through_one_worker_fills_the_node(node):
    w0, w1 = node
    fill(w0, w1)
    admin(w0, "POST", "/purge?bucket=bkt")
    lines = admin(w1, "POST", "/load?bucket=bkt&prefix=dir/").text.splitlines()
    last = orjson.loads(lines[-1])
    assert last["done"] and last["loaded"] == last["objects"] == len(KEYS) and last["failed"] == []
    assert last["bytes"] == sum(len(k.encode() * 100) for k in KEYS)
    stats = admin(w0, "GET", "/stats").json()
    assert stats["tiers"][0]["blocks"] == held(w0, "bkt") + held(w1, "bkt") == len(KEYS)


def test_a_sibling_gone_or_hung_leaves_a_partial_answer_that_says_so(node):
    w0, w1 = node
    fill(w0, w1)
    counted(w1, len(KEYS))
    gone = own_stats(w1)
    w1.__exit__()
    started = time.monotonic()
    stats = admin(w0, "GET", "/stats").json()
    assert time.monotonic() - started < 1.0  # refused at once
    assert stats["workers"] == {"count": 2, "answered": 1, "missing": [1]}
    # Its counts as it left them in its ledger: the node's counters do not go down; the rest is left out.
    assert stats["requests"] == own_stats(w0)["requests"] + gone["requests"]
    assert stats["served_bytes"] == {source: own_stats(w0)["served_bytes"][source] + gone["served_bytes"][source]
                                     for source in gone["served_bytes"]}
    assert stats["tiers"][0]["blocks"] == own_stats(w0)["tiers"][0]["blocks"]
    summary = CliRunner().invoke(main, ["stats", "--url", w0.endpoint, "--token", TOKEN]).output
    assert "workers   1 of 2 answered; worker 1: counts as last written, the other figures missing" in summary
    assert admin(w0, "POST", "/purge?bucket=bkt").json()["workers"] == {"count": 2, "answered": 1, "missing": [1]}
    # A sibling that takes the connection and never answers: its calls time out.
    path = w0.server.config.app.workers.socket_path(1)
    os.unlink(path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hung:
        hung.bind(path)
        hung.listen(16)
        started = time.monotonic()
        text = admin(w0, "GET", "/metrics").text
        assert 1.5 < time.monotonic() - started < 4.0
        assert "gateway_workers_answered 1.0" in text and "gateway_workers 2.0" in text


def test_calls_between_workers_are_signed_with_the_nodes_secret(node):
    w0, w1 = node
    workers = w0.server.config.app.workers
    assert signed(workers, 1, "GET", "/stats", []).status_code == 200
    local = f"{w1.endpoint}/_gateway/local/stats"
    good = signed(workers, 1, "GET", "/stats", []).request
    query = good.url.query.decode()
    cases = {
        "none": ({}, query, 401),
        "the admin token, not a signature": ({"authorization": f"Bearer {TOKEN}"}, query, 401),
        "malformed": ({"x-gateway-worker": "v1 nope"}, query, 401),
        "not ascii digits": ({"x-gateway-worker": ("v1 ²³ " + "0" * 64).encode()}, query, 401),
        "latin-1 bytes": ({"x-gateway-worker": "v1 1 caf\xe9".encode("latin-1")}, query, 403),
        "a digest of utf-8": ({"x-gateway-worker": f"v1 {int(time.time())} {'é' * 32}".encode()}, query, 403),
        "another secret": ({"x-gateway-worker": sign(b"x" * 32, "GET", "/_gateway/local/stats", query)}, query, 403),
        "stale": ({"x-gateway-worker": sign(workers.secret, "GET", "/_gateway/local/stats", query,
                                            int(time.time()) - 3600)}, query, 403),
        "another query": ({"x-gateway-worker": good.headers["x-gateway-worker"]}, query + "&x=1", 403),
    }
    for name, (headers, asked, status) in cases.items():
        answer = on_socket(workers, 1, "GET", f"/_gateway/local/stats?{asked}", headers)
        assert answer.status_code == status, name
    # Signed for the path as sent: the same route spelled otherwise does not carry the signature.
    odd = on_socket(workers, 1, "GET", f"/_gateway/local/%73tats?{query}",
                    {"x-gateway-worker": good.headers["x-gateway-worker"]})
    assert odd.status_code == 403
    # Over TCP (the node's port) even a well signed call is refused: siblings call on the unix socket.
    over_tcp = httpx.get(f"{local}?{query}", headers={"x-gateway-worker": good.headers["x-gateway-worker"]}, timeout=10)
    assert over_tcp.status_code == 403 and "unix socket" in over_tcp.json()["error"]
    assert httpx.get(local, timeout=10).status_code == 403
    # Signed for its method too: the signature of a pin does not unpin.
    pin = signed(workers, 1, "POST", "/pin", [("bucket", "bkt"), ("prefix", "p/")])
    assert pin.status_code == 200
    unpin = on_socket(workers, 1, "DELETE", pin.request.url.raw_path.decode(),
                      {"x-gateway-worker": pin.request.headers["x-gateway-worker"]})
    assert unpin.status_code == 403
    for route in ("/load", "/events"):  # no worker routes: a load runs where it was asked, events need none
        assert signed(workers, 1, "POST", route, [("bucket", "bkt")]).status_code == 404


def test_a_node_of_one_process_has_no_worker_routes(start_gateway, clean_origin):
    gateway = start_gateway(admin=AdminSettings(token=TOKEN))
    assert httpx.get(f"{gateway.endpoint}/_gateway/local/stats", timeout=10).status_code == 401
    assert admin(gateway, "GET", "/local/stats").status_code == 404
    assert "workers" not in admin(gateway, "GET", "/stats").json()
    assert "gateway_workers" not in admin(gateway, "GET", "/metrics").text


def test_the_dashboard_says_how_many_workers_its_figures_hold(node, browser):  # noqa: F811 (the fixture)
    w0, w1 = node
    fill(w0, w1)
    open_page(browser, w0, TOKEN)
    page_shows(browser, "2 workers", lambda b: text(b, "#workers-fact") == "2 workers")
    assert text(browser, "#requests") == str(admin(w0, "GET", "/stats").json()["requests"])
    w1.__exit__()
    page_shows(browser, "1 of 2 workers", lambda b: text(b, "#workers-fact") == "1 of 2 workers")
    assert browser.find_element("id", "workers-fact").get_attribute("class") == "partial"


def test_gateway_serve_with_two_workers_answers_for_the_node_on_every_connection(clean_origin):
    """Real processes under the supervisor: each admin request on a new connection lands on
    either worker, and every answer is the node's."""
    node = GatewayProcess(clean_origin, workers=2, GATEWAY_ADMIN_TOKEN=TOKEN, GATEWAY_CACHE_MEMORY_QUOTA="64MiB")
    node.start()
    try:
        client(node.endpoint).create_bucket(Bucket="bkt")
        for key in KEYS:
            client(node.endpoint).put_object(Bucket="bkt", Key=key, Body=key.encode() * 100)
            for _ in range(2):  # a new client, so a new connection: the kernel shares them out
                client(node.endpoint).get_object(Bucket="bkt", Key=key)["Body"].read()
        assert admin(node, "POST", "/pin?bucket=bkt&prefix=hot/").json()["workers"]["answered"] == 2
        for _ in range(6):
            stats = admin(node, "GET", "/stats").json()
            assert stats["workers"] == {"count": 2, "answered": 2, "missing": []}
            assert stats["requests"] == 1 + 3 * len(KEYS) and stats["hits"] + stats["misses"] == 2 * len(KEYS)
            assert stats["tiers"][0]["blocks"] == len(KEYS) and stats["pinned"] == [{"bucket": "bkt", "prefix": "hot/"}]
        metrics = text_string_to_metric_families(admin(node, "GET", "/metrics").text)
        pauses = {s.labels["generation"]: s.value for family in metrics if family.name == "gateway_gc_pause_seconds"
                  for s in family.samples if s.name.endswith("_count")}
        assert sorted(pauses) == ["0", "1", "2"]  # each worker's collections, timed and summed for the node
        assert admin(node, "POST", "/purge?bucket=bkt").json()["blocks_removed"] == len(KEYS)
        victim = min(node.worker_pids())
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: admin(node, "GET", "/stats").json()["workers"]["answered"] == 2  # the supervisor starts
                 and victim not in node.worker_pids(),  # another in its place
                 "the node answers with both workers again", within=30, interval=0.1)
        assert admin(node, "GET", "/stats").json()["pinned"] == [{"bucket": "bkt", "prefix": "hot/"}]
    finally:
        node.stop()


COUNTERS = ("counter", "histogram")
STATS_COUNTS = ("requests", "hits", "misses")


def node_counters(node: GatewayProcess) -> tuple[dict[tuple[str, frozenset[tuple[str, str]]], float], dict[str, int]]:
    """The node's counters as one scrape of `metrics` (every counter and histogram sample)
    and one of `stats` (its counts, served bytes by source) show them."""
    metrics = {(s.name, frozenset(s.labels.items())): s.value
               for family in text_string_to_metric_families(admin(node, "GET", "/metrics").text)
               if family.type in COUNTERS for s in family.samples}
    stats = admin(node, "GET", "/stats").json()
    return metrics, {**{figure: stats[figure] for figure in STATS_COUNTS},
                     **{f"served_bytes {source}": count for source, count in stats["served_bytes"].items()}}


def never_lower(before: tuple[dict, dict], after: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    for earlier, later in zip(before, after):
        lower = {name: (value, later.get(name)) for name, value in earlier.items() if later.get(name, -1) < value}
        assert not lower, f"{len(lower)} counters went down, such as {dict(list(lower.items())[:4])}"


def test_the_nodes_counters_never_go_down_when_a_worker_is_killed(clean_origin):
    """A worker SIGKILLed and started again: every counter of the node (metrics and stats),
    read before, while it is gone and after, is never lower than it was, and the node goes
    on counting from there."""
    node = GatewayProcess(clean_origin, workers=2, GATEWAY_ADMIN_TOKEN=TOKEN, GATEWAY_CACHE_MEMORY_QUOTA="64MiB")
    node.start()
    try:
        client(node.endpoint).create_bucket(Bucket="bkt")
        for key in KEYS:
            client(node.endpoint).put_object(Bucket="bkt", Key=key, Body=key.encode() * 100)

        def read_all() -> None:
            for key in KEYS:
                for _ in range(2):  # a new client, so a new connection: the kernel shares them out
                    client(node.endpoint).get_object(Bucket="bkt", Key=key)["Body"].read()

        read_all()
        first = node_counters(node)
        assert first[1]["requests"] >= 3 * len(KEYS)
        for _ in range(2):  # twice: the worker after the first one killed, too
            read_all()
            seen = [node_counters(node)]
            victim = min(node.worker_pids())
            os.kill(victim, signal.SIGKILL)  # right after both workers showed their counts

            def back() -> bool:
                seen.append(node_counters(node))  # while it is gone, then once the new one answers
                never_lower(seen[-2], seen[-1])
                return victim not in node.worker_pids() and admin(node, "GET", "/stats").json()["workers"]["answered"] == 2
            wait_for(back, "the supervisor starts another in its place, and the node answers with both", within=30)
            read_all()
            never_lower(seen[-1], node_counters(node))
        last = node_counters(node)
        never_lower(first, last)
        assert last[1]["requests"] >= first[1]["requests"] + 2 * 2 * len(KEYS)  # the reads after, counted on top
    finally:
        node.stop()
