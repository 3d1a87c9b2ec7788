"""Hits one worker serves from another worker's blocks, told to the block's owner: rings of
block names in shared memory, one per (reader, owner) pair of a shared tier.

Why: each block of a node of several workers has one owner worker, whose eviction policy
alone decides what its part of a tier keeps (store.shared). The hits the other workers serve
from its files would otherwise never reach that policy, which would then learn from its own
share of the traffic only: 13% more misses with 2 workers than with 1 on a Zipf workload, and
more with more workers. With the notes the owner's policy sees every hit of the node.

A ring is a small file on tmpfs, mapped by both sides; one process writes it (the reader of
the blocks, `push`) and one reads it (their owner, `drain`): single producer, single
consumer, no lock. Its header holds the writer's count of names written (`head`) and of names
dropped (`dropped`), and, on a cache line of its own, the reader's count of names taken
(`tail`); then `SLOTS` slots of 16 bytes, a block's name (32 hex digits) as raw bytes. A push
writes its slot, then publishes `head`; a full ring drops the name and counts it, never
waits. The order of the two stores is kept on x86-64 (total store order); on a weaker memory
model the owner could read a slot just before its bytes land: a stale or torn name, which
names no block it holds (nothing happens) or one it holds (one access too many). A hint, not
a record: the notes may be late, few may be lost, none is ever a read's business.

Cost to the hit: ~0.5 µs (a read of another worker's 4 KiB block from its mapping, on this
project's 2-core machine: 0.86-0.93 µs without the note, 1.29-1.50 µs with it; the owner
spends ~0.4 µs per note it takes; bench/hit_notes.py).

A worker restarted finds its rings where it left them (the run folder outlives it): a writer
goes on from the `head` in its file, a reader from its `tail`.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable

from gateway.store.blocks import BlockId
from gateway.store.policy import EvictionPolicy

__all__ = ["SLOTS", "HitNotes", "HitRing", "NotedPolicy"]

SLOTS = 4096  # names a ring holds between two drains of its owner (64 KiB of slots)
_NAME = 16  # bytes of a block's name
_HEAD, _DROPPED, _TAIL = 0, 8, 64  # the writer's counters, and the reader's on a cache line of its own
_SLOTS_AT = 128
_ROUTES = 16384  # blocks whose ring and raw name are kept (forgotten all at once past this)


def _always(key: str) -> bool:
    return True


def ring_size(slots: int) -> int:
    return _SLOTS_AT + slots * _NAME


class HitRing:
    """One ring file, mapped. Each side uses its own methods only: the writer `push`, the
    reader `drain`; both may read the counters."""

    __slots__ = ("_counts", "_head", "_head_count", "_map", "_tail", "path", "slots")

    def __init__(self, path: str, slots: int = SLOTS) -> None:
        self.path = path
        self.slots = slots
        size = ring_size(slots)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Either side may come first; the file starts zeroed. Its pages are taken now, not at
            # a first write into the mapping (on a full tmpfs that write would be a SIGBUS; this,
            # an OSError, and the tier runs without notes).
            os.posix_fallocate(fd, 0, size)
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        # The counters through ctypes: each read or write of one is a single aligned 8-byte load
        # or store, which the other process never sees half done. (struct.pack_into zeroes its
        # bytes before it writes them: the other side would now and then read a count of 0.)
        self._counts = {at: ctypes.c_uint64.from_buffer(self._map, at) for at in (_HEAD, _DROPPED, _TAIL)}
        self._head_count = self._counts[_HEAD]
        self._head = self._read(_HEAD)  # the writer's own count, kept here too (it alone changes it)
        self._tail = self._read(_TAIL)  # what the writer last saw of the reader's count

    def _read(self, at: int) -> int:
        return self._counts[at].value

    def _write(self, at: int, value: int) -> None:
        self._counts[at].value = value

    @property
    def dropped(self) -> int:
        return self._read(_DROPPED)

    @property
    def written(self) -> int:
        return self._read(_HEAD)

    def push(self, name: bytes) -> bool:
        """Append a 16-byte name; False (counted in `dropped`) when the ring is full. Writer only."""
        head = self._head
        if head - self._tail >= self.slots:
            self._tail = self._read(_TAIL)
            if head - self._tail >= self.slots:
                self._write(_DROPPED, self._read(_DROPPED) + 1)
                return False
        at = _SLOTS_AT + (head % self.slots) * _NAME
        self._map[at:at + _NAME] = name
        self._head = head + 1
        self._head_count.value = head + 1  # published after the slot's bytes
        return True

    def drain(self) -> list[bytes]:
        """Every name written since the last drain, oldest first. Reader only."""
        raw = self.drain_raw()
        return [raw[at:at + _NAME] for at in range(0, len(raw), _NAME)]

    def drain_raw(self) -> bytes:
        """`drain`'s names, one after the other (two slices of the ring at most, not one per name)."""
        head, tail = self._read(_HEAD), self._read(_TAIL)
        if head == tail:
            return b""
        tail = max(tail, head - self.slots)  # a writer never laps its reader; a garbled file is not trusted
        first, count = tail % self.slots, head - tail
        to_end = min(count, self.slots - first)  # the slots up to the ring's end, then from its start
        raw = self._map[_SLOTS_AT + first * _NAME:_SLOTS_AT + (first + to_end) * _NAME]
        if count > to_end:
            raw += self._map[_SLOTS_AT:_SLOTS_AT + (count - to_end) * _NAME]
        self._write(_TAIL, head)
        return raw

    def close(self) -> None:
        self._counts.clear()  # the mapping closes once nothing points into it
        del self._head_count
        self._map.close()

    def __repr__(self) -> str:
        return f"HitRing({self.path!r}, written={self.written}, dropped={self.dropped})"


