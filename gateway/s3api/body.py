"""The request-body pipeline every body-taking handler uses: receive, de-chunk, spool, verify."""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from gateway.errors import S3Error
from gateway.s3api.auth import ChunkSigner, PayloadCheck
from gateway.s3api.checksums import (
    ALGORITHMS,
    HEADER_PREFIX,
    Checksum,
    algorithm_of_header,
    decode_digest,
    header_name,
    new_checksum,
)
from gateway.s3api.chunked import AwsChunkedDecoder

MiB = 1024 * 1024
_BATCH = 256 * 1024  # bytes gathered before one thread hop hashes (and maybe writes) them
_READ_SIZE = 1 * MiB
# x-amz-checksum-* headers that name a setting rather than carry a value.
_CHECKSUM_SETTINGS = frozenset(("type", "algorithm", "mode"))


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
        fh: BinaryIO = await asyncio.to_thread(open, self._path, "rb")
        try:
            while piece := await asyncio.to_thread(fh.read, size):
                yield piece
        finally:
            await asyncio.to_thread(fh.close)

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


def strip_aws_chunked(content_encoding: str | None) -> str | None:
    """Content-Encoding without the aws-chunked token (None if nothing is left): it is never stored."""
    if content_encoding is None:
        return None
    kept = [t.strip() for t in content_encoding.split(",") if t.strip() and t.strip().lower() != "aws-chunked"]
    return ", ".join(kept) or None


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
    plan = _plan(headers, payload, max_size)
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
            _check_running_size(spool.size, plan, max_size)
        trailers = decoder.finish() if decoder is not None else {}
        if plan.content_length is not None and received < plan.content_length:
            raise S3Error("IncompleteBody")
        if plan.decoded_length is not None and spool.size != plan.decoded_length:
            raise S3Error("IncompleteBody", "The decoded body length does not match x-amz-decoded-content-length.")
        memory, path = await spool.finish()
        checksums = _verify(plan, hashers, checksum_hashers, trailers)
        return VerifiedBody(
            length=spool.size, md5_hex=hashers["MD5"].digest().hex(), checksums=checksums, memory=memory, path=path
        )
    except BaseException:
        await spool.discard()
        raise


# --- what the headers promise ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plan:
    chunked: bool
    signer: ChunkSigner | None
    expect_trailer: bool
    content_length: int | None
    decoded_length: int | None
    expected_sha256: str | None
    content_md5: bytes | None
    header_checksums: dict[str, bytes]  # algorithm -> digest from x-amz-checksum-* headers
    trailer_checksums: tuple[str, ...]  # algorithms announced by x-amz-trailer

    @property
    def checksum_algorithms(self) -> tuple[str, ...]:
        return (*self.header_checksums, *self.trailer_checksums)


def _plan(headers: Mapping[str, str], payload: PayloadCheck, max_size: int) -> _Plan:
    """Validate the body-related headers before reading a byte of the body."""
    content_sha256 = headers.get("x-amz-content-sha256")
    encodings = _tokens(headers.get("content-encoding"))
    streaming = payload.mode.startswith("streaming-")
    chunked = streaming or "aws-chunked" in encodings or (content_sha256 or "").startswith("STREAMING-")
    signer = payload.chunk_signer if payload.mode in ("streaming-signed", "streaming-signed-trailer") else None
    if chunked and payload.mode == "sha256":
        raise S3Error("InvalidArgument", "aws-chunked encoding is not supported with the specified x-amz-content-sha256 value.")
    if chunked and signer is None and (content_sha256 or "").startswith("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"):
        # Signed chunks we cannot check (no SigV4 seed) must not pass as unsigned ones.
        raise S3Error("InvalidRequest", "Signed aws-chunked bodies require a SigV4 Authorization header.")
    if payload.mode in ("streaming-signed", "streaming-signed-trailer") and signer is None:
        raise S3Error("InvalidRequest", "Signed aws-chunked bodies require a SigV4 Authorization header.")

    content_length = _length(headers, "content-length")
    decoded_length = _length(headers, "x-amz-decoded-content-length") if chunked else None
    transfer_codings = _tokens(headers.get("transfer-encoding"))
    if transfer_codings and transfer_codings != ["chunked"]:
        # The server undid only the chunked framing: bytes under another coding (gzip, ...) would be stored still encoded.
        raise S3Error("NotImplemented", extra={"Header": "Transfer-Encoding"})
    http_chunked = bool(transfer_codings)
    if content_length is None and not http_chunked:
        raise S3Error("MissingContentLength")
    if chunked and decoded_length is None:
        raise S3Error("MissingContentLength", "You must provide the x-amz-decoded-content-length header with aws-chunked bodies.")
    declared = decoded_length if chunked else content_length
    if declared is not None and declared > max_size:
        raise _too_large(declared, max_size)

    header_checksums: dict[str, bytes] = {}
    for name in headers:
        lname = name.lower()
        if not lname.startswith(HEADER_PREFIX) or lname[len(HEADER_PREFIX):] in _CHECKSUM_SETTINGS:
            continue
        alg = algorithm_of_header(lname)
        if alg is None:
            raise S3Error("InvalidRequest", f"The {lname} header names an unsupported checksum algorithm.")
        digest = decode_digest(alg, headers[name])
        if digest is None:
            raise S3Error("InvalidRequest", f"Value for {lname} header is invalid.")
        header_checksums[alg] = digest

    trailer_algs: list[str] = []
    for token in _tokens(headers.get("x-amz-trailer")):
        alg = algorithm_of_header(token)
        if alg is None:
            raise S3Error("InvalidRequest", f"The value specified in the x-amz-trailer header is not supported: {token[:64]}")
        trailer_algs.append(alg)
    if trailer_algs and not chunked:
        raise S3Error("InvalidRequest", "The x-amz-trailer header requires an aws-chunked body.")
    if len(header_checksums) + len(trailer_algs) > 1:
        raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")

    sdk_alg = headers.get("x-amz-sdk-checksum-algorithm")
    if sdk_alg is not None:
        used = [*header_checksums, *trailer_algs]
        if sdk_alg.strip().upper() not in ALGORITHMS or (used and used[0] != sdk_alg.strip().upper()):
            raise S3Error("InvalidRequest", "Value for x-amz-sdk-checksum-algorithm header is invalid.")
        if not used:
            raise S3Error(
                "InvalidRequest",
                "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.",
            )

    content_md5 = None
    md5_header = headers.get("content-md5")
    if md5_header is not None:
        content_md5 = _b64(md5_header)
        if content_md5 is None or len(content_md5) != 16:
            raise S3Error("InvalidDigest")

    return _Plan(
        chunked=chunked,
        signer=signer,
        expect_trailer=payload.mode.endswith("-trailer") or bool(trailer_algs) or "x-amz-trailer" in headers,
        content_length=content_length,
        decoded_length=decoded_length,
        expected_sha256=payload.expected_sha256 if payload.mode == "sha256" else None,
        content_md5=content_md5,
        header_checksums=header_checksums,
        trailer_checksums=tuple(trailer_algs),
    )


