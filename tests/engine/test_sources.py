"""What the engine's block sources share (engine.sources): an owner's open answer checked, failures
counted each time and logged at most every few seconds for each owner."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from gateway.cluster.peers import OpenAnswer, PeerError
from gateway.engine.sources import Failures, opened_from, version_of
from gateway.objects import ObjectMeta, encode_meta, meta_from_headers
from gateway.store.blocks import BlockId

BLOCK = 64 * 1024
META = meta_from_headers([("etag", '"e"'), ("content-length", str(BLOCK + 10)),
                          ("last-modified", "Wed, 01 Jan 2025 00:00:00 GMT")])


def nothing_in_files(block: BlockId) -> bytes | None:
    return None


def test_an_open_answer_gives_the_metadata_and_the_block():
    opened = opened_from(OpenAnswer(encode_meta(META), b"x" * 10, cached=True), "b", "k", 1, BLOCK, nothing_in_files)
    assert opened is not None
    meta, first = opened
    assert isinstance(meta, ObjectMeta) and meta.etag == '"e"' and meta.size == BLOCK + 10
    assert first.block == BlockId("b", "k", version_of(META), 1) and first.data == b"x" * 10
    assert not first.from_origin  # the owner had it cached: a hit for the reader


def test_a_block_left_in_the_nodes_files_is_read_from_there_or_found_gone():
    answer = OpenAnswer(encode_meta(META), None, cached=False)
    files = {BlockId("b", "k", version_of(META), 0): b"y" * BLOCK}
    opened = opened_from(answer, "b", "k", 0, BLOCK, files.get)
    assert opened is not None and opened[1].data == b"y" * BLOCK and opened[1].from_origin
    assert opened_from(answer, "b", "k", 0, BLOCK, nothing_in_files) is None  # evicted meanwhile


@pytest.mark.parametrize("answer", [OpenAnswer(encode_meta(META), b"x" * 9, cached=True),  # a byte short
                                    OpenAnswer(encode_meta(META), b"x" * BLOCK, cached=True),  # a whole block
                                    OpenAnswer(b"not metadata", b"x" * 10, cached=True)])
def test_an_open_answer_that_does_not_add_up_is_a_failure(answer: OpenAnswer):
    with pytest.raises(PeerError):
        opened_from(answer, "b", "k", 1, BLOCK, nothing_in_files)


def test_failures_are_each_counted_and_logged_at_most_every_few_seconds_per_owner(caplog: pytest.LogCaptureFixture):
    now = [100.0]
    stats: Counter[str] = Counter()
    failures = Failures(logging.getLogger("gateway.engine"), stats, "worker_failure", every=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "gateway.engine"):
        failures.failed("worker 1", PeerError("reset"), "asking the origin")
        failures.failed("worker 1", PeerError("reset"), "asking the origin")
        failures.failed("worker 2", PeerError("timed out"), "asking the origin")
        now[0] += 9.9
        failures.failed("worker 1", PeerError("reset"), "asking the origin")
        now[0] += 0.1
        failures.failed("worker 1", PeerError("refused"), "asking the origin")
    assert stats["worker_failure"] == 5
    assert [record.getMessage() for record in caplog.records] == [
        "worker 1 did not answer (reset); asking the origin",
        "worker 2 did not answer (timed out); asking the origin",
        "worker 1 did not answer (refused); asking the origin",
    ]
