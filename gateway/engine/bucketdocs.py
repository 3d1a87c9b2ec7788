"""Configuration documents of buckets that the gateway applies itself (the CORS rules), read
from the origin with the gateway's credentials and kept for a while.

A document is kept `ttl` seconds (metadata.ttl), its absence too (the origin's 404:
NoSuchCORSConfiguration, NoSuchBucket). Another failure (the gateway's credentials may not
read it, the origin is down) is kept `error_ttl` seconds (metadata.negative_ttl), so that a
failing origin is not asked again on every request. A write through the gateway that names
no key (PutBucketCors, DeleteBucketCors, any bucket configuration) forgets the bucket's
documents, on every worker and node as it forgets the bucket's listings (Writes.invalidate_local);
a change made behind the gateway is seen within `ttl`.

Names nobody vouches for. A CORS preflight is answered to anyone, so its bucket name may be
made up. The caller says whether a bucket is `known` (named in a grant or in
auth.anonymous_read, or asked about for a user who may use it); the gateway also knows that a
bucket exists once a request of a known user succeeded on it (`note_exists`, at most
`max_entries` names, least recently seen out first) or once the origin answered a lookup of it
with anything but NoSuchBucket. A lookup for any other name is one of at most `lookup_burst`
at once and `lookups_per_second` after that (a token bucket per worker; joining a lookup under
way costs none); beyond it `get` raises SlowDown and the origin is not asked. What such a
lookup found, and every NoSuchBucket, is kept apart, in at most `max_unknown` entries: made-up
names can only push each other out, never the documents of buckets that exist (at most
`max_entries`). Event loop only.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from gateway.engine.flight import SingleFlight
from gateway.engine.ratelimit import TokenBucket
from gateway.errors import S3Error
from gateway.origin import Origin
from gateway.store.meta import ExpiringLRU

_ABSENT = frozenset({"NoSuchCORSConfiguration", "NoSuchBucket", "NoSuchKey", "NotFound"})
_MAX_DOCUMENT = 64 * 1024  # S3 caps a CORS configuration at 100 rules, far below this

_Got = bytes | None | S3Error  # the document, its absence, or why it could not be read
_Key = tuple[str, str]  # (bucket, document name)


class BucketDocuments:
    """Documents kept per (bucket, name), in two bounded LRUs: buckets that exist or are known,
    and the other names. Event loop only."""

    def __init__(self, origin: Origin, *, ttl: float, error_ttl: float, max_entries: int = 10_000,
                 max_unknown: int = 1_000, lookups_per_second: float = 2.0, lookup_burst: int = 20,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._origin = origin
        self._ttl, self._error_ttl = ttl, error_ttl
        self._clock = clock
        self._kept: ExpiringLRU[_Key, _Got] = ExpiringLRU(max_entries, clock)  # buckets that exist or are known
        self._unknown: ExpiringLRU[_Key, _Got] = ExpiringLRU(max_unknown, clock)  # the other names
        self._exist: ExpiringLRU[str, bool] = ExpiringLRU(max_entries, clock)  # names seen to exist
        self._lookups = TokenBucket(lookups_per_second, lookup_burst, clock)  # of names not known
        self._flights: SingleFlight[_Key, _Got] = SingleFlight()
        self._forgotten = 0  # counts forget() calls: a read started before one is not kept
        self.stats: Counter[str] = Counter()

    async def get(self, bucket: str, name: str, *, known: bool = True) -> bytes | None:
        """The bucket's `name` document (`cors`), None when it has none; raises the origin's
        S3Error when it could not be read, and SlowDown when the bucket is neither `known` nor
        seen to exist and lookups of such names are over their rate."""
        fresh, got = self._fresh((bucket, name))
        if not fresh:
            if not known and (bucket, name) not in self._flights and self._exist.get_aged(bucket) is None \
                    and not self._lookups.take():
                self.stats["bucket_lookup_refused"] += 1
                raise S3Error("SlowDown", "Too many lookups of buckets the gateway does not know; retry later.")
            got = await self._flights.run((bucket, name), lambda: self._read(bucket, name, known))
        if isinstance(got, S3Error):
            raise got
        return got

    def get_now(self, bucket: str, name: str) -> tuple[bool, bytes | None]:
        """(True, what `get` would answer) when it is kept and fresh; (False, None) when `get`
        would have to ask the origin or would raise."""
        fresh, got = self._fresh((bucket, name))
        if not fresh or isinstance(got, S3Error):
            return False, None
        return True, got

    def note_exists(self, bucket: str) -> None:
        """A request of a known user succeeded on `bucket`: it exists, and lookups of its
        documents are not rate-limited."""
        if self._exist.get_aged(bucket) is None:
            self._exist.put(bucket, True)

    def forget(self, bucket: str | None = None) -> None:
        """Forget the documents of `bucket` (of every bucket when None). Which buckets exist is
        not forgotten: a change of configuration does not change that."""
        self._forgotten += 1
        if bucket is None:
            self._kept.clear()
            self._unknown.clear()
            return
        for store in (self._kept, self._unknown):
            store.remove_where(lambda key: key[0] == bucket)

    def sizes(self) -> tuple[int, int, int]:
        """How many (documents of buckets that exist or are known, of other names, names seen to exist)."""
        return len(self._kept), len(self._unknown), len(self._exist)

    def _fresh(self, key: _Key) -> tuple[bool, _Got]:
        for store in (self._kept, self._unknown):
            found = store.get_aged(key)
            if found is not None:
                got, age = found
                return age < (self._error_ttl if isinstance(got, S3Error) else self._ttl), got
        return False, None

    async def _read(self, bucket: str, name: str, known: bool) -> _Got:
        forgotten = self._forgotten
        got: _Got
        exists = False  # the origin's answer shows that the bucket exists
        try:
            response = await self._origin.send("GET", bucket, None, query=[(name, "")])
            if response.status == 200:
                exists = True
                got = await response.read_at_most(_MAX_DOCUMENT)
                if len(got) > _MAX_DOCUMENT:
                    got = S3Error("InternalError", f"The bucket's {name} configuration is too large to apply.")
            else:
                error = await self._origin.error_from(response, resource=f"/{bucket}")
                exists = error.code in _ABSENT and error.code != "NoSuchBucket"
                got = None if error.code in _ABSENT else error
        except S3Error as failure:
            got = failure
        if exists:
            self.note_exists(bucket)
        if forgotten == self._forgotten:
            vouched = exists or (isinstance(got, S3Error) and (known or self._exist.get_aged(bucket) is not None))
            into, other = (self._kept, self._unknown) if vouched else (self._unknown, self._kept)
            other.pop((bucket, name))
            into.put((bucket, name), got)
        return got
