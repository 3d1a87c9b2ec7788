"""Fuzz target `chunked`: the aws-chunked decoder, trailers and chunk signatures (gateway/s3api/chunked.py).

Controls: a mode, flags, and up to 15 piece lengths the body is fed in (the decoder must
not care where the network splits it). Modes:

- 0, 1: the text IS an aws-chunked body (the seeds: valid signed and unsigned bodies,
  with and without trailers, signed with a fixed key); decoded as it is.
- 2: the text is a payload, encoded here (signed or not, with trailers or not) and
  decoded: the same bytes and trailers must come back.
- 3: as 2, with one byte of the encoding changed: a signed body then fails or still
  decodes to the same bytes (a hex digit's case is the only freedom signatures leave).

Contract: an S3Error with a 4xx status (sticky: feed/finish raise it again), never another
exception; what was handed back never exceeds what was announced.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import sys
import zlib

import atheris
from _harness import Controls, check, client_error, main, seed

with atheris.instrument_imports(include=["gateway"]):
    from gateway.errors import S3Error
    from gateway.s3api.auth import ChunkSigner
    from gateway.s3api.chunked import AwsChunkedDecoder
    from gateway.signing import EMPTY_SHA256, derive_signing_key

KEY = derive_signing_key("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524", "us-east-1", "s3")
SIGNER = ChunkSigner(KEY, "20130524T000000Z", "20130524/us-east-1/s3/aws4_request",
                     "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")
TRAILER_NAMES = ("x-amz-checksum-crc32", "x-amz-checksum-crc32c", "x-amz-meta-a", "content-md5")
# Flags: 1 signed, 2 expect trailers, 4 a small max chunk size, 8/16 add trailers (modes 2, 3).
SIGNED, EXPECT_TRAILER, SMALL_MAX, TRAILER_A, TRAILER_B = 1, 2, 4, 8, 16


def encode(payload: bytes, sizes: list[int], signer: ChunkSigner | None, trailers: list[tuple[str, str]]) -> bytes:
    """The harness's own aws-chunked encoder (its own SigV4 chunk signing)."""
    prev = signer.seed_signature if signer else ""

    def sign(kind: str, last: str) -> str:
        assert signer is not None
        to_sign = "\n".join((kind, signer.amz_date, signer.scope, prev, last))
        return hmac.new(signer.signing_key, to_sign.encode(), hashlib.sha256).hexdigest()

    pieces, pos, i = [], 0, 0
    while pos < len(payload):
        size = sizes[i % len(sizes)] if sizes else len(payload)
        pieces.append(payload[pos : pos + size])
        pos += size
        i += 1
    out = bytearray()
    for piece in [*pieces, b""]:
        out += f"{len(piece):x}".encode()
        if signer:
            prev = sign("AWS4-HMAC-SHA256-PAYLOAD", EMPTY_SHA256 + "\n" + hashlib.sha256(piece).hexdigest())
            out += f";chunk-signature={prev}".encode()
        out += b"\r\n" + piece + (b"\r\n" if piece else b"")
    for name, value in trailers:
        out += f"{name}:{value}\r\n".encode()
    if signer and trailers:
        canonical = "".join(f"{n}:{v}\n" for n, v in sorted(trailers)).encode()
        out += f"x-amz-trailer-signature:{sign('AWS4-HMAC-SHA256-TRAILER', hashlib.sha256(canonical).hexdigest())}\r\n".encode()
    return bytes(out + b"\r\n")


def decode(decoder: AwsChunkedDecoder, body: bytes, cuts: list[int]) -> tuple[bytes, dict[str, str]]:
    out, pos, i = [], 0, 0
    while pos < len(body):
        step = cuts[i % len(cuts)] if cuts else len(body)
        out.extend(decoder.feed(body[pos : pos + step]))
        pos += step
        i += 1
    decoded = b"".join(out)
    check(decoder.decoded_length == len(decoded), "decoded_length differs from the bytes handed back")
    return decoded, decoder.finish()


