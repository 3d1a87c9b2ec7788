"""`gateway demo` (what `make demo` runs) as a newcomer meets it: the lines it prints are run as
printed, and the cache they show is seen where it says to look, `gateway stats` and the dashboard
in a real headless chromium (the browser of tests/admin/test_dashboard.py; that test skips, saying
why, without it)."""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.demo import SAMPLES
from tests.admin.test_dashboard import browser, page_shows, text  # noqa: F401 (browser: a fixture)
from tests.servers import free_port
from tests.support import client_env

START_TIMEOUT = 90  # seconds for the demo to print its lines (about 4 here: moto's start is most of it)


@dataclass
class Demo:
    proc: subprocess.Popen[str]
    port: int
    printed: str  # stdout up to the end of the lines to try
    env: dict[str, str]
    reader: threading.Thread  # reads the rest of stdout, to its end

    def line(self, pattern: str) -> str:
        """The printed line matching `pattern`, without its indent."""
        found = [line.strip() for line in self.printed.splitlines() if re.search(pattern, line)]
        assert len(found) == 1, (pattern, self.printed)
        return found[0]

    def run(self, line: str) -> str:
        """A printed command line run by bash, after the printed `export` line, as a user pastes them."""
        script = self.line(r"^\s*export AWS_") + "\n" + line
        result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=self.env, timeout=60)
        assert result.returncode == 0, (line, result.stdout, result.stderr)
        return result.stdout


def start_demo(port: int, **env: str) -> Demo:
    environ = client_env(**env)  # no AWS_* of this machine; GATEWAY_ADMIN_TOKEN only when given
    environ.pop("GATEWAY_ADMIN_TOKEN", None)
    environ.update(env)
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "demo", "--port", str(port)], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True)
    reader.start()
    printed = ""
    deadline = time.monotonic() + START_TIMEOUT
    while "Ctrl-C" not in printed:
        try:
            printed += lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            stop(Demo(proc, port, printed, environ, reader))
            raise AssertionError(f"the demo printed no lines to try within {START_TIMEOUT}s: {printed!r}") from None
    return Demo(proc, port, printed, environ, reader)


def stop(demo: Demo) -> None:
    """SIGTERM, as Ctrl-C would: the demo stops its moto too (killed only if it does not end)."""
    demo.proc.terminate()
    try:
        demo.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        demo.proc.kill()
        demo.proc.wait(timeout=10)
    demo.reader.join(timeout=10)
    if demo.proc.stdout is not None:
        demo.proc.stdout.close()


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    running = start_demo(free_port())  # the demo prints the port it is given, before it binds it
    # The lines are printed once the gateway serves: asked right away, it answers (no retry).
    assert httpx.get(f"http://127.0.0.1:{running.port}/_gateway/healthz", timeout=5).status_code == 200
    yield running
    stop(running)
    # Stopping the demo stops its moto too.
    moto = re.search(r"origin \(moto\): (http://127.0.0.1:\d+)", running.printed)
    assert moto, running.printed
    with pytest.raises(httpx.ConnectError):
        httpx.get(moto.group(1), timeout=2)


def read_twice(demo: Demo) -> None:
    """The printed `aws s3 cp` line, twice, as the line says to."""
    for _ in range(2):
        assert demo.run(demo.line(r"aws s3 cp ")).encode() == SAMPLES["hello.txt"]


def test_the_lines_to_try_work_as_printed_and_stats_shows_the_hit(demo: Demo) -> None:
    listing = demo.run(demo.line(r"aws s3 ls "))
    assert all(key in listing for key in SAMPLES)
    assert re.search(r"^\s*/\S+/aws s3 ls ", demo.printed, re.MULTILINE), "the AWS CLI of this install, by its path"
    read_twice(demo)
    stats = demo.run(demo.line(r"gateway stats "))
    counts = re.search(r"hit ratio \S+  \((\d+) block hits, (\d+) misses\)", stats)
    assert counts and int(counts.group(1)) >= 1, stats
    assert re.search(r"served +memory [1-9]", stats), stats
    assert re.search(r"^\s+\d+  demo/hello.txt$", stats, re.MULTILINE), stats


def test_the_printed_dashboard_shows_the_hit(demo: Demo, browser) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    read_twice(demo)
    url = re.search(r"dashboard: (\S+)", demo.printed)
    assert url and "#token=" in url.group(1), demo.printed
    token = url.group(1).rsplit("#token=", 1)[1]
    stats = httpx.get(f"http://127.0.0.1:{demo.port}/_gateway/stats", headers={"authorization": f"Bearer {token}"},
                      timeout=10).json()
    assert stats["hits"] >= 1 and stats["served_bytes"]["memory"] > 0
    browser.get("about:blank")
    browser.get(url.group(1))
    want = f"{stats['hits']} block hits, {stats['misses']} misses"
    page_shows(browser, want, lambda b: text(b, "#hit-counts").startswith(want))
    assert text(browser, '#served tr[data-source="memory"] td.num') != "0 B"
    hot = [[cell.text for cell in row.find_elements("tag name", "td")]
           for row in browser.find_elements("css selector", "#hot-objects tr")]
    assert ["demo", "hello.txt"] in [row[1:] for row in hot], hot


def test_the_admin_token_given_is_the_one_used() -> None:
    demo = start_demo(free_port(), GATEWAY_ADMIN_TOKEN="newcomer-token")  # (the demo prints the port it is given)
    try:
        assert "/_gateway/dashboard#token=newcomer-token" in demo.printed
        assert "--token newcomer-token" in demo.printed
        base = f"http://127.0.0.1:{demo.port}/_gateway"
        assert httpx.get(f"{base}/stats", headers={"authorization": "Bearer newcomer-token"}, timeout=10).status_code == 200
        assert httpx.get(f"{base}/stats", headers={"authorization": "Bearer another"}, timeout=10).status_code == 401
    finally:
        stop(demo)


def test_a_taken_port_is_one_line_and_no_lines_to_try() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "gateway.cli", "demo", "--port", str(port)],
                                capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"port {port} is taken" in result.stderr and "Try it" not in result.stdout


def test_the_readme_lines_to_try_work(demo: Demo) -> None:
    """README's first screen shows the demo's line to try with the checkout's .venv/bin/aws and port
    8080: run as written there, with this virtualenv and this demo's port."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"`make demo` prints what to try[^\n]*\n\n```sh\n(.*?)\n```", readme, re.DOTALL)
    assert block, "README's first screen has no line to try"
    script = (block.group(1).replace(".venv/bin/", os.path.dirname(sys.executable) + "/")
              .replace("127.0.0.1:8080", f"127.0.0.1:{demo.port}"))
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=demo.env, timeout=60)
    assert result.returncode == 0 and result.stdout.encode() == SAMPLES["hello.txt"], result
