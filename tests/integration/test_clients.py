"""Real S3 clients, unmodified, against the gateway: PyArrow, s3fs, DuckDB, rclone, s3cmd.

Each client does a realistic round trip (write, including a multipart upload where the client
does one; list; read back, ranged where the client does it; delete) and the bytes are compared
with what reached the origin (read straight from moto with `direct`). Every client runs as a
subprocess with a timeout, so a client that hangs fails its test instead of the suite. A test
skips only when its client is not installed; the skip says how to install it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import ADMIN, REGION
from tests.support import client_env as _client_env
from tests.support import need_duckdb_httpfs
from tests.support import need_binary as _need_binary
from tests.support import need_module as _need_module
from tests.support import run_client as _run


def _python(script: str, *args: str) -> dict:  # type: ignore[type-arg]
    """Run a client library in a child Python (this virtualenv's), which prints one JSON object."""
    out = _run([sys.executable, "-c", textwrap.dedent(script), *args], env=_client_env()).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _origin_objects(direct, bucket: str, prefix: str = "") -> dict[str, dict]:  # type: ignore[no-untyped-def,type-arg]
    """key -> {size, etag} as the origin holds them."""
    pages = direct.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: {"size": o["Size"], "etag": o["ETag"].strip('"')}
            for page in pages for o in page.get("Contents", [])}


def _origin_bytes(direct, bucket: str, key: str) -> bytes:  # type: ignore[no-untyped-def]
    return direct.get_object(Bucket=bucket, Key=key)["Body"].read()


def _is_multipart(etag: str) -> bool:
    return "-" in etag  # S3 (and moto) give a multipart object the ETag "<md5 of part md5s>-<parts>"


# --------------------------------------------------------------------------------------------- PyArrow

_PYARROW = """
    import hashlib, json, os, sys
    import pyarrow as pa, pyarrow.compute as pc, pyarrow.fs as pafs, pyarrow.parquet as pq

    endpoint, key, secret, bucket = sys.argv[1:5]
    fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=key, secret_key=secret,
                           region="us-east-1", connect_timeout=5, request_timeout=30,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))

    def column(n, start):
        ids = pa.array(range(start, start + n), pa.int64())
        noise = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(os.urandom(8 * n))])
        return ids, noise

    # Partition "big" is ~19 MB of mostly incompressible Parquet: above PyArrow's 10 MiB part size, so
    # the AWS C++ SDK uploads it with CreateMultipartUpload and two UploadParts sent as
    # `Transfer-Encoding: chunked`, `Content-Encoding: aws-chunked`, STREAMING-UNSIGNED-PAYLOAD-TRAILER
    # with an x-amz-checksum-crc64nvme trailer. Partition "small" is one PutObject, aws-chunked too.
    big_ids, big_noise = column(1_100_000, 0)
    small_ids, small_noise = column(5_000, 10_000_000)
    table = pa.table({
        "id": pa.concat_arrays([big_ids, small_ids]),
        "x": pc.cast(pc.divide(pa.concat_arrays([big_ids, small_ids]), 7), pa.int64()),
        "noise": pa.concat_arrays([big_noise, small_noise]),
        "part": pa.array(["big"] * len(big_ids) + ["small"] * len(small_ids)),
    })
    root = f"{bucket}/warehouse/events"
    pq.write_to_dataset(table, root, partition_cols=["part"], filesystem=fs,
                        basename_template="data-{i}.parquet", row_group_size=200_000)

    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    files = {i.path: i.size for i in infos if i.type == pafs.FileType.File}
    dirs = sorted(i.path for i in infos if i.type == pafs.FileType.Directory)

    # Reading with filters: partition pruning plus row-group statistics, i.e. ranged GETs of the
    # footer and of the column chunks.
    got = pq.read_table(root, filesystem=fs, filters=[("part", "=", "big"), ("id", ">=", 1_000_000)],
                        columns=["id", "x", "noise"])
    want = table.filter(pc.and_(pc.equal(table["part"], "big"), pc.greater_equal(table["id"], 1_000_000)))
    want = want.select(["id", "x", "noise"])
    filtered_equal = got.sort_by("id").equals(want)
    whole = pq.read_table(root, filesystem=fs, columns=["id", "x", "noise"]).sort_by("id")
    whole_equal = whole.equals(table.select(["id", "x", "noise"]).sort_by("id"))

    digests, ranges = {}, {}
    for path in files:
        with fs.open_input_file(path) as f:
            digests[path] = hashlib.sha256(f.read()).hexdigest()
            size = f.size()
            ranges[path] = [f.read_at(4, 0).hex(), f.read_at(1000, size // 2).hex(), f.read_at(4, size - 4).hex()]

    print(json.dumps({"files": files, "dirs": dirs, "rows": got.num_rows, "filtered_equal": filtered_equal,
                      "whole_equal": whole_equal, "digests": digests, "ranges": ranges}))
"""


