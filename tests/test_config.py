"""Settings: TOML + GATEWAY_* env vars, validation, secrets hidden."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import (
    ConfigError,
    RedisTarget,
    load,
    parse_duration,
    parse_size,
    redacted_url,
    redis_target,
)

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


def test_redis_url_names_one_server_a_sentinel_master_or_a_cluster():
    assert redis_target("redis://:pw@10.0.0.1:6379/2").kind == "server"
    assert redis_target("unix:///run/redis.sock").kind == "server"
    assert redis_target("redis+sentinel://app:p%40ss@s1,s2:26380,[::1]/main/3?sentinel_password=sp") == RedisTarget(
        "sentinel", (("s1", 26379), ("s2", 26380), ("::1", 26379)), "app", "p@ss", "sp", master="main", db=3)
    assert redis_target("rediss+cluster://:pw@n1:7000,n2") == RedisTarget(
        "cluster", (("n1", 7000), ("n2", 6379)), None, "pw", tls=True)
    settings = load(None, environ={"GATEWAY_REDIS_URL": "redis+cluster://n1:7000,n2:7000"})
    assert settings.redis.target.hosts == (("n1", 7000), ("n2", 7000))


@pytest.mark.parametrize(("url", "message"), [
    ("memcached://h:1", "expected redis://"),
    ("redis+sentinel://s1:26379", "master name"),
    ("redis+sentinel://s1:26379/main/x", "master name"),
    ("redis+sentinel://s1:99999/main", "host\\[:port\\] entries"),
    ("redis+sentinel://s1/main?password=x", "unknown parameter 'password'"),
    ("redis+cluster://n1:7000,,n2", "host\\[:port\\] entries"),
    ("redis+cluster://n1:7000/3", "one database"),
])
def test_bad_redis_urls_are_named(url, message):
    with pytest.raises(ConfigError, match="redis.url: .*" + message):
        load(None, environ={"GATEWAY_REDIS_URL": url})


def test_a_hash_tag_in_the_key_prefix_is_refused_on_a_cluster():
    with pytest.raises(ConfigError, match="redis.key_prefix: no braces"):
        load(None, environ={"GATEWAY_REDIS_URL": "redis+cluster://n1", "GATEWAY_REDIS_KEY_PREFIX": "{gw}:"})


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://user:hunter2@h:6379/0", "redis://user:***@h:6379/0"),
    ("redis+sentinel://:hunter2@s1:26379,s2:26379/main/1?sentinel_password=hunter2",
     "redis+sentinel://:***@s1:26379,s2:26379/main/1?sentinel_password=***"),
    ("rediss+cluster://app:hunter2@n1:7000,n2:7000", "rediss+cluster://app:***@n1:7000,n2:7000"),
    ("redis+cluster://app:hun/ter@2@n1:7000", "redis+cluster://app:***@n1:7000"),  # not percent-encoded
    ("unix:///run/redis.sock?db=1&password=hunter2", "unix:///run/redis.sock?db=1&password=***"),
    ("redis+cluster://n1:7000,n2:7000", "redis+cluster://n1:7000,n2:7000"),
])
def test_redis_passwords_are_hidden_in_every_url_form(url, shown):
    assert redacted_url(url) == shown
    settings = load(None, environ={"GATEWAY_REDIS_URL": url})
    assert settings.redacted()["redis"]["url"] == shown
    assert "hunter2" not in repr(settings) + repr(settings.redis.target) + str(settings.redacted())


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["", "B", "KiB", "MiB", "GiB", "kb", "MB"]))
def test_parse_size(number, unit):
    factor = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "kb": 1000, "MB": 1000**2}[unit]
    assert parse_size(f"{number}{unit}") == number * factor


def test_parse_duration():
    assert parse_duration("30s") == 30 and parse_duration("5m") == 300 and parse_duration("250ms") == 0.25
    with pytest.raises(ConfigError):
        parse_duration("soon")


@pytest.mark.parametrize("parse, text", [(parse_size, "1" * 5000), (parse_size, "1." + "0" * 5000 + "GiB"),
                                         (parse_duration, "1" * 400), (parse_duration, "9" * 320 + "d")])
def test_huge_numbers_are_config_errors(parse, text):
    # Found by fuzz/fuzz_config.py: Fraction() of 4300+ digits raised ValueError, float() of 309+ gave inf.
    with pytest.raises(ConfigError):
        parse(text)
