"""A node of several worker processes on one port (`server.workers` > 1).

The supervisor binds the node's TCP socket once and starts the workers (`python -m
gateway.run`), each with the socket, its WorkerSet (in GATEWAY_WORKER) and a pipe it
reports on: "ready" once it serves, or the configuration error it stopped on. Once every
worker reported "ready", the node says it listens and makes the file that tells its workers
the node serves (WorkerSet.serving_path: their readyz, gateway.admin.ready). The kernel
spreads the connections among the workers that accept on the shared socket. The node's
run folder (the workers' unix sockets, the journal, their counters' ledgers, the memory
tier's files) is made on tmpfs, mode 0700, and removed at exit.

It restarts a worker that exits (same index), while the others go on serving: at once when
it had run EARLY seconds, else after a pause that doubles with each such death in a row (up
to MAX_PAUSE), whether it had served (killed, crashed on a request) or never came up (a
crash loop, logged as an error each time). The node gives up, stopping every worker, only
while none serves: when every worker failed to come up RESTART_LIMIT times in a row, or one
reports a configuration error; a node that cannot start fails with the reason rather than
looping. (gunicorn halts on a worker that cannot boot even while others serve; nginx's
master keeps serving with the workers it has, which is what a node that serves does here.)

SIGTERM and SIGINT stop the node: SIGTERM to every worker, which drains within
server.shutdown_timeout, SIGKILL to any still running KILL_MARGIN later. SIGHUP goes on to
every worker (each reloads its TLS files). A worker whose supervisor is gone (its stdin at
EOF) stops the same way.

This process serves nothing itself: it imports neither the app nor an event loop. The
`gateway serve` command becomes it (become_supervisor: an exec, same pid) once its checks
passed, so the node does not keep the CLI's and the checks' modules (some 35 MB) for its life.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import pickle
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

from gateway import log
from gateway.config import ConfigError, Settings
from gateway.node.cores import usable_cores, worker_count
from gateway.node.listening import listen
from gateway.node.workers import ENV, WorkerSet

__all__ = ["NodeFailed", "become_supervisor", "supervise", "usable_cores", "worker_count"]

logger = logging.getLogger("gateway.server")

RESTART_LIMIT = 3  # failures in a row to come up, of every worker while none serves, that stop the node
EARLY = 5.0  # seconds: a worker that exits sooner after starting is restarted after a pause
FIRST_PAUSE = 0.5  # seconds before restarting a worker that died early once; doubled each time in a row
MAX_PAUSE = 30.0  # seconds: the longest pause before a restart
KILL_MARGIN = 5.0  # seconds past server.shutdown_timeout before a stopping worker is killed
TICK = 0.1  # seconds between looks at a worker that closed its report pipe, until it exited; while stopping
# Seconds between looks at the workers at most when nothing is due: a report, an exit (its pipe closes)
# and a signal (the wakeup pipe) wake the supervisor; an idle node's supervisor wakes once a second.
IDLE_LOOK = 1.0


class NodeFailed(Exception):
    """The node cannot run: no worker serves, and every one keeps dying as it starts."""


def supervise(settings: Settings, count: int, log_level: str, listening: Callable[[int], None]) -> None:
    """Run a node of `count` workers until SIGTERM or SIGINT; `listening(port)` once every
    worker serves. Raises ConfigError or NodeFailed (after stopping every worker) when the
    node cannot start or keeps failing."""
    base = settings.server.run_folder or _tmpfs()
    if not os.path.isdir(base):
        raise ConfigError(f"server.run_folder: not a folder: {base}")
    _check_room(base, settings.cache.memory_quota)
    with listen(settings.server) as sock:
        port = sock.getsockname()[1]  # server.port 0: the one the system gave, which the workers are told
        settings = dataclasses.replace(settings, server=dataclasses.replace(settings.server, port=port))
        with _run_folder(base, port) as run_dir:
            node = _Node(settings, count, log_level, sock, run_dir)
            with _signals() as (received, wakeup):
                try:
                    node.serve(received, wakeup, lambda: listening(port))
                finally:
                    node.stop(received)


def become_supervisor(settings: Settings, count: int, log_level: str, banner: str) -> NoReturn:
    """Replace this process (same pid, same standard streams) with a fresh interpreter that runs
    only `supervise` (main below). `banner` is printed to stderr once the node serves, "{port}"
    in it replaced by the port. Errors are printed as the CLI prints them: "Error: ..." and exit code 1."""
    # Handed over in a file of no name (in memory where the system has memfd_create) whose
    # descriptor the new process inherits: the settings carry secrets, which the environment
    # would show in /proc/<pid>/environ for the node's life.
    handoff = os.fdopen(os.memfd_create("gateway-node", 0), "w+b") if hasattr(os, "memfd_create") \
        else tempfile.TemporaryFile()
    handoff.write(pickle.dumps((settings, count, log_level, banner)))
    handoff.flush()
    handoff.seek(0)
    os.set_inheritable(handoff.fileno(), True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "gateway.supervisor", str(handoff.fileno())])


def main() -> None:
    """`python -m gateway.supervisor FD`: the node that become_supervisor handed over in FD."""
    with open(int(sys.argv[1]), "rb") as handoff:
        settings, count, log_level, banner = pickle.load(handoff)
    log.configure(log_level)
    try:
        supervise(settings, count, log_level,
                  lambda port: print(banner.replace("{port}", str(port)), file=sys.stderr, flush=True))
    except (ConfigError, NodeFailed) as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


def _tmpfs() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) \
        else tempfile.gettempdir()


def _check_room(base: str, memory_quota: int) -> None:
    """The memory tier's blocks are files in the run folder: they need the room up front,
    or the node fails later on a full tmpfs (Docker gives /dev/shm 64 MiB)."""
    stat = os.statvfs(base)
    free = stat.f_bavail * stat.f_frsize
    if memory_quota > free:
        raise ConfigError(
            f"cache.memory_quota is {memory_quota} bytes but {base} has {free} free: with server.workers > 1 "
            "the memory tier's blocks are files there. Give it more room (docker run --shm-size; Kubernetes: "
            "an emptyDir of medium Memory on /dev/shm) or lower cache.memory_quota")


@contextlib.contextmanager
def _run_folder(base: str, port: int) -> Iterator[str]:
    _remove_stale(base)
    path = tempfile.mkdtemp(prefix=f"s3gw-{port}-{os.getpid()}-", dir=base)  # mode 0700
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove_stale(base: str) -> None:
    """Remove the run folders of this user's nodes that were killed (SIGKILL, the OOM killer)
    before removing theirs: the memory tier's files in them hold RAM. A folder is stale when
    its supervisor's pid is gone and none of its workers' sockets answers."""
    for name in os.listdir(base):
        parts = name.split("-")
        path = os.path.join(base, name)
        if len(parts) != 4 or parts[0] != "s3gw" or not parts[2].isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(path).st_uid != os.getuid() or _alive(int(parts[2])) or _answers(path):
                continue
            logger.warning("removing %s, the run folder of a node that did not remove it", path)
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's
        pass
    return True


def _answers(folder: str) -> bool:
    for name in os.listdir(folder):
        if name.endswith(".sock"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(os.path.join(folder, name))
                except OSError:
                    continue
                return True
    return False


@contextlib.contextmanager
def _signals() -> Iterator[tuple[list[int], int]]:
    """The signals received, in order, taken by the supervisor's loop; and the read end of the pipe
    a byte is written to as each arrives (signal.set_wakeup_fd), which wakes that loop."""
    received: list[int] = []
    handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    previous_fd = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    previous = {sig: signal.signal(sig, lambda sig, frame: received.append(sig)) for sig in handled}
    try:
        yield received, wake_read
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(wake_read)
        os.close(wake_write)


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    report: int  # the read end of the pipe it reports on
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    late: bool = False  # killed for not serving within server.worker_start_timeout
    error: str = ""
    unread: bytes = b""
    closed: bool = False  # its report pipe is at its end: it exits (or exited)

    def __post_init__(self) -> None:
        os.set_blocking(self.report, False)

    def read_report(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.report, 4096):
                self.unread += chunk
            self.closed = True  # (read b"": the worker closed its end)
        *lines, self.unread = self.unread.split(b"\n")
        for line in lines:
            word, _, rest = line.decode(errors="replace").partition(" ")
            self.ready = self.ready or word == "ready"
            self.error = rest if word == "error" else self.error

    def close(self) -> None:
        os.close(self.report)
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # the settings it did not read: the file closes all the same
                self.proc.stdin.close()


def _describe(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


class _Node:
    """The workers of the node and what happens to them; runs in the supervisor's thread only."""

    def __init__(self, settings: Settings, count: int, log_level: str, sock: socket.socket, run_dir: str) -> None:
        self.settings = settings
        self.count = count
        self.payload = pickle.dumps((settings, log_level))
        self.sock = sock
        self.run_dir = run_dir
        self.secret = os.urandom(32)
        self.workers: dict[int, _Worker] = {}
        self.early = [0] * count  # deaths in a row soon after starting (EARLY), per index: the pause grows
        self.unstarted = [0] * count  # failures in a row to come up (never reported "ready"), per index
        self.due: dict[int, float] = {}  # index -> when to start it again
        self.selector = selectors.DefaultSelector()

    def serve(self, received: list[int], wakeup: int, listening: Callable[[], None]) -> None:
        for index in range(self.count):
            self._start(index)
        self.selector.register(wakeup, selectors.EVENT_READ, None)
        announced = False
        while True:
            self._read_reports(self._next_look(time.monotonic()))
            if self._stop_asked(received):
                return
            self._look_after(time.monotonic())
            if not announced and len(self.workers) == self.count and all(w.ready for w in self.workers.values()):
                self._mark_served()
                listening()
                announced = True

    def _mark_served(self) -> None:
        """Every worker serves: the node is ready from now on (its workers' readyz, which read
        this file; a worker restarted later does not change it: see gateway.admin.ready)."""
        path = WorkerSet(0, self.count, self.run_dir, self.secret).serving_path
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600))

    def _stop_asked(self, received: list[int]) -> bool:
        while received:
            sig = received.pop(0)
            if sig != signal.SIGHUP:
                logger.info("%s: stopping the node's %d workers", signal.Signals(sig).name, self.count)
                return True
            self._send(signal.SIGHUP, ready_only=True)
        return False

    def _look_after(self, now: float) -> None:
        """Kill a worker that does not serve in time, note those that exited, start those due."""
        for worker in self.workers.values():
            if not (worker.ready or worker.late) and now - worker.started > self.settings.server.worker_start_timeout:
                logger.warning("worker %d (pid %d) does not serve %.0fs after starting: killed", worker.index,
                               worker.proc.pid, self.settings.server.worker_start_timeout)
                worker.late = True
                worker.proc.kill()
        for worker in [w for w in self.workers.values() if w.proc.poll() is not None]:
            self._exited(worker)
        for index in [i for i, at in self.due.items() if at <= now]:
            del self.due[index]
            self._start(index)

    def _start(self, index: int) -> None:
        read, write = os.pipe()
        env = dict(os.environ, **{ENV: WorkerSet(index, self.count, self.run_dir, self.secret).encode()})
        try:
            proc = subprocess.Popen([sys.executable, "-m", "gateway.run", str(self.sock.fileno()), str(write)],
                                    stdin=subprocess.PIPE, env=env, pass_fds=(self.sock.fileno(), write))
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        worker = self.workers[index] = _Worker(index, proc, read)
        self.selector.register(read, selectors.EVENT_READ, worker)
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # it died at once: the loop sees it exit
            proc.stdin.write(self.payload)  # then left open: the worker stops when it reads EOF
            proc.stdin.flush()
        logger.info("worker %d started (pid %d)", index, proc.pid)

    def _next_look(self, now: float) -> float:
        """Seconds until the loop must look at the workers though nothing woke it: a worker's start
        timeout, a restart due; TICK while a worker that closed its pipe has not exited yet."""
        if any(worker.closed for worker in self.workers.values()):
            return TICK
        limit = self.settings.server.worker_start_timeout
        due = [IDLE_LOOK, *(at - now for at in self.due.values()),
               *(w.started + limit - now for w in self.workers.values() if not (w.ready or w.late))]
        return max(0.0, min(due))

    def _read_reports(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            worker: _Worker | None = key.data
            if worker is None:  # a signal's byte: the handler appended it to `received`
                with contextlib.suppress(BlockingIOError):
                    while os.read(key.fd, 512):
                        pass
                continue
            was_ready = worker.ready
            worker.read_report()
            if worker.closed:  # (its pipe stays readable at its end: looked at every TICK until it exited)
                with contextlib.suppress(KeyError):
                    self.selector.unregister(worker.report)
            if worker.ready and not was_ready:
                self.unstarted[worker.index] = 0
                logger.info("worker %d serves (pid %d)", worker.index, worker.proc.pid)

    def _exited(self, worker: _Worker) -> None:
        worker.read_report()
        self._forget(worker)
        index, code = worker.index, worker.proc.returncode
        early = not worker.ready or time.monotonic() - worker.started < EARLY
        self.early[index] = self.early[index] + 1 if early else 0
        self.unstarted[index] = 0 if worker.ready else self.unstarted[index] + 1
        serving = any(w.ready for w in self.workers.values())
        if worker.error and not serving:
            raise ConfigError(worker.error)
        if not serving and all(failed >= RESTART_LIMIT for failed in self.unstarted):
            raise NodeFailed(f"worker {index} exited ({_describe(code)}) right after starting, "
                             f"{self.unstarted[index]} times in a row, and no worker serves; its log above says why")
        pause = min(MAX_PAUSE, FIRST_PAUSE * 2 ** min(self.early[index] - 1, 16)) if early else 0.0
        self.due[index] = time.monotonic() + pause
        if worker.ready:
            logger.warning("worker %d (pid %d) exited (%s); starting it again in %.1fs", index, worker.proc.pid,
                           _describe(code), pause)
            return
        # A crash loop: the node goes on with the workers that serve, and tries again, ever less often.
        logger.error("worker %d (pid %d) exited (%s) before it served, %d times in a row; starting it again in %.1fs",
                     index, worker.proc.pid, worker.error or _describe(code), self.unstarted[index], pause)

    def _forget(self, worker: _Worker) -> None:
        del self.workers[worker.index]
        with contextlib.suppress(KeyError):  # (unregistered once its pipe closed)
            self.selector.unregister(worker.report)
        worker.close()

    def _send(self, sig: int, *, ready_only: bool = False) -> None:
        for worker in self.workers.values():
            if worker.proc.poll() is None and (worker.ready or not ready_only):
                worker.proc.send_signal(sig)

    def stop(self, received: list[int]) -> None:
        """SIGTERM to every worker, then SIGKILL to those still running after their drain
        time; another SIGINT meanwhile goes on (uvicorn then stops without waiting)."""
        self.due.clear()
        self._send(signal.SIGTERM)
        # No worker will be started again: once the workers close theirs, new connections
        # are refused (while this copy stayed open, the kernel kept accepting them unanswered).
        self.sock.close()
        deadline = time.monotonic() + self.settings.server.shutdown_timeout + KILL_MARGIN
        while any(w.proc.poll() is None for w in self.workers.values()) and time.monotonic() < deadline:
            while received:
                if (sig := received.pop(0)) == signal.SIGINT:
                    self._send(sig)
            time.sleep(TICK)
        for worker in list(self.workers.values()):
            if worker.proc.poll() is None:
                logger.warning("worker %d (pid %d) did not stop within %.0fs: killed", worker.index, worker.proc.pid,
                               self.settings.server.shutdown_timeout + KILL_MARGIN)
                worker.proc.kill()
            code = worker.proc.wait()  # uvicorn ends by raising the signal it stopped on again
            logger.info("worker %d (pid %d) stopped%s", worker.index, worker.proc.pid,
                        "" if code in (0, -signal.SIGTERM, -signal.SIGINT) else f" ({_describe(code)})")
            self._forget(worker)
        self.selector.close()


if __name__ == "__main__":
    main()
