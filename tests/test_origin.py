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


class PiecesOrigin:
    """A raw HTTP/1.1 origin on this loop: every GET is answered with `pieces`, written one at a
    time with a pause between them (so the client receives the body in several reads), after
    `head`; then the connection stays open for the next request, unless `close` (a cut-off body).
    `origin` is the gateway's client for it."""

    def __init__(self, head: bytes, pieces: list[bytes], *, close: bool = False) -> None:
        self.head, self.pieces, self.close = head, pieces, close
        self.connections = 0

    async def __aenter__(self) -> PiecesOrigin:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.origin = Origin(OriginSettings(endpoint=f"http://127.0.0.1:{port}", access_key="a", secret_key="s",
                                            retries=0))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.origin.aclose()
        self._server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(self.head)
                for piece in self.pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.005)
                if self.close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


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
