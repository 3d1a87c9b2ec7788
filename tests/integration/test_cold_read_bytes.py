"""A cold read fetches about what it reads (store.pieces): a range is rounded out to a 64 KiB
granule, not to 1 MiB blocks, and a suffix asks for max(N, 64 KiB). Origin requests and the
bytes of their answers are counted at a real moto, behind bench/shaped_proxy.py's relay
(unshaped), the one place both count alike; never more requests than the reads themselves."""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.config import CacheSettings
from gateway.engine.runs import GRANULE
from gateway.node.workers import WorkerSet, placement
from gateway.store.blocks import BlockId
from tests.servers import free_port, stop_process, wait_serving
from tests.support import RunningGateway, base_settings, client
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent.parent

KiB = 1024
MiB = 1024 * KiB
BLOCK = MiB
DATA = os.urandom(5 * MiB)


class Counted:
    """bench/shaped_proxy.py, unshaped, in front of moto: what went through it (object GETs and
    HEADs, the GETs' answers' body bytes) since `mark`, as its counters say."""

    def __init__(self, upstream: str) -> None:
        port = free_port()  # (the proxy does not say which port it bound)
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "shaped_proxy.py"), "--upstream",
                                      upstream.removeprefix("http://"), "--port", str(port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_serving(self._counters, self.proc, "shaped_proxy")
        self.mark()

    def _counters(self) -> tuple[int, int]:
        with httpx.Client(timeout=5) as c:
            got = c.get(self.endpoint + "/_shaped_proxy/counters").json()
        return got["requests"]["GET"] + got["requests"]["HEAD"], got["bytes"]["GET"]

    def mark(self) -> None:
        self._at = self._counters()

    def since(self) -> tuple[int, int]:
        """(object GETs and HEADs, bytes of the GETs' answers' bodies) since `mark`."""
        now = self._counters()
        return now[0] - self._at[0], now[1] - self._at[1]

    def close(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="module")
def counted(origin_endpoint: str) -> Iterator[Counted]:
    proxy = Counted(origin_endpoint)
    yield proxy
    proxy.close()


def _settings(counted: Counted, memory: int = 16 * MiB):  # type: ignore[no-untyped-def]
    base = base_settings(counted.endpoint)
    return dataclasses.replace(base, cache=CacheSettings(block_size=BLOCK, memory_quota=memory, readahead_blocks=0))


@pytest.fixture
def cold(start_gateway, clean_origin, counted):  # type: ignore[no-untyped-def]
    gateway = start_gateway(origin=_settings(counted).origin,
                            cache=CacheSettings(block_size=BLOCK, memory_quota=16 * MiB, readahead_blocks=0))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    gateway.purge_caches()
    counted.mark()
    return gateway, s3


def read(s3, rng: str, key: str = "k") -> bytes:  # type: ignore[no-untyped-def]
    return s3.get_object(Bucket="bkt", Key=key, Range=rng)["Body"].read()  # type: ignore[no-any-return]


def x_cache(s3, rng: str) -> str:  # type: ignore[no-untyped-def]
    got = s3.get_object(Bucket="bkt", Key="k", Range=rng)
    got["Body"].read()
    return got["ResponseMetadata"]["HTTPHeaders"]["x-cache"]  # type: ignore[no-any-return]


def test_a_cold_suffix_read_asks_for_its_bytes_not_a_block(cold, counted):
    _, s3 = cold
    assert read(s3, "bytes=-16384") == DATA[-16384:]
    requests, sent = counted.since()
    assert requests == 1 and sent <= max(16 * KiB, GRANULE), (requests, sent)
    counted.mark()
    assert read(s3, "bytes=-16384") == DATA[-16384:]
    assert read(s3, "bytes=-8") == DATA[-8:]
    assert x_cache(s3, "bytes=-100") == "hit-mem"
    assert counted.since() == (0, 0)


def test_a_ranged_read_mid_object_asks_for_its_bytes_rounded_to_the_granule(cold, counted):
    _, s3 = cold
    a, b = 2 * MiB + 300_000, 2 * MiB + 304_095  # 4 KiB in the middle of a block
    assert read(s3, f"bytes={a}-{b}") == DATA[a:b + 1]
    requests, sent = counted.since()
    assert requests == 1 and sent <= (b - a + 1) + 2 * GRANULE, (requests, sent)
    counted.mark()
    assert x_cache(s3, f"bytes={a}-{b}") == "hit-mem"
    assert read(s3, f"bytes={a + 10}-{b - 10}") == DATA[a + 10:b - 9]
    assert counted.since() == (0, 0)


def test_a_ranged_read_across_blocks_keeps_the_blocks_between_whole(cold, counted):
    _, s3 = cold
    a, b = MiB - 5000, 3 * MiB + 7000  # the end of block 0, blocks 1 and 2, the start of block 3
    assert read(s3, f"bytes={a}-{b}") == DATA[a:b + 1]
    requests, sent = counted.since()
    assert requests == 1 and sent <= (b - a + 1) + 2 * GRANULE, (requests, sent)
    counted.mark()
    assert read(s3, f"bytes={MiB}-{3 * MiB - 1}") == DATA[MiB:3 * MiB]  # whole blocks, kept whole
    assert read(s3, f"bytes={a}-{b}") == DATA[a:b + 1]  # and the ends, from their pieces
    assert counted.since() == (0, 0)


def test_a_read_overlapping_a_piece_fetches_what_it_lacks_once_and_then_is_a_hit(cold, counted):
    _, s3 = cold
    a = 4 * MiB + 100_000
    assert read(s3, f"bytes={a}-{a + 999}") == DATA[a:a + 1000]
    counted.mark()
    wider = (a - 200_000, a + 300_000)
    assert read(s3, "bytes=%d-%d" % wider) == DATA[wider[0]:wider[1] + 1]
    requests, sent = counted.since()
    assert requests == 1 and sent <= wider[1] - wider[0] + 1 + 2 * GRANULE, (requests, sent)
    counted.mark()
    assert x_cache(s3, "bytes=%d-%d" % wider) == "hit-mem"
    assert read(s3, f"bytes={a}-{a + 999}") == DATA[a:a + 1000]
    assert counted.since() == (0, 0)


def test_pieces_that_fill_a_block_make_it_whole(cold, counted):
    gateway, s3 = cold
    for start in range(0, MiB, 256 * KiB):
        assert read(s3, f"bytes={start}-{start + 256 * KiB - 1}") == DATA[start:start + 256 * KiB]
    requests, sent = counted.since()
    assert requests == 4 and sent == MiB, (requests, sent)
    memory = gateway.server.config.app.s3.engine.reads.fetch.store.memory
    assert memory.pieces == 0 and len(memory) == 1 and memory.used == MiB  # one whole block, no piece left
    counted.mark()
    assert read(s3, f"bytes=0-{MiB - 1}") == DATA[:MiB]
    assert counted.since() == (0, 0)


def test_a_read_of_what_a_piece_lacks_after_an_overwrite_answers_the_new_version_whole(cold, origin_endpoint):
    # The piece is named by the version it holds; the bytes it lacks are asked If-Match that
    # version, so an object overwritten behind the gateway is answered whole from the new one.
    _, s3 = cold
    a = 2 * MiB + 200_000
    assert read(s3, f"bytes={a}-{a + 999}") == DATA[a:a + 1000]
    newer = os.urandom(len(DATA))
    client(origin_endpoint, ("origin-key", "origin-secret")).put_object(Bucket="bkt", Key="k", Body=newer)
    wider = (a - 150_000, a + 150_000)  # the piece's bytes and more of the same block
    assert read(s3, "bytes=%d-%d" % wider) == newer[wider[0]:wider[1] + 1]
    assert read(s3, f"bytes={a}-{a + 999}") == newer[a:a + 1000]


def test_pieces_count_their_bytes_in_the_memory_quota(start_gateway, clean_origin, counted):
    gateway = start_gateway(origin=_settings(counted).origin,
                            cache=CacheSettings(block_size=BLOCK, memory_quota=3 * GRANULE, readahead_blocks=0))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=DATA)
    memory = gateway.server.config.app.s3.engine.reads.fetch.store.memory
    for block in range(5):
        start = block * MiB + 500_000
        assert read(s3, f"bytes={start}-{start + 99}") == DATA[start:start + 100]
        assert memory.used <= memory.quota
    assert memory.pieces == 3 and memory.used == 3 * GRANULE  # the oldest two evicted


