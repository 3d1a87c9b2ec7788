"""accounting.Sending: an ASGI answer recorded once, as its last bytes go to the server, with
the status, bytes and x-cache it went out with; or at the end when they never went."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.s3api.accounting import Accounts, Sending
from tests.s3api.test_accounts import Books


def _accounts() -> tuple[Accounts, list[dict[str, Any]], list[str]]:
    books = Books()
    buckets = books.buckets
    accounts = Accounts(books)
    entries: list[dict[str, Any]] = []
    accounts.observers.append(entries.append)
    return accounts, entries, buckets


def test_an_answer_is_recorded_as_its_last_bytes_go_and_only_then() -> None:
    accounts, entries, _ = _accounts()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        assert len(entries) == (1 if message.get("body") == b"two" else 0)  # recorded before it goes
        sent.append(message)

    sending = Sending(accounts, "GET", "RID", send)

    async def answer() -> None:
        await sending.send({"type": "http.response.start", "status": 206,
                            "headers": [(b"x-cache", b"hit-mem"), (b"content-range", b"bytes 0-5/99")]})
        await sending.send({"type": "http.response.body", "body": b"one", "more_body": True})
        await sending.send({"type": "http.response.body", "body": b"two"})

    asyncio.run(answer())
    sending.done()  # the end of the request: already recorded
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
    assert len(entries) == 1
    entry = entries[0]
    assert (entry["status"], entry["bytes"], entry["cache"], entry["request_id"]) == (206, 6, "hit-mem", "RID")
    assert accounts.stats.requests == {("unknown", 206): 1}  # no request parsed: no operation


def test_an_answer_cut_short_is_recorded_at_the_end() -> None:
    accounts, entries, buckets = _accounts()

    async def send(message: dict[str, Any]) -> None:
        raise OSError("the client left")

    sending = Sending(accounts, "GET", "RID", send)
    try:
        asyncio.run(sending.send({"type": "http.response.start", "status": 200, "headers": []}))
    except OSError:
        pass
    assert entries == []
    sending.done()
    sending.done()
    assert len(entries) == 1 and entries[0]["status"] == 200 and entries[0]["bytes"] == 0
    assert buckets == []  # no request parsed: no bucket shown to exist