def test_one_input(data: bytes) -> None:
    ctl = Controls(data)
    mode = ctl.pick(3)
    flags = ctl.pick(31)
    cuts = [ctl.pick(254) + 1 for _ in range(ctl.pick(15))]
    where, new = (ctl.pick(255) * 256 + ctl.pick(255), ctl.pick(255)) if mode == 3 else (0, 0)
    text = ctl.rest()
    signer = SIGNER if flags & SIGNED else None
    max_chunk = 64 if flags & SMALL_MAX else 16 * 1024 * 1024

    if mode < 2:
        decoder = AwsChunkedDecoder(signer, expect_trailer=bool(flags & EXPECT_TRAILER), max_chunk_size=max_chunk)
        try:
            decode(decoder, text, cuts)
        except S3Error as exc:
            client_error(exc)
            for again in (lambda: decoder.feed(b"0\r\n"), decoder.finish):  # once broken, stays broken
                try:
                    again()
                except S3Error as exc2:
                    check(exc2 is exc, f"after {exc!r} the decoder raised {exc2!r}")
                else:
                    raise AssertionError(f"after {exc!r} the decoder went on")
        except Exception as exc:
            client_error(exc)
        return

    # Chunks of 16 bytes and more, of at most 1 KiB: a fuzzer's time goes to paths, not HMACs.
    text = text[:1024]
    sizes = [max(c, 16) for c in cuts[:3]] or [len(text) or 1]
    trailers = []
    if flags & TRAILER_A:
        crc = zlib.crc32(text).to_bytes(4, "big")
        trailers.append(("x-amz-checksum-crc32", base64.b64encode(crc).decode()))
    if flags & TRAILER_B:
        trailers.append(("x-amz-meta-note", text[:20].hex() or "empty"))
    body = encode(text, [min(s, max_chunk) for s in sizes], signer, trailers)
    mutated = mode == 3 and bool(body)
    if mutated:
        where %= len(body)
        mutated = body[where] != new
        body = body[:where] + bytes([new]) + body[where + 1 :]
    decoder = AwsChunkedDecoder(signer, expect_trailer=bool(trailers) or bool(flags & EXPECT_TRAILER),
                                max_chunk_size=max_chunk)
    try:
        decoded, got_trailers = decode(decoder, body, cuts)
    except Exception as exc:
        client_error(exc)
        check(mutated, f"a body encoded here was refused: {exc!r}")
        return
    if not mutated or signer is not None:
        check(decoded == text, lambda: f"decoded {decoded[:60]!r}, encoded {text[:60]!r} (mutated: {mutated})")
        check(got_trailers == dict(trailers), lambda: f"trailers {got_trailers} != {dict(trailers)}")


def seeds() -> dict[str, bytes]:
    out = {}
    payload = b"a" * 100 + b"\r\n0\r\n" + bytes(range(256))
    b64_crc = base64.b64encode(zlib.crc32(payload).to_bytes(4, "big")).decode()
    variants = {
        "unsigned": (None, []),
        "unsigned-trailer": (None, [("x-amz-checksum-crc32", b64_crc)]),
        "signed": (SIGNER, []),
        "signed-trailer": (SIGNER, [("x-amz-checksum-crc32", b64_crc)]),
        "signed-two-trailers": (SIGNER, [("x-amz-checksum-crc32", b64_crc), ("x-amz-meta-a", "b")]),
    }
    for name, (signer, trailers) in variants.items():
        flags = (SIGNED if signer else 0) | (EXPECT_TRAILER if trailers else 0)
        body = encode(payload, [64, 200], signer, trailers)
        out[f"body-{name}"] = seed(body, 0, flags, 3, 7, 50, 1)
        out[f"roundtrip-{name}"] = seed(payload[:40], 2, flags | (TRAILER_A if trailers else 0), 2, 9, 5)
    out["mutated-signed"] = seed(b"hello world", 3, SIGNED | TRAILER_A, 1, 4, 0, 30, ord("X"))
    out["empty"] = seed(encode(b"", [], None, []), 0, 0, 0)
    out["extensions"] = seed(b"5;name=value;x\r\nhello\r\n0;ext\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n", 1,
                             EXPECT_TRAILER, 0)
    return out


if __name__ == "__main__":
    main("chunked", test_one_input, seeds)
    sys.exit(0)
