"""Locust scenarios against any S3 endpoint, every body checked: run headless, see loadtests/README.md.

Users (pick them by class name on the command line, or LOADTEST_SCENARIOS=zipf,dashboard,...):

  ZipfReads      (zipf)       GETs over the prepared read set, rank k drawn with P ~ 1/k**exponent
  DashboardRefresh (dashboard) list one prepared folder, then GET every file in it, N at a time
  MetadataMix    (metadata)   in its own prefix: create 10%, delete 10%, copy-as-rename 10%,
                              head 20%, read 20%, list 30%
  ReadWriteMix   (readwrite)  Zipf reads of the read set, overwrites of its own keys, and
                              read-backs that must return the last version written

Every GET's body is compared with the bytes the scenario knows (loadtests/content.py); a body
that differs is a failure "wrong bytes" (a HEAD with the wrong size "wrong metadata", a
listing that is not what the user created "wrong listing"), never a success. Every request
is SigV4-signed by boto3, one client per user; credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (or any source boto3 reads), the endpoint from --host.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import gevent
import gevent.lock
import gevent.pool
from botocore.exceptions import BotoCoreError, ClientError
from locust import User, between, constant, task
from locust.exception import StopUser

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `locust -f loadtests/locustfile.py` from anywhere

from loadtests.content import CHUNK, Body, SizeSpec, Zipf, mismatch  # noqa: E402
from loadtests.manifest import Manifest, manifest_key, s3_client  # noqa: E402

log = logging.getLogger("loadtests")
_URL = re.compile(r"https?://[^\s\"']+")


def _env(name: str, default: str) -> str:
    return os.environ.get(f"LOADTEST_{name}", default)


BUCKET = _env("BUCKET", "loadtest")
PREFIX = _env("PREFIX", "loadtest").strip("/")
ZIPF_EXPONENT = float(_env("ZIPF_EXPONENT", "1.0"))
RANGE_FRACTION = float(_env("RANGE_FRACTION", "0"))  # share of Zipf reads that ask for a random byte range
DASHBOARD_PARALLEL = int(_env("DASHBOARD_PARALLEL", "8"))
META_OBJECTS = int(_env("META_OBJECTS", "20"))  # objects each metadata user starts with
META_SIZE = SizeSpec.parse(_env("META_SIZE", "1KiB"))
CHECK_LISTINGS = _env("CHECK_LISTINGS", "1") not in ("0", "", "false", "no")
WRITE_PERCENT = int(_env("WRITE_PERCENT", "20"))  # read/write mix: overwrites of the user's own keys
READBACK_PERCENT = int(_env("READBACK_PERCENT", "20"))  # read/write mix: reads of the user's own keys
RW_KEYS = int(_env("RW_KEYS", "10"))
RW_SIZE = SizeSpec.parse(_env("RW_SIZE", "64KiB"))
CLEANUP = _env("CLEANUP", "1") not in ("0", "", "false", "no")  # delete the users' own objects when they stop


def _wait_time():  # type: ignore[no-untyped-def]
    """LOADTEST_WAIT: seconds between a user's requests, '0' (default) or a range '0.5-2'."""
    low, _, high = _env("WAIT", "0").partition("-")
    return between(float(low), float(high)) if high else constant(float(low))


class Failure(Exception):
    """A failed check or request; its text is what Locust's failure table shows."""

    def __repr__(self) -> str:
        return str(self)


WRONG_BYTES = "wrong bytes"
WRONG_METADATA = "wrong metadata"
WRONG_LISTING = "wrong listing"


