"""A run: one origin GET whose body answers a read of several blocks, cut at block bounds
as it arrives. A cold read costs the origin one request whatever its range, as going to S3
directly does, and all of its bytes come from one answer of the origin, so from one version
of the object even while it is overwritten."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from gateway.bytebudget import ByteBudget
from gateway.engine.flight import SingleFlight
from gateway.errors import S3Error
from gateway.origin import BlockResponse
from gateway.store.blocks import BlockId


@dataclass(frozen=True, slots=True)
class Want:
    """What a GET reads, as known before the object's size: bytes `start` to `end` (None: to
    the end), or the last `suffix` bytes. `Want()` is the whole object, asked without a Range."""

    start: int = 0
    end: int | None = None
    suffix: int | None = None

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end is None and self.suffix is None

    def origin_range(self, block_size: int, granule: int | None = None) -> str | None:
        """The Range the origin is asked for (None: the whole object): the bytes this read wants
        rounded out to `granule` bounds (at most a block; None: whole blocks, for a store that
        keeps no part of a block), so that whole blocks can be kept and the parts of blocks at
        its ends kept as pieces. A suffix asks for at least the last granule."""
        unit = block_size if granule is None else min(granule, block_size)
        if self.suffix is not None:
            return f"bytes=-{max(self.suffix, unit)}"
        first = self.start // unit * unit
        if self.end is None:
            return None if first == 0 else f"bytes={first}-"
        return f"bytes={first}-{(self.end // unit + 1) * unit - 1}"


# Bytes a read of part of a block asks the origin for at least, and what its range is rounded out
# to, where parts of blocks are kept (store.pieces): the overhead of an origin request (~20 ms at
# S3) is worth ~1.6 MB at 80 MB/s, so a granule far below that costs no time, and a Parquet page
# index or ORC stream a few KiB long costs the origin its own bytes, not a 1 MiB block.
GRANULE = 64 * 1024

_UNCLAIMED = 10.0  # seconds a run that nobody claimed goes on (its reader went away meanwhile)
_LAZY_START = 1.0  # seconds a run not `eager` waits for its reader before its pump reads anyway

Keep = Callable[[BlockId, bytes, int, bool], Awaitable[None]]  # (block, bytes, where they start in it, whole)
Stretch = tuple[bytes | memoryview, int, int]  # a run's bytes for its reader, where in the object they start, the buffer held


class RunStopped(Exception):
    """A run stopped before it brought a block someone waited for: they fetch it themselves."""


class Run:
    """Bytes [first, last] of one object version from one origin answer, read in order in
    pieces cut at block bounds (a piece is a whole block, or the part of one the answer holds:
    kept as the block's piece where the store keeps parts of blocks, see `keep`).
    Event loop only.

    A pump reads at most `ahead` pieces ahead of the reader, each held against the read
    buffer until the reader gives it back. A run without a reader (`reader=False`: readahead)
    only keeps the blocks it brings. Each whole block is kept (`keep`) and handed to whoever
    waits for it meanwhile: the first `ahead` blocks' fetches are registered in the fetcher's
    single flight (`flights`) when the run starts, each later one when the pump gets to it,
    so a concurrent read of a block waits for these bytes instead of asking the origin again;
    a registered block the pump cannot read without waiting for its reader is let go
    (RunStopped: those who wait fetch it alone), so nobody waits for a reader's pace. Every
    piece it brings is a miss (`keep` counts it).

    One reader claims the run (`claim`; `claimed`: the reader that starts it). A run closed
    early, or that nobody claimed within _UNCLAIMED seconds, stops after the piece being read.
    The pump starts at once (`eager`), or when the reader first asks for a piece (at most
    _LAZY_START later): the blocks a read takes from the tiers before its run are then read
    before the run's blocks are stored (which could evict them).
    """

    def __init__(self, answer: Awaitable[BlockResponse], blocks: Callable[[int], BlockId], first: int, last: int,
                 size: int, block_size: int, *, flights: SingleFlight[str, bytes], keep: Keep,
                 budget: ByteBudget, ahead: int, reader: bool = True, eager: bool = True,
                 claimed: bool = False) -> None:
        self.first, self.last, self.size = first, last, size
        self._answer = asyncio.ensure_future(answer)  # the origin's answer, its status checked
        self._answer.add_done_callback(_retrieved)
        self._response: BlockResponse | None = None
        self._blocks = blocks
        self._block_size = block_size
        self._flights = flights
        self._keep = keep
        self._budget = budget
        ahead = max(1, ahead)
        self._room = asyncio.Semaphore(ahead)
        self._pieces: asyncio.Queue[tuple[int, bytes | memoryview, int, int, bool] | BaseException] = asyncio.Queue()
        self._told = 0  # bytes of the piece being read handed to the reader as they arrived
        self._reader = reader
        self._claimed = not reader or claimed  # a run without a reader is nobody's to claim
        self._closing = False
        self._reading = False
        self._next = first // block_size
        self._advanced = asyncio.Event()  # the reader took a piece
        self._waiting: dict[int, asyncio.Future[bytes]] = {}  # registered blocks not brought yet
        self._wanted = asyncio.Event()  # the pump may read: the reader asked for a piece, or `eager`
        for index in self.indexes[:ahead]:
            self._register(index)
        if eager or not reader:
            self._wanted.set()
        self.pump = asyncio.ensure_future(self._run())
        self.pump.add_done_callback(self._stopped)
        if not self._claimed:  # a reader that went away before it claimed the run: stopped after a while
            asyncio.get_running_loop().call_later(_UNCLAIMED, self._abandon)

    @property
    def indexes(self) -> range:
        """The blocks this run brings (the first of them perhaps only in part)."""
        return range(self.first // self._block_size, self.last // self._block_size + 1)

    def bounds(self, index: int) -> tuple[int, int]:
        """(first, last) byte of the object that this run's piece of block `index` holds."""
        size = self._block_size
        return max(self.first, index * size), min(self.last, (index + 1) * size - 1)

    async def started(self) -> None:
        """Wait for the origin's answer; raises what it raised (ObjectChanged, an S3Error)."""
        await asyncio.shield(self._answer)

    def claim(self) -> bool:
        """True once, for the one reader that takes the pieces, while the run is open."""
        if self._claimed or self._closing:
            return False
        self._claimed = True
        return True

    async def piece(self, index: int) -> AsyncIterator[Stretch]:
        """The piece of block `index` (the next one, in order) in parts: (bytes, where in the
        object the first is, the read buffer they hold), to be given back once sent. A piece
        read ahead comes whole, holding the buffer; the piece the reader waits for comes as it
        arrives, holding none (so each reader holds at most one piece beyond the buffer, and
        never waits for room that only its own later pieces hold). Raises S3Error if the origin
        failed before its end."""
        if index < self._next:
            raise RuntimeError(f"run read out of order: block {index}, expected {self._next} or later")
        self._wanted.set()
        while True:
            item = await self._pieces.get()
            if isinstance(item, BaseException):
                raise item
            got, data, at, held, last = item
            if last:
                self._next += 1
                self._room.release()
                self._advanced.set()
            if got != index:
                self._budget.give(held)  # a piece before the read's first (a suffix's part of a block)
                continue
            yield data, at, held
            if last:
                return

    async def aclose(self) -> None:
        """Done with the run: the pump stops after the piece it is reading; pieces read but not
        taken are given back."""
        self._closing = True
        if not self._reading:
            self.pump.cancel()
        while not self._pieces.empty():
            item = self._pieces.get_nowait()
            if not isinstance(item, BaseException):
                self._budget.give(item[3])

    def _abandon(self) -> None:
        if not self._claimed and not self._closing:
            asyncio.ensure_future(self.aclose())

    def _register(self, index: int) -> None:
        """Make the fetch of block `index`, if whole in this run, the one others wait for."""
        lo, hi = self.bounds(index)
        whole = lo == index * self._block_size and hi == min((index + 1) * self._block_size, self.size) - 1
        name = self._blocks(index).name
        if whole and index not in self._waiting and self._flights.joined(name) is None:
            waiting: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            self._waiting[index] = waiting
            self._flights.start(name, lambda: waiting)

    async def _run(self) -> None:
        try:
            self._response = await self._answer
        except BaseException as exc:
            if self._answer.done():
                self._pieces.put_nowait(exc)
            else:  # closed before the origin answered: the answer is dropped when it comes
                self._answer.add_done_callback(_drop_answer)
            raise
        try:
            with contextlib.suppress(TimeoutError):  # (others may wait for its blocks: not for long)
                await asyncio.wait_for(self._wanted.wait(), _LAZY_START)
            for index in self.indexes:
                if self._reader:
                    await self._room.acquire()
                if self._closing:
                    return
                lo, hi = self.bounds(index)
                taken = await self._held_for(index, hi - lo + 1)
                if taken is None or self._closing:
                    self._budget.give(taken or 0)
                    return
                self._register(index)
                self._reading = True  # (until the piece is read and kept: not cancelled meanwhile)
                try:
                    data = await self._piece(index, lo, hi, streamed=self._reader and taken == 0)
                    await self._kept(index, data, lo, hi)
                except BaseException as exc:
                    self._budget.give(taken)
                    self._pieces.put_nowait(exc if isinstance(exc, S3Error) else
                                            S3Error("ServiceUnavailable", "The origin failed while sending its response."))
                    raise
                finally:
                    self._reading = False
                if not self._reader or self._closing:  # (closing: aclose drained the pieces already)
                    self._budget.give(taken)
                    if self._closing:
                        return
                    continue
                told = self._told  # the rest of the piece once it is kept: a read answered whole left it kept
                self._pieces.put_nowait((index, memoryview(data)[told:] if told else data, lo + told, taken, True))
        finally:
            await self._response.aclose()  # pooled when read to its end, else closed

    async def _held_for(self, index: int, size: int) -> int | None:
        """The read buffer the piece of block `index` holds until the reader takes it: none for
        the piece the reader wants next (the reader took its share of the buffer for it, as for
        any block it reads); for one read ahead, taken while there is room now, else the pump
        waits for the reader to catch up. None for a run without a reader when there is no
        room: it stops there."""
        while True:
            if self._reader and index == self._next:
                return 0
            held = self._budget.try_take(size)
            if held:
                return held
            if not self._reader:
                return None
            # Those waiting for blocks from here on would wait for this reader: they fetch them alone.
            self._release(index)
            self._advanced.clear()
            await self._advanced.wait()

    async def _piece(self, index: int, lo: int, hi: int, *, streamed: bool) -> bytes:
        """One piece from the answer; `streamed`: the reader waits for it, so each stretch of it
        is handed to the reader as it arrives (all but what arrived last, which the pump hands
        over once the piece is kept: `_told` bytes were handed over)."""
        assert self._response is not None
        self._told = 0
        if not streamed:
            return await self._response.read_exactly(hi - lo + 1)

        def arrived(part: memoryview) -> None:
            if not self._closing:
                self._pieces.put_nowait((index, part, lo + self._told, 0, False))
                self._told += len(part)

        return await self._response.read_exactly(hi - lo + 1, arrived)

    async def _kept(self, index: int, data: bytes, lo: int, hi: int) -> None:
        """A piece brought: a whole block is kept and given to whoever waits for it."""
        waiting = self._waiting.pop(index, None)
        whole = lo == index * self._block_size and hi == min((index + 1) * self._block_size, self.size) - 1
        if whole and waiting is None:
            return  # another fetch of it was under way when the pump got there: that one keeps it
        try:
            await self._keep(self._blocks(index), data, lo - index * self._block_size, whole)
        finally:  # the bytes are good whether or not they could be kept
            if waiting is not None:
                waiting.set_result(data)

    def _release(self, start: int) -> None:
        """Those waiting for blocks `start` on get RunStopped: this run does not bring them now."""
        for index in [i for i in self._waiting if i >= start]:
            waiting = self._waiting.pop(index)
            if not waiting.done():
                waiting.set_exception(RunStopped())

    def _stopped(self, task: asyncio.Future[None]) -> None:
        if not task.cancelled():
            task.exception()  # a failure is the reader's to see (its piece raises), not a log line
        self._release(0)


def _retrieved(task: asyncio.Future[BlockResponse]) -> None:
    if not task.cancelled():
        task.exception()  # the reader sees it (its piece or `started` raises), not the log


def _drop_answer(task: asyncio.Future[BlockResponse]) -> None:
    if not task.cancelled() and task.exception() is None:
        asyncio.ensure_future(task.result().aclose())
