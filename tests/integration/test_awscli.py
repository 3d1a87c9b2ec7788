"""The AWS CLI, unmodified, against the gateway."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ADMIN

pytestmark = pytest.mark.usefixtures("clean_origin")
_VENV_AWS = Path(sys.executable).with_name("aws")
AWS = str(_VENV_AWS) if _VENV_AWS.exists() else (shutil.which("aws") or "aws")


def aws(gateway, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ADMIN[0], AWS_SECRET_ACCESS_KEY=ADMIN[1], AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_MAX_ATTEMPTS="1")
    result = subprocess.run([AWS, "--endpoint-url", gateway.endpoint, *args], env=env, capture_output=True,
                            text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)} failed: {result.stderr}")
    return result


def test_cp_ls_sync_rm(gateway, s3, tmp_path):
    s3.create_bucket(Bucket="cli")
    small = tmp_path / "small.txt"
    small.write_bytes(b"hello cli\n")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 * 1024 * 1024 + 7))  # above the CLI's 8 MiB multipart threshold
    aws(gateway, "s3", "cp", str(small), "s3://cli/small.txt")
    aws(gateway, "s3", "cp", str(big), "s3://cli/dir/big.bin")
    listing = aws(gateway, "s3", "ls", "--recursive", "s3://cli").stdout
    assert "small.txt" in listing and "dir/big.bin" in listing
    assert "dir/" in aws(gateway, "s3", "ls", "s3://cli").stdout
    down = tmp_path / "down.bin"
    aws(gateway, "s3", "cp", "s3://cli/dir/big.bin", str(down))
    assert down.read_bytes() == big.read_bytes()

    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    an_hour_ago = time.time() - 3600
    for i in range(5):
        (tree / "a" / f"f{i}.txt").write_text(f"file {i}")
        # S3 keeps whole seconds: a file written in the second of its upload would look
        # newer than its copy, and the CLI would upload it again.
        os.utime(tree / "a" / f"f{i}.txt", (an_hour_ago, an_hour_ago))
    aws(gateway, "s3", "sync", str(tree), "s3://cli/tree")
    again = aws(gateway, "s3", "sync", str(tree), "s3://cli/tree").stdout
    assert again.strip() == ""  # nothing changed: sync compared sizes and times via the listing
    back = tmp_path / "back"
    aws(gateway, "s3", "sync", "s3://cli/tree", str(back))
    assert sorted(p.name for p in (back / "a").iterdir()) == [f"f{i}.txt" for i in range(5)]
    aws(gateway, "s3", "rm", "--recursive", "s3://cli/tree")
    assert "tree/" not in aws(gateway, "s3", "ls", "--recursive", "s3://cli").stdout


def test_s3api_calls(gateway, s3, tmp_path):
    aws(gateway, "s3api", "create-bucket", "--bucket", "api")
    body = tmp_path / "b.txt"
    body.write_text("api body")
    put = json.loads(aws(gateway, "s3api", "put-object", "--bucket", "api", "--key", "k",
                         "--body", str(body), "--metadata", "x=y").stdout)
    assert put["ETag"]
    head = json.loads(aws(gateway, "s3api", "head-object", "--bucket", "api", "--key", "k").stdout)
    assert head["Metadata"] == {"x": "y"} and head["ContentLength"] == 8
    listed = json.loads(aws(gateway, "s3api", "list-objects-v2", "--bucket", "api").stdout)
    assert [o["Key"] for o in listed["Contents"]] == ["k"]
    missing = aws(gateway, "s3api", "head-object", "--bucket", "api", "--key", "nope", check=False)
    assert missing.returncode != 0 and "404" in missing.stderr


def test_presign(gateway, s3):
    import httpx

    s3.create_bucket(Bucket="pre")
    s3.put_object(Bucket="pre", Key="k", Body=b"presigned")
    url = aws(gateway, "s3", "presign", "s3://pre/k", "--expires-in", "60").stdout.strip()
    assert httpx.get(url).content == b"presigned"
