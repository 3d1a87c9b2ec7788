"""objects: metadata from a HEAD or from a ranged GET, its shared (Redis) form, and headers as
a client can be sent them."""

from __future__ import annotations

import re
from email.header import decode_header

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.objects import (
    Missing,
    ObjectMeta,
    decode_meta,
    encode_meta,
    headers_carried,
    meta_from_headers,
    meta_from_ranged_get,
)

GET_206 = [
    ("Content-Length", "100"), ("Content-Range", "bytes 0-99/5000"), ("ETag", '"abc"'),
    ("Last-Modified", "Mon, 30 Nov 2026 10:00:00 GMT"), ("Content-Type", "text/csv"),
    ("x-amz-meta-owner", "data-team"), ("x-amz-checksum-crc32", "AAAAAA=="), ("x-amz-request-id", "R"),
]


def test_a_ranged_get_gives_the_whole_size_and_no_checksums():
    meta = meta_from_ranged_get(GET_206, 5000)
    assert meta.size == 5000 and meta.etag == '"abc"' and not meta.complete
    assert meta.headers["content-length"] == "5000" and meta.headers["x-amz-meta-owner"] == "data-team"
    assert "content-range" not in meta.headers and "x-amz-request-id" not in meta.headers
    assert not any(name.startswith("x-amz-checksum-") for name in meta.headers)
    assert meta_from_headers([("Content-Length", "5000"), ("ETag", '"abc"')]).complete


def test_the_shared_form_keeps_everything():
    for meta in (meta_from_ranged_get(GET_206, 5000), meta_from_headers(GET_206[2:] + [("Content-Length", "7")])):
        assert decode_meta(encode_meta(meta)) == meta
    missing = Missing("NoSuchKey", "gone", 404, (("x-amz-delete-marker", "true"),))
    assert decode_meta(encode_meta(missing)) == missing
    no_bucket = Missing("NoSuchBucket", "The specified bucket does not exist", 404, (), (("BucketName", "nobucket"),))
    assert decode_meta(encode_meta(no_bucket)) == no_bucket
    written_before = orjson.loads(encode_meta(no_bucket))
    del written_before["missing"]["extra"]  # by a node of the version before `extra`
    assert decode_meta(orjson.dumps(written_before)) == Missing(no_bucket.code, no_bucket.message, 404, ())


def test_an_entry_of_another_format_is_a_miss():
    old = orjson.loads(encode_meta(ObjectMeta(1, '"e"', meta_from_headers([]).last_modified, {})))
    old["v"] = 1
    del old["complete"]
    assert decode_meta(orjson.dumps(old)) is None
    assert decode_meta(b"not json") is None


# --- headers a client can be sent (objects.headers_carried) ---------------------------------

_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _decoded(value: str) -> bytes:
    """An RFC 2047 encoded-word's bytes, by the standard library's decoder."""
    [(raw, charset)] = decode_header(value)
    assert charset == "utf-8" and isinstance(raw, bytes), value
    return raw


def test_what_a_header_can_carry_is_kept_byte_for_byte():
    headers = {"content-type": "text/plain", "x-amz-meta-city": "Montr\xc3\xa9al", "x-amz-meta-tab": "a\tb",
               "content-disposition": 'attachment; filename="r\xe9sum\xe9.txt"', "x-amz-meta-old": "caf\xe9"}
    assert headers_carried(headers) == headers
    meta = meta_from_headers([("Content-Length", "3"), *headers.items()])
    assert {n: meta.headers[n] for n in headers} == headers


def test_a_control_character_in_user_metadata_is_mime_encoded():
    meta = meta_from_headers([("Content-Length", "3"), ("x-amz-meta-note", "one\x01two"),
                              ("x-amz-meta-city", "Montr\xc3\xa9al\x0a"), ("x-amz-meta-plain", "ok")])
    assert meta.headers["x-amz-meta-note"] == "=?UTF-8?B?b25lAXR3bw==?="
    assert _decoded(meta.headers["x-amz-meta-city"]).decode() == "Montréal\n"
    assert meta.headers["x-amz-meta-plain"] == "ok" and "x-amz-missing-meta" not in meta.headers


def test_what_cannot_be_sent_is_left_out_and_user_metadata_counted():
    carried = headers_carried({
        "content-type": "text/plain", "content-disposition": "a\x02b", "cache-control": "no\x7f",
        "x-amz-meta-odd(name)": "v", "x-amz-meta-sp ace": "v", "x-amz-meta-latin1": "caf\xe9\x01",  # not UTF-8
        "x-amz-missing-meta": "2",  # the origin's own
    })
    assert carried == {"content-type": "text/plain", "x-amz-missing-meta": "5"}
    assert headers_carried(carried) == carried


def test_the_shared_form_of_an_older_node_is_made_safe():
    written = orjson.loads(encode_meta(meta_from_headers([("Content-Length", "3")])))
    written["headers"]["x-amz-meta-note"] = "one\x01two"  # by a node before headers_carried
    written["headers"]["content-disposition"] = "a\x02b"
    meta = decode_meta(orjson.dumps(written))
    assert isinstance(meta, ObjectMeta)
    assert meta.headers["x-amz-meta-note"] == "=?UTF-8?B?b25lAXR3bw==?=" and "content-disposition" not in meta.headers
    assert decode_meta(encode_meta(meta)) == meta


_NAMES = st.tuples(st.sampled_from(["x-amz-meta-", "content-", ""]),
                   st.text(alphabet="ab-_.()é \x01:", min_size=1, max_size=6)).map("".join)
_VALUES = st.one_of(st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=12),  # bytes, as latin-1 text
                    st.text(max_size=12).map(lambda t: t.encode().decode("latin-1")))  # UTF-8 bytes of any text


@given(st.dictionaries(_NAMES, _VALUES, max_size=8))
def test_every_header_carried_is_safe_and_every_value_comes_back(headers: dict[str, str]):
    carried = headers_carried(headers)
    for name, value in carried.items():
        assert _TOKEN.fullmatch(name) and not _FORBIDDEN.search(value), (name, value)
    left_out = 0
    for name, value in headers.items():
        if name not in carried:
            left_out += name.startswith("x-amz-meta-")
            assert not _TOKEN.fullmatch(name) or _FORBIDDEN.search(value)
        elif not _FORBIDDEN.search(value):
            assert carried[name] == value  # what could be sent is sent as it was
        else:
            assert name.startswith("x-amz-meta-") and _decoded(carried[name]) == value.encode("latin-1")
    assert carried.get("x-amz-missing-meta") == (str(left_out) if left_out else None)
    assert headers_carried(carried) == carried
