"""BucketDocuments (a bucket's CORS rules) on an in-memory origin and an injected clock: a
document and its absence are kept `ttl`, a failure to read one `error_ttl`, and a write
through the gateway forgets at once."""

from __future__ import annotations

import pytest

from gateway.engine.bucketdocs import BucketDocuments
from gateway.errors import S3Error
from tests.engine.origin import MemoryOrigin
from tests.store.helpers import Clock

TTL, ERROR_TTL = 60.0, 5.0
RULES = b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>"


@pytest.fixture
def docs() -> tuple[BucketDocuments, MemoryOrigin, Clock]:
    origin, clock = MemoryOrigin(), Clock()
    origin.create_bucket("web")
    return BucketDocuments(origin, ttl=TTL, error_ttl=ERROR_TTL, clock=clock), origin, clock  # type: ignore[arg-type]


async def test_the_absence_of_rules_is_kept_for_the_ttl_then_read_again(docs):
    documents, origin, clock = docs
    assert await documents.get("web", "cors") is None
    origin.documents["web", "cors"] = RULES  # behind the gateway
    clock.now += TTL - 1
    assert await documents.get("web", "cors") is None and origin.requests["GET"] == 1
    clock.now += 1
    assert await documents.get("web", "cors") == RULES and origin.requests["GET"] == 2


async def test_rules_are_kept_for_the_ttl_and_a_change_is_seen_after_it(docs):
    documents, origin, clock = docs
    origin.documents["web", "cors"] = RULES
    assert await documents.get("web", "cors") == RULES
    changed = RULES.replace(b"*", b"https://example.com")
    origin.documents["web", "cors"] = changed
    clock.now += TTL / 2
    assert documents.get_now("web", "cors") == (True, RULES)
    clock.now += TTL / 2
    assert documents.get_now("web", "cors") == (False, None)  # stale: get asks the origin
    assert await documents.get("web", "cors") == changed


async def test_a_failure_is_kept_for_the_error_ttl(docs):
    documents, origin, clock = docs
    origin.down = True
    for _ in range(2):
        with pytest.raises(S3Error) as failed:
            await documents.get("web", "cors")
        assert failed.value.code == "ServiceUnavailable"
    assert origin.requests["GET"] == 1  # the failure was kept: a failing origin is not asked on every request
    origin.down = False
    clock.now += ERROR_TTL
    assert await documents.get("web", "cors") is None and origin.requests["GET"] == 2


async def test_a_write_through_the_gateway_forgets_at_once(docs):
    documents, origin, _ = docs
    assert await documents.get("web", "cors") is None
    origin.documents["web", "cors"] = RULES
    documents.forget("web")
    assert await documents.get("web", "cors") == RULES
