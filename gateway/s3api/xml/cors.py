"""A bucket's CORS configuration, as the origin answers GetBucketCors."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from gateway.s3api.xml.common import _PARSE_ERRORS, _children, _fromstring, _local, _text


@dataclass(frozen=True, slots=True)
class CorsRule:
    origins: tuple[str, ...]  # AllowedOrigin: each may hold one "*"
    methods: tuple[str, ...]  # AllowedMethod: GET, PUT, POST, DELETE, HEAD
    headers: tuple[str, ...]  # AllowedHeader (lower-cased): each may hold one "*"
    expose: tuple[str, ...]  # ExposeHeader
    max_age: int | None  # MaxAgeSeconds


def parse_cors_configuration(body: bytes) -> tuple[CorsRule, ...] | None:
    """The rules of a <CORSConfiguration> document, in its order; None when it is not one."""
    try:
        root = _fromstring(body)
    except _PARSE_ERRORS:
        return None
    if _local(root.tag) != "CORSConfiguration":
        return None
    rules = []
    for rule in _children(root, "CORSRule"):
        age = (_text(rule, "MaxAgeSeconds") or "").strip()
        rules.append(CorsRule(_texts(rule, "AllowedOrigin"), _texts(rule, "AllowedMethod"),
                              tuple(h.lower() for h in _texts(rule, "AllowedHeader")), _texts(rule, "ExposeHeader"),
                              int(age) if age.isascii() and age.isdigit() else None))
    return tuple(rules)


def _texts(element: ET.Element, name: str) -> tuple[str, ...]:
    return tuple((child.text or "").strip() for child in _children(element, name))