def _check_running_size(size: int, plan: _Plan, max_size: int) -> None:
    # Checked while receiving so an oversize body is refused before it is stored.
    if plan.decoded_length is not None and size > plan.decoded_length:
        raise S3Error("IncompleteBody", "The decoded body is longer than x-amz-decoded-content-length.")
    if size > max_size:
        raise _too_large(size, max_size)


def _verify(
    plan: _Plan, hashers: dict[str, Checksum], checksum_hashers: dict[str, Checksum], trailers: dict[str, str]
) -> dict[str, str]:
    if plan.expected_sha256 is not None:
        computed = hashers["SHA256"].digest().hex()
        if computed != plan.expected_sha256.lower():
            raise S3Error(
                "XAmzContentSHA256Mismatch",
                extra={"ClientComputedContentSHA256": plan.expected_sha256, "S3ComputedContentSHA256": computed},
            )
    if plan.content_md5 is not None:
        computed_md5 = hashers["MD5"].digest()
        if computed_md5 != plan.content_md5:
            raise S3Error(
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
                extra={
                    "ExpectedDigest": base64.b64encode(plan.content_md5).decode("ascii"),
                    "CalculatedDigest": base64.b64encode(computed_md5).decode("ascii"),
                },
            )

    announced = {header_name(alg) for alg in plan.trailer_checksums}
    for name in trailers:
        if name.startswith(HEADER_PREFIX) and name not in announced:
            raise S3Error(
                "MalformedTrailerError",
                f"The request contained trailing data that was not well-formed or did not conform to our published schema: "
                f"{name} was not announced in x-amz-trailer.",
            )
    provided = dict(plan.header_checksums)
    for alg in plan.trailer_checksums:
        value = trailers.get(header_name(alg))
        if value is None:
            raise S3Error(
                "MalformedTrailerError",
                f"The request contained trailing data that was not well-formed or did not conform to our published schema: "
                f"{header_name(alg)} is missing.",
            )
        digest = decode_digest(alg, value)
        if digest is None:
            raise S3Error("InvalidRequest", f"Value for {header_name(alg)} trailing header is invalid.")
        provided[alg] = digest

    verified: dict[str, str] = {}
    for alg, digest in provided.items():
        hasher = checksum_hashers[alg]
        if hasher.digest() != digest:
            raise S3Error("BadDigest", f"The {alg} you specified did not match the calculated checksum.")
        verified[header_name(alg)] = hasher.b64digest()
    return verified


def _too_large(size: int, max_size: int) -> S3Error:
    return S3Error("EntityTooLarge", extra={"ProposedSize": str(size), "MaxSizeAllowed": str(max_size)})


def _length(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    if value is None:
        return None
    value = value.strip()
    # Length cap before int(): a thousands-digit value must not reach the int parser's limit.
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise S3Error("InvalidArgument", f"Invalid {name} header.", extra={"ArgumentName": name, "ArgumentValue": value[:64]})
    return int(value)


def _tokens(value: str | None) -> list[str]:
    return [t.strip().lower() for t in value.split(",") if t.strip()] if value else []


def _b64(value: str) -> bytes | None:
    try:
        return base64.b64decode(value.strip().encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None


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
