"""S3 event notifications: which objects changed behind the gateway, from SQS or a webhook."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from urllib.parse import unquote_plus, urlsplit

import httpx
import orjson

from gateway import log
from gateway.config import EventsSettings
from gateway.retry import FOREVER, ExponentialBackoff, Retry
from gateway.signing import sha256_hex, sign_request_v4

Change = tuple[str, str]  # bucket, key
OnChanges = Callable[[list[Change]], Awaitable[None]]
MAX_EVENT_BYTES = 1024 * 1024


class EventError(ValueError):
    """The payload is not an S3 event notification."""


def parse_s3_event(payload: bytes) -> list[Change]:
    """The (bucket, key) pairs of an S3 event notification.

    Accepts the S3 notification document ({"Records": [...]}), the same wrapped by SNS
    ({"Type": "Notification", "Message": "<json>"}) and EventBridge's S3 events
    ({"detail": {"bucket": {"name"}, "object": {"key"}}}). S3's own test event and SNS
    subscription confirmations carry no change and yield nothing. Keys arrive
    URL-encoded with '+' for spaces, as S3 sends them.
    """
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise EventError(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise EventError("not a JSON object")
    if document.get("Type") in ("Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation"):
        message = document.get("Message")
        if document["Type"] != "Notification" or not isinstance(message, str):
            return []
        return parse_s3_event(message.encode())
    if document.get("Event") == "s3:TestEvent":
        return []
    if isinstance(document.get("detail"), dict):
        return _pairs([{"s3": document["detail"]}])
    records = document.get("Records")
    if not isinstance(records, list):
        raise EventError("no Records")
    return _pairs(records)


def _pairs(records: list[object]) -> list[Change]:
    changes: list[Change] = []
    for record in records:
        try:
            s3 = record["s3"]  # type: ignore[index]
            bucket = s3["bucket"]["name"]
            key = s3["object"]["key"]
        except (KeyError, TypeError):
            raise EventError("a record without s3.bucket.name and s3.object.key") from None
        if not isinstance(key, str):  # unquote_plus of a number raises AttributeError
            raise EventError("a record whose s3.object.key is not a string")
        key = unquote_plus(key)
        if not isinstance(bucket, str) or not bucket:
            raise EventError("a record with an empty bucket name")
        changes.append((bucket, key))
    return changes


class SqsConsumer:
    """Long-polls an SQS queue of S3 event notifications and reports the changes.

    Speaks SQS's JSON protocol over httpx, signed with the gateway's own SigV4 code. A
    message is deleted only after its changes were applied; one that is not an S3 event
    is logged and deleted. Errors back off and retry; the loop ends when cancelled.
    """

    def __init__(self, settings: EventsSettings, on_changes: OnChanges, *, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self._on_changes = on_changes
        parts = urlsplit(settings.sqs_queue_url)
        self._endpoint = f"{parts.scheme}://{parts.netloc}/"
        self._host = parts.netloc
        self._client = client or httpx.AsyncClient(timeout=settings.wait_seconds + 10)
        self.received = 0
        self.errors = 0
        self._retry = Retry(ExponentialBackoff(1.0, cap=30.0), FOREVER)

    async def run(self) -> None:
        """Poll until cancelled. A failed poll (a queue that is down must not stop the gateway)
        is counted and logged, and tried again after a pause: 1 s, doubling up to 30 s."""
        while True:
            await self._retry.call(self.poll_once, failed=self._failed)

    async def _failed(self, failures: int, error: BaseException | int) -> None:
        self.errors += 1
        log.engine.warning("SQS poll failed (%s); retrying in %.0f s", error.__class__.__name__,
                           self._retry.backoff.compute(failures))

    async def poll_once(self) -> int:
        """One ReceiveMessage round; returns how many messages were handled."""
        answer = await self._call("ReceiveMessage", {
            "QueueUrl": self.settings.sqs_queue_url, "MaxNumberOfMessages": 10,
            "WaitTimeSeconds": self.settings.wait_seconds,
        })
        messages = answer.get("Messages") or []
        assert isinstance(messages, list)
        done: list[dict[str, str]] = []
        for message in messages:
            try:
                changes = parse_s3_event(str(message.get("Body", "")).encode())
            except EventError as exc:
                log.engine.warning("SQS message %s is not an S3 event (%s); dropped", message.get("MessageId"), exc)
                changes = []
            if changes:
                await self._on_changes(changes)
            done.append({"Id": str(len(done)), "ReceiptHandle": message["ReceiptHandle"]})
        if done:
            await self._call("DeleteMessageBatch", {"QueueUrl": self.settings.sqs_queue_url, "Entries": done})
        self.received += len(messages)
        return len(messages)

    async def _call(self, action: str, body: dict[str, object]) -> dict[str, object]:
        payload = orjson.dumps(body)
        headers = {"host": self._host, "content-type": "application/x-amz-json-1.0", "x-amz-target": f"AmazonSQS.{action}"}
        headers.update(sign_request_v4(
            method="POST", path="/", query=[], headers=headers, payload_hash=sha256_hex(payload),
            access_key=self.settings.sqs_access_key, secret_key=self.settings.sqs_secret_key,
            region=self.settings.sqs_region, now=datetime.now(timezone.utc), service="sqs",
        ))
        response = await self._client.post(self._endpoint, content=payload, headers=headers)
        if response.status_code >= 300:
            raise RuntimeError(f"SQS {action} answered {response.status_code}: {response.text[:200]}")
        result = orjson.loads(response.content or b"{}")
        return result if isinstance(result, dict) else {}

    async def aclose(self) -> None:
        await self._client.aclose()
