"""POST Object (HTML form uploads, boto3's generate_presigned_post) through the gateway to moto.

Each refused form is checked to have written nothing at the origin; each accepted one to be
what a GET through the gateway's cache then answers.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import socket
import threading
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from tests.support import ADMIN, READER, TEAM, base_settings, client

pytestmark = pytest.mark.usefixtures("clean_origin")
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def presigned(endpoint: str, bucket: str, key: str, *, key_pair: tuple[str, str] = ADMIN, version: str = "s3v4",
              fields: dict[str, str] | None = None, conditions: list[object] | None = None) -> dict[str, object]:
    signer = client(endpoint, key_pair, signature_version=version)
    return signer.generate_presigned_post(bucket, key, Fields=fields, Conditions=conditions, ExpiresIn=300)


def post(post: dict[str, object], content: bytes, *, filename: str = "f.txt", extra: dict[str, str] | None = None,
         **kwargs: object) -> httpx.Response:
    data = dict(post["fields"], **(extra or {}))  # type: ignore[arg-type]
    return httpx.post(str(post["url"]), data=data, files={"file": (filename, content, "text/plain")}, timeout=30,
                      **kwargs)  # type: ignore[arg-type]


def error_code(response: httpx.Response) -> str:
    return ET.fromstring(response.content).findtext("Code") or ""


def keys(direct, bucket: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [o["Key"] for o in direct.list_objects_v2(Bucket=bucket).get("Contents", [])]


@pytest.mark.parametrize("version", ["s3v4", "s3"])
def test_a_presigned_post_stores_the_file_with_its_fields(gateway, s3, direct, version):
    s3.create_bucket(Bucket="bkt")
    form = presigned(gateway.endpoint, "bkt", "up/${filename}", version=version,
                     fields={"Content-Type": "text/csv", "x-amz-meta-note": "na\u00efve", "Cache-Control": "max-age=9"},
                     conditions=[{"Content-Type": "text/csv"}, {"x-amz-meta-note": "na\u00efve"},
                                 {"Cache-Control": "max-age=9"}, ["content-length-range", 1, 1000]])
    answer = post(form, b"a,b\n1,2\n", filename="caf\u00e9 \u2615.csv")
    assert answer.status_code == 204, answer.text
    assert answer.headers["etag"] == '"%s"' % hashlib.md5(b"a,b\n1,2\n").hexdigest()
    key = "up/caf\u00e9 \u2615.csv"
    assert urlsplit(answer.headers["location"]).path == "/bkt/up/caf%C3%A9%20%E2%98%95.csv"
    stored = direct.get_object(Bucket="bkt", Key=key)
    assert stored["Body"].read() == b"a,b\n1,2\n"
    assert (stored["ContentType"], stored["CacheControl"]) == ("text/csv", "max-age=9")
    # The field's UTF-8 bytes, as a PUT's header bytes are stored (botocore reads header bytes as latin-1).
    assert stored["Metadata"]["note"].encode("latin-1").decode("utf-8") == "na\u00efve"
    assert s3.get_object(Bucket="bkt", Key=key)["Body"].read() == b"a,b\n1,2\n"


def test_a_post_replaces_what_the_cache_holds(gateway, s3):
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="doc", Body=b"first")
    assert s3.get_object(Bucket="bkt", Key="doc")["Body"].read() == b"first"  # cached now
    assert s3.get_object(Bucket="bkt", Key="doc")["ResponseMetadata"]["HTTPHeaders"]["x-cache"].startswith("hit")
    assert post(presigned(gateway.endpoint, "bkt", "doc"), b"second version").status_code == 204
    assert s3.get_object(Bucket="bkt", Key="doc")["Body"].read() == b"second version"
    assert s3.head_object(Bucket="bkt", Key="doc")["ContentLength"] == len(b"second version")


def test_success_action_status_and_redirect(gateway, s3):
    s3.create_bucket(Bucket="bkt")
    created = post(presigned(gateway.endpoint, "bkt", "a", fields={"success_action_status": "201"},
                             conditions=[{"success_action_status": "201"}]), b"x")
    assert created.status_code == 201
    root = ET.fromstring(created.content)
    assert root.tag == NS + "PostResponse"
    assert (root.findtext(NS + "Bucket"), root.findtext(NS + "Key")) == ("bkt", "a")
    assert root.findtext(NS + "ETag") == created.headers["etag"]
    ok = post(presigned(gateway.endpoint, "bkt", "b", fields={"success_action_status": "200"},
                        conditions=[{"success_action_status": "200"}]), b"x")
    assert (ok.status_code, ok.content) == (200, b"")
    target = "https://app.example/done?from=upload"
    moved = post(presigned(gateway.endpoint, "bkt", "c d", fields={"success_action_redirect": target},
                           conditions=[{"success_action_redirect": target}]), b"x")
    assert moved.status_code == 303
    location = urlsplit(moved.headers["location"])
    assert (location.scheme, location.netloc, location.path) == ("https", "app.example", "/done")
    assert parse_qs(location.query) == {"from": ["upload"], "bucket": ["bkt"], "key": ["c d"],
                                        "etag": [moved.headers["etag"]]}


def test_a_redirect_that_is_not_a_clean_url_falls_back_to_the_status(gateway, s3):
    s3.create_bucket(Bucket="bkt")
    for target in ("https://app.example/\r\nSet-Cookie: a=b", "not a url", "https://app.example/caf\u00e9"):
        form = presigned(gateway.endpoint, "bkt", "r", fields={"success_action_redirect": target},
                         conditions=[{"success_action_redirect": target}])
        answer = post(form, b"x")
        assert answer.status_code == 204 and "set-cookie" not in answer.headers, target
        assert urlsplit(answer.headers["location"]).path == "/bkt/r"


def test_virtual_hosted_post(gateway, s3, direct):
    s3.create_bucket(Bucket="vbkt")
    form = presigned(gateway.endpoint, "vbkt", "v")
    port = urlsplit(gateway.endpoint).port
    answer = httpx.post(f"http://127.0.0.1:{port}/", headers={"host": f"vbkt.s3.gateway.test:{port}"},
                        data=form["fields"], files={"file": ("f", b"hosted")}, timeout=30)
    assert answer.status_code == 204, answer.text
    assert urlsplit(answer.headers["location"]).path == "/v"
    assert direct.get_object(Bucket="vbkt", Key="v")["Body"].read() == b"hosted"


def test_the_signer_needs_a_write_grant_on_the_key(gateway, s3, direct):
    s3.create_bucket(Bucket="shared")
    assert post(presigned(gateway.endpoint, "shared", "team/ok", key_pair=TEAM), b"x").status_code == 204
    for key_pair, key in ((TEAM, "other/no"), (READER, "team/no")):
        refused = post(presigned(gateway.endpoint, "shared", key, key_pair=key_pair), b"x")
        assert (refused.status_code, error_code(refused)) == (403, "AccessDenied")
    assert keys(direct, "shared") == ["team/ok"]


def test_forms_the_policy_does_not_allow_write_nothing(gateway, s3, direct):
    s3.create_bucket(Bucket="bkt")
    form = presigned(gateway.endpoint, "bkt", "up/${filename}", conditions=[["content-length-range", 2, 5]])
    cases = [
        (post(form, b"x", extra={"x-amz-meta-sneaky": "1"}), 403, "AccessDenied"),  # a field the policy does not name
        (post(form, b"x", extra={"key": "elsewhere/x"}), 403, "AccessDenied"),  # a key outside starts-with
        (post(form, b"much too long"), 400, "EntityTooLarge"),
        (post(form, b"x"), 400, "EntityTooSmall"),
        (post(dict(form, fields=dict(form["fields"], policy=form["fields"]["policy"][:-4] + "AAA=")), b"xx"),  # type: ignore[index]
         403, "SignatureDoesNotMatch"),
        (post(presigned(gateway.endpoint, "bkt", "k", key_pair=("AKIANOBODY000000001", "s" * 40)), b"xx"),
         403, "InvalidAccessKeyId"),
        (httpx.post(str(form["url"]), data=form["fields"], timeout=30,  # type: ignore[arg-type]
                    files={"other": ("f", b"xx")}), 400, "IncorrectNumberOfFilesInPostRequest"),
    ]
    for answer, status, code in cases:
        assert (answer.status_code, error_code(answer)) == (status, code), answer.text
    assert keys(direct, "bkt") == []


def test_a_field_that_would_split_a_header_is_refused(gateway, s3, direct):
    s3.create_bucket(Bucket="bkt")
    form = presigned(gateway.endpoint, "bkt", "k", fields={"Content-Type": "text/plain\r\nx-amz-acl: public-read"},
                     conditions=[["starts-with", "$Content-Type", "text/"]])
    refused = post(form, b"xx")
    assert (refused.status_code, error_code(refused)) == (400, "InvalidArgument")
    assert keys(direct, "bkt") == []


def test_a_form_cannot_copy_another_object(gateway, s3, direct):
    s3.create_bucket(Bucket="shared")
    s3.put_object(Bucket="shared", Key="secret/plans", Body=b"not for the team")
    fields = {"x-amz-copy-source": "/shared/secret/plans"}
    form = presigned(gateway.endpoint, "shared", "team/copy", key_pair=TEAM, fields=fields,
                     conditions=[{"x-amz-copy-source": "/shared/secret/plans"}])
    refused = post(form, b"x")
    assert (refused.status_code, error_code(refused)) == (400, "InvalidArgument")
    assert keys(direct, "shared") == ["secret/plans"]


def test_tagging_acl_and_a_checksum_reach_the_origin(gateway, s3, direct):
    s3.create_bucket(Bucket="bkt")
    tagging = "<Tagging><TagSet><Tag><Key>team</Key><Value>data eng</Value></Tag></TagSet></Tagging>"
    good = base64.b64encode(hashlib.sha256(b"payload").digest()).decode()
    fields = {"tagging": tagging, "acl": "private", "x-amz-checksum-sha256": good}
    form = presigned(gateway.endpoint, "bkt", "t", fields=fields, conditions=[{k: v} for k, v in fields.items()])
    assert post(form, b"payload").status_code == 204
    assert direct.get_object_tagging(Bucket="bkt", Key="t")["TagSet"] == [{"Key": "team", "Value": "data eng"}]
    assert direct.head_object(Bucket="bkt", Key="t", ChecksumMode="ENABLED")["ChecksumSHA256"] == good
    bad = presigned(gateway.endpoint, "bkt", "u", fields={"x-amz-checksum-sha256": good},
                    conditions=[{"x-amz-checksum-sha256": good}])
    refused = post(bad, b"not the payload")
    assert (refused.status_code, error_code(refused)) == (400, "BadDigest")
    assert keys(direct, "bkt") == ["t"]


def test_a_file_over_the_object_limit(start_gateway, clean_origin):
    small = start_gateway(server=dataclasses.replace(base_settings(clean_origin).server, max_object_size=1000))
    admin = client(small.endpoint)
    admin.create_bucket(Bucket="bkt")
    refused = post(presigned(small.endpoint, "bkt", "big"), b"x" * 5000)
    assert (refused.status_code, error_code(refused)) == (400, "EntityTooLarge")
    assert post(presigned(small.endpoint, "bkt", "fits"), b"x" * 1000).status_code == 204
    assert [o["Key"] for o in admin.list_objects_v2(Bucket="bkt")["Contents"]] == ["fits"]


def _raw_post(endpoint: str, body: bytes, *, length: int, boundary: str) -> bytes:
    """A POST whose body may be shorter than its Content-Length; the answer's bytes (b"" if none)."""
    url = urlsplit(endpoint)
    with socket.create_connection((url.hostname, url.port), timeout=15) as sock:
        sock.sendall(b"POST /bkt HTTP/1.1\r\nHost: %s\r\nContent-Type: multipart/form-data; boundary=%s\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (url.netloc.encode(), boundary.encode(), length, body))
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_a_cut_upload_is_never_stored(gateway, s3, direct):
    s3.create_bucket(Bucket="bkt")
    form = presigned(gateway.endpoint, "bkt", "cut")
    request = httpx.Request("POST", str(form["url"]), data=form["fields"], files={"file": ("f", b"z" * 100_000)})
    body = request.read()
    boundary = request.headers["content-type"].split("boundary=")[1]
    # The client goes away mid-file; then a body that is whole by its length but ends inside the file.
    _raw_post(gateway.endpoint, body[: len(body) // 2], length=len(body), boundary=boundary)
    answer = _raw_post(gateway.endpoint, body[:-60], length=len(body) - 60, boundary=boundary)
    assert answer.startswith(b"HTTP/1.1 400") and b"MalformedPOSTRequest" in answer
    assert keys(direct, "bkt") == []
    assert post(form, b"whole").status_code == 204


def test_a_post_that_is_not_a_form_is_still_not_allowed(gateway, s3):
    s3.create_bucket(Bucket="bkt")
    answer = httpx.post(gateway.endpoint + "/bkt", content=b"x", headers={"content-type": "text/plain"}, timeout=30)
    assert (answer.status_code, error_code(answer)) == (405, "MethodNotAllowed")


@pytest.mark.parametrize("content_type, body", [
    ("multipart/form-data", b"--x\r\n"),  # no boundary
    ("multipart/form-data; boundary=x", b""),
    ("multipart/form-data; boundary=x", b"garbage without any boundary"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--x--"),
    ("multipart/form-data; boundary=x", b"--x\r\n\xff\xfe: \x00\r\n\r\nv\r\n--x--"),
])
def test_garbage_forms_get_a_4xx(gateway, s3, direct, content_type, body):
    s3.create_bucket(Bucket="bkt")
    answer = httpx.post(gateway.endpoint + "/bkt", content=body, headers={"content-type": content_type}, timeout=30)
    assert 400 <= answer.status_code < 500 and error_code(answer), answer.text
    assert keys(direct, "bkt") == []


def test_the_access_log_names_the_key_written_and_its_signer(gateway, s3):
    """As a PutObject's: the advisor's trace (gateway/advisor/trace.py) takes it for a write of that key.
    A 204 has no body: the client has the whole answer once its headers are sent, while the gateway
    makes the entry as the app sends the (empty) last body message after them. So the test waits for
    the entry itself, not for the answer."""
    s3.create_bucket(Bucket="shared")
    entries: list[dict[str, object]] = []
    logged = threading.Event()

    def observe(entry: dict[str, object]) -> None:
        entries.append(entry)
        if entry["operation"] == "PostObject":
            logged.set()

    observers = gateway.server.config.app.s3.accounts.observers
    observers.append(observe)
    try:
        assert post(presigned(gateway.endpoint, "shared", "team/${filename}", key_pair=TEAM), b"x",
                    filename="log.txt").status_code == 204
        assert logged.wait(30), "no PostObject entry reached the access log"
    finally:
        observers.remove(observe)
    posted = [e for e in entries if e["operation"] == "PostObject"]
    assert [(e["bucket"], e["key"], e["user"], e["status"]) for e in posted] == [("shared", "team/log.txt", TEAM[0], 204)]
