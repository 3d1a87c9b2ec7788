"""The client how-tos of docs/clients.md, run as they are written there against a real gateway.

Each block marked `<!-- checked: NAME -->` in the doc is taken from the file, its endpoint and
credentials placeholders are replaced by the test gateway's, and it runs unmodified: shell blocks
under bash (AWS CLI, rclone, s3cmd, with their config blocks written where those tools look for
them), Python blocks in a child interpreter (boto3, PyArrow), the DuckDB SQL through DuckDB's Python
package with httpfs loaded from its wheel. What each printed or downloaded is compared with the
origin's bytes. The SDK sections are run by tests/integration/test_sdk_clients.py, the Trino and
Spark blocks are compared with what tests/engines uses by tests/engines/test_docs_engines.py.
"""

from __future__ import annotations

import io
import re
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import ADMIN, client_env, need_binary, need_duckdb_httpfs, need_module, run_client

DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
# The placeholders the doc uses, as in deploy/gateway.example.toml.
ENDPOINT, HOST = "http://gateway.internal:8080", "gateway.internal:8080"
KEY, SECRET = "AKIAANALYTICS0000001", "analytics-secret-change-me"
CHECKED = {"awscli", "boto3", "presigned-post", "pyarrow", "duckdb", "rclone-config", "rclone", "s3cmd-config",
           "s3cmd"}
ROWS = (1000, 500)  # rows of events/part-0.parquet and part-1.parquet


def _blocks() -> dict[str, tuple[str, str]]:
    """marker -> (fence language, code) of every checked block in the doc."""
    found = re.findall(r"<!-- checked: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    blocks = {name: (lang, code) for name, lang, code in found}
    assert len(blocks) == len(found), "a marker is used twice"
    return blocks


def _snippet(name: str, gateway) -> str:  # type: ignore[no-untyped-def]
    code = _blocks()[name][1]
    return (code.replace(ENDPOINT, gateway.endpoint).replace(HOST, gateway.endpoint.removeprefix("http://"))
            .replace(KEY, ADMIN[0]).replace(SECRET, ADMIN[1]))


@pytest.fixture
def warehouse(s3, direct) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    """The bucket the doc reads: two Parquet files under warehouse/events/, put straight into the origin."""
    need_module("pyarrow", "pip install pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    s3.create_bucket(Bucket="warehouse")
    files = {}
    start = 0
    for index, rows in enumerate(ROWS):
        buffer = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(range(start, start + rows), pa.int64())}), buffer)
        start += rows
        key = f"events/part-{index}.parquet"
        files[key] = buffer.getvalue()
        direct.put_object(Bucket="warehouse", Key=key, Body=files[key])
    return files


def _shell(script: str, env: dict[str, str], cwd: Path) -> str:
    return run_client(["bash", "-euo", "pipefail", "-c", script], env=env, cwd=str(cwd)).stdout.decode()


def test_the_doc_marks_every_runnable_client():
    blocks = _blocks()
    assert set(blocks) == CHECKED
    for name, (_, code) in blocks.items():
        if name not in ("rclone", "s3cmd"):  # commands only: the endpoint is in their config blocks
            assert (ENDPOINT in code or HOST in code) and KEY in code and SECRET in code, name
    assert "not tested here" in DOC.read_text()


def test_awscli_howto(gateway, warehouse, tmp_path):
    need_binary("aws", "pip install awscli")
    out = _shell(_snippet("awscli", gateway), client_env(), tmp_path)
    assert "part-0.parquet" in out and "part-1.parquet" in out
    assert (tmp_path / "part-0.parquet").read_bytes() == warehouse["events/part-0.parquet"]
    assert f'"ContentLength": {len(warehouse["events/part-0.parquet"])}' in out


def test_boto3_howto(gateway, warehouse, tmp_path):
    out = run_client([sys.executable, "-c", _snippet("boto3", gateway)], env=client_env(), cwd=str(tmp_path))
    lines = out.stdout.decode().splitlines()
    assert lines[:2] == [f"{key} {len(data)}" for key, data in warehouse.items()]
    assert lines[2] == "b'PAR1'"


def test_presigned_post_howto(gateway, warehouse, tmp_path, direct):
    out = run_client([sys.executable, "-c", _snippet("presigned-post", gateway)], env=client_env(), cwd=str(tmp_path))
    assert out.stdout.decode().splitlines() == ["201 b'day,visits\\n1,20\\n'"]
    assert direct.get_object(Bucket="warehouse", Key="uploads/notes.csv")["Body"].read() == b"day,visits\n1,20\n"


def test_pyarrow_howto(gateway, warehouse, tmp_path):
    out = run_client([sys.executable, "-c", _snippet("pyarrow", gateway)], env=client_env(), cwd=str(tmp_path))
    assert out.stdout.decode().split() == [str(sum(ROWS))]


_DUCKDB = """
    import sys
    import duckdb

    extension, sql = sys.argv[1:3]
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    con.execute(f"LOAD '{extension}'")  # the wheel's httpfs: nothing is downloaded
    print(con.execute(sql).fetchall())
"""


def test_duckdb_howto(gateway, warehouse, tmp_path):
    extension = need_duckdb_httpfs()
    out = run_client([sys.executable, "-c", textwrap.dedent(_DUCKDB), str(extension), _snippet("duckdb", gateway)],
                     env=client_env(), cwd=str(tmp_path))
    assert out.stdout.decode().strip() == f"[({sum(ROWS)},)]"


def test_rclone_howto(gateway, warehouse, tmp_path):
    need_binary("rclone", "apt-get install rclone")
    home = tmp_path / "home"
    config = home / ".config" / "rclone" / "rclone.conf"  # where rclone looks by default
    config.parent.mkdir(parents=True)
    config.write_text(_snippet("rclone-config", gateway) + "\n")
    env = client_env(HOME=str(home))
    env.pop("RCLONE_CONFIG", None)
    out = _shell(_snippet("rclone", gateway), env, tmp_path)
    assert sorted(out.split()) == ["part-0.parquet", "part-1.parquet"]
    for key, data in warehouse.items():
        assert (tmp_path / key).read_bytes() == data


def test_s3cmd_howto(gateway, warehouse, tmp_path):
    need_binary("s3cmd", "apt-get install s3cmd")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".s3cfg").write_text(_snippet("s3cmd-config", gateway) + "\n")  # where s3cmd looks by default
    out = _shell(_snippet("s3cmd", gateway), client_env(HOME=str(home)), tmp_path)
    assert "s3://warehouse/events/part-0.parquet" in out and "s3://warehouse/events/part-1.parquet" in out
    assert (tmp_path / "part-0.parquet").read_bytes() == warehouse["events/part-0.parquet"]
