"""SigV4 signatures this process verified lately: a request sent again byte for byte (a presigned
URL fetched once more, a client repeating a request within the same second) costs a look-up
instead of the canonical request, the hashes and the HMACs (about 45 of the 75 us a presigned
check takes here).

An entry is keyed on every input of the check: the secret, the method, the path, the query,
the signed headers as received, the date, the scope, the headers named signed, the payload
hashes tried and the signature presented. HMAC-SHA256 is a function of these alone, so a hit
is the answer the check would give again. What depends on the time (an expired URL, a skewed
clock) is checked on every request before the look-up, and a failed check is never kept.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["VerifiedSignatures"]


class VerifiedSignatures:
    """At most `size` verified signatures (the oldest goes first). Event loop only."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._verified: dict[Hashable, tuple[bytes, str]] = {}
        self.hits = 0

    def get(self, key: Hashable) -> tuple[bytes, str] | None:
        """(signing key, signature) of a check that passed with exactly these inputs, or None."""
        found = self._verified.get(key)
        if found is not None:
            self.hits += 1
        return found

    def put(self, key: Hashable, verified: tuple[bytes, str]) -> None:
        if self.size <= 0:
            return
        if len(self._verified) >= self.size:
            del self._verified[next(iter(self._verified))]
        self._verified[key] = verified
