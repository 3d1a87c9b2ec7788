"""Metadata on an in-memory origin and an injected clock: fresh answers from memory, revalidation
past the TTL, remembered 404s, stale answers while the origin is down, one origin request
however many readers miss at once, and nothing cached across an invalidation. Time moves
only when a test moves it (tests/integration/test_metadata_cache.py covers the same through
moto and a gateway, within the TTL)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from gateway.config import MetadataSettings
from gateway.engine.coherence import Coherence
from gateway.engine.metadata import Metadata
from gateway.errors import S3Error
from tests.engine.origin import MemoryOrigin
from tests.engine.test_coherence import Channel
from tests.store.helpers import Clock
from tests.waiting import eventually

TTL, NEGATIVE_TTL, STALE_IF_ERROR = 60.0, 5.0, 600.0


class Node:
    """Metadata of one node (no Redis, no block cache) before a MemoryOrigin holding bucket `bkt`."""

    def __init__(self, **settings: object) -> None:
        self.origin = MemoryOrigin()
        self.origin.create_bucket("bkt")
        self.clock = Clock()
        self.channel = Channel()  # the invalidation channel, heard
        self.coherence = Coherence(self.channel)  # type: ignore[arg-type]
        chosen = MetadataSettings(ttl=TTL, negative_ttl=NEGATIVE_TTL, stale_if_error=STALE_IF_ERROR)
        self.metadata = Metadata(self.origin, dataclasses.replace(chosen, **settings), self.coherence,  # type: ignore[arg-type]
                                 clock=self.clock)

    async def etag(self, key: str = "k") -> str:
        return (await self.metadata.head_object("bkt", key)).meta.etag

    def heads(self) -> int:
        return self.origin.requests["HEAD"]


async def test_metadata_is_answered_from_memory_within_the_ttl():
    node = Node()
    etag = node.origin.put("bkt", "k", b"one")
    first = await node.metadata.head_object("bkt", "k")
    assert first.meta.etag == etag and first.meta.size == 3 and not first.from_memory
    node.origin.put("bkt", "k", b"two, behind the gateway")
    node.clock.now += TTL  # (at the TTL itself: still fresh)
    again = await node.metadata.head_object("bkt", "k")
    assert again.meta.etag == etag and again.from_memory
    assert node.heads() == 1 and node.metadata.stats["meta_hit"] == 1


async def test_a_change_behind_the_gateway_is_seen_past_the_ttl():
    node = Node()
    old = node.origin.put("bkt", "k", b"one")
    assert await node.etag() == old
    new = node.origin.put("bkt", "k", b"two, longer")
    node.clock.now += TTL + 1
    assert await node.etag() == new
    assert node.metadata.stats["meta_revalidate"] == 1
    assert node.origin.sent[-1][3]["if-none-match"] == old  # a conditional HEAD
    node.clock.now += TTL / 2
    assert await node.etag() == new and node.heads() == 2  # the new answer is fresh again


async def test_an_unchanged_object_is_revalidated_not_fetched_again_and_its_age_starts_again():
    node = Node()
    etag = node.origin.put("bkt", "k", b"same")
    await node.etag()
    node.clock.now += TTL + 1
    assert await node.etag() == etag
    stats = node.metadata.stats
    assert (stats["meta_revalidate"], stats["meta_not_modified"], stats["meta_miss"]) == (1, 1, 1)
    node.clock.now += TTL  # counted from the revalidation, not from the first answer
    assert await node.etag() == etag and node.heads() == 2


async def test_a_404_is_remembered_for_the_negative_ttl():
    node = Node()
    for _ in range(2):
        with pytest.raises(S3Error) as missing:
            await node.metadata.head_object("bkt", "later")
        assert missing.value.code == "NoSuchKey" and missing.value.status == 404
    assert node.metadata.stats["meta_hit"] == 1  # the second from memory
    etag = node.origin.put("bkt", "later", b"now")
    node.clock.now += NEGATIVE_TTL
    with pytest.raises(S3Error):
        await node.metadata.head_object("bkt", "later")  # still remembered
    node.clock.now += 1
    assert await node.etag("later") == etag


async def test_a_missing_bucket_is_remembered_with_the_origins_own_error():
    node = Node()
    errors = []
    for _ in range(2):
        with pytest.raises(S3Error) as missing:
            await node.metadata.head_object("no-such-bucket", "k")
        errors.append(missing.value)
    assert [(e.code, e.extra) for e in errors] == [("NoSuchBucket", {"BucketName": "no-such-bucket"})] * 2
    assert node.metadata.stats["meta_hit"] == 1


async def test_stale_metadata_is_served_while_the_origin_is_down_within_stale_if_error():
    node = Node()
    etag = node.origin.put("bkt", "k", b"kept")
    await node.etag()
    node.origin.down = True
    node.clock.now += TTL + STALE_IF_ERROR  # past the TTL, and at the end of the stale bound
    assert await node.etag() == etag
    assert node.metadata.stats["meta_stale_served"] == 1
    node.clock.now += 1
    with pytest.raises(S3Error) as down:
        await node.metadata.head_object("bkt", "k")
    assert down.value.code == "ServiceUnavailable"
    with pytest.raises(S3Error) as never_seen:
        await node.metadata.head_object("bkt", "never-seen")
    assert never_seen.value.code == "ServiceUnavailable"


async def test_strict_mode_asks_the_origin_every_time():
    node = Node(strict=True)
    node.origin.put("bkt", "k", b"one")
    await node.etag()
    changed = node.origin.put("bkt", "k", b"two")
    assert await node.etag() == changed  # no time passed
    node.origin.delete("bkt", "k")
    with pytest.raises(S3Error) as gone:
        await node.metadata.head_object("bkt", "k")
    assert gone.value.code == "NoSuchKey" and node.heads() >= 3


async def test_concurrent_misses_make_one_origin_request():
    node = Node()
    etag = node.origin.put("bkt", "k", b"popular")
    node.origin.hold()
    readers = [asyncio.create_task(node.etag()) for _ in range(8)]
    await eventually(lambda: node.heads() == 1 and node.metadata.stats["meta_miss"] == 8, "every reader missed")
    node.origin.release()
    assert await asyncio.gather(*readers) == [etag] * 8
    assert node.heads() == 1 and node.metadata.stats["meta_miss_shared"] == 7


async def test_an_answer_asked_for_before_an_invalidation_is_returned_not_cached():
    node = Node()
    old = node.origin.put("bkt", "k", b"before the write")
    node.origin.hold()
    before = asyncio.create_task(node.etag())
    await eventually(lambda: node.heads() == 1, "the first reader asks the origin")
    node.coherence.invalidated("bkt")  # a write lands meanwhile
    after = asyncio.create_task(node.etag())  # a read that starts after the write: its own request
    await eventually(lambda: node.heads() == 2, "the reader after the write asks the origin too")
    node.origin.release()
    assert await before == old and await after == old
    assert node.metadata.stats["meta_not_cached_raced"] == 1  # the first one's answer
    assert await node.etag() == old and node.metadata.stats["meta_hit"] == 1  # the second one's was cached
    assert node.heads() == 2


async def test_nothing_is_answered_from_memory_while_invalidations_may_go_unheard():
    node = Node()
    node.origin.put("bkt", "k", b"one")
    await node.etag()
    node.channel.heard = False  # Redis down or hung: a write elsewhere may have gone unheard
    changed = node.origin.put("bkt", "k", b"two")
    assert await node.etag() == changed and node.metadata.stats["meta_hit"] == 0
    node.channel.heard = True
    assert await node.etag() == changed and node.metadata.stats["meta_hit"] == 1


async def test_a_request_with_its_own_read_headers_bypasses_the_cache():
    node = Node()
    node.origin.put("bkt", "k", b"one")
    await node.etag()
    keyed = {"x-amz-server-side-encryption-customer-key": "a-key"}
    await node.metadata.head_object("bkt", "k", headers=keyed)
    assert node.heads() == 2 and node.origin.sent[-1][3]["x-amz-server-side-encryption-customer-key"] == "a-key"
    assert node.metadata.stats["meta_hit"] == 0
