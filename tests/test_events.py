"""events.parse_s3_event: the notification shapes S3, SNS and EventBridge deliver."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.events import EventError, parse_s3_event

S3_EVENT = {"Records": [
    {"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "bkt"}, "object": {"key": "dir/a+b%2Bc.txt", "eTag": "x"}}},
    {"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "bkt"}, "object": {"key": "%C3%BC"}}},
]}


def test_plain_s3_notification_decodes_keys_as_s3_encodes_them():
    assert parse_s3_event(orjson.dumps(S3_EVENT)) == [("bkt", "dir/a b+c.txt"), ("bkt", "ü")]


def test_sns_envelope_and_confirmation():
    wrapped = {"Type": "Notification", "Message": orjson.dumps(S3_EVENT).decode()}
    assert parse_s3_event(orjson.dumps(wrapped)) == [("bkt", "dir/a b+c.txt"), ("bkt", "ü")]
    assert parse_s3_event(orjson.dumps({"Type": "SubscriptionConfirmation", "Message": "x"})) == []


def test_eventbridge_and_test_event():
    bridge = {"detail-type": "Object Created", "detail": {"bucket": {"name": "bkt"}, "object": {"key": "k"}}}
    assert parse_s3_event(orjson.dumps(bridge)) == [("bkt", "k")]
    assert parse_s3_event(orjson.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"})) == []


@pytest.mark.parametrize("payload", [b"", b"[]", b"{}", b'{"Records": 1}', b'{"Records": [{"s3": {}}]}',
                                     b'{"Records": [{"s3": {"bucket": {"name": ""}, "object": {"key": "k"}}}]}'])
def test_garbage_is_an_event_error(payload):
    with pytest.raises(EventError):
        parse_s3_event(payload)


@given(st.recursive(st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63 - 1) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
                        ["Records", "s3", "bucket", "object", "name", "key", "Type", "Message", "detail"]), inner, max_size=4)))
def test_any_json_yields_changes_or_an_event_error(document):
    try:
        changes = parse_s3_event(orjson.dumps(document))
    except EventError:
        return
    assert all(isinstance(b, str) and isinstance(k, str) for b, k in changes)


@pytest.mark.parametrize("key", [0, 1.5, None, True, [], {}])
def test_a_key_that_is_not_a_string_is_an_event_error(key):
    # Found by fuzz/fuzz_events.py: unquote_plus(0) raised AttributeError.
    with pytest.raises(EventError):
        parse_s3_event(orjson.dumps({"Records": [{"s3": {"bucket": {"name": "b"}, "object": {"key": key}}}]}))
