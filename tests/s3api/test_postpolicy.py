"""gateway.s3api.auth.postpolicy against the policies and signatures botocore makes (SigV4 and SigV2)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.config import Config
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import S3Error
from gateway.s3api.auth.postpolicy import verify_post_policy

KEY, SECRET = "AKIAPOST00000000001", "post-secret-000000000000000000000000001"


def now() -> datetime:
    """The clock when a test runs (policies are made with it, not when the module was collected)."""
    return datetime.now(timezone.utc)


def secret_for(access_key: str) -> str | None:
    return SECRET if access_key == KEY else None


def presigned(conditions: list[object] | None = None, *, fields: dict[str, str] | None = None,
              version: str = "s3v4", expires: int = 600, key: str = "up/${filename}",
              secret: str = SECRET) -> dict[str, str]:
    """The form fields botocore gives for a presigned POST, names lower-cased as the form reader gives them."""
    client = boto3.client("s3", endpoint_url="http://gateway.test", region_name="us-east-1",
                          aws_access_key_id=KEY, aws_secret_access_key=secret,
                          config=Config(signature_version=version, s3={"addressing_style": "path"}))
    post = client.generate_presigned_post("bkt", key, Fields=fields, Conditions=conditions, ExpiresIn=expires)
    return {name.lower(): value for name, value in post["fields"].items()}


def code_of(fields: dict[str, str], *, bucket: str = "bkt", at: datetime | None = None, size: int = 1) -> str | None:
    try:
        policy = verify_post_policy(fields, secret_for, now=at or now())
        policy.check_fields(fields, bucket)
        policy.check_size(size)
    except S3Error as err:
        return err.code
    return None


@pytest.mark.parametrize("version", ["s3v4", "s3"])
def test_botocores_presigned_posts_pass(version):
    fields = presigned([{"acl": "private"}, ["starts-with", "$Content-Type", "text/"], ["content-length-range", 1, 10]],
                       fields={"acl": "private", "Content-Type": "text/plain"}, version=version)
    assert code_of(fields) is None
    assert verify_post_policy(fields, secret_for, now=now()).access_key == KEY


@pytest.mark.parametrize("version", ["s3v4", "s3"])
def test_a_changed_policy_or_a_wrong_secret_does_not_match(version):
    fields = presigned(version=version)
    document = json.loads(base64.b64decode(fields["policy"]))
    document["conditions"].append(["starts-with", "$x-amz-meta-a", ""])
    forged = dict(fields, policy=base64.b64encode(json.dumps(document).encode()).decode())
    assert code_of(forged) == "SignatureDoesNotMatch"
    assert code_of(presigned(version=version, secret="another-secret")) == "SignatureDoesNotMatch"


def test_an_unknown_key_and_a_missing_signature():
    fields = presigned()
    assert code_of(dict(fields, **{"x-amz-credential": fields["x-amz-credential"].replace(KEY, "AKIAUNKNOWN")})) \
        == "InvalidAccessKeyId"
    assert code_of({k: v for k, v in fields.items() if k != "x-amz-signature"}) == "InvalidArgument"
    assert code_of({k: v for k, v in fields.items() if not k.startswith("x-amz-")}) == "InvalidArgument"
    assert code_of({"key": "k"}) == "AccessDenied"  # no policy: an anonymous upload


def test_an_expired_policy_is_denied():
    made = now()
    fields = presigned(expires=60)
    assert code_of(fields, at=made + timedelta(seconds=30)) is None
    assert code_of(fields, at=made + timedelta(seconds=120)) == "AccessDenied"


def test_conditions_hold_on_the_fields_and_the_bucket():
    fields = presigned([["starts-with", "$x-amz-meta-tag", "blue"]], fields={"x-amz-meta-tag": "blue-sky"})
    assert code_of(fields) is None
    assert code_of(dict(fields, **{"x-amz-meta-tag": "red"})) == "AccessDenied"  # fields are not signed: the policy holds them
    assert code_of(dict(fields, key="elsewhere/x")) == "AccessDenied"
    assert code_of(fields, bucket="other-bucket") == "AccessDenied"


def test_every_field_must_be_named_by_a_condition():
    fields = presigned()
    assert code_of(dict(fields, **{"x-amz-meta-extra": "1"})) == "AccessDenied"
    assert code_of(dict(fields, acl="public-read")) == "AccessDenied"
    assert code_of(dict(fields, **{"x-ignore-anything": "1"})) is None


def test_content_length_range_bounds_the_file():
    fields = presigned([["content-length-range", 5, 10]])
    assert [code_of(fields, size=size) for size in (4, 5, 10, 11)] == ["EntityTooSmall", None, None, "EntityTooLarge"]


def _v2_signature(policy: str) -> str:
    return base64.b64encode(hmac.new(SECRET.encode(), policy.encode(), hashlib.sha1).digest()).decode()


def _signed_v2(document: object) -> dict[str, str]:
    policy = base64.b64encode(json.dumps(document).encode()).decode()
    return {"key": "k", "awsaccesskeyid": KEY, "policy": policy, "signature": _v2_signature(policy)}


@pytest.mark.parametrize("document", [
    [], {"conditions": []}, {"expiration": "soon", "conditions": []},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": {}},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [["matches", "$key", "k"]]},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [["eq", "key", "k"]]},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [{"key": "k", "acl": "private"}]},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [{"key": 5}]},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [["content-length-range", 10, 5]]},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [["content-length-range", -1, 5]]},
    {"expiration": "2100-01-01T00:00:00Z", "conditions": [["content-length-range", True, 5]]},
])
def test_a_signed_but_invalid_policy_is_an_invalid_policy_document(document):
    assert code_of(_signed_v2(document)) == "InvalidPolicyDocument"


def test_a_policy_that_is_not_base64_json():
    fields = _signed_v2({})
    fields["policy"] = "!!not base64!!"
    fields["signature"] = _v2_signature(fields["policy"])
    assert code_of(fields) == "InvalidPolicyDocument"


@given(st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40), max_size=8))
def test_any_forged_form_is_refused(fields):
    """No form without a policy signed by a known secret passes, whatever its fields."""
    fields = {name.lower(): value for name, value in fields.items()}
    with pytest.raises(S3Error) as raised:
        verify_post_policy(fields, secret_for, now=now())
    assert 400 <= raised.value.status < 500