class Outcome:
    """What a timed request yields to its block: the bytes it moved, and afterwards its error, if any."""

    __slots__ = ("error", "length")

    def __init__(self) -> None:
        self.length = 0
        self.error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _Shared:
    """Per process: the manifest (loaded once, by the first user that needs it) and a run id."""

    run_id = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    users = itertools.count()
    session: boto3.session.Session | None = None  # one per process: a client from it costs ~5x less CPU
    _lock = gevent.lock.Semaphore()
    _manifest: Manifest | None = None
    _error: str | None = None
    zipf: Zipf | None = None
    order: list[int] = []  # Zipf rank -> index in the read set (a seeded shuffle: hot keys are spread out)

    @classmethod
    def manifest(cls, s3) -> Manifest:  # type: ignore[no-untyped-def]
        with cls._lock:
            if cls._manifest is None and cls._error is None:
                try:
                    manifest = Manifest.load(s3, BUCKET, PREFIX)
                except (ClientError, BotoCoreError, ValueError) as exc:
                    cls._error = (f"no usable manifest at s3://{BUCKET}/{manifest_key(PREFIX)} ({exc}): "
                                  "run python -m loadtests.prepare first (loadtests/README.md)")
                    log.error("%s", cls._error)
                else:
                    if manifest.objects:
                        cls.zipf = Zipf(len(manifest.objects), ZIPF_EXPONENT)
                        cls.order = list(range(len(manifest.objects)))
                        random.Random(f"loadtests-zipf:{manifest.seed}").shuffle(cls.order)
                    cls._manifest = manifest
            if cls._error is not None:
                raise Failure(cls._error)
            assert cls._manifest is not None
            return cls._manifest


