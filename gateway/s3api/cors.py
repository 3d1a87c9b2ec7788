"""CORS, as S3 applies a bucket's CORS configuration: browser preflights (OPTIONS) answered
from its rules, and the Access-Control-* headers of the rule that matches added to the answer
of a request that names its Origin.

The rules are the origin bucket's own (GetBucketCors, read with the gateway's credentials and
kept a while: engine.bucketdocs). The first rule whose AllowedOrigin matches the Origin (one
`*` may stand for any text), whose AllowedMethod holds the method, and, for a preflight, whose
AllowedHeader patterns cover every header asked for (case-insensitive, one `*` each) applies.
The hit path (s3api.hits) answers a request that carries an Origin when the bucket's document is
in memory, with the same headers; a kept answer (s3api.replays) is answered again only while the
bucket's document is the same as the one it was made with.

A preflight is answered to anyone, so its bucket name may be made up, and each name the gateway
looked up would cost a request at the origin and an entry in memory. So a preflight asks the
origin only about buckets the gateway has reason to believe it serves: one named by a grant or by
auth.anonymous_read is looked up as any request's; one no grant can reach (no admin, no `*` grant)
is answered at once as having no CORS rules, as S3 answers for a bucket that has none; one only an
admin or a `*` grant reaches is looked up freely once it is known to exist (a known user's request
on it succeeded, or an earlier lookup found it), and otherwise within a small rate limit (SlowDown
beyond it), its answer kept apart from the rules of buckets that exist (engine.bucketdocs).
"""

from __future__ import annotations

import functools

from starlette.responses import Response

from gateway.errors import S3Error
from gateway.s3api import xml
from gateway.s3api.context import Context
from gateway.s3api.responses import empty_response

_METHODS = frozenset({"GET", "PUT", "POST", "DELETE", "HEAD"})
_VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"


async def preflight(ctx: Context) -> Response:
    """OPTIONS: the CORS preflight of a browser, unauthenticated as S3's is."""
    req = ctx.req
    origin, method = req.headers.get("origin"), req.headers.get("access-control-request-method")
    if not origin:
        raise S3Error("BadRequest", "Insufficient information. Origin request header needed.")
    if method not in _METHODS:
        raise S3Error("BadRequest", f"Invalid Access-Control-Request-Method: {(method or 'null')[:64]}")
    asked = [h.strip().lower() for h in req.headers.get("access-control-request-headers", "").split(",") if h.strip()]
    bucket = req.bucket or ""
    served = ctx.services.policy.serves(bucket) if bucket else False
    # A bucket no user may reach has no rules to apply: the origin is not asked (see the module
    # docstring); one only an admin or a `*` grant reaches is looked up within a rate limit.
    rules = () if served is False else _rules(await ctx.services.engine.bucket_cors(bucket, known=served is True))
    resource = {"Method": method, "ResourceType": "OBJECT" if req.key else "BUCKET"}
    if not rules:
        raise S3Error("AccessForbidden", "CORSResponse: CORS is not enabled for this bucket.", extra=resource)
    rule = matching(rules, origin, method, asked)
    if rule is None:
        raise S3Error("AccessForbidden", "CORSResponse: This CORS request is not allowed. The Origin, the method or "
                      "the headers asked for are not allowed by the bucket's CORS rules.", extra=resource)
    return empty_response(req.request_id, headers=allowed(rule, origin, asked))


async def add_headers(ctx: Context, response: Response) -> None:
    """The Access-Control-* headers of the rule that matches a request's Origin and method, on
    its answer (error answers too: an expired presigned URL's 403, for the page to see). Rules
    that cannot be read now add nothing: the browser then does not show the answer to the page."""
    req, engine, bucket = ctx.req, ctx.services.engine, ctx.req.bucket or ""
    if req.user is None and not ctx.services.policy.allows(None, "read", bucket):
        # Not signed by a known user (a refused request, say): only rules in memory are used, so
        # that unauthenticated requests never make the gateway ask the origin for anything.
        known, document = engine.bucket_cors_now(bucket)
        if not known:
            return
    else:
        policy = ctx.services.policy
        known = policy.serves(bucket) is True or policy.may_see_bucket(req.user, bucket)
        try:  # a name the signer may not use and no grant names: within the rate limit of such names
            document = await engine.bucket_cors(bucket, known=known)
        except S3Error:
            return
    response.headers.update(answer_headers(document, req.headers["origin"], req.method))


def answer_headers(document: bytes | None, origin: str, method: str) -> dict[str, str]:
    """What the bucket's CORS document (None: it has none) adds to the answer of a request with
    this Origin: Vary when it has rules, and the headers of the rule that matches, if one does.
    The hit path (s3api.hits) adds the same with a document it has in memory."""
    rules = _rules(document)
    if not rules:
        return {}
    rule = matching(rules, origin, method, [])
    return allowed(rule, origin, []) if rule is not None else {"vary": _VARY}


def matching(rules: tuple[xml.CorsRule, ...], origin: str, method: str, asked: list[str]) -> xml.CorsRule | None:
    """The first rule that allows `origin` to `method` with the headers `asked` (lower-cased)."""
    for rule in rules:
        if method in rule.methods and any(_fits(pattern, origin) for pattern in rule.origins) \
                and all(any(_fits(pattern, header) for pattern in rule.headers) for header in asked):
            return rule
    return None


def allowed(rule: xml.CorsRule, origin: str, asked: list[str]) -> dict[str, str]:
    """What S3 answers for a rule that applies: any origin (`*`) is answered `*`, any other is
    echoed with Access-Control-Allow-Credentials."""
    anyone = "*" in rule.origins
    headers = {"access-control-allow-origin": "*" if anyone else origin,
               "access-control-allow-methods": ", ".join(rule.methods), "vary": _VARY}
    if not anyone:
        headers["access-control-allow-credentials"] = "true"
    if asked:
        headers["access-control-allow-headers"] = ", ".join(asked)
    if rule.expose:
        headers["access-control-expose-headers"] = ", ".join(rule.expose)
    if rule.max_age is not None:
        headers["access-control-max-age"] = str(rule.max_age)
    return headers


def _fits(pattern: str, value: str) -> bool:
    """`value` matches `pattern`, where one `*` stands for any text."""
    head, star, tail = pattern.partition("*")
    if not star:
        return value == pattern
    return len(value) >= len(head) + len(tail) and value.startswith(head) and value.endswith(tail)


@functools.lru_cache(maxsize=256)  # keyed by the document itself: the same bytes while it is kept
def _parsed(document: bytes) -> tuple[xml.CorsRule, ...]:
    return xml.parse_cors_configuration(document) or ()


def _rules(document: bytes | None) -> tuple[xml.CorsRule, ...]:
    return () if document is None else _parsed(document)
