"""The request-body pipeline every body-taking handler uses: receive, de-chunk, spool, verify."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from typing import BinaryIO

from gateway.errors import S3Error
from gateway.s3api.auth import PayloadCheck
from gateway.s3api.bodycheck import check_running_size, plan_body, verify_body
from gateway.s3api.checksums import Checksum, new_checksum
from gateway.s3api.chunked import AwsChunkedDecoder

MiB = 1024 * 1024
_BATCH = 256 * 1024  # bytes gathered before one thread hop hashes (and maybe writes) them
_READ_SIZE = 1 * MiB


class VerifiedBody:
    """A fully received and verified request body, in memory or in a spool file.

    Re-readable through `chunks()` (e.g. for a retry to the origin); `aclose()`
    removes the spool file. Event loop only.
    """

    __slots__ = ("length", "md5_hex", "checksums", "_memory", "_path")

    def __init__(self, *, length: int, md5_hex: str, checksums: dict[str, str], memory: bytes | None, path: str | None) -> None:
        self.length = length
        self.md5_hex = md5_hex
        self.checksums = checksums  # verified "x-amz-checksum-<alg>" -> base64 value
        self._memory = memory
        self._path = path

    def __repr__(self) -> str:
        where = "memory" if self._path is None else "spooled"
        return f"VerifiedBody(length={self.length}, md5_hex={self.md5_hex!r}, checksums={self.checksums!r}, {where})"

    async def chunks(self, size: int = _READ_SIZE) -> AsyncIterator[bytes]:
        if self._path is None:
            data = self._memory or b""
            for start in range(0, len(data), size):
                yield data[start : start + size]
            return
        # Opened and closed on the loop: the open and close of a local spool file do not wait
        # on the disk, and the close must run however the stream ends (read out, closed, or
        # dropped unfinished by the origin client and collected), where an await may not run.
        fh: BinaryIO = open(self._path, "rb")  # noqa: SIM115 (closed in the finally below)
        try:
            while piece := await asyncio.to_thread(fh.read, size):
                yield piece
        finally:
            fh.close()

    async def read_all(self) -> bytes:
        """The whole body at once: meant for small XML bodies."""
        if self._path is None:
            return self._memory or b""
        return await asyncio.to_thread(_read_file, self._path)

    async def aclose(self) -> None:
        path, self._path, self._memory = self._path, None, None
        if path is not None:
            await asyncio.to_thread(_unlink, path)

    async def __aenter__(self) -> VerifiedBody:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def receive_verified_body(
    chunks: AsyncIterator[bytes],
    headers: Mapping[str, str],
    payload: PayloadCheck,
    *,
    max_size: int,
    spool_memory: int = 4 * MiB,
    spool_dir: str | None = None,
) -> VerifiedBody:
    """Receive the whole body and verify it; nothing leaves here unverified.

    `headers` has lowercase keys, repeated headers joined with ",".
    """
    plan = plan_body(headers, payload, max_size)
    hashers: dict[str, Checksum] = {"MD5": new_checksum("MD5")}
    if plan.expected_sha256 is not None:
        hashers["SHA256"] = new_checksum("SHA256")
    checksum_hashers = {alg: new_checksum(alg) for alg in plan.checksum_algorithms}
    spool = _Spool(spool_memory, spool_dir, [*hashers.values(), *checksum_hashers.values()])
    decoder = AwsChunkedDecoder(plan.signer, expect_trailer=plan.expect_trailer) if plan.chunked else None
    try:
        received = 0
        async for piece in chunks:
            if not piece:
                continue
            received += len(piece)
            if plan.content_length is not None and received > plan.content_length:
                raise S3Error("InvalidRequest", "The request body is longer than its Content-Length.")
            for data in decoder.feed(piece) if decoder is not None else (piece,):
                await spool.add(data)
            check_running_size(spool.size, plan, max_size)
        trailers = decoder.finish() if decoder is not None else {}
        if plan.content_length is not None and received < plan.content_length:
            raise S3Error("IncompleteBody")
        if plan.decoded_length is not None and spool.size != plan.decoded_length:
            raise S3Error("IncompleteBody", "The decoded body length does not match x-amz-decoded-content-length.")
        memory, path = await spool.finish()
        checksums = verify_body(plan, hashers, checksum_hashers, trailers)
        return VerifiedBody(
            length=spool.size, md5_hex=hashers["MD5"].digest().hex(), checksums=checksums, memory=memory, path=path
        )
    except BaseException:
        await spool.discard()
        raise


# --- spooling ------------------------------------------------------------------------------------


class _Spool:
    """Accumulates verified-to-be bytes: in memory up to `limit`, then in a temp file.

    Hashing of batches happens in the same thread hop as the file write, so the
    event loop neither hashes nor writes large amounts of data itself.
    """

    def __init__(self, limit: int, directory: str | None, hashers: list[Checksum]) -> None:
        self._limit = limit
        self._dir = directory
        self._hashers = hashers
        self._memory: list[bytes] = []
        self._memory_size = 0
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._file: BinaryIO | None = None
        self._path: str | None = None
        self.size = 0

    async def add(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_size += len(data)
        self.size += len(data)
        if self._pending_size >= _BATCH:
            await self._flush()

    async def _flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending, self._pending_size = [], 0
        if self._file is None and self._memory_size + len(data) <= self._limit:
            if len(data) >= _BATCH:
                await asyncio.to_thread(self._hash, data)
            else:
                self._hash(data)  # small tail: cheaper than a thread hop
            self._memory.append(data)
            self._memory_size += len(data)
            return
        if self._file is None:
            held, self._memory, self._memory_size = b"".join(self._memory), [], 0
            self._file, self._path = await asyncio.to_thread(self._open, held)
        await asyncio.to_thread(self._hash_and_write, data)

    def _hash(self, data: bytes) -> None:
        for h in self._hashers:
            h.update(data)

    def _open(self, held: bytes) -> tuple[BinaryIO, str]:
        fd, path = tempfile.mkstemp(prefix="gateway-body-", dir=self._dir)
        fh = os.fdopen(fd, "wb")
        try:
            fh.write(held)  # already hashed while it was in memory
        except BaseException:
            fh.close()
            _unlink(path)
            raise
        return fh, path

    def _hash_and_write(self, data: bytes) -> None:
        self._hash(data)
        assert self._file is not None
        self._file.write(data)

    async def finish(self) -> tuple[bytes | None, str | None]:
        """Flush everything; returns (bytes, None) for a memory body or (None, path) for a spooled one."""
        await self._flush()
        if self._file is None:
            return b"".join(self._memory), None
        fh, self._file = self._file, None
        await asyncio.to_thread(fh.close)
        return None, self._path

    async def discard(self) -> None:
        fh, path = self._file, self._path
        self._file = self._path = None
        self._memory = []
        if fh is None and path is None:
            return
        # Shielded so a second cancellation cannot leave the file behind.
        await asyncio.shield(asyncio.to_thread(_close_and_unlink, fh, path))


def _close_and_unlink(fh: BinaryIO | None, path: str | None) -> None:
    if fh is not None:
        try:
            fh.close()
        except OSError:
            pass
    if path is not None:
        _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _read_file(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()
