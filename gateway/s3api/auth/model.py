"""What authentication reads of a request and what it answers: who signed it, and how to verify its body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

PayloadMode = Literal["sha256", "unsigned", "streaming-signed", "streaming-signed-trailer", "streaming-unsigned-trailer"]


@dataclass(frozen=True, slots=True)
class RequestView:
    """What authentication needs of a request, as received on the wire."""

    method: str
    raw_path: str  # percent-encoded, as received (ASGI raw_path decoded as latin-1)
    query_string: str  # raw, as received
    headers: tuple[tuple[str, str], ...]  # lowercase names, wire order, repeated names kept

    def header(self, name: str) -> str | None:
        """All values of `name` joined with "," (None if absent)."""
        values = [v for n, v in self.headers if n == name]
        return ",".join(values) if values else None


@dataclass(frozen=True, slots=True)
class ChunkSigner:
    """What is needed to verify aws-chunked chunk and trailer signatures."""

    signing_key: bytes = field(repr=False)
    amz_date: str
    scope: str
    seed_signature: str


@dataclass(frozen=True, slots=True)
class PayloadCheck:
    mode: PayloadMode
    expected_sha256: str | None = None  # for mode "sha256"
    chunk_signer: ChunkSigner | None = None  # for the streaming-signed modes


@dataclass(frozen=True, slots=True)
class Identity:
    access_key: str | None  # None = anonymous
    payload: PayloadCheck


SecretLookup = Callable[[str], "str | None"]
