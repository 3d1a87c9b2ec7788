"""POST Object's authentication: the policy a form carries, its signature (SigV4 or SigV2), and
its conditions on the form's fields and the file's size. Pure: the clock and secrets passed in.

The policy is base64 JSON: `expiration` (ISO 8601) and `conditions`, each one of
`{"field": "value"}` or `["eq", "$field", "value"]` (exact), `["starts-with", "$field",
"prefix"]`, `["content-length-range", min, max]` (the file's size). A field the form lacks has
the value "". Every field of the form must be named by some condition, but the policy, the
signature, the access key id, the file and fields named x-ignore-*; `bucket` names the bucket
the form is posted to.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

import orjson

from gateway.errors import S3Error
from gateway.s3api.auth.common import _lookup, _parse_amz_date
from gateway.s3api.auth.model import SecretLookup
from gateway.s3api.auth.sigv4 import _parse_credential
from gateway.signing import ALGORITHM, derive_signing_key, signature_hex

_UNCHECKED = frozenset({"policy", "x-amz-signature", "signature", "awsaccesskeyid", "file"})
_OPERATORS = frozenset({"eq", "starts-with"})


@dataclass(frozen=True, slots=True)
class Condition:
    operator: str  # "eq" or "starts-with"
    field: str  # lower-cased, without the "$"
    value: str
    text: str  # as the policy wrote it, for the error that names it


@dataclass(frozen=True, slots=True)
class PostPolicy:
    """A verified policy: who signed it, and what it allows."""

    access_key: str
    conditions: tuple[Condition, ...]
    size_range: tuple[int, int] | None  # content-length-range, inclusive

    def check_fields(self, fields: Mapping[str, str], bucket: str) -> None:
        """Every condition holds, and every field of the form is named by one (else AccessDenied)."""
        for condition in self.conditions:
            value = bucket if condition.field == "bucket" else fields.get(condition.field, "")
            holds = value == condition.value if condition.operator == "eq" else value.startswith(condition.value)
            if not holds:
                raise _denied(f"Policy Condition failed: {condition.text}")
        named = {c.field for c in self.conditions}
        extra = sorted(f for f in fields if f not in named and f not in _UNCHECKED and not f.startswith("x-ignore-"))
        if extra:
            raise _denied(f"Extra input fields: {', '.join(extra)}")

    def check_size(self, size: int) -> None:
        """The file's size within content-length-range."""
        if self.size_range is None:
            return
        low, high = self.size_range
        if size < low:
            raise S3Error("EntityTooSmall", extra={"ProposedSize": str(size), "MinSizeAllowed": str(low)})
        if size > high:
            raise S3Error("EntityTooLarge", extra={"ProposedSize": str(size), "MaxSizeAllowed": str(high)})


def verify_post_policy(fields: Mapping[str, str], secret_for: SecretLookup, *, now: datetime) -> PostPolicy:
    """The form's policy, its signature checked and its expiry passed; (field names lower-cased)."""
    policy = fields.get("policy")
    if policy is None:
        raise S3Error("AccessDenied", "A POST upload without a policy is anonymous, and anonymous uploads are not allowed.")
    if "x-amz-signature" in fields or "x-amz-algorithm" in fields:
        access_key = _verify_v4(fields, policy, secret_for)
    elif "signature" in fields or "awsaccesskeyid" in fields:
        access_key = _verify_v2(fields, policy, secret_for)
    else:
        raise _missing("x-amz-signature")
    expiration, conditions, size_range = _parse(policy)
    if now > expiration:
        raise _denied("Policy expired.")
    return PostPolicy(access_key, conditions, size_range)