@pytest.fixture
def two_workers(origin_endpoint, clean_origin, counted, tmp_path):  # type: ignore[no-untyped-def]
    """A node of two workers (a memory tier they share, on tmpfs) in front of the counted origin,
    which holds bkt/k; a client of each worker."""
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    origin.create_bucket(Bucket="bkt")
    origin.put_object(Bucket="bkt", Key="k", Body=DATA)
    run, secret = tmp_path / "run", secrets.token_bytes(32)
    run.mkdir()
    nodes = [RunningGateway(_settings(counted), workers=WorkerSet(i, 2, str(run), secret)).__enter__() for i in range(2)]
    try:
        yield nodes, [client(node.endpoint) for node in nodes]
    finally:
        for node in nodes:
            node.__exit__()


def test_a_piece_fetched_through_one_worker_answers_a_read_on_the_other(two_workers, counted):
    # Parts of blocks are kept in the memory tier the workers share, by the block's owner worker:
    # the blocks here are owned by either worker, and each piece serves the other worker's read.
    nodes, (first, second) = two_workers
    assert all(node.server.config.app.s3.engine.reads.fetch.store.keeps_pieces for node in nodes)
    for s3 in (first, second):  # each worker knows the object's version (a worker that does not opens
        assert read(s3, "bytes=0-99") == DATA[:100]  # it with the origin: Opens.open asks for whole blocks)
    for index in range(1, 5):
        a = index * MiB + 123_456
        counted.mark()
        assert read(first, f"bytes={a}-{a + 4095}") == DATA[a:a + 4096]
        requests, sent = counted.since()
        assert requests == 1 and sent <= 4096 + 2 * GRANULE, (index, requests, sent)
        counted.mark()
        got = second.get_object(Bucket="bkt", Key="k", Range=f"bytes={a + 100}-{a + 3999}")
        assert got["Body"].read() == DATA[a + 100:a + 4000]
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
        assert counted.since() == (0, 0), index
        b = a + 3 * GRANULE  # more of the block, through the other worker: what the piece lacks, once
        assert read(second, f"bytes={a}-{b}") == DATA[a:b + 1]
        requests, sent = counted.since()
        assert requests == 1 and sent <= 3 * GRANULE, (index, requests, sent)
        counted.mark()
        assert read(first, f"bytes={a}-{b}") == DATA[a:b + 1]
        assert counted.since() == (0, 0), index


