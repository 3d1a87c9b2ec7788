"""Create the objects the Locust scenarios read, and the manifest listing them.

    python -m loadtests.prepare --endpoint http://127.0.0.1:8080 --bucket loadtest \
        --objects 1000 --size 64KiB --dirs 20 --files 100 --file-size 1KiB-16KiB

Credentials come from the usual AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
Objects whose key and size the bucket already holds under the same seed are skipped, so a
second run only adds what is missing (--force writes everything again). Sizes are fixed
('64KiB') or log-uniform ranges ('1KiB-4MiB'); each object's size follows from the seed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from loadtests.content import SizeSpec
from loadtests.manifest import Manifest, manifest_key, s3_client

_MULTIPART = 16 * 1024 * 1024


def plan(prefix: str, seed: str, objects: int, size: SizeSpec, dirs: int, files: int,
         file_size: SizeSpec) -> Manifest:
    rng = random.Random(f"loadtests-sizes:{seed}")
    read_set = tuple((f"{prefix}/objects/{i:06d}", size.pick(rng)) for i in range(objects))
    folders = {}
    for d in range(dirs):
        folder = f"{prefix}/dirs/{d:03d}/"
        folders[folder] = tuple((f"{folder}{i:05d}", file_size.pick(rng)) for i in range(files))
    return Manifest(seed, read_set, folders)


def _existing(s3, bucket: str, prefix: str, seed: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """key -> size of what an earlier run with the same seed left under the prefix."""
    try:
        old = Manifest.load(s3, bucket, prefix)
    except (ClientError, ValueError):
        return {}
    if old.seed != seed:
        return {}
    found: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            found[item["Key"]] = item["Size"]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.prepare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", required=True, help="S3 endpoint URL (the gateway, the origin, ...)")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", default="loadtest", help="everything goes under <prefix>/ (default loadtest)")
    parser.add_argument("--objects", type=int, default=1000, help="objects in the read set (default 1000)")
    parser.add_argument("--size", default="64KiB", help="their size or size range (default 64KiB)")
    parser.add_argument("--dirs", type=int, default=20, help="dashboard folders (default 20)")
    parser.add_argument("--files", type=int, default=100, help="small files per folder (default 100)")
    parser.add_argument("--file-size", default="1KiB-16KiB", help="their size or size range (default 1KiB-16KiB)")
    parser.add_argument("--seed", default="0", help="the objects' bytes and sizes follow from it (default 0)")
    parser.add_argument("--workers", type=int, default=16, help="uploads in flight (default 16)")
    parser.add_argument("--create-bucket", action="store_true", help="create the bucket if it does not exist")
    parser.add_argument("--force", action="store_true", help="upload every object, even those already there")
    args = parser.parse_args(argv)
    prefix = args.prefix.strip("/")
    try:
        manifest = plan(prefix, args.seed, args.objects, SizeSpec.parse(args.size), args.dirs, args.files,
                        SizeSpec.parse(args.file_size))
    except ValueError as exc:
        parser.error(str(exc))

    s3 = s3_client(args.endpoint, pool=args.workers)
    if args.create_bucket:
        try:
            s3.head_bucket(Bucket=args.bucket)
        except ClientError:
            s3.create_bucket(Bucket=args.bucket)
    existing = {} if args.force else _existing(s3, args.bucket, prefix, args.seed)
    todo = list(manifest.objects) + [item for files in manifest.dirs.values() for item in files]
    missing = [(key, size) for key, size in todo if existing.get(key) != size]
    transfer = TransferConfig(multipart_threshold=_MULTIPART, multipart_chunksize=_MULTIPART, max_concurrency=4)

    def upload(item: tuple[str, int]) -> int:
        key, size = item
        body = manifest.body(key, size)
        if size < _MULTIPART:
            s3.put_object(Bucket=args.bucket, Key=key, Body=body.bytes())
        else:
            s3.upload_fileobj(body.reader(), args.bucket, key, Config=transfer)
        return size

    started = time.monotonic()
    with ThreadPoolExecutor(max(1, args.workers)) as pool:
        uploaded = sum(pool.map(upload, missing))
    # Last: a manifest means every object it lists is there.
    s3.put_object(Bucket=args.bucket, Key=manifest_key(prefix), Body=manifest.to_json(),
                  ContentType="application/json")
    print(f"uploaded {len(missing)} objects ({uploaded} bytes) in {time.monotonic() - started:.1f} s, "
          f"{len(todo) - len(missing)} already there; manifest s3://{args.bucket}/{manifest_key(prefix)} "
          f"(seed {args.seed}: {len(manifest.objects)} objects, {len(manifest.dirs)} folders)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
