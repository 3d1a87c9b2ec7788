"""An incremental, pure decoder of `aws-chunked` request bodies that verifies chunk and trailer signatures."""

from __future__ import annotations

import hashlib
import hmac
import re

from gateway.errors import S3Error
from gateway.s3api.auth import ChunkSigner
from gateway.signing import EMPTY_SHA256, signature_hex

MAX_LINE = 4096  # a chunk header is ~90 bytes; anything near this is not a chunk header
MAX_TRAILER_BYTES = 16 * 1024
MAX_TRAILERS = 32
TRAILER_SIGNATURE = "x-amz-trailer-signature"

_SIZE = re.compile(rb"[0-9a-fA-F]{1,16}")
_SIG = re.compile(rb"[0-9a-fA-F]{64}")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-zA-Z]+")

_HEADER, _DATA, _DATA_CRLF, _TRAILER, _DONE = range(5)


def _framing(detail: str) -> S3Error:
    return S3Error("InvalidRequest", f"Malformed aws-chunked encoding: {detail}")


def _incomplete(detail: str = "The request body terminated unexpectedly") -> S3Error:
    return S3Error("IncompleteBody", detail)


def _bad_trailer(detail: str) -> S3Error:
    return S3Error(
        "MalformedTrailerError",
        f"The request contained trailing data that was not well-formed or did not conform to our published schema: {detail}",
    )