def test_a_cold_open_through_another_worker_reads_the_piece_the_node_holds(two_workers, origin_endpoint, counted):
    # An engine reads a file's footer first, then again through another connection, which the
    # kernel may hand to the other worker: that worker knows nothing of the object, and asks the
    # other workers for its metadata before the origin; the node's piece then answers the read.
    nodes, clients = two_workers
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    for first, then in ((0, 1), (1, 0)):  # (the last block's owner reads first once, second once)
        key = f"footer{first}"
        origin.put_object(Bucket="bkt", Key=key, Body=DATA)
        counted.mark()
        assert read(clients[first], "bytes=-16384", key) == DATA[-16384:]
        assert counted.since()[0] == 1
        got = client(nodes[then].endpoint).get_object(Bucket="bkt", Key=key, Range="bytes=-16384")  # a new connection
        assert got["Body"].read() == DATA[-16384:]
        assert got["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
        assert counted.since()[0] == 1, (first, then)
        a = 2 * MiB + 1000  # a range elsewhere through the other worker: one GET, its metadata known
        assert read(clients[then], f"bytes={a}-{a + 99}", key) == DATA[a:a + 100]
        assert counted.since()[0] == 2


def test_two_workers_reading_the_same_cold_range_at_once_cost_one_origin_get(two_workers, counted):
    # The block's owner worker fetches what its piece lacks, once however many workers ask; the
    # other waits for it (up to the peer read timeout, then it fetches alone).
    nodes, clients = two_workers
    for s3 in clients:  # each worker knows the object's version
        assert read(s3, "bytes=0-99") == DATA[:100]
    for index in range(1, 5):
        a = index * MiB + 300_000
        counted.mark()
        start = threading.Barrier(2)

        def at_once(s3):  # type: ignore[no-untyped-def]
            start.wait(timeout=10)
            return read(s3, f"bytes={a}-{a + 4095}")

        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(at_once, clients)) == [DATA[a:a + 4096]] * 2
        requests, sent = counted.since()
        assert requests == 1 and sent <= 4096 + 2 * GRANULE, (index, requests, sent)


