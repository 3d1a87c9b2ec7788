"""origin: reading the origin's error documents, and addressing keys that URL libraries mangle."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.origin import _encode_path, parse_error_document


def test_parse_error_document():
    body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code><Message>The specified key '
            b"does not exist.</Message><Key>a</Key><RequestId>R</RequestId><HostId>H</HostId></Error>")
    # The origin's request ids and resource are its own: the gateway answers with its own.
    assert parse_error_document(body) == ("NoSuchKey", "The specified key does not exist.", {"Key": "a"})


@pytest.mark.parametrize("body", [b"", b"<html>502 Bad Gateway</html>", b"<Error><Message>m</Message></Error>",
                                  b"<Error><Code>x", b"\xff\xfe",
                                  b'<!DOCTYPE x [<!ENTITY a "aaaa">]><Error><Code>&a;</Code></Error>'])
def test_parse_error_document_tolerates_garbage(body):
    assert parse_error_document(body) is None


@given(st.binary(max_size=200))
def test_parse_error_document_never_raises(body):
    parse_error_document(body)


@pytest.mark.parametrize("path, encoded", [
    ("/b/a/../c", "/b/a/%2E%2E/c"),
    ("/b/./x", "/b/%2E/x"),
    ("/b/sp ace+plus", "/b/sp%20ace%2Bplus"),
    ("/b//lead", "/b//lead"),
    ("/b/ü", "/b/%C3%BC"),
])
def test_encode_path_keeps_every_segment(path, encoded):
    assert _encode_path(path) == encoded
