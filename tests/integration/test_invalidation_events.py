"""Changes made behind the gateway, made visible at once: the admin purge, the event webhook, SQS."""

from __future__ import annotations

import dataclasses

import boto3
import httpx
import orjson
import pytest

from gateway.config import AdminSettings, EventsSettings
from tests.support import base_settings, client
from tests.waiting import wait_for

TOKEN = "admin-token-for-tests"


def event(bucket: str, key: str) -> bytes:
    return orjson.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": bucket}, "object": {"key": key}}}]})


def long_ttls(origin: str) -> dict[str, object]:
    settings = base_settings(origin)
    return {"metadata": dataclasses.replace(settings.metadata, ttl=3600.0),
            "listing": dataclasses.replace(settings.listing, ttl=3600.0)}


@pytest.fixture
def gateway_with_admin(start_gateway, clean_origin):
    gateway = start_gateway(admin=AdminSettings(token=TOKEN), **long_ttls(clean_origin))
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    return gateway, s3


def admin(gateway, method: str, route: str, token: str | None = TOKEN, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, f"{gateway.endpoint}/_gateway{route}", headers=headers, timeout=10, **kwargs)


def test_admin_needs_its_token_and_never_s3_credentials(gateway_with_admin):
    gateway, _ = gateway_with_admin
    assert admin(gateway, "GET", "/healthz", token=None).status_code == 200
    assert admin(gateway, "POST", "/purge?bucket=bkt", token=None).status_code == 401
    assert admin(gateway, "POST", "/purge?bucket=bkt", token="wrong").status_code == 401
    from tests.support import ADMIN
    assert admin(gateway, "POST", "/purge?bucket=bkt", token=ADMIN[1]).status_code == 401
    assert admin(gateway, "POST", "/purge").status_code == 400


def test_purge_makes_a_change_behind_the_gateway_visible(gateway_with_admin, direct):
    gateway, s3 = gateway_with_admin
    s3.put_object(Bucket="bkt", Key="dir/a", Body=b"old")
    assert s3.get_object(Bucket="bkt", Key="dir/a")["Body"].read() == b"old"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]] == ["dir/a"]
    direct.put_object(Bucket="bkt", Key="dir/a", Body=b"new!")
    direct.put_object(Bucket="bkt", Key="dir/b", Body=b"b")
    assert s3.head_object(Bucket="bkt", Key="dir/a")["ContentLength"] == 3  # cached for an hour
    answer = admin(gateway, "POST", "/purge?bucket=bkt&prefix=dir/")
    assert answer.status_code == 200 and answer.json()["blocks_removed"] >= 1
    assert s3.get_object(Bucket="bkt", Key="dir/a")["Body"].read() == b"new!"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]] == ["dir/a", "dir/b"]


def test_purge_of_one_key_drops_its_blocks(gateway_with_admin):
    gateway, s3 = gateway_with_admin
    s3.put_object(Bucket="bkt", Key="k", Body=b"x" * 1000)
    s3.get_object(Bucket="bkt", Key="k")["Body"].read()
    assert s3.get_object(Bucket="bkt", Key="k")["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "hit-mem"
    assert admin(gateway, "POST", "/purge?bucket=bkt&key=k").json()["blocks_removed"] == 1
    assert s3.get_object(Bucket="bkt", Key="k")["ResponseMetadata"]["HTTPHeaders"]["x-cache"] == "miss"


def test_event_webhook_invalidates(gateway_with_admin, direct):
    gateway, s3 = gateway_with_admin
    s3.put_object(Bucket="bkt", Key="sp ace", Body=b"old")
    s3.head_object(Bucket="bkt", Key="sp ace")
    direct.put_object(Bucket="bkt", Key="sp ace", Body=b"newer")
    assert admin(gateway, "POST", "/events", content=event("bkt", "sp+ace")).json() == {"invalidated": 1}
    assert s3.head_object(Bucket="bkt", Key="sp ace")["ContentLength"] == 5
    assert admin(gateway, "POST", "/events", content=b"not json").status_code == 400


def test_sqs_notifications_invalidate(start_gateway, clean_origin, direct):
    sqs = boto3.client("sqs", endpoint_url=clean_origin, region_name="us-east-1",
                       aws_access_key_id="origin-key", aws_secret_access_key="origin-secret")
    queue = sqs.create_queue(QueueName="bucket-events")["QueueUrl"]
    gateway = start_gateway(
        events=EventsSettings(sqs_queue_url=queue, sqs_access_key="origin-key", sqs_secret_key="origin-secret", wait_seconds=1),
        **long_ttls(clean_origin),
    )
    s3 = client(gateway.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=b"old")
    s3.head_object(Bucket="bkt", Key="k")
    direct.put_object(Bucket="bkt", Key="k", Body=b"from elsewhere")
    assert s3.head_object(Bucket="bkt", Key="k")["ContentLength"] == 3
    sqs.send_message(QueueUrl=queue, MessageBody=event("bkt", "k").decode())
    wait_for(lambda: s3.head_object(Bucket="bkt", Key="k")["ContentLength"] == 14,
             "the SQS event invalidates the cached metadata", within=10, interval=0.2)
    # The message was consumed (deleted), not left to be delivered again.
    consumer = gateway.server.config.app._events
    wait_for(lambda: consumer.received >= 1, "the consumer is done with the message (it counts it once deleted)")
    assert "Messages" not in sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=0)