def test_a_part_whose_owner_worker_does_not_answer_is_fetched_alone(two_workers, counted):
    nodes, clients = two_workers
    assert read(clients[0], "bytes=0-99") == DATA[:100]  # worker 0 knows the object's version
    index = next(i for i in range(1, 5) if placement("bkt", "k", i) % 2 == 1)  # a block worker 1 owns
    nodes[1].__exit__()  # worker 1 is gone (as while it is restarted)
    a = index * MiB + 5000
    counted.mark()
    assert read(clients[0], f"bytes={a}-{a + 999}") == DATA[a:a + 1000]
    requests, sent = counted.since()
    assert requests == 1 and sent <= 1000 + 2 * GRANULE, (requests, sent)
    siblings = nodes[0].server.config.app.s3.engine.fetch.siblings
    assert siblings.stats["worker_failure"] >= 1 and siblings.stats["worker_part_fetch"] == 0


def test_a_read_on_another_worker_of_what_a_piece_lacks_after_an_overwrite_answers_the_new_version(
        two_workers, origin_endpoint, counted):
    nodes, (first, second) = two_workers
    for index in range(1, 4):
        a = index * MiB + 200_000
        key = f"o{index}"
        client(origin_endpoint, ("origin-key", "origin-secret")).put_object(Bucket="bkt", Key=key, Body=DATA)
        assert read(second, "bytes=0-99", key) == DATA[:100]  # the second worker knows the version now
        assert read(first, f"bytes={a}-{a + 999}", key) == DATA[a:a + 1000]  # its piece, through the first
        newer = os.urandom(len(DATA))
        client(origin_endpoint, ("origin-key", "origin-secret")).put_object(Bucket="bkt", Key=key, Body=newer)
        wider = (a - 150_000, a + 150_000)  # the piece's bytes and more of the same block, asked If-Match
        assert read(second, "bytes=%d-%d" % wider, key) == newer[wider[0]:wider[1] + 1]
        assert read(second, f"bytes={a}-{a + 999}", key) == newer[a:a + 1000]
        assert read(first, f"bytes={a}-{a + 999}", key) == newer[a:a + 1000]


def test_a_sequential_reader_is_read_ahead_for_by_the_worker_owning_the_next_block(
        origin_endpoint, clean_origin, counted, tmp_path):
    # An engine reads a stream through several connections, each perhaps on another worker: only
    # the owner of the first block ahead reads ahead, so that two workers never both fetch it.
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    origin.create_bucket(Bucket="bkt")
    etag = origin.put_object(Bucket="bkt", Key="k", Body=DATA)["ETag"]  # (what names its blocks)
    run, secret = tmp_path / "run", secrets.token_bytes(32)
    run.mkdir()
    base = _settings(counted)
    base = dataclasses.replace(base, cache=dataclasses.replace(base.cache, readahead_blocks=1))
    nodes = [RunningGateway(base, workers=WorkerSet(i, 2, str(run), secret)).__enter__() for i in range(2)]
    try:
        s3 = client(nodes[0].endpoint)
        fetch = nodes[0].server.config.app.s3.engine.reads.fetch
        owners = [placement("bkt", "k", index) % 2 for index in range(5)]
        assert set(owners[1:]) == {0, 1}  # (both kinds of next block below)
        for index in range(4):  # three consecutive reads at the end of block `index`: a sequential reader
            for n in (3, 2, 1):
                a = (index + 1) * MiB - n * 100_000
                assert read(s3, f"bytes={a}-{a + 99_999}") == DATA[a:a + 100_000]
            wait_for(lambda: fetch.background == 0, "the readahead ends")
            after = BlockId("bkt", "k", etag, index + 1)
            assert (after in fetch.store) == (owners[index + 1] == 0), (index, owners)
    finally:
        for node in nodes:
            node.__exit__()


_READS = st.one_of(
    st.tuples(st.just("range"), st.integers(0, len(DATA) - 1), st.integers(1, 2 * MiB)),
    st.tuples(st.just("suffix"), st.integers(1, 3 * MiB), st.just(0)),
    st.tuples(st.just("whole"), st.just(0), st.just(0)),
)


