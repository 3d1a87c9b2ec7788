"""What a request body's headers promise (length, aws-chunked framing, digests, checksums), checked before
a byte of it is read; and the received body checked against those promises."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import S3Error
from gateway.s3api.auth import ChunkSigner, PayloadCheck
from gateway.s3api.checksums import ALGORITHMS, HEADER_PREFIX, Checksum, algorithm_of_header, decode_digest, header_name

# x-amz-checksum-* headers that name a setting rather than carry a value.
_CHECKSUM_SETTINGS = frozenset(("type", "algorithm", "mode"))


@dataclass(frozen=True, slots=True)
class BodyPlan:
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


def plan_body(headers: Mapping[str, str], payload: PayloadCheck, max_size: int) -> BodyPlan:
    """Validate the body-related headers before reading a byte of the body (in S3's order of checks)."""
    chunked, signer = _chunking(headers, payload)
    content_length, decoded_length = _lengths(headers, chunked, max_size)
    header_checksums = _header_checksums(headers)
    trailer_algs = _trailer_algorithms(headers, chunked)
    if len(header_checksums) + len(trailer_algs) > 1:
        raise S3Error("InvalidRequest", "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.")
    _check_sdk_algorithm(headers, [*header_checksums, *trailer_algs])
    return BodyPlan(
        chunked=chunked,
        signer=signer,
        expect_trailer=payload.mode.endswith("-trailer") or bool(trailer_algs) or "x-amz-trailer" in headers,
        content_length=content_length,
        decoded_length=decoded_length,
        expected_sha256=payload.expected_sha256 if payload.mode == "sha256" else None,
        content_md5=_content_md5(headers),
        header_checksums=header_checksums,
        trailer_checksums=tuple(trailer_algs),
    )


def _chunking(headers: Mapping[str, str], payload: PayloadCheck) -> tuple[bool, ChunkSigner | None]:
    """Whether the body is aws-chunked, and the signer of its chunks if they are signed."""
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
    return chunked, signer


def _lengths(headers: Mapping[str, str], chunked: bool, max_size: int) -> tuple[int | None, int | None]:
    """(Content-Length, x-amz-decoded-content-length), the framing allowed and the size within `max_size`."""
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
    return content_length, decoded_length


def _header_checksums(headers: Mapping[str, str]) -> dict[str, bytes]:
    """Algorithm -> digest of every x-amz-checksum-<algorithm> header."""
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
    return header_checksums


def _trailer_algorithms(headers: Mapping[str, str], chunked: bool) -> list[str]:
    """The checksum algorithms x-amz-trailer announces (only an aws-chunked body has trailers)."""
    trailer_algs: list[str] = []
    for token in _tokens(headers.get("x-amz-trailer")):
        alg = algorithm_of_header(token)
        if alg is None:
            raise S3Error("InvalidRequest", f"The value specified in the x-amz-trailer header is not supported: {token[:64]}")
        trailer_algs.append(alg)
    if trailer_algs and not chunked:
        raise S3Error("InvalidRequest", "The x-amz-trailer header requires an aws-chunked body.")
    return trailer_algs


def _check_sdk_algorithm(headers: Mapping[str, str], used: list[str]) -> None:
    """x-amz-sdk-checksum-algorithm must name the one checksum the headers or trailers carry."""
    sdk_alg = headers.get("x-amz-sdk-checksum-algorithm")
    if sdk_alg is None:
        return
    if sdk_alg.strip().upper() not in ALGORITHMS or (used and used[0] != sdk_alg.strip().upper()):
        raise S3Error("InvalidRequest", "Value for x-amz-sdk-checksum-algorithm header is invalid.")
    if not used:
        raise S3Error(
            "InvalidRequest",
            "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.",
        )


def _content_md5(headers: Mapping[str, str]) -> bytes | None:
    """The Content-MD5 digest, if sent; one that is not 16 base64 bytes is InvalidDigest."""
    md5_header = headers.get("content-md5")
    if md5_header is None:
        return None
    content_md5 = _b64(md5_header)
    if content_md5 is None or len(content_md5) != 16:
        raise S3Error("InvalidDigest")
    return content_md5


def check_running_size(size: int, plan: BodyPlan, max_size: int) -> None:
    # Checked while receiving so an oversize body is refused before it is stored.
    if plan.decoded_length is not None and size > plan.decoded_length:
        raise S3Error("IncompleteBody", "The decoded body is longer than x-amz-decoded-content-length.")
    if size > max_size:
        raise _too_large(size, max_size)


def verify_body(
    plan: BodyPlan, hashers: dict[str, Checksum], checksum_hashers: dict[str, Checksum], trailers: dict[str, str]
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
