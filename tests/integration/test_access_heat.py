"""Access heat is the engine's: each GetObject served is one hit of its object, and nothing else is."""

from __future__ import annotations

import botocore.exceptions
import pytest

from gateway.engine import Engine
from tests.support import RunningGateway

BUCKET = "heat-events"


def engine(gateway: RunningGateway) -> Engine:
    return gateway.server.config.app.s3.engine


def heat_of(gateway: RunningGateway) -> dict[str, int]:
    return {key: hits for bucket, key, hits in engine(gateway).heat.top(10_000) if bucket == BUCKET}


def test_only_object_gets_served_heat_an_object(gateway, s3):
    s3.create_bucket(Bucket=BUCKET)
    etag = s3.put_object(Bucket=BUCKET, Key="k", Body=b"x" * 100)["ETag"]
    s3.put_object(Bucket=BUCKET, Key="other", Body=b"y")
    assert heat_of(gateway) == {}  # writes do not count

    assert s3.get_object(Bucket=BUCKET, Key="k")["Body"].read() == b"x" * 100  # 200
    assert s3.get_object(Bucket=BUCKET, Key="k", Range="bytes=0-9")["Body"].read() == b"x" * 10  # 206
    assert s3.get_object(Bucket=BUCKET, Key="k")["Body"].read() == b"x" * 100  # a hit now
    assert heat_of(gateway) == {"k": 3}

    # Answers without the object's bytes, or with an error, count for nothing.
    s3.head_object(Bucket=BUCKET, Key="k")
    for asked, status in (({"IfNoneMatch": etag}, "304"), ({"IfMatch": '"nope"'}, "412"),
                          ({"Range": "bytes=500-600"}, "416")):
        with pytest.raises(botocore.exceptions.ClientError) as caught:
            s3.get_object(Bucket=BUCKET, Key="k", **asked)
        assert caught.value.response["Error"]["Code"] in (status, "NotModified", "PreconditionFailed",
                                                          "InvalidRange")
    with pytest.raises(botocore.exceptions.ClientError):
        s3.get_object(Bucket=BUCKET, Key="missing")
    s3.get_object_acl(Bucket=BUCKET, Key="k")  # a subresource, not the object
    s3.list_objects_v2(Bucket=BUCKET)
    assert heat_of(gateway) == {"k": 3}

    s3.get_object(Bucket=BUCKET, Key="other")["Body"].read()
    assert heat_of(gateway) == {"k": 3, "other": 1}
