"""What a read gives its caller (ObjectRead) and the pieces its stream is made of."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from gateway.engine.runs import Run


class ObjectRead:
    """The bytes of a read, and how it is served: hit-mem | hit-disk | hit-peer | partial | miss.

    A read within one block is `body`, in hand (no stream to run); otherwise `chunks`. Either
    way the read owns what it holds (a share of the read buffer, an origin response) until it
    is closed: `async with read:` or `await read.aclose()`, on every path, sent or not.
    Closing twice is harmless.
    """

    __slots__ = ("source", "chunks", "body", "_close")

    def __init__(self, source: str, *, chunks: AsyncIterator[bytes | memoryview] | None = None,
                 body: bytes | memoryview | None = None,
                 close: Callable[[], Awaitable[None]] | None = None) -> None:
        self.source = source
        self.chunks = chunks
        self.body = body
        self._close = close

    async def aclose(self) -> None:
        close, self._close = self._close, None
        if close is not None:
            await close()

    async def __aenter__(self) -> ObjectRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def within(data: bytes | memoryview, offset: int, start: int, end: int) -> bytes | memoryview:
    """The bytes of a read [start, end] that `data`, the object's bytes from `offset` on, holds."""
    lo, hi = max(start, offset) - offset, min(end, offset + len(data) - 1) - offset + 1
    if (lo, hi) == (0, len(data)):
        return data
    return memoryview(data)[lo:hi] if lo < hi else b""  # (a view: a block's part is not copied)


async def started(chunks: AsyncGenerator[bytes | memoryview, None], runs: list[Run]) -> bytes | memoryview:
    """The first piece of a read's stream. Started here, so that closing the read runs its
    `finally` (which gives the budget back and stops the runs) even if the response never asks
    for a byte: an unstarted generator's is not run."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:  # (never: a read of a non-empty object has a first piece)
        return b""
    except BaseException:
        for started in runs:  # (the stream closed them if it began: closing again is harmless)
            await started.aclose()
        raise


async def prepend(head: bytes | memoryview, rest: AsyncIterator[bytes | memoryview]) -> AsyncIterator[bytes | memoryview]:
    yield head
    async for chunk in rest:
        yield chunk