class S3User(User):
    """One boto3 client (its own connections) and the helpers that time, check and report requests."""

    abstract = True
    scenario = ""
    wait_time = _wait_time()
    pool = 10

    def on_start(self) -> None:
        if not self.host:
            raise SystemExit("no endpoint: pass --host http://host:port (the gateway, the origin, nginx)")
        _Shared.session = _Shared.session or boto3.session.Session()
        self.s3 = s3_client(self.host, pool=self.pool, session=_Shared.session)
        self.rng = random.Random()
        self.number = next(_Shared.users)

    def need_manifest(self) -> Manifest:
        """The manifest; without one, report the failure and end the test (nothing to read)."""
        try:
            return _Shared.manifest(self.s3)
        except Failure as exc:
            self.report("GET", "manifest", time.perf_counter(), 0, exc)
            gevent.spawn(self.environment.runner.quit)  # type: ignore[union-attr]
            raise StopUser from None

    def report(self, kind: str, name: str, started: float, length: int, error: Exception | None) -> None:
        self.environment.events.request.fire(
            request_type=kind, name=name, response_time=(time.perf_counter() - started) * 1000,
            response_length=length, exception=error, context={})

    @contextmanager
    def request(self, kind: str, name: str) -> Iterator[Outcome]:
        """Time the block and report it as one request; the block may set .length and raise Failure."""
        started = time.perf_counter()
        outcome = Outcome()
        try:
            yield outcome
        except Failure as exc:
            outcome.error = exc
        except ClientError as exc:
            meta = exc.response.get("ResponseMetadata", {})
            outcome.error = Failure(f"{exc.response.get('Error', {}).get('Code', '?')} "
                                    f"({meta.get('HTTPStatusCode', '?')})")
        except Exception as exc:  # connection resets, timeouts, ...: a failed request, whatever raised it
            # without the URL, so that Locust's error table has one row per kind of error, not per key
            outcome.error = Failure(f"{type(exc).__name__}: {_URL.sub('<url>', str(exc))}")
        self.report(kind, name, started, outcome.length, outcome.error)

    def get(self, name: str, key: str, body: Body, start: int = 0, end: int | None = None) -> bool:
        """GET key (bytes [start, end) when given), check them against body; whether all went well."""
        kind = "GET" if end is None else "GET range"
        with self.request(kind, name) as outcome:
            params = {} if end is None else {"Range": f"bytes={start}-{end - 1}"}
            response = self.s3.get_object(Bucket=BUCKET, Key=key, **params)

            def pieces() -> Iterator[bytes]:
                for piece in response["Body"].iter_chunks(CHUNK):
                    outcome.length += len(piece)
                    yield piece

            problem = mismatch(body, pieces(), start, end)
            if problem is not None:
                log.error("%s: s3://%s/%s [%s, %s): %s", WRONG_BYTES, BUCKET, key, start,
                          body.size if end is None else end, problem)
                raise Failure(WRONG_BYTES)
        return outcome.ok

    def put(self, name: str, key: str, body: Body) -> bool:
        with self.request("PUT", name) as outcome:
            self.s3.put_object(Bucket=BUCKET, Key=key, Body=body.bytes())
            outcome.length = body.size
        return outcome.ok

    def listing(self, prefix: str) -> dict[str, int]:
        found: dict[str, int] = {}
        token: dict[str, str] = {}
        while True:
            page = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix, **token)
            found.update((item["Key"], item["Size"]) for item in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return found
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def check_listing(self, prefix: str, found: dict[str, int], expected: dict[str, int]) -> None:
        if CHECK_LISTINGS and found != expected:
            missing = sorted(expected.keys() - found.keys())[:3]
            extra = sorted(found.keys() - expected.keys())[:3]
            sizes = sorted(k for k in expected.keys() & found.keys() if expected[k] != found[k])[:3]
            log.error("%s: s3://%s/%s: missing %s, unexpected %s, wrong sizes %s", WRONG_LISTING, BUCKET, prefix,
                      missing, extra, sizes)
            raise Failure(WRONG_LISTING)

    def zipf_read(self, name: str) -> None:
        manifest = self.need_manifest()
        assert _Shared.zipf is not None, "the manifest lists no objects: prepare with --objects > 0"
        key, size = manifest.objects[_Shared.order[_Shared.zipf.sample(self.rng)]]
        body = manifest.body(key, size)
        if RANGE_FRACTION and size > 1 and self.rng.random() < RANGE_FRACTION:
            start = self.rng.randrange(size)
            self.get(name, key, body, start, self.rng.randint(start + 1, size))
        else:
            self.get(name, key, body)


class ZipfReads(S3User):
    """GETs over the prepared read set, Zipf-distributed (LOADTEST_ZIPF_EXPONENT, default 1.0; 0 is uniform)."""

    scenario = "zipf"

    @task
    def read(self) -> None:
        self.zipf_read("zipf")


class DashboardRefresh(S3User):
    """A dashboard refresh: list one prepared folder, then GET every file in it, LOADTEST_DASHBOARD_PARALLEL
    at a time. Besides each request, the whole refresh is reported as REFRESH dashboard."""

    scenario = "dashboard"
    pool = max(10, DASHBOARD_PARALLEL)

    @task
    def refresh(self) -> None:
        manifest = self.need_manifest()
        assert manifest.dirs, "the manifest lists no folders: prepare with --dirs > 0"
        folder = self.rng.choice(sorted(manifest.dirs))
        expected = dict(manifest.dirs[folder])
        started = time.perf_counter()
        found: dict[str, int] = {}
        with self.request("LIST", "dashboard") as listed:
            found = self.listing(folder)
            listed.length = len(found)
            self.check_listing(folder, found, expected)
        pool = gevent.pool.Pool(DASHBOARD_PARALLEL)
        fetched = pool.map(lambda item: self.get("dashboard", item[0], manifest.body(*item)),
                           [(key, expected.get(key, size)) for key, size in found.items()])
        self.report("REFRESH", "dashboard", started, sum(found.values()),
                    None if listed.ok and all(fetched) else Failure("a request of the refresh failed"))


class MetadataMix(S3User):
    """Metadata operations on the user's own objects under <prefix>/meta/<run>/<user>/ (no prepare needed):
    create 10%, delete 10%, copy-as-rename 10%, head 20%, read 20%, list 30%."""

    scenario = "metadata"

    def on_start(self) -> None:
        super().on_start()
        self.prefix = f"{PREFIX}/meta/{_Shared.run_id}/{self.number:04d}/"
        self.objects: dict[str, Body] = {}
        self.serial = itertools.count()
        for _ in range(META_OBJECTS):
            self.create()

    def on_stop(self) -> None:
        if CLEANUP and self.objects:
            keys = list(self.objects)
            try:
                for i in range(0, len(keys), 1000):
                    self.s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                                  "Quiet": True})
            except (ClientError, BotoCoreError, OSError) as exc:
                log.warning("cleanup of s3://%s/%s failed: %s", BUCKET, self.prefix, exc)

    def _pick(self) -> str | None:
        return self.rng.choice(list(self.objects)) if self.objects else None

    @task(10)
    def create(self) -> None:
        n = next(self.serial)
        key = f"{self.prefix}{n:06d}"
        body = Body(_Shared.run_id, f"{key}#{n}", META_SIZE.pick(self.rng))
        if self.put("metadata", key, body):
            self.objects[key] = body

    @task(10)
    def delete(self) -> None:
        key = self._pick()
        if key is None:
            return self.create()
        with self.request("DELETE", "metadata"):
            self.s3.delete_object(Bucket=BUCKET, Key=key)
            del self.objects[key]

    @task(10)
    def rename(self) -> None:
        """CopyObject to a new key, then DeleteObject of the old one: reported as one RENAME."""
        source = self._pick()
        if source is None:
            return self.create()
        target = f"{self.prefix}{next(self.serial):06d}"
        with self.request("RENAME", "metadata"):
            self.s3.copy_object(Bucket=BUCKET, Key=target, CopySource={"Bucket": BUCKET, "Key": source})
            self.objects[target] = self.objects[source]
            self.s3.delete_object(Bucket=BUCKET, Key=source)
            del self.objects[source]

    @task(20)
    def head(self) -> None:
        key = self._pick()
        if key is None:
            return self.create()
        with self.request("HEAD", "metadata"):
            size = self.s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
            if size != self.objects[key].size:
                log.error("%s: s3://%s/%s: ContentLength %s instead of %s", WRONG_METADATA, BUCKET, key, size,
                          self.objects[key].size)
                raise Failure(WRONG_METADATA)

    @task(20)
    def read(self) -> None:
        key = self._pick()
        if key is None:
            return self.create()
        self.get("metadata", key, self.objects[key])

    @task(30)
    def list_prefix(self) -> None:
        with self.request("LIST", "metadata") as listed:
            found = self.listing(self.prefix)
            listed.length = len(found)
            self.check_listing(self.prefix, found, {k: body.size for k, body in self.objects.items()})


