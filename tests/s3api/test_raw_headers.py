"""responses.raw_headers, which the hit path writes, are the header lines body_response and
empty_response send for the same answer (the ASGI path's), whatever the headers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.s3api.responses import body_response, empty_response, raw_headers

NAMES = st.sampled_from(["Content-Type", "content-length", "ETag", "x-amz-meta-a", "X-Amz-Meta-A", "x-cache",
                         "x-amz-request-id", "Content-Range", "last-modified", "accept-ranges"])
VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xff), max_size=12)


@given(headers=st.dictionaries(NAMES, VALUES, max_size=8), body=st.binary(max_size=64),
       status=st.sampled_from([200, 206]), head=st.booleans())
def test_raw_headers_are_what_the_responses_send(headers: dict[str, str], body: bytes, status: int, head: bool) -> None:
    if head:
        expected = empty_response("0123456789ABCDEF", status=status, headers=headers).raw_headers
        assert raw_headers(headers, "0123456789ABCDEF", 0) == expected
    else:
        expected = body_response(body, "0123456789ABCDEF", status=status, headers=headers).raw_headers
        assert raw_headers(headers, "0123456789ABCDEF", len(body)) == expected
