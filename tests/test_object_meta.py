"""objects: metadata from a HEAD or from a ranged GET, and its shared (Redis) form."""

from __future__ import annotations

import orjson

from gateway.objects import Missing, ObjectMeta, decode_meta, encode_meta, meta_from_headers, meta_from_ranged_get

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
