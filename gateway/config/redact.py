"""Secrets hidden from what the settings show: passwords in URLs, fields named like secrets."""

from __future__ import annotations

import re
from typing import Any


def _is_secret(name: str) -> bool:
    return "secret" in name or "token" in name or "password" in name


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if _is_secret(k) and v else _redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return redacted_url(value)
    return value


def redacted_url(url: str) -> str:
    """The URL with passwords hidden: that of its user part (redis://user:***@host, also for
    the comma-separated hosts of redis+sentinel:// and redis+cluster://) and query
    parameters named like secrets (?sentinel_password=***)."""
    scheme, sep, rest = url.partition("://")
    if not sep or not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*", scheme):
        return url
    rest, question, query = rest.partition("?")
    userinfo, at, hosts = rest.rpartition("@")  # the last @: a raw @ in a password stays hidden
    if at and ":" in userinfo:
        rest = userinfo.partition(":")[0] + ":***@" + hosts
    if question:
        query = "&".join(
            f"{name}=***" if _is_secret(name.lower()) and sep_ else name + sep_ + value
            for name, sep_, value in (pair.partition("=") for pair in query.split("&")))
    return f"{scheme}://{rest}{question}{query}"
