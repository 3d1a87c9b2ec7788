"""The read and write paths of a node (gateway.engine.engine.Engine and its parts).

Object metadata and listings are cached in process (store.meta, the L1) and, when Redis
is configured, shared by the nodes (cluster.shared, the L2); object bytes come from the
block cache (store) or the origin. `s3api` never talks to the origin itself.
"""

from gateway.engine.engine import Engine
from gateway.engine.fetch import FirstBlock
from gateway.engine.metadata import ObjectHead
from gateway.engine.reads import ObjectRead
from gateway.objects import ObjectChanged, ObjectMeta, meta_from_headers
from gateway.origin import OriginResponse

__all__ = ["Engine", "FirstBlock", "ObjectChanged", "ObjectHead", "ObjectMeta", "ObjectRead", "OriginResponse",
           "meta_from_headers"]
