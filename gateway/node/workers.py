"""The worker processes of one node: which one this is, how many there are, and where
they find each other.

A node is `server.workers` processes on one port (gateway.supervisor). They are one
cache: every block has one owner worker (`owner`, from its object and index), the only one that
fetches it from the origin, writes it into the tiers and evicts it, within its share of
each quota; any worker reads a block another one holds straight from the tier's files.
A worker asks the owner for a block it misses over the owner's own socket
(`socket_path`), with the peer API signed under the node's `secret`.

The supervisor makes a file in the run folder (`serving_path`) once every worker of the node
served: from then on the node is ready (gateway.admin.ready), and a worker that starts asks
its siblings at once; before, a starting worker waits for its siblings to be up.

Imports nothing of the gateway, so every layer may take a WorkerSet.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass

__all__ = ["ENV", "WorkerSet"]

ENV = "GATEWAY_WORKER"  # how the supervisor tells a worker who it is: "<index>/<count>/<secret hex>/<run dir>"


@dataclass(frozen=True, slots=True)
class WorkerSet:
    """This worker among its node's workers. `WorkerSet()` is a node of one process."""

    index: int = 0
    count: int = 1
    run_dir: str = ""  # the node's private folder (on tmpfs): sockets, the journal, ledgers, the memory tier's files
    secret: bytes = b""  # signs the calls between the workers

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"worker {self.index} of {self.count}")
        if self.count > 1 and not (self.run_dir and self.secret):
            raise ValueError("several workers need a run folder and a secret")

    @property
    def alone(self) -> bool:
        return self.count == 1

    @property
    def first(self) -> bool:
        """The worker that runs what a node does once: its fleet membership, the replication
        controller, the SQS consumer."""
        return self.index == 0

    def owner(self, bucket: str, key: str, index: int) -> int:
        """The worker that owns block `index` of the object, whatever its version: a cold
        read, which does not know the version yet, asks the worker that will keep the block."""
        return placement(bucket, key, index) % self.count

    def owns(self, bucket: str, key: str, index: int) -> bool:
        return self.count == 1 or self.owner(bucket, key, index) == self.index

    def socket_path(self, index: int) -> str:
        return os.path.join(self.run_dir, f"worker-{index}.sock")

    def ledger_path(self, index: int) -> str:
        """Where worker `index` keeps its counts, for the worker after it (gateway.admin.ledger)."""
        return os.path.join(self.run_dir, f"counters-{index}")

    @property
    def serving_path(self) -> str:
        """Made by the supervisor once every worker of the node served, kept while the node runs."""
        return os.path.join(self.run_dir, "serving")

    def node_served(self) -> bool:
        """Every worker of the node served once (alone: this one, which asks). A stat on tmpfs."""
        return self.alone or os.path.exists(self.serving_path)

    @property
    def journal_path(self) -> str:
        return os.path.join(self.run_dir, "journal")

    @property
    def memory_path(self) -> str:
        """The memory tier's block files, shared by the workers."""
        return os.path.join(self.run_dir, "memory")

    def siblings(self) -> list[int]:
        return [i for i in range(self.count) if i != self.index]

    def encode(self) -> str:
        return f"{self.index}/{self.count}/{self.secret.hex()}/{self.run_dir}"

    @classmethod
    def decode(cls, value: str) -> WorkerSet:
        index, count, secret, run_dir = value.split("/", 3)
        return cls(int(index), int(count), run_dir, bytes.fromhex(secret))

    @classmethod
    def from_env(cls) -> WorkerSet:
        value = os.environ.get(ENV)
        return cls.decode(value) if value else cls()


@functools.lru_cache(maxsize=4096)  # asked on every hit of a node of several workers: the hot blocks' are kept
def placement(bucket: str, key: str, index: int) -> int:
    """A block's place among the workers of a node (its owner is this modulo their count)."""
    name = f"{bucket}\0{key}\0{index}".encode("utf-8", "surrogateescape")
    return int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "big")
