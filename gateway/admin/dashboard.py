"""The dashboard page (`GET dashboard`): one static HTML file, read once, with a strict CSP."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

PAGE = files("gateway.admin").joinpath("dashboard.html").read_bytes()


def _hashes(tag: bytes) -> str:
    """CSP sources for the page's inline <script> or <style> blocks, by their SHA-256."""
    blocks = re.findall(rb"<%s>(.*?)</%s>" % (tag, tag), PAGE, re.DOTALL)
    if not blocks:
        raise RuntimeError(f"dashboard.html has no <{tag.decode()}>")
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(block).digest()).decode()}'" for block in blocks)


# The page needs no token and holds no figures: its script asks for the token and reads
# `stats` with it. Only its own inline script and style run (so a key that slipped into
# the DOM as markup could still not run script), it talks only to this origin, and no
# other site can frame it.
CSP = "; ".join((
    "default-src 'none'",
    f"script-src {_hashes(b'script')}",
    f"style-src {_hashes(b'style')}",
    "connect-src 'self'",
    "img-src data:",  # the empty favicon, so the browser asks the S3 port for none
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
))

HEADERS = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"content-length", str(len(PAGE)).encode()),
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]
