"""The peer API's wire format: signatures and query strings, pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.cluster.peers import decode_query, encode_query, sign, verify

SECRET = b"cluster-secret"
# Keys as the S3 layer hands them over: any text, bytes that are not UTF-8 as surrogateescapes.
keys = st.one_of(st.text(st.characters(exclude_categories=("Cs",))),
                 st.binary().map(lambda raw: raw.decode("utf-8", "surrogateescape")))


@given(keys, st.text(st.characters(exclude_categories=("Cs",))), st.integers(0, 10**6))
def test_a_query_comes_back_as_it_was_sent(key, etag, index):
    params = [("bucket", "bkt"), ("key", key), ("etag", etag), ("vid", ""), ("index", str(index))]
    query = encode_query(params)
    assert query.isascii() and " " not in query
    assert decode_query(query) == dict(params)


@given(st.text(), st.text(), st.integers(0, 2**40))
def test_a_signature_verifies_only_for_its_own_request(path, query, when):
    header = sign(SECRET, "GET", path, query, when)
    assert verify(SECRET, header, "GET", path, query, now=when) == 200
    assert verify(SECRET, header, "GET", path, query + "x", now=when) == 403
    assert verify(SECRET, header, "GET", path + "x", query, now=when) == 403
    assert verify(SECRET, header, "PUT", path, query, now=when) == 403
    assert verify(b"other-secret", header, "GET", path, query, now=when) == 403


def test_stale_missing_and_malformed_signatures():
    header = sign(SECRET, "GET", "/_peer/v1/block", "a=1", 1_000_000)
    assert verify(SECRET, header, "GET", "/_peer/v1/block", "a=1", now=1_000_000 + 299) == 200
    assert verify(SECRET, header, "GET", "/_peer/v1/block", "a=1", now=1_000_000 + 301) == 403
    assert verify(SECRET, header, "GET", "/_peer/v1/block", "a=1", now=1_000_000 - 301) == 403
    for bad in (None, "", "v1", "v2 1000000 ab", "v1 soon ab", "AWS4-HMAC-SHA256 Credential=x"):
        assert verify(SECRET, bad, "GET", "/_peer/v1/block", "a=1", now=1_000_000) == 401
    assert verify(SECRET, "v1 1000000 \u00e9\u00e9", "GET", "/_peer/v1/block", "a=1", now=1_000_000) == 403


def test_a_timestamp_of_non_ascii_digits_is_malformed():
    # Found by fuzz/fuzz_peers.py: "³".isdigit() is true, int("³") raised ValueError out of the peer API.
    for when in ("\u00b380", "\u0661\u0662", "1" * 5000):
        assert verify(SECRET, f"v1 {when} ab", "GET", "/_peer/v1/block", "a=1", now=1_000_000) == 401
