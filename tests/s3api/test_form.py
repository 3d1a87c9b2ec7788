"""gateway.s3api.form: multipart/form-data read as POST Object reads it, however the body is cut."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.form import MAX_FIELD_BYTES, FilePart, FormReader, boundary_of

BOUNDARY = b"----form-boundary-7MA4YWxk"


def encode(fields: list[tuple[str, bytes]], file: bytes | None, *, after: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
           filename: str = "a.txt", boundary: bytes = BOUNDARY, preamble: bytes = b"") -> bytes:
    """A form as browsers and HTTP libraries write it: CRLF line ends, the file last but `after`."""
    out = [preamble]
    for name, value in fields:
        out.append(b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, name.encode(), value))
    if file is not None:
        out.append(b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
                   b"Content-Type: text/plain\r\n\r\n%s\r\n" % (boundary, filename.encode(), file))
    for name, value in after:
        out.append(b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (boundary, name.encode(), value))
    out.append(b"--%s--\r\n" % boundary)
    return b"".join(out)


async def _pieces(body: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    last = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(body))):
        yield body[last:cut]
        last = cut
    yield body[last:]


async def _read(body: bytes, cuts: list[int] = ()) -> tuple[dict[str, str], FilePart | None, bytes]:  # type: ignore[assignment]
    form = FormReader(_pieces(body, list(cuts)), BOUNDARY)
    fields, file = await form.fields()
    content = b""
    if file is not None:
        content = b"".join([piece async for piece in form.file_chunks()])
        await form.finish()
    return fields, file, content


def read(body: bytes, cuts: list[int] = ()) -> tuple[dict[str, str], FilePart | None, bytes]:  # type: ignore[assignment]
    return asyncio.run(_read(body, cuts))


names = st.text(st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")), min_size=1, max_size=12).filter(
    lambda n: n != "file")
values = st.text(max_size=40).map(lambda t: t.encode("utf-8")).filter(lambda v: b"\r\n--" not in v)
# File content made of the pieces most likely to confuse a parser: CRLFs, dashes, the boundary itself.
tricky = st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"-", b"--", BOUNDARY, BOUNDARY[:5], b"x", b"\x00", b"\xff"]),
                  max_size=40).map(b"".join).filter(lambda v: b"\r\n--" + BOUNDARY not in v)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(names, values, max_size=5), file=tricky | st.binary(max_size=300),
       cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_fields_and_file_come_back_whatever_the_cuts(fields, file, cuts):
    got_fields, part, content = read(encode(list(fields.items()), file), cuts)
    assert got_fields == {name: value.decode() for name, value in fields.items()}
    assert part == FilePart("a.txt", "text/plain")
    assert content == file


def test_a_large_file_streams_in_pieces():
    file = bytes(range(256)) * 4096  # 1 MiB
    body = encode([("key", b"k")], file)
    fields, _, content = read(body, list(range(0, len(body), 65536)))
    assert fields == {"key": "k"} and content == file


def test_names_are_case_insensitive_and_parameters_may_be_quoted_escaped_or_bare():
    body = (b"--%s\r\ncontent-disposition: form-data; NAME=Key\r\n\r\nv1\r\n"
            b"--%s\r\nContent-Disposition: form-data; name=\"X-Amz-Meta-A\"\r\n\r\nv2\r\n"
            b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\";c.txt\"\r\n\r\nF\r\n"
            b"--%s--" % (BOUNDARY, BOUNDARY, BOUNDARY, BOUNDARY))
    fields, part, content = read(body)
    assert fields == {"key": "v1", "x-amz-meta-a": "v2"}
    assert part == FilePart('a "b";c.txt', None) and content == b"F"


def test_a_preamble_and_fields_after_the_file_are_ignored():
    fields, _, content = read(encode([("key", b"k")], b"data", after=[("acl", b"public-read")], preamble=b"junk\r\n"))
    assert fields == {"key": "k"} and content == b"data"


def test_an_epilogue_is_read_to_the_end_within_the_bound():
    body = encode([("key", b"k")], b"data") + b"epilogue " * 100
    assert read(body, list(range(0, len(body), 50)))[2] == b"data"
    with pytest.raises(S3Error) as raised:
        read(body + b"e" * MAX_FIELD_BYTES, list(range(0, len(body), 50)))
    assert raised.value.code == "MaxPostPreDataLengthExceeded"


def test_a_form_without_a_file():
    fields, part, _ = read(encode([("key", b"k")], None))
    assert fields == {"key": "k"} and part is None


@pytest.mark.parametrize("body, code", [
    (encode([("key", b"k"), ("KEY", b"other")], b"x"), "InvalidArgument"),  # a field twice
    (encode([("key", b"\xff\xfe")], b"x"), "InvalidArgument"),  # not UTF-8
    (encode([("key", b"k")], b"data")[:-20], "MalformedPOSTRequest"),  # cut inside the file
    (encode([("key", b"k")], b"data")[:60], "MalformedPOSTRequest"),  # cut inside the fields
    (b"--%s\r\nno colon here\r\n\r\nv\r\n--%s--" % (BOUNDARY, BOUNDARY), "MalformedPOSTRequest"),
    (b"--%s\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nv\r\n--%s--" % (BOUNDARY, BOUNDARY),
     "MalformedPOSTRequest"),
    (b"--%s\r\nContent-Disposition: form-data\r\n\r\nv\r\n--%s--" % (BOUNDARY, BOUNDARY), "MalformedPOSTRequest"),
    (b"--%s junk\r\n" % BOUNDARY, "MalformedPOSTRequest"),
    (encode([("key", b"k" * MAX_FIELD_BYTES)], b"x"), "MaxPostPreDataLengthExceeded"),
    (encode([(f"f{i}", b"v" * 1000) for i in range(25)], b"x"), "MaxPostPreDataLengthExceeded"),
    (encode([("key", b"k")], b"x", after=[("tail", b"t" * (MAX_FIELD_BYTES + 1))]), "MaxPostPreDataLengthExceeded"),
])
def test_bad_forms_get_a_4xx(body, code):
    with pytest.raises(S3Error) as raised:
        read(body, list(range(0, len(body), 7)))
    assert raised.value.code == code and 400 <= raised.value.status < 500


def test_an_oversized_field_is_refused_before_the_body_ends():
    async def endless() -> AsyncIterator[bytes]:
        yield b"--%s\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n" % BOUNDARY
        while True:
            yield b"k" * 4096

    async def run() -> None:
        await FormReader(endless(), BOUNDARY).fields()

    with pytest.raises(S3Error) as raised:
        asyncio.run(run())
    assert raised.value.code == "MaxPostPreDataLengthExceeded"


@pytest.mark.parametrize("content_type, boundary", [
    ("multipart/form-data; boundary=abc", b"abc"),
    ('Multipart/Form-Data;charset=utf-8; boundary="a b:c"', b"a b:c"),
])
def test_boundary_of(content_type, boundary):
    assert boundary_of(content_type) == boundary


@pytest.mark.parametrize("content_type", ["multipart/form-data", "multipart/mixed; boundary=a", "text/plain",
                                          "multipart/form-data; boundary=", "multipart/form-data; boundary=" + "a" * 71,
                                          "multipart/form-data; boundary=caf\u00e9"])
def test_unusable_content_types_are_malformed_requests(content_type):
    with pytest.raises(S3Error) as raised:
        boundary_of(content_type)
    assert raised.value.code == "MalformedPOSTRequest"