_PYARROW_DELETE = """
    import json, sys
    import pyarrow.fs as pafs

    endpoint, key, secret, bucket = sys.argv[1:5]
    fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key=key, secret_key=secret,
                           region="us-east-1", connect_timeout=5, request_timeout=30,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    fs.delete_dir(f"{bucket}/warehouse")
    left = fs.get_file_info(pafs.FileSelector(f"{bucket}/", recursive=True))
    print(json.dumps({"left": [i.path for i in left]}))
"""


def test_pyarrow_parquet_dataset(gateway, s3, direct):
    _need_module("pyarrow", "pip install pyarrow")
    s3.create_bucket(Bucket="arrow")
    out = _python(_PYARROW, gateway.endpoint, *ADMIN, "arrow")
    assert out["filtered_equal"] and out["rows"] == 100_000
    assert out["whole_equal"]
    big = "arrow/warehouse/events/part=big/data-0.parquet"
    small = "arrow/warehouse/events/part=small/data-0.parquet"
    assert set(out["files"]) == {big, small}
    assert out["files"][big] > 10 * 1024 * 1024
    assert "arrow/warehouse/events/part=big" in out["dirs"]

    # What PyArrow wrote (multipart with aws-chunked parts, and a PutObject) is byte for byte what
    # reached the origin, and its ranged reads saw the origin's bytes.
    files = {k: v for k, v in _origin_objects(direct, "arrow").items() if not k.endswith("/")}
    assert {f"arrow/{k}": v["size"] for k, v in files.items()} == out["files"]
    assert _is_multipart(files["warehouse/events/part=big/data-0.parquet"]["etag"])
    for key in files:
        data = _origin_bytes(direct, "arrow", key)
        path = f"arrow/{key}"
        assert out["digests"][path] == _sha(data)
        size = len(data)
        assert out["ranges"][path] == [data[:4].hex(), data[size // 2:size // 2 + 1000].hex(), data[-4:].hex()]
        assert data[:4] == data[-4:] == b"PAR1"

    assert _python(_PYARROW_DELETE, gateway.endpoint, *ADMIN, "arrow")["left"] == []
    assert _origin_objects(direct, "arrow") == {}


# --------------------------------------------------------------------------------------------- s3fs

_S3FS_SETUP = """
    import hashlib, json, os, sys
    import s3fs

    endpoint, key, secret, bucket = sys.argv[1:5]
    fs = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=endpoint, use_listings_cache=False,
                           client_kwargs={"region_name": "us-east-1"},
                           config_kwargs={"connect_timeout": 5, "read_timeout": 30,
                                          "retries": {"max_attempts": 1}})
"""

_S3FS = _S3FS_SETUP + """
    small = b"hello from s3fs\\n"
    big = os.urandom(12 * 1024 * 1024 + 3)
    fs.pipe(f"{bucket}/dir/small.txt", small)
    with fs.open(f"{bucket}/dir/sub/big.bin", "wb", block_size=5 * 1024 * 1024) as f:  # multipart: 5+5+2 MiB
        for i in range(0, len(big), 1 << 20):
            f.write(big[i:i + (1 << 20)])
    found = fs.find(f"{bucket}/dir", detail=True)
    top = sorted(fs.ls(f"{bucket}/dir", detail=False))
    back = fs.cat_file(f"{bucket}/dir/sub/big.bin")
    ranged = fs.cat_file(f"{bucket}/dir/sub/big.bin", start=5_000_000, end=5_000_100)
    with fs.open(f"{bucket}/dir/sub/big.bin", "rb", block_size=1 << 20) as f:  # ranged reads of 1 MiB
        f.seek(len(big) - 10)
        tail = f.read()
    print(json.dumps({
        "listing": {k: v["size"] for k, v in found.items()}, "top": top, "big_ok": back == big,
        "ranged_ok": ranged == big[5_000_000:5_000_100], "tail_ok": tail == big[-10:],
        "small_size": fs.info(f"{bucket}/dir/small.txt")["size"], "sha": hashlib.sha256(big).hexdigest(),
    }))
"""

_S3FS_DELETE = _S3FS_SETUP + """
    fs.rm(f"{bucket}/dir", recursive=True)
    fs.invalidate_cache()
    print(json.dumps({"left": fs.find(f"{bucket}/")}))
"""


def test_s3fs_round_trip(gateway, s3, direct):
    if importlib.util.find_spec("s3fs") is None:
        import botocore

        pytest.skip(f"s3fs cannot be installed beside botocore {botocore.__version__} (pinned in constraints.txt): "
                    "the s3fs releases that use aiobotocore need an older botocore (pip falls back to s3fs 0.4, "
                    "from before them); it runs where s3fs is installed with a botocore its aiobotocore accepts")
    s3.create_bucket(Bucket="fsspec")
    out = _python(_S3FS, gateway.endpoint, *ADMIN, "fsspec")
    assert out["listing"] == {"fsspec/dir/small.txt": 16, "fsspec/dir/sub/big.bin": 12 * 1024 * 1024 + 3}
    assert out["top"] == ["fsspec/dir/small.txt", "fsspec/dir/sub"]
    assert out["big_ok"] and out["ranged_ok"] and out["tail_ok"]
    assert out["small_size"] == 16
    origin = _origin_objects(direct, "fsspec")
    assert _is_multipart(origin["dir/sub/big.bin"]["etag"]), origin
    assert _sha(_origin_bytes(direct, "fsspec", "dir/sub/big.bin")) == out["sha"]
    assert _origin_bytes(direct, "fsspec", "dir/small.txt") == b"hello from s3fs\n"

    assert _python(_S3FS_DELETE, gateway.endpoint, *ADMIN, "fsspec")["left"] == []
    assert _origin_objects(direct, "fsspec") == {}


# --------------------------------------------------------------------------------------------- DuckDB

_DUCKDB = """
    import json, pathlib, sys
    import duckdb, duckdb_extension_httpfs

    endpoint, key, secret, bucket = sys.argv[1:5]
    # The httpfs extension binary comes from the duckdb-extension-httpfs wheel: nothing is downloaded.
    ext = pathlib.Path(duckdb_extension_httpfs.__file__).parent / "extensions" / f"v{duckdb.__version__}"
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    con.execute(f"LOAD '{ext / 'httpfs.duckdb_extension'}'")
    host = endpoint.removeprefix("http://")
    for setting in (f"s3_endpoint='{host}'", "s3_url_style='path'", "s3_use_ssl=false", "s3_region='us-east-1'",
                    f"s3_access_key_id='{key}'", f"s3_secret_access_key='{secret}'",
                    "http_timeout=30", "http_retries=0",
                    # parts of 50GB / 10000 ~ 5 MiB instead of 80 MB, so an 11 MB COPY is a multipart upload
                    "s3_uploader_max_filesize='50GB'"):
        con.execute(f"SET {setting}")

    # COPY ... TO s3://: part-0 (~11 MB) is above the ~5 MiB part size, so a multipart upload.
    con.execute(f"COPY (SELECT range AS id, range % 1000 AS x, md5(range::VARCHAR) AS s FROM range(0, 300000)) "
                f"TO 's3://{bucket}/duck/part-0.parquet' (FORMAT parquet)")
    con.execute(f"COPY (SELECT range AS id, range % 1000 AS x, md5(range::VARCHAR) AS s FROM range(300000, 500000)) "
                f"TO 's3://{bucket}/duck/part-1.parquet' (FORMAT parquet)")
    con.execute(f"COPY (SELECT range AS n FROM range(10)) TO 's3://{bucket}/duck/numbers.csv' (FORMAT csv, HEADER)")
    count, total = con.execute(f"SELECT count(*), sum(x) FROM read_parquet('s3://{bucket}/duck/*.parquet')").fetchone()
    filtered = con.execute(f"SELECT count(*), min(id), max(id) FROM read_parquet('s3://{bucket}/duck/*.parquet') "
                           f"WHERE id BETWEEN 299990 AND 300009").fetchone()
    globbed = sorted(r[0] for r in con.execute(f"SELECT file FROM glob('s3://{bucket}/**')").fetchall())
    csv = con.execute(f"SELECT sum(n) FROM read_csv('s3://{bucket}/duck/numbers.csv')").fetchone()[0]
    # Bytes the test put straight into the origin, read back whole through the gateway.
    blob = con.execute(f"SELECT content FROM read_blob('s3://{bucket}/given/blob.bin')").fetchone()[0]
    print(json.dumps({"count": count, "sum": int(total), "filtered": list(filtered), "glob": globbed,
                      "csv": int(csv), "blob": bytes(blob).hex()}))
"""


def test_duckdb_httpfs(gateway, s3, direct):
    need_duckdb_httpfs()
    s3.create_bucket(Bucket="duck")
    blob = os.urandom(3 * 1024 * 1024 + 11)
    direct.put_object(Bucket="duck", Key="given/blob.bin", Body=blob)
    out = _python(_DUCKDB, gateway.endpoint, *ADMIN, "duck")
    assert out["count"] == 500_000
    assert out["sum"] == sum(i % 1000 for i in range(500_000))
    assert out["filtered"] == [20, 299990, 300009]
    assert out["glob"] == ["s3://duck/duck/numbers.csv", "s3://duck/duck/part-0.parquet",
                           "s3://duck/duck/part-1.parquet", "s3://duck/given/blob.bin"]
    assert out["csv"] == 45
    assert bytes.fromhex(out["blob"]) == blob
    origin = _origin_objects(direct, "duck", "duck/")
    assert set(origin) == {"duck/numbers.csv", "duck/part-0.parquet", "duck/part-1.parquet"}
    assert _is_multipart(origin["duck/part-0.parquet"]["etag"]), origin
    assert _origin_bytes(direct, "duck", "duck/numbers.csv") == b"n\n" + b"".join(b"%d\n" % i for i in range(10))
    assert _origin_bytes(direct, "duck", "duck/part-0.parquet")[:4] == b"PAR1"


# --------------------------------------------------------------------------------------------- rclone

def _rclone_env(gateway, tmp_path: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return _client_env(RCLONE_CONFIG=str(tmp_path / "rclone.conf"),
                       RCLONE_CONFIG_GW_TYPE="s3", RCLONE_CONFIG_GW_PROVIDER="Other",
                       RCLONE_CONFIG_GW_ENDPOINT=gateway.endpoint, RCLONE_CONFIG_GW_ACCESS_KEY_ID=ADMIN[0],
                       RCLONE_CONFIG_GW_SECRET_ACCESS_KEY=ADMIN[1], RCLONE_CONFIG_GW_REGION=REGION,
                       RCLONE_CONFIG_GW_FORCE_PATH_STYLE="true")


def test_rclone_copy_check_cat_delete(gateway, s3, direct, tmp_path):
    binary = _need_binary("rclone", "apt-get install rclone")
    s3.create_bucket(Bucket="rclone")
    # Versioned, because of two moto quirks that real S3 does not have: on an unversioned bucket moto
    # answers CompleteMultipartUpload with `x-amz-version-id: null`, and then HeadObject ?versionId=null
    # (which rclone sends to read back what it uploaded) with a bare 400; S3 answers that 200. rclone
    # straight against moto fails the same way, so it is the origin, not the gateway.
    s3.put_bucket_versioning(Bucket="rclone", VersioningConfiguration={"Status": "Enabled"})
    env = _rclone_env(gateway, tmp_path)
    flags = ["--retries", "1", "--low-level-retries", "1", "--contimeout", "5s", "--timeout", "30s",
             "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"]

    def rclone(*args: str) -> subprocess.CompletedProcess[bytes]:
        return _run([binary, *args, *flags], env=env)

    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    files = {
        "top.txt": b"rclone top\n",
        "a/one.csv": b"k,v\n" + b"".join(b"%d,%d\n" % (i, i * i) for i in range(2000)),
        "a/b/big.bin": os.urandom(12 * 1024 * 1024 + 5),  # above the 5M cutoff: multipart in 5M chunks
        "a/b/empty": b"",
        "a/b/sp ace+plus%.txt": b"odd name\n",
    }
    for name, data in files.items():
        (tree / name).write_bytes(data)

    rclone("copy", str(tree), "gw:rclone/data")
    listed = rclone("lsf", "-R", "--files-only", "gw:rclone/data").stdout.decode().splitlines()
    assert sorted(listed) == sorted(files)
    rclone("check", str(tree), "gw:rclone/data")  # sizes and MD5s, multipart ones via rclone's metadata
    origin = _origin_objects(direct, "rclone", "data/")
    assert {k.removeprefix("data/"): v["size"] for k, v in origin.items()} == {k: len(v) for k, v in files.items()}
    assert _is_multipart(origin["data/a/b/big.bin"]["etag"])
    for name, data in files.items():
        assert _origin_bytes(direct, "rclone", f"data/{name}") == data

    assert rclone("cat", "gw:rclone/data/a/b/big.bin").stdout == files["a/b/big.bin"]
    ranged = rclone("cat", "--offset", "6000000", "--count", "1234", "gw:rclone/data/a/b/big.bin").stdout
    assert ranged == files["a/b/big.bin"][6_000_000:6_001_234]
    assert rclone("cat", "gw:rclone/data/a/b/sp ace+plus%.txt").stdout == b"odd name\n"
    back = tmp_path / "back"
    rclone("copy", "gw:rclone/data", str(back))
    assert {str(p.relative_to(back)): p.read_bytes() for p in back.rglob("*") if p.is_file()} == files

    rclone("delete", "gw:rclone/data/a/b")
    assert sorted(rclone("lsf", "-R", "--files-only", "gw:rclone/data").stdout.decode().splitlines()) == \
        ["a/one.csv", "top.txt"]
    rclone("purge", "gw:rclone/data")
    assert _origin_objects(direct, "rclone") == {}


# --------------------------------------------------------------------------------------------- s3cmd

@pytest.mark.parametrize("signature_v2", [False, True], ids=["sigv4", "sigv2"])
def test_s3cmd_put_ls_get_del(gateway, s3, direct, tmp_path, signature_v2):
    binary = _need_binary("s3cmd", "apt-get install s3cmd")
    host = gateway.endpoint.removeprefix("http://")
    config = tmp_path / "s3cfg"
    config.write_text(textwrap.dedent(f"""\
        [default]
        access_key = {ADMIN[0]}
        secret_key = {ADMIN[1]}
        host_base = {host}
        host_bucket = {host}
        bucket_location = {REGION}
        use_https = False
        signature_v2 = {signature_v2}
        socket_timeout = 30
        max_retries = 1
        progress_meter = False
        """))

    def s3cmd(*args: str) -> subprocess.CompletedProcess[bytes]:
        return _run([binary, "-c", str(config), *args], env=_client_env())

    bucket = "s3cmd-v2" if signature_v2 else "s3cmd-v4"
    s3cmd("mb", f"s3://{bucket}")
    small = tmp_path / "small.txt"
    small.write_bytes(b"hello s3cmd\n")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(11 * 1024 * 1024 + 9))  # parts of 5 + 5 + 1 MiB
    s3cmd("put", str(small), f"s3://{bucket}/docs/small.txt", "--mime-type=text/plain")
    s3cmd("put", str(big), f"s3://{bucket}/blobs/big.bin", "--multipart-chunk-size-mb=5")

    origin = _origin_objects(direct, bucket)
    assert {k: v["size"] for k, v in origin.items()} == {"docs/small.txt": 12, "blobs/big.bin": big.stat().st_size}
    assert _is_multipart(origin["blobs/big.bin"]["etag"])
    assert _origin_bytes(direct, bucket, "blobs/big.bin") == big.read_bytes()
    assert direct.head_object(Bucket=bucket, Key="docs/small.txt")["ContentType"] == "text/plain"

    top = s3cmd("ls", f"s3://{bucket}").stdout.decode()
    assert f"DIR  s3://{bucket}/blobs/" in top and f"DIR  s3://{bucket}/docs/" in top
    recursive = s3cmd("ls", "-r", f"s3://{bucket}").stdout.decode()
    assert f"s3://{bucket}/blobs/big.bin" in recursive and f"s3://{bucket}/docs/small.txt" in recursive
    assert bucket in s3cmd("ls").stdout.decode()

    down = tmp_path / "down.bin"
    s3cmd("get", f"s3://{bucket}/blobs/big.bin", str(down))  # checks the MD5 s3cmd stored at upload
    assert down.read_bytes() == big.read_bytes()
    # --continue resumes a partial download with a ranged GET (Range: bytes=N-).
    partial = tmp_path / "partial.bin"
    partial.write_bytes(big.read_bytes()[:4_000_000])
    s3cmd("get", "--continue", f"s3://{bucket}/blobs/big.bin", str(partial))
    assert partial.read_bytes() == big.read_bytes()
    assert s3cmd("get", f"s3://{bucket}/docs/small.txt", "-").stdout == b"hello s3cmd\n"
    info = s3cmd("info", f"s3://{bucket}/docs/small.txt").stdout.decode()
    assert "text/plain" in info

    s3cmd("del", f"s3://{bucket}/docs/small.txt")
    s3cmd("del", "--recursive", "--force", f"s3://{bucket}/blobs/")
    assert _origin_objects(direct, bucket) == {}
    s3cmd("rb", f"s3://{bucket}")
    assert bucket not in [b["Name"] for b in direct.list_buckets()["Buckets"]]
