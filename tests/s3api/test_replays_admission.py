"""Which requests gateway.s3api.replays keeps: one is kept from its second arrival, what keeping
it takes is made only then, and requests sent once never push out one that is sent again.

Replays is driven as the HTTP protocol drives it: each arrival of a request's bytes is offered
to `answer` first (None: not kept), and, when the hit path answered it, to `keep`."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3api.replays import MAX_REQUEST_BYTES, SEEN, Replays


class Made:
    """What a keeper made, counted (the kept answer is not looked at: nothing is answered again here)."""

    def __init__(self) -> None:
        self.made = 0

    def keeper(self) -> Any:
        self.made += 1
        return object()


def arrive(replays: Replays, request: bytes, made: Made) -> None:
    assert replays.answer(request, []) is None  # never answered as kept here: asserted separately below
    replays.keep(request, made.keeper)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=30), max_size=120))
def test_a_request_is_kept_from_its_second_arrival_and_made_only_then(arrivals: list[int]) -> None:
    replays, made = Replays(None, None, size=1000), Made()  # type: ignore[arg-type]
    seen: dict[bytes, int] = {}
    for number in arrivals:
        request = b"GET /bkt/k%d HTTP/1.1\r\n\r\n" % number
        if request in replays.kept():
            continue  # the protocol answers it as kept: neither answer-None nor keep happens
        arrive(replays, request, made)
        seen[request] = seen.get(request, 0) + 1
    assert set(replays.kept()) == {request for request, count in seen.items() if count >= 2}
    assert made.made == len(replays.kept())  # nothing made for a request sent once


def test_requests_sent_once_do_not_push_out_one_sent_again() -> None:
    replays, made = Replays(None, None, size=4), Made()  # type: ignore[arg-type]
    again = b"GET /bkt/dashboard.png?X-Amz-Signature=1 HTTP/1.1\r\n\r\n"
    for _ in range(2):
        arrive(replays, again, made)
    assert replays.kept() == [again]
    for number in range(3 * SEEN):  # each signed anew (a new x-amz-date), as DuckDB or curl sends them
        arrive(replays, b"GET /bkt/part-%d HTTP/1.1\r\nx-amz-date: %d\r\n\r\n" % (number, number), made)
    assert replays.kept() == [again] and made.made == 1


def test_no_more_than_seen_requests_are_counted() -> None:
    replays = Replays(None, None, size=4)  # type: ignore[arg-type]
    for number in range(2 * SEEN):  # first arrivals, and kept ones found stale (counted as sent again)
        request = b"GET /bkt/k%d HTTP/1.1\r\n\r\n" % number
        assert replays.answer(request, []) is None
        replays._arrived(request + b"stale", again=True)
    assert len(replays._arrivals) == SEEN


def test_a_request_of_many_tiny_headers_is_not_kept() -> None:
    """Under MAX_REQUEST_BYTES, but 600 headers: ~100 KiB once parsed (loadtests/hostile_memory.py
    grew the gateway by ~90 MB with such requests sent twice each); a browser's 14 are kept."""
    replays, made = Replays(None, None, size=10), Made()  # type: ignore[arg-type]
    many = b"GET /bkt/k?X-Amz-Signature=1 HTTP/1.1\r\n" + b"a: b\r\n" * 600 + b"\r\n"
    browser = (b"GET /bkt/k?X-Amz-Signature=1 HTTP/1.1\r\n"
               + b"".join(b"sec-header-%d: %s\r\n" % (n, b"v" * 60) for n in range(14)) + b"\r\n")
    assert len(many) < MAX_REQUEST_BYTES
    for _ in range(2):
        arrive(replays, many, made)
        arrive(replays, browser, made)
    assert replays.kept() == [browser] and made.made == 1
