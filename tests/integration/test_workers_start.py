"""A node of 4 workers coming up under `gateway serve --workers 4` (real processes, moto
origin): `readyz` says 200 only once every worker serves, and a normal start logs no problem."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.servers import free_port
from tests.support import GatewayProcess

WORKERS = 4
TOKEN = "start-token"


def start_node(origin: str, port: int = 0) -> GatewayProcess:
    return GatewayProcess(origin, workers=WORKERS, port=port, GATEWAY_ADMIN_TOKEN=TOKEN,
                          GATEWAY_CACHE_MEMORY_QUOTA="64MiB")


def answering(port: int) -> list[int]:
    """The workers whose unix socket accepts a connection now (it listens once the worker serves)."""
    folders = list(Path("/dev/shm").glob(f"s3gw-{port}-*")) or list(Path("/tmp").glob(f"s3gw-{port}-*"))
    assert len(folders) == 1, folders
    found = []
    for index in range(WORKERS):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(folders[0] / f"worker-{index}.sock"))
            except OSError:  # not bound yet, or bound and not listening yet
                continue
            found.append(index)
    return found


def node_workers(node: GatewayProcess) -> dict[str, Any]:
    """The `workers` figure of the node's stats: how many of its workers answered."""
    stats = httpx.get(f"{node.endpoint}/_gateway/stats", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
    workers: dict[str, Any] = stats.json()["workers"]
    return workers


def test_readyz_answers_200_only_once_every_worker_serves(clean_origin: str) -> None:
    """readyz polled from the moment the process starts, each time on a new connection (so on
    any worker that accepts): at its first 200 every worker's socket already answers, and the
    node's stats hold every worker. Before that it answers 503 and says the workers are starting.
    A worker killed after that leaves the node ready while the supervisor starts it again."""
    node = start_node(clean_origin, free_port())  # asked from the start: before the node says its port
    first: dict[str, Any] = {}
    unready: list[dict[str, Any]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                answer = httpx.get(f"{node.endpoint}/_gateway/readyz", timeout=5)
            except httpx.HTTPError:  # nothing listens yet, or no worker accepted in time
                stop.wait(0.01)
                continue
            if answer.status_code == 200:
                first["answering"] = answering(node.port)  # first, at once: nothing may start meanwhile
                first["checks"] = answer.json()["checks"]
                first["stats"] = node_workers(node)
                return
            unready.append(answer.json())
            stop.wait(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        node.start(timeout=60)
        poller.join(30)  # ready at the latest a moment after the node says it listens
        assert first, f"readyz never answered 200: {unready[-3:]}"
        assert first["answering"] == list(range(WORKERS)), first
        assert first["stats"] == {"count": WORKERS, "answered": WORKERS, "missing": []}, first
        assert first["checks"] == {"origin": "ok", "workers": "ok"}
        for answer in unready:  # what the probe said before: the workers are still starting
            assert answer["status"] == "unavailable" and set(answer["failed"]) == {"workers"}, answer

        # A worker killed once the node served: the others serve meanwhile, the node stays ready.
        victim = min(node.worker_pids())
        os.kill(victim, signal.SIGKILL)
        deadline, asked = time.monotonic() + 30, 0
        while victim in node.worker_pids() or node_workers(node)["answered"] != WORKERS:
            assert time.monotonic() < deadline, "the supervisor did not start the killed worker again"
            ready = httpx.get(f"{node.endpoint}/_gateway/readyz", timeout=5)
            assert ready.status_code == 200, ready.text
            asked += 1
        assert asked, "readyz was never asked while a worker was missing"
    finally:
        stop.set()
        node.stop()


def test_a_normal_start_logs_no_worker_that_did_not_answer(clean_origin: str) -> None:
    """Workers asking their siblings as they start (the runtime pins they hold) wait until the
    node's workers are up: a normal start, and a node that served for a while, log no
    "worker N did not answer" (nor any answer refused between workers)."""
    node = start_node(clean_origin).start(timeout=60)
    try:
        for _ in range(3):
            assert node_workers(node)["answered"] == WORKERS
        assert httpx.get(f"{node.endpoint}/_gateway/readyz", timeout=5).status_code == 200
    finally:
        output = node.stop()
    assert "did not answer" not in output and "answered GET" not in output, output[-3000:]
    assert "gateway listening on" in output
