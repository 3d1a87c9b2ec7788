"""`gateway stats | evict | pin | unpin` against a running gateway, through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from gateway.cli import main
from gateway.config import AdminSettings
from tests.servers import free_port
from tests.support import client

TOKEN = "cli-admin-token"


@pytest.fixture
def gateway(start_gateway, clean_origin):  # type: ignore[no-untyped-def]
    gateway = start_gateway(admin=AdminSettings(token=TOKEN))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="dir/hot", Body=b"h" * 2048)
    for _ in range(3):
        s3.get_object(Bucket="bkt", Key="dir/hot")["Body"].read()
    return gateway


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"GATEWAY_ADMIN_TOKEN": None, **(env or {})})  # type: ignore[dict-item]


def test_stats_summary_and_json(gateway):
    result = cli("stats", "--url", gateway.endpoint, "--token", TOKEN)
    assert result.exit_code == 0, result.output
    assert "hit ratio 66.7%" in result.output and "bkt/dir/hot" in result.output
    assert "memory" in result.output and "2.0 KiB" in result.output and "/ 1.0 GiB" in result.output
    document = json.loads(cli("stats", "--json", "--url", gateway.endpoint, "--token", TOKEN).output)
    assert document["hot_objects"] == [{"bucket": "bkt", "key": "dir/hot", "hits": 3}]


def test_token_from_the_environment_and_url_from_a_config_file(gateway, tmp_path):
    assert cli("stats", "--url", gateway.endpoint, env={"GATEWAY_ADMIN_TOKEN": TOKEN}).exit_code == 0
    config = tmp_path / "gateway.toml"
    config.write_text(f'[server]\nhost = "0.0.0.0"\nport = {gateway.settings.server.port}\n\n[admin]\ntoken = "{TOKEN}"\n')
    result = cli("stats", "--json", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["node"].endswith(f":{gateway.settings.server.port}")


def test_pin_unpin_and_evict(gateway):
    where = ("--url", gateway.endpoint, "--token", TOKEN)
    store = gateway.server.config.app.s3.engine.store
    result = cli("pin", "bkt/dir/", *where)
    assert result.exit_code == 0 and result.output.strip() == "pinned bkt/dir/"
    assert store.pinned == [("bkt", "dir/")]
    assert "bkt/dir/" in cli("stats", *where).output
    result = cli("unpin", "s3://bkt/dir/", *where)
    assert result.exit_code == 0 and result.output.strip() == "unpinned bkt/dir/"
    assert store.pinned == []
    again = cli("unpin", "bkt/dir/", *where)
    assert again.exit_code == 1 and again.output.strip() == "Error: bkt/dir/ is not pinned"
    result = cli("evict", "bkt/dir/", *where)
    assert result.exit_code == 0 and result.output.strip() == "evicted bkt/dir/: 1 blocks removed"
    assert cli("evict", "bkt", *where).output.strip() == "evicted bkt/: 0 blocks removed"


def test_clear_one_line_errors(gateway):
    def error_of(result: Result) -> str:
        assert result.exit_code != 0
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output, result.output
        return lines[0]

    assert "refused the admin token" in error_of(cli("stats", "--url", gateway.endpoint, "--token", "wrong"))
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert "cannot reach the gateway" in error_of(cli("stats", "--url", nowhere, "--token", TOKEN))
    assert "no admin token" in error_of(cli("stats", "--url", gateway.endpoint))
    assert "BUCKET[/PREFIX]" in error_of(cli("evict", "/dir/", "--url", gateway.endpoint, "--token", TOKEN))
    assert "no admin API" in error_of(cli("stats", "--url", gateway.endpoint + "/elsewhere", "--token", TOKEN))


def test_help_on_every_admin_command():
    for command in ("stats", "evict", "pin", "unpin"):
        result = cli(command, "--help")
        assert result.exit_code == 0 and "Usage" in result.output and "--token" in result.output
