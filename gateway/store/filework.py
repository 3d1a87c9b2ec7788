"""Where a tier's file work runs. On a disk, in the tier's own bounded thread pool: a read or a
write may wait for the device, which the event loop must never do. On tmpfs, at once on the event
loop: the work is a copy to or from memory that waits for no device, and costs less than handing
it to a thread and taking the answer back (a wake-up of each, and the GIL passed twice): a node of
two workers spent 11-12% less CPU on a cold scan so (docs/benchmarks-notes.md)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["FileWork"]


class FileWork:
    """`run(func, *args)`: a future of `func(*args)`, computed in the threads, or (`inline`)
    already done. After `shutdown` a call raises RuntimeError, as a shut-down pool's does."""

    def __init__(self, name: str, threads: int, *, inline: bool) -> None:
        self._closed = False
        self._executor = None if inline else ThreadPoolExecutor(max_workers=threads,
                                                                thread_name_prefix=f"gateway-store-{name}")

    def run(self, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        if self._executor is not None:
            return loop.run_in_executor(self._executor, func, *args)
        if self._closed:
            raise RuntimeError("cannot schedule new file work after shutdown")
        done: asyncio.Future[T] = loop.create_future()
        try:
            done.set_result(func(*args))
        except Exception as exc:  # (the caller's await raises it, as a thread's would)
            done.set_exception(exc)
        return done

    async def shutdown(self) -> None:
        """Take no more work; wait for what the threads have."""
        self._closed = True
        if self._executor is not None:
            shutdown = functools.partial(self._executor.shutdown, wait=True)
            await asyncio.get_running_loop().run_in_executor(None, shutdown)