class ReadWriteMix(S3User):
    """Zipf reads of the prepared read set, overwrites of LOADTEST_RW_KEYS keys of the user's own
    (LOADTEST_WRITE_PERCENT, default 20), and reads of those keys (LOADTEST_READBACK_PERCENT, default 20)
    that must return the version written last: a cache that keeps serving an overwritten object fails."""

    scenario = "readwrite"

    def on_start(self) -> None:
        super().on_start()
        self.prefix = f"{PREFIX}/rw/{_Shared.run_id}/{self.number:04d}/"
        self.keys = [f"{self.prefix}{i:04d}" for i in range(max(1, RW_KEYS))]
        self.versions: dict[str, Body] = {}
        self.serial = itertools.count()
        for key in self.keys:
            self.write(key)

    def on_stop(self) -> None:
        if CLEANUP and self.versions:
            try:
                self.s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in self.versions],
                                                              "Quiet": True})
            except (ClientError, BotoCoreError, OSError) as exc:
                log.warning("cleanup of s3://%s/%s failed: %s", BUCKET, self.prefix, exc)

    def write(self, key: str | None = None) -> None:
        key = key or self.rng.choice(self.keys)
        body = Body(_Shared.run_id, f"{key}#{next(self.serial)}", RW_SIZE.pick(self.rng))
        if self.put("readwrite", key, body):
            self.versions[key] = body
        else:
            self.versions.pop(key, None)  # it may or may not have landed: not read back until written again

    def read_shared(self) -> None:
        self.zipf_read("readwrite shared")

    def read_back(self) -> None:
        if not self.versions:
            return self.write()
        key = self.rng.choice(sorted(self.versions))
        self.get("readwrite own", key, self.versions[key])

    @task
    def mix(self) -> None:
        point = self.rng.randrange(100)
        if point < WRITE_PERCENT:
            self.write()
        elif point < WRITE_PERCENT + READBACK_PERCENT:
            self.read_back()
        else:
            self.read_shared()


SCENARIOS: dict[str, type[S3User]] = {cls.scenario: cls for cls in (ZipfReads, DashboardRefresh, MetadataMix,
                                                                    ReadWriteMix)}


def _select(names: str) -> None:
    """LOADTEST_SCENARIOS=zipf,metadata: only those user classes run (the others become abstract)."""
    wanted = {name.strip() for name in names.split(",") if name.strip()}
    unknown = wanted - SCENARIOS.keys()
    if unknown:
        raise SystemExit(f"LOADTEST_SCENARIOS: unknown {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    for name, cls in SCENARIOS.items():
        cls.abstract = name not in wanted


if _env("SCENARIOS", ""):
    _select(_env("SCENARIOS", ""))
