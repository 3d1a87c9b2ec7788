"""Signatures this process verified lately: a request sent again byte for byte (a presigned
URL fetched once more, a client repeating a request within the same second) costs a look-up
instead of the canonical request, the hashes and the HMACs (about 45 of the 75 us a presigned
check takes here), and a GET or HEAD sent again whole costs a look-up instead of the whole
check (`known`: parsing the query and the credential, the look-ups, the memo's key; another
30 us of the 45 left for a replayed presigned GET).

An entry is keyed on every input of the check: the secret, the method, the path, the query,
the signed headers as received, the date, the scope, the headers named signed, the payload
hashes tried and the signature presented. HMAC-SHA256 is a function of these alone, so a hit
is the answer the check would give again. What depends on the time (an expired URL, a skewed
clock) is checked on every request before the look-up, and a failed check is never kept.

A whole request (`known`) is keyed on all that authentication reads of it (method, path, query
string, every header as received, the bucket of a virtual host): its answer is a function of
these, the secret and the time alone. So a hit is used only while the access key's secret is
still the one it was checked with and the time checks that passed then pass at this moment
(Identity.valid_at: the same bounds, inclusive, that the checks compare with).

A whole request is kept only from the second time it comes (`again`): a presigned URL used once
(a web page's images, a notebook's `generate_presigned_url` per file) never comes back, and its
keeping cost its check ~10,000 instructions (`bench/auth_instructions.py --presigned`: the
request's size, the LRU's frames, the garbage collector's walks of what it kept) for nothing.
What is remembered of a request is the hash of its query's last 64 characters (where the SDKs put
X-Amz-Signature: a URL's own; hashed for less than its whole key), in one slot of a table 16
times the memo's size (512 KiB for 4,096 requests; a later request of the same slot takes it).
A presigned URL sent again and again (a dashboard's) is checked in full twice, then answered by
a look-up, as cheap as before. Requests whose queries end alike (an empty one, say) count as come
before: kept every time. A hit is still of the whole key: what `again` says only ever costs or
saves instructions.

A request that carries `amz-sdk-invocation-id` is neither looked up nor kept: the AWS SDKs (and
the engines and tools on them: boto3, the Java, Go, JavaScript and C++ SDKs, PyArrow, Trino)
give each request an id of its own and sign it anew on a retry, so it is never sent again byte
for byte, and keeping it cost such a request 12% of its check (37,000 of 303,000 instructions,
`bench/auth_instructions.py`) for nothing.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable
from datetime import datetime

from gateway.lru import LRU
from gateway.s3api.auth.model import Identity, SecretLookup

__all__ = ["HEADER_COST", "KNOWN_REQUEST_MAX", "SDK_INVOCATION_ID", "SEEN_BY", "VerifiedSignatures", "kept_size"]

# What a request kept whole (here, and by s3api.replays) holds beyond its characters, per header:
# its (name, value) tuple and two strings, ~160 bytes. Counted in characters alone, 4,096 of
# them as 600 headers "a: b" held ~100 KiB, and 4,096 such requests (one presigned URL and
# headers of the sender's choosing) grew the gateway by ~500 MB (loadtests/hostile_memory.py).
HEADER_COST = 160
# The largest request kept whole, in kept_size: a presigned GET from a browser (14 headers) is
# about 3,500; larger ones are checked every time, so the memo holds at most ~32 MiB of requests.
KNOWN_REQUEST_MAX = 8192
# How many of a query's last characters tell whether it came before (`again`): an X-Amz-Signature.
SEEN_BY = 64
# The header by which an SDK marks each request as its own (a new UUID per request).
SDK_INVOCATION_ID = "amz-sdk-invocation-id"


def kept_size(characters: int, headers: int) -> int:
    """About the bytes a request of `characters` (path, query and headers) in `headers` headers
    holds when kept whole."""
    return characters + HEADER_COST * headers


class VerifiedSignatures:
    """At most `size` verified signatures and `size` whole requests (the oldest goes first).
    Event loop only. `hits` counts both kinds."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._verified: LRU[Hashable, tuple[bytes, str]] = LRU(size)  # the oldest checked first out
        self._requests: LRU[Hashable, tuple[Identity, str]] = LRU(size)
        # (identity, secret) of a whole request kept, or None: the dict's own get, no frame on a miss
        self.kept: Callable[[Hashable], tuple[Identity, str] | None] = self._requests.get
        slots = 16
        while slots < 16 * size:
            slots *= 2
        self._mask = slots - 1
        # By hash & mask, the hash last seen there: 8 bytes a slot, and no object for the garbage
        # collector to walk (a list of 65,536 ints cost the SDK's header-signed check, which never
        # uses it, ~2,700 instructions of collections a request: bench/auth_instructions.py)
        self._seen = array("q", bytes(8 * slots))
        self.hits = 0

    def again(self, query_string: str) -> bool:
        """Whether a request of this query came before (the last of its slot): only then is it
        kept (`know`); if not, it is the one remembered there now."""
        hashed = hash(query_string[-SEEN_BY:])
        slot = hashed & self._mask
        if self._seen[slot] == hashed:
            return True
        self._seen[slot] = hashed
        return False

    def known(self, request: Hashable, secret_for: SecretLookup, now: datetime) -> Identity | None:
        """The identity of a whole request that passed, if its key's secret is still the one
        it was checked with and its time checks pass at `now`; else None."""
        found = self._requests.get(request)
        return None if found is None else self.valid(found, secret_for, now)

    def valid(self, found: tuple[Identity, str], secret_for: SecretLookup, now: datetime) -> Identity | None:
        """The identity of a request kept (`kept`), if it still holds (as `known`); else None."""
        identity, secret = found
        if identity.access_key is None or secret_for(identity.access_key) != secret or not identity.valid_at(now):
            return None
        self.hits += 1
        return identity

    def know(self, request: Hashable, identity: Identity, secret: str) -> None:
        self._requests.put(request, (identity, secret))

    def get(self, key: Hashable) -> tuple[bytes, str] | None:
        """(signing key, signature) of a check that passed with exactly these inputs, or None."""
        found = self._verified.get(key)
        if found is not None:
            self.hits += 1
        return found

    def put(self, key: Hashable, verified: tuple[bytes, str]) -> None:
        self._verified.put(key, verified)
