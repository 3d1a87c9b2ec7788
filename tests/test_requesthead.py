"""gateway.requesthead reads a request head as uvicorn's httptools protocol reads it, or not at all.

The same bytes go to `read_head` and to uvicorn's own HttpToolsProtocol (on a transport that
keeps what is written): whenever `read_head` gives a scope, uvicorn started exactly one request
with the same scope, keep-alive and no body, and answered no 400. The bytes are requests as
botocore signs them (header-signed and presigned) and mutations of them: whitespace, case,
control and non-ASCII bytes, obs-fold, bare line feeds, bodies, pipelining, other methods and
versions, connection headers.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import uvicorn
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from gateway.requesthead import read_head

CREDENTIALS = Credentials("AKIAHEAD", "head-secret")


class _Transport(asyncio.Transport):
    """A transport that keeps what the protocol writes and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 9000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Started(HttpToolsProtocol):
    """uvicorn's protocol, keeping the requests it would start instead of starting them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started: list[Any] = []  # their request cycles

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        self.started.append(cycle)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never run")


_LOOP = asyncio.new_event_loop()
_CONFIG = uvicorn.Config(_app, lifespan="off", log_level="critical")


def uvicorn_reads(data: bytes) -> _Started:
    protocol = _Started(config=_CONFIG, server_state=ServerState(), app_state={"kept": 1}, _loop=_LOOP)
    protocol.connection_made(_Transport())
    protocol.data_received(data)
    return protocol


def connection_fields(protocol: HttpToolsProtocol) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": protocol.asgi_version, "spec_version": "2.3"}, "http_version": "1.1",
            "server": protocol.server, "client": protocol.client, "scheme": protocol.scheme,
            "root_path": protocol.root_path, "state": protocol.app_state}


def as_sent(method: str, path: str, query: str, headers: dict[str, str], signing: str) -> bytes:
    """A request head as botocore signs it, as it goes on the wire."""
    url = f"http://127.0.0.1:9000{quote(path, safe='/~')}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    if signing == "header":
        S3SigV4Auth(CREDENTIALS, "s3", "us-east-1").add_auth(request)
    elif signing == "presigned":
        S3SigV4QueryAuth(CREDENTIALS, "s3", "us-east-1", expires=60).add_auth(request)
    target = request.url.removeprefix("http://127.0.0.1:9000")
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1:9000"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


def _replace(old: bytes, new: bytes) -> Any:
    return lambda data: data.replace(old, new, 1)


MUTATIONS = [
    _replace(b": ", b":"), _replace(b": ", b":  "), _replace(b": ", b": \t"), _replace(b": ", b" : "),
    _replace(b"\r\n\r\n", b" \r\n\r\n"), _replace(b"\r\n\r\n", b"\t\r\n\r\n"),
    _replace(b"Host", b"HOST"), _replace(b"Host: ", b"Host:\r\n "), _replace(b"\r\nHost", b"\nHost"),
    _replace(b"\r\n\r\n", b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\nabc"),
    _replace(b"\r\n\r\n", b"\r\nContent-Length: 0\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: chunked\r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nConnection: keep-alive\r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nUpgrade: h2c\r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nX-Empty:\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nX-Empty: \r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nX-Dup: 1\r\nX-Dup: 2\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nX-Bin: a\x01b\r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nX-Del: a\x7fb\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nX-Latin: caf\xe9\r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nX-Utf8: \xc3\xa9\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\nX Space: 1\r\n\r\n"),
    _replace(b"\r\n\r\n", b"\r\nX-Tab: a\tb\r\n\r\n"), _replace(b"\r\n\r\n", b"\r\n: novalue\r\n\r\n"),
    _replace(b"HTTP/1.1", b"HTTP/1.0"), _replace(b"HTTP/1.1", b"HTTP/2.0"), _replace(b"HTTP/1.1", b"http/1.1"),
    _replace(b" HTTP/1.1", b"  HTTP/1.1"), _replace(b"GET ", b"get "), _replace(b"GET ", b"GET  "),
    _replace(b"GET ", b"POST "), _replace(b"HEAD ", b"PUT "), _replace(b" /", b" http://127.0.0.1:9000/"),
    _replace(b" /", b" *"), _replace(b" /", b" /%2e%2E/"), _replace(b" /", b" /#frag"), _replace(b" /", b" /a b"),
    _replace(b" /", b" /\xc3\xa9"), _replace(b" /", b" /%ZZ"), _replace(b" /", b" /%C3%A9"), _replace(b" /", b" /a?"),
    _replace(b" /", b" /a??b"), _replace(b" /", b" //"), _replace(b" /", b" /[x]"), _replace(b" /", b" /a\"b"),
    _replace(b"\r\n\r\n", b"\r\n"), _replace(b"\r\n\r\n", b"\r\n\r\n\r\n"), lambda data: b"\r\n" + data,
    lambda data: data[:-1], lambda data: data + b"\x00",
]


@settings(max_examples=600, deadline=None)
@given(
    method=st.sampled_from(["GET", "HEAD"]),
    path=st.sampled_from(["/bucket/key", "/bucket/dir/part-0.parquet", "/bucket/a b+c", "/bucket/é€", "/b/%41",
                          "/", "/bucket/a;b=c:d@e!$&'()*,"]),
    query=st.sampled_from(["", "x-id=GetObject", "versionId=a%2Fb", "list-type=2&prefix=a%20b", "acl"]),
    headers=st.dictionaries(st.sampled_from(["amz-sdk-invocation-id", "Range", "If-None-Match", "User-Agent",
                                             "x-amz-checksum-mode", "Accept-Encoding"]),
                            st.sampled_from(["bytes=0-99", '"etag"', "Boto3/1.36 md/x#1  y", "ENABLED", "identity",
                                             "00000000-0000-4000-8000-000000000000", "a,b"]), max_size=4),
    signing=st.sampled_from(["header", "presigned", "none"]),
    mutations=st.lists(st.sampled_from(MUTATIONS), max_size=2),
)
def test_a_head_read_here_is_read_as_uvicorn_reads_it(method: str, path: str, query: str, headers: dict[str, str],
                                                      signing: str, mutations: list[Any]) -> None:
    data = as_sent(method, path, query, headers, signing)
    for mutation in mutations:
        data = mutation(data)
    protocol = uvicorn_reads(data)
    scope = read_head(data, connection_fields(protocol))
    if scope is None:
        return
    assert protocol.transport.written == b"", "uvicorn answered what read_head took"  # type: ignore[attr-defined]
    assert len(protocol.started) == 1
    started = protocol.started[0]
    assert scope == started.scope
    assert started.keep_alive and not started.more_body  # (read whole by now)
    assert scope["asgi"] is not started.scope["asgi"] and scope["state"] is not protocol.app_state


@settings(max_examples=100, deadline=None)
@given(method=st.sampled_from(["GET", "HEAD"]), signing=st.sampled_from(["header", "presigned"]),
       path=st.sampled_from(["/bucket/key", "/bucket/a b", "/bucket/é"]),
       query=st.sampled_from(["", "x-id=GetObject", "versionId=1"]))
def test_an_sdk_request_is_read_here(method: str, signing: str, path: str, query: str) -> None:
    data = as_sent(method, path, query, {"amz-sdk-invocation-id": "1", "amz-sdk-request": "attempt=1"}, signing)
    assert read_head(data, connection_fields(uvicorn_reads(data))) is not None
