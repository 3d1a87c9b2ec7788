"""accounting.Accounts.record: the one function that keeps every book of an answer of the S3
endpoint, whichever way it was made (the app, the hit path below it, a kept request sent again):
the request counts, the engine's (heat, the metadata hit of an answer made below ASGI), the bucket
it shows to exist, the access log."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.s3api.accounting import (ASGI, BELOW_ASGI, REPLAYED, Accounts, Answered, Served, access_entry, note_answer,
                                     outcome_of)
from gateway.s3api.responses import raw_headers


class Books:
    """What the engine was told (accounting.EngineBooks)."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, str, bool, bool]] = []  # (bucket, key, read, from_fresh_now) of each answer
        self.buckets: list[str] = []

    def answered(self, bucket: str, key: str, read: bool, from_fresh_now: bool) -> None:
        self.reads.append((bucket, key, read, from_fresh_now))

    def bucket_exists(self, bucket: str) -> None:
        self.buckets.append(bucket)


def _answered(operation: str, status: int, *, user: str | None = "AKID") -> Answered:
    entry = access_entry(None, "GET" if operation == "GetObject" else "HEAD", {"status": status})
    entry.update(operation=operation, bucket="bkt", key="k", user=user)
    return Answered(operation, status, entry)


def _recorded(served: Served) -> tuple[Accounts, Books, list[dict[str, Any]]]:
    books = Books()
    accounts = Accounts(books)
    entries: list[dict[str, Any]] = []
    accounts.observers.append(entries.append)
    accounts.record(served)
    return accounts, books, entries


@pytest.mark.parametrize("way", [ASGI, BELOW_ASGI, REPLAYED])
def test_a_get_hit_keeps_the_same_books_whichever_way_it_was_made(way: int) -> None:
    accounts, books, entries = _recorded(Served(_answered("GetObject", 206), "RID", 5, "hit-mem", 0.002, way))
    stats = accounts.stats
    assert stats.requests == {("GetObject", 206): 1} and stats.served == {"memory": 5}
    assert (stats.below_asgi, stats.replayed) == {ASGI: (0, 0), BELOW_ASGI: (1, 0), REPLAYED: (1, 1)}[way]
    # one more hit of the object; the metadata hit too when fresh_now gave the metadata (not counted there)
    assert books.reads == [("bkt", "k", True, way != ASGI)]
    assert books.buckets == ["bkt"]
    assert len(entries) == 1
    assert {k: entries[0][k] for k in ("request_id", "bytes", "cache", "status", "key")} == \
        {"request_id": "RID", "bytes": 5, "cache": "hit-mem", "status": 206, "key": "k"}


def test_a_head_is_no_hit_of_the_object() -> None:
    _, books, _ = _recorded(Served(_answered("HeadObject", 200), "RID", 0, "hit-mem", 0.001))
    assert books.reads == []  # the app's HEAD counted its metadata hit as it looked it up
    _, books, _ = _recorded(Served(_answered("HeadObject", 200), "RID", 0, "hit-mem", 0.001, BELOW_ASGI))
    assert books.reads == [("bkt", "k", False, True)]


@pytest.mark.parametrize("status, cache", [(304, None), (404, None), (200, None)])
def test_a_get_that_read_nothing_of_the_engine_is_no_hit(status: int, cache: str | None) -> None:
    """A 304, an error, or a GET relayed from the origin (partNumber: no x-cache)."""
    accounts, books, entries = _recorded(Served(_answered("GetObject", status, user=None), "RID", 0, cache, 0.001))
    assert books.reads == [] and books.buckets == []  # (anonymous: no bucket vouched for)
    assert accounts.stats.requests == {("GetObject", status): 1} and len(entries) == 1


@pytest.mark.parametrize("status, headers", [
    (200, {"content-length": "12", "x-cache": "hit-mem", "etag": '"e"'}),
    (206, {"content-range": "bytes 0-3/12", "content-length": "4", "x-cache": "hit-disk"}),
    (200, {"content-range": "bytes 0-11/12", "content-length": "12", "x-cache": "hit-peer"}),
    (206, {"content-length": "4"}),
])
def test_the_hit_paths_outcome_is_what_the_apps_lines_show(status: int, headers: dict[str, str]) -> None:
    """outcome_of (the hit path, headers by name) keeps of an answer what note_answer (the app,
    header lines as sent) keeps of the same answer (object_answer always names its Content-Length)."""
    shown: dict[str, Any] = {"bytes": 4, "cache": None}
    note_answer(shown, status, raw_headers(headers, "RID", 4))
    assert outcome_of(status, headers, 4) == shown