class HitNotes:
    """The rings of one shared tier for this worker: those it writes (one to each other
    worker, of the hits it serves from that worker's blocks) and those it reads (one from each
    other worker, of the hits served from this worker's blocks). Event loop only.

    `owner` names a block's owner worker. The files live in `folder` (on tmpfs), named
    `<tier>.<reader>-<owner>`; made at `open`, left for the next worker at `close`.
    """

    def __init__(self, folder: str, tier: str, index: int, count: int, owner: Callable[[BlockId], int],
                 slots: int = SLOTS) -> None:
        self.folder, self.tier, self.index, self.count = folder, tier, index, count
        self.owner = owner
        self.slots = slots
        self._out: list[HitRing | None] = []
        self._in: list[HitRing] = []
        # block name -> its owner's ring and raw name: `note`'s, read by a caller that pushes itself
        # (store.shared, on every hit of another worker's block, without `note`'s frame)
        self.routes: dict[str, tuple[HitRing, bytes]] = {}

    def path(self, reader: int, owner: int) -> str:
        return os.path.join(self.folder, f"{self.tier}.{reader}-{owner}")

    def open(self) -> None:
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        me = self.index
        self._out = [None if i == me else HitRing(self.path(me, i), self.slots) for i in range(self.count)]
        self._in = [HitRing(self.path(i, me), self.slots) for i in range(self.count) if i != me]

    def close(self) -> None:
        for ring in (*self._out, *self._in):
            if ring is not None:
                ring.close()
        self._out, self._in, self.routes = [], [], {}

    def note(self, block_id: BlockId) -> bool:
        """A hit of another worker's block, for its owner: a store of 16 bytes, never a wait.
        False when it was lost (its ring full, or the rings closed)."""
        route = self.routes.get(block_id.name)
        if route is None:  # the ring and raw name of a block, kept for its next hits
            ring = self._out[self.owner(block_id)] if self._out else None
            if ring is None:
                return False
            if len(self.routes) >= _ROUTES:
                self.routes.clear()
            route = self.routes[block_id.name] = (ring, bytes.fromhex(block_id.name))
        return route[0].push(route[1])

    def drain(self) -> list[str]:
        """The names of this worker's blocks other workers hit since the last drain."""
        names = b"".join([ring.drain_raw() for ring in self._in]).hex()
        return [names[at:at + 2 * _NAME] for at in range(0, len(names), 2 * _NAME)]

    def __repr__(self) -> str:
        return f"HitNotes({self.tier!r}, worker {self.index} of {self.count})"


class NotedPolicy:
    """An owner's eviction policy that takes the other workers' notes (`drain`) before it
    chooses a victim, so that no hit they served is missing from the choice."""

    __slots__ = ("access", "drain", "policy")

    def __init__(self, policy: EvictionPolicy, drain: Callable[[], object]) -> None:
        self.policy = policy
        self.drain = drain
        # The policy's own: every hit of the owner's blocks takes it, with no frame of this one between.
        self.access: Callable[[str], None] = policy.access

    def insert(self, key: str, size: int) -> None:
        self.policy.insert(key, size)

    def remove(self, key: str) -> None:
        self.policy.remove(key)

    def victim(self, evictable: Callable[[str], bool] = _always) -> str | None:
        self.drain()
        return self.policy.victim(evictable)

    def __contains__(self, key: object) -> bool:
        return key in self.policy

    def __len__(self) -> int:
        return len(self.policy)

    def __repr__(self) -> str:
        return f"NotedPolicy({self.policy!r})"
