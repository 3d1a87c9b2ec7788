"""store.filework: a tier's file work in its threads, or (tmpfs) at once on the loop; either way
its outcome or its error reaches the await, and after shutdown nothing more is taken."""

from __future__ import annotations

import threading

import pytest

from gateway.store.filework import FileWork


def where(fail: bool = False) -> threading.Thread:
    if fail:
        raise OSError("no space left")
    return threading.current_thread()


@pytest.mark.parametrize("inline", [True, False])
async def test_work_runs_where_it_should_and_its_error_reaches_the_await(inline: bool) -> None:
    work = FileWork("t", 2, inline=inline)
    try:
        done = work.run(where)
        assert done.done() == inline  # inline: finished before anything awaited it
        assert (await done is threading.current_thread()) == inline
        with pytest.raises(OSError, match="no space left"):
            await work.run(where, True)
    finally:
        await work.shutdown()
    with pytest.raises(RuntimeError):
        work.run(where)