def _verify_v4(fields: Mapping[str, str], policy: str, secret_for: SecretLookup) -> str:
    for name in ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature"):
        if name not in fields:
            raise _missing(name)
    if fields["x-amz-algorithm"] != ALGORITHM:
        raise S3Error("InvalidArgument", f"The algorithm must be {ALGORITHM}.", extra={"ArgumentName": "x-amz-algorithm"})
    if _parse_amz_date(fields["x-amz-date"]) is None:
        raise S3Error("InvalidArgument", "x-amz-date must be of the form YYYYMMDDTHHMMSSZ.",
                      extra={"ArgumentName": "x-amz-date"})
    cred = _parse_credential(fields["x-amz-credential"], lambda detail: S3Error(
        "InvalidArgument", f"x-amz-credential: {detail}", extra={"ArgumentName": "x-amz-credential"}))
    secret = _lookup(secret_for, cred.access_key)
    expected = signature_hex(derive_signing_key(secret, cred.date, cred.region, cred.service), policy)
    if not hmac.compare_digest(expected.encode(), fields["x-amz-signature"].strip().lower().encode("utf-8")):
        raise S3Error("SignatureDoesNotMatch", extra={"AWSAccessKeyId": cred.access_key})
    return cred.access_key


def _verify_v2(fields: Mapping[str, str], policy: str, secret_for: SecretLookup) -> str:
    for name in ("awsaccesskeyid", "signature"):
        if name not in fields:
            raise _missing(name)
    access_key = fields["awsaccesskeyid"]
    secret = _lookup(secret_for, access_key)
    expected = base64.b64encode(hmac.new(secret.encode(), policy.encode(), hashlib.sha1).digest())
    if not hmac.compare_digest(expected, fields["signature"].strip().encode("utf-8")):
        raise S3Error("SignatureDoesNotMatch", extra={"AWSAccessKeyId": access_key})
    return access_key


def _parse(policy: str) -> tuple[datetime, tuple[Condition, ...], tuple[int, int] | None]:
    """(expiration, conditions, content-length-range) of a policy field."""
    try:
        document = orjson.loads(base64.b64decode("".join(policy.split()), validate=True))
    except (binascii.Error, ValueError):
        raise _invalid("it is not base64-encoded JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("conditions"), list):
        raise _invalid("it needs an object with 'expiration' and 'conditions' (a list)")
    conditions: list[Condition] = []
    size_range: tuple[int, int] | None = None
    for raw in document["conditions"]:
        if isinstance(raw, list) and len(raw) == 3 and isinstance(raw[0], str) and raw[0].lower() == "content-length-range":
            size_range = _size_range(raw)
        else:
            conditions.append(_condition(raw))
    return _expiration(document.get("expiration")), tuple(conditions), size_range


def _expiration(value: object) -> datetime:
    if not isinstance(value, str):
        raise _invalid("'expiration' must be a date and time, as 2030-01-01T12:00:00.000Z")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise _invalid("'expiration' must be a date and time, as 2030-01-01T12:00:00.000Z") from None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when


def _condition(raw: object) -> Condition:
    text = orjson.dumps(raw).decode()
    if isinstance(raw, dict) and len(raw) == 1:
        ((field, value),) = raw.items()
        operator = "eq"
    elif isinstance(raw, list) and len(raw) == 3 and isinstance(raw[0], str) and raw[0].lower() in _OPERATORS:
        operator, field, value = raw[0].lower(), raw[1], raw[2]
        if not isinstance(field, str) or not field.startswith("$"):
            raise _invalid(f"a condition names its field with '$': {text}")
        field = field[1:]
    else:
        raise _invalid(f"a condition is not one the policy language has: {text}")
    if not isinstance(field, str) or not isinstance(value, str):
        raise _invalid(f"a condition compares text with text: {text}")
    return Condition(operator, field.lower(), value, text)


def _size_range(raw: list[object]) -> tuple[int, int]:
    bounds = [int(v) if isinstance(v, str) and v.isascii() and v.isdigit() else v for v in raw[1:]]
    low, high = bounds
    if not isinstance(low, int) or not isinstance(high, int) or isinstance(low, bool) or isinstance(high, bool) \
            or not 0 <= low <= high:
        raise _invalid(f"content-length-range takes two sizes, the smaller first: {orjson.dumps(raw).decode()}")
    return low, high


def _denied(detail: str) -> S3Error:
    return S3Error("AccessDenied", f"Invalid according to Policy: {detail}")


def _invalid(detail: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", f"Invalid Policy: {detail}.")


def _missing(name: str) -> S3Error:
    return S3Error("InvalidArgument", f"A POST upload with a policy must carry the field {name}.",
                   extra={"ArgumentName": name})
