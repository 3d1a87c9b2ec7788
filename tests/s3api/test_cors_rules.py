"""gateway.s3api.cors: which CORS rule applies, and the headers it gives (pure parts)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.s3api import xml
from gateway.s3api.cors import _fits, allowed, matching

CONFIG = b"""<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <CORSRule><AllowedOrigin>https://*.example.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod>
    <AllowedMethod>HEAD</AllowedMethod><AllowedHeader>X-Amz-*</AllowedHeader><AllowedHeader>range</AllowedHeader>
    <ExposeHeader>ETag</ExposeHeader><ExposeHeader>x-amz-version-id</ExposeHeader><MaxAgeSeconds>600</MaxAgeSeconds>
  </CORSRule>
  <CORSRule><AllowedOrigin>https://upload.example.org</AllowedOrigin><AllowedMethod>PUT</AllowedMethod>
    <AllowedMethod>POST</AllowedMethod><AllowedHeader>*</AllowedHeader></CORSRule>
  <CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>
</CORSConfiguration>"""


def rules() -> tuple[xml.CorsRule, ...]:
    parsed = xml.parse_cors_configuration(CONFIG)
    assert parsed is not None
    return parsed


def test_the_configuration_parses_in_order():
    first, second, third = rules()
    assert first == xml.CorsRule(("https://*.example.com",), ("GET", "HEAD"), ("x-amz-*", "range"),
                                 ("ETag", "x-amz-version-id"), 600)
    assert second.headers == ("*",) and second.max_age is None
    assert third.origins == ("*",)
    assert xml.parse_cors_configuration(b"<NotCors/>") is None
    assert xml.parse_cors_configuration(b"<<<") is None


def test_the_first_rule_that_allows_all_of_it_applies():
    first, second, third = rules()
    assert matching(rules(), "https://app.example.com", "GET", ["x-amz-date", "range"]) == first
    # A header the first rule does not allow: the third allows the origin and method, but no headers.
    assert matching(rules(), "https://app.example.com", "GET", ["authorization"]) is None
    assert matching(rules(), "https://app.example.com", "GET", []) == first
    assert matching(rules(), "http://app.example.com", "GET", []) == third  # another scheme: only "*"
    assert matching(rules(), "https://upload.example.org", "PUT", ["content-type", "x-amz-meta-a"]) == second
    assert matching(rules(), "https://upload.example.org", "DELETE", []) is None
    assert matching(rules(), "https://evil.example", "PUT", []) is None
    assert matching(rules(), "https://app.example.com", "get", []) is None  # methods are upper-case


def test_the_headers_of_a_rule():
    first, _, third = rules()
    assert allowed(first, "https://app.example.com", ["range"]) == {
        "access-control-allow-origin": "https://app.example.com", "access-control-allow-methods": "GET, HEAD",
        "access-control-allow-credentials": "true", "access-control-allow-headers": "range",
        "access-control-expose-headers": "ETag, x-amz-version-id", "access-control-max-age": "600",
        "vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"}
    assert allowed(third, "http://any.where", []) == {
        "access-control-allow-origin": "*", "access-control-allow-methods": "GET",
        "vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"}


text = st.text(st.characters(min_codepoint=32, max_codepoint=126).filter(lambda c: c != "*"), max_size=12)


@given(head=text, middle=st.text(max_size=12), tail=text)
def test_a_star_stands_for_any_text(head, middle, tail):
    assert _fits(f"{head}*{tail}", head + middle + tail)
    assert _fits(head + tail, head + tail)


@given(pattern=text, value=text)
def test_without_a_star_only_the_same_text_fits(pattern, value):
    assert _fits(pattern, value) == (pattern == value)


def test_the_text_around_a_star_may_not_overlap():
    assert not _fits("ab*ba", "aba")
    assert _fits("ab*ba", "abba") and _fits("*", "") and not _fits("a*", "")
