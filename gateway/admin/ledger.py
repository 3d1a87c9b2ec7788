"""A worker's counts kept in its node's run folder, so that the node's counters outlive it.

The counters of a worker of a node of several (gateway.node.workers) are plain ints in its
memory: a worker that dies takes them along, and the node's sums (gateway.admin.nodewide)
would go back, which Prometheus reads as a reset. So each worker writes what it counted
(the counting families of its metrics, the counts of its stats) to its index's ledger,
`counters-<index>` in the run folder: every PERIOD seconds, before every answer that shows
them, and as it stops. The worker the supervisor starts in its place goes on from that
ledger (`carried`, added to its own counts), and a worker answering for the node counts a
sibling that does not answer with its ledger. Every count the node shows was written first,
and the worker after it starts from at least that: the node's counters never go down while
it runs. A worker killed (SIGKILL, the OOM killer) loses what it counted since its last
write, at most PERIOD seconds of its share of the traffic; one that stops (SIGTERM) loses
nothing. Nothing of this is on the request path: the counters stay ints, read by a task.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.admin.nodewide import Family, add_counts, counting, sum_families

__all__ = ["PERIOD", "Counts", "Ledger", "read"]

log = logging.getLogger("gateway.admin")

# Seconds between a worker's writes of its ledger: what a killed worker's counters can lose.
# A write costs well under a millisecond (a few KiB on tmpfs), and none when nothing changed.
PERIOD = 0.5


@dataclass(frozen=True, slots=True)
class Counts:
    """What one index's workers counted: counting metric families (nodewide.counting) and
    a stats document's COUNTS."""

    families: list[Family] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=lambda: add_counts([]))


class Ledger:
    """The ledger of one worker: `carried`, what the workers before it at its index counted,
    read once as it starts (none before the first); `write`, its counts with those. Event
    loop only; a ledger on tmpfs (the node's run folder) is read and written in microseconds."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.carried = read(path) or Counts()
        self._written = b""
        self._failed = False

    def carry(self, families: list[Family], stats: dict[str, Any]) -> tuple[list[Family], dict[str, Any]]:
        """This worker's metric families and stats COUNTS with what its predecessors counted."""
        return sum_families([families, self.carried.families]), add_counts([stats, self.carried.stats])

    def write(self, families: list[Family], stats: dict[str, Any]) -> None:
        """Keep the counting ones of `families` and `stats` (carried ones included), replacing
        the ledger whole (a worker killed while writing leaves the previous one)."""
        data = orjson.dumps({"families": counting(families), "stats": stats})
        if data == self._written:
            return
        temporary = self.path + ".tmp"
        try:
            with open(temporary, "wb") as fh:
                fh.write(data)
            os.replace(temporary, self.path)
        except OSError as exc:  # a full tmpfs: the counts of a worker killed meanwhile go back
            if not self._failed:
                log.warning("cannot write the counters' ledger %s: %s", self.path, exc)
            self._failed = True
            return
        self._written, self._failed = data, False


def read(path: str) -> Counts | None:
    """The counts in a ledger; None when there is none (or none readable)."""
    try:
        with open(path, "rb") as fh:
            document = orjson.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        log.warning("cannot read the counters' ledger %s: %s", path, exc)
        return None
    return Counts(document["families"], document["stats"])
