"""Settings: TOML + GATEWAY_* env vars, validation, secrets hidden."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ConfigError, load, parse_duration, parse_size

EXAMPLE = "deploy/gateway.example.toml"


def test_example_config_loads():
    settings = load(EXAMPLE, environ={})
    assert settings.origin.endpoint.startswith("https://")
    assert settings.server.max_object_size == 5 * 1024**3
    assert settings.auth.users[0].grants[1].prefix == "analytics/"
    assert settings.auth.users[1].admin


def test_env_overrides_file():
    settings = load(EXAMPLE, environ={"GATEWAY_SERVER_PORT": "9001", "GATEWAY_ORIGIN_SECRET_KEY": "from-env",
                                      "GATEWAY_SERVER_SPOOL_MEMORY": "1MiB", "GATEWAY_ORIGIN_READ_TIMEOUT": "250ms"})
    assert settings.server.port == 9001
    assert settings.origin.secret_key == "from-env"
    assert settings.server.spool_memory == 1024**2
    assert settings.origin.read_timeout == 0.25


def test_users_from_env_json():
    settings = load(None, environ={
        "GATEWAY_AUTH_USERS": '[{"access_key": "AK", "secret_key": "SK", "grants": [{"bucket": "b1", "access": "readwrite"}]}]'})
    assert settings.auth.users[0].grants[0].access == "readwrite"


@pytest.mark.parametrize("environ, message", [
    ({"GATEWAY_SERVER_PROT": "1"}, "unknown setting"),
    ({"GATEWAY_SERVER_PORT": "eighty"}, "server.port"),
    ({"GATEWAY_ORIGIN_ENDPOINT": "ftp://x"}, "origin.endpoint"),
    ({"GATEWAY_SERVER_SPOOL_MEMORY": "lots"}, "server.spool_memory"),
    ({"GATEWAY_AUTH_USERS": '[{"access_key": "AK"}]'}, "secret_key"),
    ({"GATEWAY_AUTH_USERS": '[{"access_key": "A", "secret_key": "S", "grants": [{"bucket": "b", "access": "all"}]}]'}, "access"),
])
def test_bad_settings_are_named(environ, message):
    with pytest.raises(ConfigError, match=message):
        load(None, environ=environ)


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[origin\nendpoint=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(bad, environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml", environ={})


def test_secrets_never_in_repr_or_redacted_view():
    settings = load(EXAMPLE, environ={})
    text = repr(settings) + str(settings.redacted())
    assert "origin-secret-example" not in text
    assert "analytics-secret-change-me" not in text
    assert settings.redacted()["origin"]["secret_key"] == "***"


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["", "B", "KiB", "MiB", "GiB", "kb", "MB"]))
def test_parse_size(number, unit):
    factor = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "kb": 1000, "MB": 1000**2}[unit]
    assert parse_size(f"{number}{unit}") == number * factor


def test_parse_duration():
    assert parse_duration("30s") == 30 and parse_duration("5m") == 300 and parse_duration("250ms") == 0.25
    with pytest.raises(ConfigError):
        parse_duration("soon")
