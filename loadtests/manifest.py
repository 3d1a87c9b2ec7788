"""Where the prepared objects live and the manifest that lists them; the boto3 client every part uses.

Layout under the prefix (default `loadtest`):

    <prefix>/manifest.json        written last by prepare: seed, objects, folders
    <prefix>/objects/<n>          the read set (Zipf reads, the read/write mix)
    <prefix>/dirs/<d>/<n>         the small files the dashboard refreshes, folder by folder
    <prefix>/meta/<run>/<user>/   each metadata-mix user's own objects (created at run time)
    <prefix>/rw/<run>/<user>/     each read/write-mix user's own writes (created at run time)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import boto3
from botocore.config import Config

from loadtests.content import Body

FORMAT = "loadtests/1"


def s3_client(endpoint: str, *, pool: int = 10, session: boto3.session.Session | None = None):  # type: ignore[no-untyped-def]
    """A SigV4 client for `endpoint`: credentials from the usual AWS chain (AWS_ACCESS_KEY_ID, ...),
    path-style addressing, no retries (a load test reports errors instead of hiding them)."""
    session = session or boto3.session.Session()
    region = os.environ.get("LOADTEST_REGION") or session.region_name or "us-east-1"
    return session.client(
        "s3", endpoint_url=endpoint, region_name=region,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      retries={"max_attempts": 1, "mode": "standard"}, max_pool_connections=pool,
                      connect_timeout=10, read_timeout=120),
    )


def manifest_key(prefix: str) -> str:
    return f"{prefix}/manifest.json"


@dataclass(frozen=True, slots=True)
class Manifest:
    """What prepare created: every object's key and size; its bytes are Body(seed, key, size)."""

    seed: str
    objects: tuple[tuple[str, int], ...]
    dirs: dict[str, tuple[tuple[str, int], ...]]  # folder prefix ("<prefix>/dirs/003/") -> its files

    def body(self, key: str, size: int) -> Body:
        return Body(self.seed, key, size)

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT, "seed": self.seed, "objects": self.objects, "dirs": self.dirs},
                          separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ValueError(f"manifest format {doc.get('format')!r}, expected {FORMAT!r}")
        return cls(str(doc["seed"]), tuple((k, int(s)) for k, s in doc["objects"]),
                   {d: tuple((k, int(s)) for k, s in files) for d, files in doc["dirs"].items()})

    @classmethod
    def load(cls, s3, bucket: str, prefix: str) -> Manifest:  # type: ignore[no-untyped-def]
        return cls.from_json(s3.get_object(Bucket=bucket, Key=manifest_key(prefix))["Body"].read())
