"""The peer API's wire format: signatures and query strings, pure."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from gateway.cluster.peers import HELD_MAX, decode_query, encode_query, held_masks, mask_indexes, sign, verify
from gateway.config import ClusterSettings

SECRET = b"cluster-secret"
# Keys as the S3 layer hands them over: any text, bytes that are not UTF-8 as surrogateescapes.
keys = st.one_of(st.text(st.characters(exclude_categories=("Cs",))),
                 st.binary().map(lambda raw: raw.decode("utf-8", "surrogateescape")))


@given(st.lists(st.integers(0, 3 * HELD_MAX)))
def test_the_blocks_of_a_held_question_come_back_as_they_were_asked(indexes):
    masks = held_masks(indexes)
    assert sorted(i for first, mask in masks for i in mask_indexes(first, mask)) == sorted(set(indexes))
    assert all(0 < mask < 1 << HELD_MAX for _, mask in masks)  # each question within its bound
    assert not indexes or len(masks) <= (max(indexes) - min(indexes)) // HELD_MAX + 1


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


def test_a_request_is_signed_once_a_minute_for_the_start_of_it(monkeypatch):
    import gateway.cluster.peers as peers

    client = peers.PeerClient(ClusterSettings(secret=SECRET.decode()))
    now = [60 * 16_666_667 + 59]  # the last second of a minute
    monkeypatch.setattr(peers, "time", SimpleNamespace(time=lambda: now[0]))
    params = [("bucket", "bkt"), ("key", "a/ké y"), ("index", "3")]
    query, signature = client._signed("/_peer/v1/block", params)
    assert query == encode_query(params)
    assert signature == sign(SECRET, "GET", "/_peer/v1/block", query, 60 * 16_666_667)
    assert verify(SECRET, signature, "GET", "/_peer/v1/block", query, now=now[0]) == 200
    assert client._signed("/_peer/v1/block", list(params)) == (query, signature)  # the same bytes again
    assert client._signed("/_peer/v1/open", params)[1] != signature
    now[0] += 1  # the next minute: signed anew
    assert client._signed("/_peer/v1/block", params) == (query, sign(SECRET, "GET", "/_peer/v1/block", query, now[0]))
    for index in range(peers._SIGNED_KEPT + 10):  # at most _SIGNED_KEPT kept, the oldest out first
        client._signed("/_peer/v1/block", [("index", str(index))])
    assert len(client._made) == peers._SIGNED_KEPT
