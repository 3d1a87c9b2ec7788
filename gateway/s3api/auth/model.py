"""What authentication reads of a request and what it answers: who signed it, and how to verify its body."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
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
    # When the signature's time checks pass (the clock skew allowed, a presigned URL's expiry):
    # from valid_from to valid_until inclusive; None: no bound on that side.
    valid_from: datetime | None = None
    valid_until: datetime | None = None

    def valid_at(self, now: datetime) -> bool:
        """Whether the time checks that passed for this identity pass again at `now`."""
        return ((self.valid_from is None or now >= self.valid_from)
                and (self.valid_until is None or now <= self.valid_until))


SecretLookup = Callable[[str], "str | None"]
