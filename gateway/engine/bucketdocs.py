"""Configuration documents of buckets that the gateway applies itself (the CORS rules), read
from the origin with the gateway's credentials and kept for a while.

A document is kept `ttl` seconds (metadata.ttl), its absence too (the origin's 404:
NoSuchCORSConfiguration, NoSuchBucket). Another failure (the gateway's credentials may not
read it, the origin is down) is kept `error_ttl` seconds (metadata.negative_ttl), so that a
failing origin is not asked again on every request. A write through the gateway that names
no key (PutBucketCors, DeleteBucketCors, any bucket configuration) forgets the bucket's
documents, on every worker and node as it forgets the bucket's listings (Writes.invalidate_local);
a change made behind the gateway is seen within `ttl`. Event loop only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from gateway.engine.flight import SingleFlight
from gateway.errors import S3Error
from gateway.origin import Origin

_ABSENT = frozenset({"NoSuchCORSConfiguration", "NoSuchBucket", "NoSuchKey", "NotFound"})
_MAX_DOCUMENT = 64 * 1024  # S3 caps a CORS configuration at 100 rules, far below this


class BucketDocuments:
    def __init__(self, origin: Origin, *, ttl: float, error_ttl: float, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._origin = origin
        self._ttl, self._error_ttl = ttl, error_ttl
        self._max_entries = max_entries
        self._clock = clock
        # (bucket, name) -> (kept until, the document or None, or the failure)
        self._kept: OrderedDict[tuple[str, str], tuple[float, bytes | None | S3Error]] = OrderedDict()
        self._flights: SingleFlight[tuple[str, str], bytes | None | S3Error] = SingleFlight()
        self._forgotten = 0  # counts forget() calls: a read started before one is not kept

    async def get(self, bucket: str, name: str) -> bytes | None:
        """The bucket's `name` document (`cors`), None when it has none; raises the origin's
        S3Error when it could not be read."""
        entry = self._kept.get((bucket, name))
        got = entry[1] if entry is not None and entry[0] > self._clock() else \
            await self._flights.run((bucket, name), lambda: self._read(bucket, name))
        if isinstance(got, S3Error):
            raise got
        return got

    def get_now(self, bucket: str, name: str) -> tuple[bool, bytes | None]:
        """(True, what `get` would answer) when it is kept and fresh; (False, None) when `get`
        would have to ask the origin or would raise."""
        entry = self._kept.get((bucket, name))
        if entry is None or entry[0] <= self._clock() or isinstance(entry[1], S3Error):
            return False, None
        return True, entry[1]

    def forget(self, bucket: str | None = None) -> None:
        """Forget the documents of `bucket` (of every bucket when None)."""
        self._forgotten += 1
        if bucket is None:
            self._kept.clear()
            return
        for kept in [k for k in self._kept if k[0] == bucket]:
            del self._kept[kept]

    async def _read(self, bucket: str, name: str) -> bytes | None | S3Error:
        forgotten = self._forgotten
        got: bytes | None | S3Error
        try:
            response = await self._origin.send("GET", bucket, None, query=[(name, "")])
            if response.status == 200:
                got = await response.read_at_most(_MAX_DOCUMENT)
                if len(got) > _MAX_DOCUMENT:
                    got = S3Error("InternalError", f"The bucket's {name} configuration is too large to apply.")
            else:
                error = await self._origin.error_from(response, resource=f"/{bucket}")
                got = None if error.code in _ABSENT else error
        except S3Error as failure:
            got = failure
        if forgotten == self._forgotten:
            ttl = self._error_ttl if isinstance(got, S3Error) else self._ttl
            self._kept[(bucket, name)] = (self._clock() + ttl, got)
            self._kept.move_to_end((bucket, name))
            while len(self._kept) > self._max_entries:
                self._kept.popitem(last=False)
        return got
