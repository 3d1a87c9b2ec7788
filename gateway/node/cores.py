"""How many workers a node runs: `server.workers`, with 0 as one per core this process may use.

Asked by `gateway serve` (gateway.supervisor) and by `gateway advise`, which models the node a
config runs (gateway.advisor.command): the two cannot disagree.
"""

from __future__ import annotations

import math
import os

from gateway.config import ServerSettings

__all__ = ["usable_cores", "worker_count"]


def worker_count(server: ServerSettings) -> int:
    """server.workers, with 0 as one per core this process may use (usable_cores)."""
    return server.workers or usable_cores()


def usable_cores(cgroup: str = "/sys/fs/cgroup") -> int:
    """The cores this process may run on, bounded by its cgroup's CPU quota (a container's CPU
    limit: a pod limited to 2 CPUs on a 64-core host gets 2 workers, not 64)."""
    cores = len(os.sched_getaffinity(0))
    quota = _cpu_quota(cgroup)
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def _cpu_quota(cgroup: str) -> float | None:
    """CPUs the cgroup may use (cgroup v2 cpu.max, else v1 cfs_quota_us / cfs_period_us); None: no limit."""
    try:
        with open(os.path.join(cgroup, "cpu.max")) as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(cgroup, "cpu", "cpu.cfs_quota_us")) as fh:
            quota_us = int(fh.read())
        with open(os.path.join(cgroup, "cpu", "cpu.cfs_period_us")) as fh:
            period_us = int(fh.read())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None