class AwsChunkedDecoder:
    """Decodes one aws-chunked body fed in pieces split at any byte boundary.

    Wire format::

        hex-size[;chunk-signature=sig] CRLF  <size bytes> CRLF     ... repeated ...
        0[;chunk-signature=sig] CRLF
        [name:value CRLF ...]  [x-amz-trailer-signature:sig CRLF]
        CRLF

    Payload bytes are handed back as they arrive (only a partial header line is
    ever held), so a piece returned by `feed` may belong to a chunk whose
    signature is checked later: the body is trustworthy once `finish` returned.

    `signer` None means unsigned chunks (STREAMING-UNSIGNED-PAYLOAD-TRAILER, or
    aws-chunked announced only by Content-Encoding); otherwise every chunk
    signature, and the trailer signature, must verify. Not thread-safe.
    """

    def __init__(self, signer: ChunkSigner | None, *, expect_trailer: bool, max_chunk_size: int = 16 * 1024 * 1024) -> None:
        self._signer = signer
        self._expect_trailer = expect_trailer
        self._max_chunk_size = max_chunk_size
        self._state = _HEADER
        self._line = bytearray()  # a partial header/trailer line, at most MAX_LINE bytes
        self._remaining = 0  # payload bytes left in the current chunk
        self._crlf_seen = 0  # bytes of the "\r\n" after chunk data seen so far
        self._prev_signature = signer.seed_signature.lower() if signer else ""
        self._chunk_signature = ""
        self._chunk_hash = hashlib.sha256()
        self._trailers: dict[str, str] = {}
        self._trailer_lines: list[tuple[str, str]] = []
        self._trailer_bytes = 0
        self._trailer_signed = False
        self._separated = False  # the empty line between signed trailers and their signature was seen
        self._failed: S3Error | None = None
        self.decoded_length = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Consume the next piece of the body; returns the payload bytes it completed."""
        if self._failed is not None:
            raise self._failed
        try:
            return self._feed(data)
        except S3Error as exc:
            # Once broken, stay broken: a caller retrying feed must not resync mid-stream.
            self._failed = exc
            raise

    def finish(self) -> dict[str, str]:
        """Declare the end of the body; returns the trailing headers (lowercase names, no signature)."""
        if self._failed is not None:
            raise self._failed
        if self._state == _TRAILER and not self._line:
            if self._signer is not None and self._trailers and not self._trailer_signed:
                # After a blank line the body ended without the signature its trailers need;
                # right after a trailer line it was cut short (the signature still to come).
                self._failed = _bad_trailer("signed trailers need x-amz-trailer-signature") if self._separated \
                    else _incomplete()
                raise self._failed
            if self._signer is None or self._trailer_signed:
                # Lenient end: the closing empty line is missing but the body is otherwise complete.
                self._end_trailers()
        if self._state != _DONE:
            self._failed = _incomplete()
            raise self._failed
        return dict(self._trailers)

    # --- the state machine ---

    def _feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            state = self._state
            if state == _DATA:
                take = min(self._remaining, end - pos)
                piece = data[pos : pos + take]
                pos += take
                self._remaining -= take
                self.decoded_length += take
                if self._signer is not None:
                    self._chunk_hash.update(piece)
                out.append(piece)
                if self._remaining == 0:
                    self._state = _DATA_CRLF
            elif state == _DATA_CRLF:
                if data[pos] != b"\r\n"[self._crlf_seen]:
                    raise _incomplete("The chunk data is not followed by CRLF: a chunk size does not match its data.")
                pos += 1
                self._crlf_seen += 1
                if self._crlf_seen == 2:
                    self._end_chunk()
            elif state in (_HEADER, _TRAILER):
                # A line may hold MAX_LINE bytes plus its CRLF; look no further than that.
                window = MAX_LINE + 2 - len(self._line)
                nl = data.find(b"\n", pos, pos + window)
                if nl < 0:
                    if end - pos >= window:
                        raise self._too_long()
                    self._line += data[pos:]
                    pos = end
                    continue
                self._line += data[pos : nl + 1]
                pos = nl + 1
                line = bytes(self._line)
                self._line.clear()
                if state == _HEADER:
                    if len(line) < 2 or line[-2] != 0x0D or b"\r" in line[:-2]:
                        raise _framing("lines must end with CRLF")
                    self._header_line(line[:-2])
                else:
                    # A trailer line may end in LF alone: minio-go writes `name:value\n`, the
                    # form the trailer signature covers (S3 and moto accept it).
                    text = line[:-2] if line.endswith(b"\r\n") else line[:-1]
                    if b"\r" in text:
                        raise _bad_trailer("lines must end with CRLF")
                    self._trailer_line(text)
            else:  # _DONE
                raise _framing("data after the end of the aws-chunked body")
        return out

    def _too_long(self) -> S3Error:
        return _framing("chunk header line too long") if self._state == _HEADER else _bad_trailer("trailer too long")

    def _header_line(self, line: bytes) -> None:
        size_text, sep, ext = line.partition(b";")
        if not _SIZE.fullmatch(size_text):
            raise _framing("invalid chunk size")
        size = int(size_text, 16)
        if size > self._max_chunk_size:
            raise _framing(f"chunk size {size} exceeds the maximum of {self._max_chunk_size}")
        if self._signer is not None:
            name, eq, sig = ext.partition(b"=")
            if not sep or name != b"chunk-signature" or not eq or not _SIG.fullmatch(sig):
                raise _framing("signed chunks need a chunk-signature")
            self._chunk_signature = sig.decode("ascii").lower()
            self._chunk_hash = hashlib.sha256()
        # Unsigned chunks may carry extensions; nothing can verify them, so they are ignored.
        if size == 0:
            self._verify_chunk(EMPTY_SHA256)
            self._state = _TRAILER
        else:
            self._remaining = size
            self._state = _DATA

    def _end_chunk(self) -> None:
        self._crlf_seen = 0
        self._verify_chunk(self._chunk_hash.hexdigest())
        self._state = _HEADER

    def _verify_chunk(self, data_sha256: str) -> None:
        signer = self._signer
        if signer is None:
            return
        to_sign = "\n".join(
            ("AWS4-HMAC-SHA256-PAYLOAD", signer.amz_date, signer.scope, self._prev_signature, EMPTY_SHA256, data_sha256)
        )
        expected = signature_hex(signer.signing_key, to_sign)
        if not hmac.compare_digest(expected, self._chunk_signature):
            raise S3Error("SignatureDoesNotMatch", "The chunk signature does not match the calculated signature.")
        self._prev_signature = expected

    def _trailer_line(self, line: bytes) -> None:
        if not line:
            if self._signer is not None and self._trailers and not self._trailer_signed and not self._separated:
                # minio-go puts an empty line between the signed trailers and their signature.
                self._separated = True
                return
            self._end_trailers()
            return
        if not self._expect_trailer:
            raise _framing("trailing headers were not announced; expected the final empty line")
        if self._trailer_signed:
            raise _bad_trailer("nothing may follow x-amz-trailer-signature")
        self._trailer_bytes += len(line) + 2
        if self._trailer_bytes > MAX_TRAILER_BYTES or len(self._trailer_lines) >= MAX_TRAILERS:
            raise _bad_trailer("trailer too long")
        try:
            text = line.decode("ascii")
        except UnicodeDecodeError:
            raise _bad_trailer("trailers must be ASCII") from None
        name, sep, value = text.partition(":")
        name = name.strip().lower()
        if not sep or not _TOKEN.fullmatch(name):
            raise _bad_trailer("expected name:value")
        value = value.strip()
        if name == TRAILER_SIGNATURE:
            self._verify_trailer(value)
            return
        if name in self._trailers:
            raise _bad_trailer(f"duplicate trailer {name}")
        self._trailers[name] = value
        self._trailer_lines.append((name, value))

    def _verify_trailer(self, provided: str) -> None:
        signer = self._signer
        if signer is None:
            raise _bad_trailer("x-amz-trailer-signature in an unsigned body")
        if not _SIG.fullmatch(provided.encode("ascii")):
            raise S3Error("SignatureDoesNotMatch", "The trailer signature does not match the calculated signature.")
        # Clients sign the trailers sorted by name (the order they send them in); wire order is a fallback.
        orders = [sorted(self._trailer_lines), self._trailer_lines]
        for lines in orders:
            canonical = "".join(f"{n}:{v}\n" for n, v in lines).encode("ascii")
            to_sign = "\n".join(
                ("AWS4-HMAC-SHA256-TRAILER", signer.amz_date, signer.scope, self._prev_signature, hashlib.sha256(canonical).hexdigest())
            )
            expected = signature_hex(signer.signing_key, to_sign)
            if hmac.compare_digest(expected, provided.lower()):
                self._trailer_signed = True
                self._prev_signature = expected
                return
        raise S3Error("SignatureDoesNotMatch", "The trailer signature does not match the calculated signature.")

    def _end_trailers(self) -> None:
        if self._signer is not None and self._trailers and not self._trailer_signed:
            # Signed trailers without their signature would let anyone swap the checksum.
            raise _bad_trailer("signed trailers need x-amz-trailer-signature")
        self._state = _DONE
