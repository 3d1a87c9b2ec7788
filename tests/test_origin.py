"""origin: reading the origin's error documents, addressing keys that URL libraries mangle, and
reading bodies that come in pieces, chunked, longer than wanted or cut off."""

from __future__ import annotations

import asyncio
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import OriginSettings
from gateway.errors import S3Error
from gateway.origin import Origin, _encode_path, parse_error_document
from tests.test_rangeclient import RawServer

KiB = 1024


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


class PiecesOrigin(RawServer):
    """A raw HTTP/1.1 origin on this loop (tests/test_rangeclient.py's RawServer): every GET is
    answered with `head` and `pieces`, written one at a time with a pause between them (so the
    client receives the body in several reads); then the connection stays open for the next
    request, unless `close` (a cut-off body). `origin` is the gateway's client for it."""

    def __init__(self, head: bytes, pieces: list[bytes], *, close: bool = False) -> None:
        wire = [head + pieces[0], *pieces[1:]] if pieces else [head]
        super().__init__(lambda _: wire, close_after=1 if close else None)

    async def __aenter__(self) -> PiecesOrigin:
        await super().__aenter__()
        self.origin = Origin(OriginSettings(endpoint=f"http://{self.host}", access_key="a", secret_key="s", retries=0))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.origin.aclose()
        await super().__aexit__(*exc)


def _head(length: int) -> bytes:
    return f"HTTP/1.1 206 Partial Content\r\nContent-Length: {length}\r\n\r\n".encode()


async def test_read_at_most_joins_the_pieces_and_gives_the_connection_back():
    body = os.urandom(300 * KiB)
    pieces = [body[i:i + 64 * KiB] for i in range(0, len(body), 64 * KiB)]
    async with PiecesOrigin(_head(len(body)), pieces) as server:
        for _ in range(2):
            response = await server.origin.send("GET", "b", "k")
            assert await response.read_at_most(len(body)) == body
    assert server.connections == 1  # read to its end: the second GET reused the connection


async def test_read_at_most_reads_every_chunk_of_a_chunked_body():
    chunks = [os.urandom(n) for n in (10 * KiB, 1, 70 * KiB)]
    # Each chunk's end comes in the next write: the client has taken the chunk's bytes before it
    # learns that the chunk ended (aiohttp then says so with an empty piece, not the body's end).
    wire = [f"{len(c):x}\r\n".encode() + c for c in chunks]
    wire = [wire[0], *(b"\r\n" + w for w in wire[1:]), b"\r\n0\r\n\r\n"]
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    async with PiecesOrigin(head, wire) as server:
        response = await server.origin.send("GET", "b", "k")
        assert await response.read_at_most(100 * KiB) == b"".join(chunks)


async def test_read_at_most_stops_past_the_limit_and_drops_the_connection():
    body = os.urandom(200 * KiB)
    async with PiecesOrigin(_head(len(body)), [body[:64 * KiB], body[64 * KiB:]]) as server:
        response = await server.origin.send("GET", "b", "k")
        data = await response.read_at_most(10 * KiB)
        assert len(data) > 10 * KiB and body.startswith(data)
        response = await server.origin.send("GET", "b", "k")
        assert await response.read_at_most(len(body)) == body
    assert server.connections == 2  # the first was not read to its end: not reused


async def test_read_at_most_of_a_body_cut_off_raises_service_unavailable():
    body = os.urandom(100 * KiB)
    async with PiecesOrigin(_head(len(body)), [body[:30 * KiB]], close=True) as server:
        response = await server.origin.send("GET", "b", "k")
        with pytest.raises(S3Error) as cut:
            await response.read_at_most(len(body))
    assert cut.value.code == "ServiceUnavailable"


async def test_read_at_most_of_answers_without_a_body_returns_at_once():
    # HEAD answers share aiohttp's one empty payload; reading it a second time must end too
    # (a loop on StreamReader.readchunk spun on it for ever, the event loop with it).
    async with PiecesOrigin(_head(5), []) as server:
        for _ in range(3):
            response = await server.origin.send("HEAD", "b", "k")
            assert await asyncio.wait_for(response.read_at_most(1024), 5) == b""
