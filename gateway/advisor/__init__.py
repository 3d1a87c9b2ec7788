"""The cache advisor (issue 8): replay a trace through a model of the tiered store, with the
live store's block arithmetic and eviction policies, and recommend a memory:SSD split.

Imports gateway.store (blocks, policy) and gateway.config only; never s3api, cluster or engine.
"""

from gateway.advisor.model import (
    Model,
    Outcome,
    evaluate,
    miss_ratio_curve,
    recommend,
    sweep,
)
from gateway.advisor.shadow import ShadowAdvisor
from gateway.advisor.simulate import (
    Counters,
    SimStore,
    StoreSpec,
    TierSpec,
    replay,
    replayer,
    sampled,
    spec_from_settings,
    tiers_for,
)
from gateway.advisor.trace import (
    Read,
    Trace,
    TraceError,
    TraceStats,
    open_trace,
    read_access_log,
    read_csv_trace,
)

__all__ = [
    "Counters", "Model", "Outcome", "Read", "ShadowAdvisor", "SimStore", "StoreSpec", "TierSpec", "Trace", "TraceError", "TraceStats",
    "evaluate", "miss_ratio_curve", "open_trace", "read_access_log", "read_csv_trace", "recommend", "replay", "replayer",
    "sampled", "spec_from_settings", "sweep", "tiers_for",
]