Read = tuple[tuple[str, int, int], int]  # ((kind, a, n), the worker asked)
_WHOLE: Read = (("whole", 0, 0), 0)
# Shapes that cost more origin requests than reads once (the runs of a read split around a block
# held whole or in part), for one worker and, with the worker asked, for two.
_EXAMPLES: list[list[Read]] = [
    [(("range", 0, 3), 0), _WHOLE],  # a piece of block 0 (bytes 0-2), then the whole object
    [(("suffix", 16384, 0), 0), _WHOLE],  # a piece of the last block, then the whole object
    [(("range", MiB + 300_000, 4096), 0), (("range", 0, 4 * MiB), 0)],  # a piece inside block 1, blocks 0-3
    [(("range", 2 * MiB, MiB), 0), _WHOLE],  # block 2 whole, then the whole object
    [(("range", MiB + 10, 2 * MiB), 0), (("range", 5000, 4 * MiB), 0)],  # blocks 1-2 whole, 3 in part; then blocks 0-4
]
_TWO_WORKERS: list[list[Read]] = [
    [(("range", 0, 3), 0), (("whole", 0, 0), 1)],
    [(("range", 0, 3), 1), (("whole", 0, 0), 0)],
    [(("suffix", 16384, 0), 1), (("whole", 0, 0), 0)],
    [(("range", MiB + 300_000, 4096), 1), (("range", 0, 4 * MiB), 0)],
    [(("range", 2 * MiB, MiB), 1), (("whole", 0, 0), 0)],
]


def _ask(s3, key: str, kind: str, a: int, n: int) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
    if kind == "whole":
        return s3.get_object(Bucket="bkt", Key=key)["Body"].read(), DATA
    if kind == "suffix":
        return read(s3, f"bytes=-{a}", key), DATA[-a:]
    end = min(a + n, len(DATA)) - 1
    return read(s3, f"bytes={a}-{end}", key), DATA[a:end + 1]


@pytest.mark.parametrize("workers", [1, 2])
def test_any_reads_answer_the_origins_bytes_with_no_more_requests_than_reads(
        origin_endpoint, clean_origin, counted, tmp_path: Path, workers: int) -> None:
    base = _settings(counted, memory=96 * MiB)  # room for every example's object: no eviction in between
    origin = client(origin_endpoint, ("origin-key", "origin-secret"))
    origin.create_bucket(Bucket="bkt")
    run, secret = tmp_path / "run", secrets.token_bytes(32)
    run.mkdir()
    sets = [WorkerSet(i, workers, str(run), secret) for i in range(workers)] if workers > 1 else [None]
    nodes = [RunningGateway(base, workers=w).__enter__() for w in sets]
    try:
        # With two workers too, parts of blocks are kept (in the memory tier they share).
        assert all(node.server.config.app.s3.engine.reads.fetch.store.keeps_pieces for node in nodes)
        # A whole GET without x-amz-checksum-mode: one that asks for checksums after a ranged read
        # brought metadata without them costs a HEAD more (not what this file tests).
        clients = [client(node.endpoint, response_checksum_validation="when_required") for node in nodes]
        rounds = [0]

        @settings(max_examples=12, suppress_health_check=list(HealthCheck))
        @given(st.lists(st.tuples(_READS, st.integers(0, workers - 1)), min_size=1, max_size=6))
        def reads(sequence: list[Read]) -> None:
            rounds[0] += 1
            key = f"k{rounds[0]}"  # each example reads an object the gateway never saw
            origin.put_object(Bucket="bkt", Key=key, Body=DATA)
            counted.mark()
            sent = [Counter(node.server.config.app.s3.engine.origin.requests) for node in nodes]
            for (kind, a, n), via in sequence:
                got, expected = _ask(clients[via], key, kind, a, n)
                assert got == expected, (kind, a, n, via)
            requests, _ = counted.since()
            sent = [Counter(node.server.config.app.s3.engine.origin.requests) - before
                    for node, before in zip(nodes, sent)]
            assert requests <= len(sequence), (requests, sequence, sent)

        for shape in _EXAMPLES + (_TWO_WORKERS if workers > 1 else []):
            reads = example(shape)(reads)
        reads()
        assert rounds[0] > 1
    finally:
        for node in nodes:
            node.__exit__()
