"""A worker loads what a streamed answer needs before it serves (s3api.responses.load_streaming):
anyio's asyncio backend, which Starlette's StreamingResponse would import at the first object
answer, on the event loop, while the first cold reads of a fresh node wait."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

_STARTED = textwrap.dedent("""
    import asyncio, sys
    from gateway.app import create_app
    from tests.support import base_settings

    async def main():
        app = create_app(base_settings("http://127.0.0.1:9"))
        before = "anyio._backends._asyncio" in sys.modules
        queue = asyncio.Queue()
        for message in ({"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}):
            queue.put_nowait(message)
        sent = []

        async def send(message):
            sent.append(message["type"])
            if message["type"] == "lifespan.startup.complete":
                print(before, "anyio._backends._asyncio" in sys.modules)

        await app({"type": "lifespan", "asgi": {"version": "3.0"}}, queue.get, send)
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"], sent

    asyncio.run(main())
""")


def test_a_worker_loads_the_streamed_answers_backend_as_it_starts() -> None:
    # In a fresh interpreter: this one imported anyio's backends long ago (pytest's plugins).
    out = subprocess.run([sys.executable, "-c", _STARTED], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "True"], out.stdout
