"""Fuzz target `events`: the S3 event notification parser (gateway/events.py parse_s3_event).

Text: the payload (S3's Records document, SNS-wrapped, EventBridge), as SQS or the webhook
hands it over. Contract: a list of (bucket, key) string pairs with a non-empty bucket, or
EventError (the consumer logs and drops the message); never another exception.
"""

from __future__ import annotations

import json
import sys

import atheris
from _harness import Controls, Finding, check, main, seed

with atheris.instrument_imports(include=["gateway.events"]):
    from gateway.events import EventError, parse_s3_event


def test_one_input(data: bytes) -> None:
    payload = Controls(data).rest()
    try:
        changes = parse_s3_event(payload)
    except EventError:
        return
    except Exception as exc:
        raise Finding(f"{type(exc).__name__} instead of EventError: {exc!r}") from exc
    check(isinstance(changes, list), "not a list")
    for bucket, key in changes:
        check(isinstance(bucket, str) and bucket and isinstance(key, str), f"change {(bucket, key)!r}")


def seeds() -> dict[str, bytes]:
    record = ('{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":'
              '{"name":"lake","arn":"arn:aws:s3:::lake"},"object":{"key":"dir/a+b%C3%BC.txt","size":5,'
              '"eTag":"x","sequencer":"0A1B"}}}')
    records = f'{{"Records":[{record},{record}]}}'
    sns = '{"Type":"Notification","MessageId":"m","Message":' + json.dumps(records) + "}"
    return {
        "records": seed(records),
        "sns": seed(sns),
        "sns-confirm": seed('{"Type":"SubscriptionConfirmation","SubscribeURL":"https://x"}'),
        "eventbridge": seed('{"source":"aws.s3","detail-type":"Object Created","detail":{"bucket":{"name":"lake"},'
                            '"object":{"key":"a/b c.txt","size":1}}}'),
        "test-event": seed('{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"lake"}'),
    }


if __name__ == "__main__":
    main("events", test_one_input, seeds)
    sys.exit(0)
