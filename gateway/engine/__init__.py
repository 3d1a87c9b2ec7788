"""The read and write paths of a node (gateway.engine.engine.Engine and its parts).

Object metadata and listings are cached in process (store.meta, the L1) and, when Redis
is configured, shared by the nodes (cluster.level2, the L2); object bytes come from the
block cache (store) or the origin. `s3api` never talks to the origin itself: it asks for
typed operations (open_object/get_object, forward, put_object, complete_upload), and errors
reach it as S3Error. The `*_now` methods answer without an await, for the hit path.
"""

from gateway.engine.engine import Engine, OpenObject
from gateway.engine.metadata import ObjectHead
from gateway.engine.objectread import ObjectRead
from gateway.engine.reads import OneBlock
from gateway.engine.runs import Want
from gateway.engine.writes import Forwarded
from gateway.objects import ObjectMeta, headers_carried, meta_from_headers

__all__ = ["Engine", "Forwarded", "ObjectHead", "ObjectMeta", "ObjectRead", "OneBlock", "OpenObject", "Want",
           "headers_carried", "meta_from_headers"]
