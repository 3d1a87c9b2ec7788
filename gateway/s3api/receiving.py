"""Receiving a request's body from the ASGI server: whole and verified (s3api.body), as a
form (POST Object), or known to be left unread (the connection then closes)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.types import Scope

from gateway.config import ServerSettings
from gateway.errors import S3Error
from gateway.s3api import headers as hdrs
from gateway.s3api.body import VerifiedBody, receive_verified_body
from gateway.s3api.form import FormReader, boundary_of
from gateway.s3api.request import S3Request

__all__ = ["BodyReceiver", "body_chunks", "unread_body"]


class BodyReceiver:
    """Receives request bodies within the server settings' limits (sizes, spooling)."""

    def __init__(self, server: ServerSettings) -> None:
        self.server = server

    async def body(self, req: S3Request, *, max_size: int | None = None,
                   object_checksums: bool = False) -> VerifiedBody:
        """The request body, received whole and verified (signature, digests, lengths).

        `object_checksums`: the request's x-amz-checksum-* headers describe the object it
        makes, not its body (CompleteMultipartUpload), so the body is not checked against them.
        """
        if req._body is None:
            assert req.identity is not None
            server = self.server
            headers = req.headers
            if object_checksums:
                headers = {n: v for n, v in headers.items()
                           if n not in hdrs.CHECKSUM_VALUES and n != "x-amz-sdk-checksum-algorithm"}
            req._body = await receive_verified_body(
                body_chunks(req), headers, req.identity.payload,
                max_size=server.max_object_size if max_size is None else max_size,
                spool_memory=server.spool_memory, spool_dir=server.spool_dir or None,
            )
        return req._body

    def form(self, req: S3Request) -> FormReader:
        """The request's multipart/form-data body (POST Object), read as it arrives."""
        return FormReader(body_chunks(req), boundary_of(req.headers.get("content-type", "")))

    async def small_body(self, req: S3Request, *, object_checksums: bool = False) -> tuple[VerifiedBody, bytes]:
        """A verified body that is an XML document: refused early above server.max_xml_size."""
        body = await self.body(req, max_size=self.server.max_xml_size, object_checksums=object_checksums)
        return body, await body.read_all()


async def body_chunks(req: S3Request) -> AsyncIterator[bytes]:
    """The body's bytes as the server hands them over; S3Error when the client leaves first."""
    while True:
        message = await req.receive()
        if message["type"] == "http.disconnect":
            raise S3Error("IncompleteBody", "The client closed the connection before sending the whole body.")
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            req.body_received = True
            return


def unread_body(scope: Scope, req: S3Request | None) -> bool:
    """Whether the request has a body not read to its end (its bytes would be the connection's next)."""
    if req is not None and req.body_received:
        return False
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False
