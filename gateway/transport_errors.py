"""The S3 errors the HTTP transport answers itself (gateway.httpserver): too many connections,
a request head too large or too slow. They are rendered with the function it is given, so the
transport knows nothing of S3's XML."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gateway.errors import S3_ERRORS

__all__ = ["ErrorPage", "TransportErrors"]

ErrorPage = Callable[[str, "str | None"], tuple[str, bytes]]
"""(S3 error code, resource) -> (request id, error document): gateway.s3api.responses.error_page."""


class TransportErrors:
    """The answers the protocol gives itself: whole HTTP messages, and ASGI apps that answer
    in the application's place (with the connection closed)."""

    def __init__(self, error_page: ErrorPage) -> None:
        self.page = error_page
        self.slow_down = self._refusal("SlowDown")
        self.head_too_large = self._refusal("RequestHeaderSectionTooLarge")

    def message(self, code: str) -> bytes:
        """A whole HTTP/1.1 answer carrying S3 error `code`, closing the connection."""
        status, _ = S3_ERRORS[code]
        request_id, body = self.page(code, None)
        head = (f"HTTP/1.1 {status} {'Bad Request' if status == 400 else 'Service Unavailable'}\r\n"
                f"content-type: application/xml\r\ncontent-length: {len(body)}\r\nx-amz-request-id: {request_id}\r\n"
                f"date: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime())}\r\n"
                "connection: close\r\n\r\n")
        return head.encode("ascii") + body

    def _refusal(self, code: str) -> Any:
        status, _ = S3_ERRORS[code]

        async def refuse(scope: Any, receive: Any, send: Any) -> None:
            request_id, body = self.page(code, scope.get("path"))
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/xml"), (b"content-length", str(len(body)).encode()),
                                    (b"x-amz-request-id", request_id.encode()), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})

        return refuse
