"""Query engines as real JVM servers for the engine tests: fetched from Maven Central with `mvn`,
kept in a cache folder that later runs on the same machine reuse, started on loopback ports.

- `maven_artifact()`: one file from Maven Central, by `mvn dependency:get` into a local repository
  in the cache folder (not transitively: hadoop-aws's own dependency tree reaches repositories this
  machine cannot).
- `trino_home()`: Trino's server tarball (`io.trino:trino-server:<TRINO_VERSION>:tar.gz`, 820 MB),
  unpacked once with only the plugins the tests use kept; the tarball is then deleted.
- `TrinoServer`: one node that is coordinator and worker, its catalogs written from dicts, asked over
  Trino's HTTP protocol (POST /v1/statement, then follow `nextUri`).

The cache folder is `$S3GW_ENGINES_CACHE`, by default `~/.cache/s3gw-engines`; the Java for Trino is
`$TRINO_JAVA_HOME`, by default the Temurin 25 JDK (Trino 476 needs Java 24 or newer).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from tests.servers import free_port
from tests.waiting import wait_for

TRINO_VERSION = "476"
TRINO_PLUGINS = ("hive", "iceberg", "tpch")
CACHE = Path(os.environ.get("S3GW_ENGINES_CACHE", "~/.cache/s3gw-engines")).expanduser()
TRINO_JAVA_HOME = Path(os.environ.get("TRINO_JAVA_HOME", "/usr/lib/jvm/temurin-25-jdk-amd64"))
FETCH_TIMEOUT = 1800  # seconds for one mvn download (the Trino tarball took 80 s here)
START_TIMEOUT = 240  # seconds for a server to answer queries (Trino took about 25 s here)
QUERY_TIMEOUT = 300  # seconds for one query; past it the query is cancelled and the test fails


class EngineUnavailable(RuntimeError):
    """What an engine needs cannot be had on this machine (no Java, no mvn, no Maven Central)."""


class QueryError(AssertionError):
    """A query the engine answered with an error: its message and Trino's error name."""

    def __init__(self, message: str, name: str, kind: str, causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"{name} ({kind}): {message}" + "".join(f"\n  caused by {c}" for c in causes))
        self.message = message
        self.name = name
        self.kind = kind
        self.causes = causes  # "type: message" of each cause in the engine's stack, outermost first

    @classmethod
    def from_answer(cls, error: dict[str, Any]) -> QueryError:
        causes: list[str] = []
        info = (error.get("failureInfo") or {}).get("cause")
        while info and len(causes) < 20:
            causes.append(f"{info.get('type')}: {info.get('message')}")
            info = info.get("cause")
        return cls(error.get("message", ""), error.get("errorName", ""), error.get("errorType", ""), tuple(causes))

    def mentions(self, text: str) -> bool:
        return any(text in m for m in (self.message, *self.causes))


def maven_artifact(coordinates: str, *, repo: Path | None = None) -> Path:
    """The file of `group:artifact:version[:type[:classifier]]` in a local Maven repository under the
    cache folder, fetched from Maven Central by `mvn dependency:get` when it is not there yet."""
    group, artifact, version, *rest = coordinates.split(":")
    kind = rest[0] if rest else "jar"
    classifier = rest[1] if len(rest) > 1 else ""
    repo = repo or CACHE / "m2"
    name = f"{artifact}-{version}{'-' + classifier if classifier else ''}.{kind}"
    path = repo / Path(*group.split(".")) / artifact / version / name
    if path.exists():
        return path
    mvn = shutil.which("mvn")
    if mvn is None:
        raise EngineUnavailable("mvn is not installed (apt-get install maven)")
    spec = f"{group}:{artifact}:{version}:{kind}" + (f":{classifier}" if classifier else "")
    result = subprocess.run([mvn, "-q", "-B", "dependency:get", f"-Dartifact={spec}", "-Dtransitive=false",
                             f"-Dmaven.repo.local={repo}"], capture_output=True, text=True, timeout=FETCH_TIMEOUT,
                            check=False)
    if result.returncode != 0 or not path.exists():
        raise EngineUnavailable(f"mvn could not fetch {spec}: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return path


def trino_home(version: str = TRINO_VERSION) -> Path:
    """Trino's server folder in the cache, unpacked from the tarball once (the tarball is removed after)."""
    home = CACHE / f"trino-server-{version}"
    if (home / ".unpacked").exists():
        return home
    tarball = maven_artifact(f"io.trino:trino-server:{version}:tar.gz")
    partial = CACHE / f"trino-server-{version}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    # GNU tar, whole: the plugins share jars as hard links into each other's folders, which a partial
    # unpack (or Python's tarfile, seeking back through the gzip stream for each) handles badly.
    subprocess.run(["tar", "xzf", str(tarball), "-C", str(partial)], check=True, timeout=FETCH_TIMEOUT)
    unpacked = partial / f"trino-server-{version}"
    for plugin in (unpacked / "plugin").iterdir():
        if plugin.name not in TRINO_PLUGINS:
            shutil.rmtree(plugin)
    shutil.rmtree(home, ignore_errors=True)
    unpacked.rename(home)
    shutil.rmtree(partial)
    (home / ".unpacked").write_text(f"{version}\n")
    tarball.unlink()
    return home


def properties(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


class TrinoServer:
    """A single-node Trino (coordinator that also runs the tasks) with the catalogs given, in `workdir`.

    `heap`: the JVM's -Xmx; the machine is shared, so the defaults are small (2 GB heap, 2 task threads)."""

    user = "engines-test"
    header = "X-Trino"

    def __init__(self, home: Path, workdir: Path, catalogs: dict[str, dict[str, str]], *, heap: str = "2G",
                 java_home: Path = TRINO_JAVA_HOME) -> None:
        self.home = home
        self.workdir = workdir
        self.catalogs = catalogs
        self.heap = heap
        self.java_home = java_home
        # Chosen beforehand: it goes into the config file the server reads as it starts (whether it
        # could bind port 0 and say which it got is not known to these tests).
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.output: deque[str] = deque(maxlen=5000)
        self.started_in = 0.0
        self.http = httpx.Client(timeout=60)

    # -- configuration -------------------------------------------------------------------------------

    def jvm_options(self) -> list[str]:
        return [f"-Xmx{self.heap}", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError", "-XX:-OmitStackTraceInFastThrow",
                "-XX:ReservedCodeCacheSize=256M", "-XX:+EnableDynamicAgentLoading", "-Djdk.attach.allowAttachSelf=true",
                "-Dfile.encoding=UTF-8", "--enable-native-access=ALL-UNNAMED", "--sun-misc-unsafe-memory-access=allow"]

    def server_config(self) -> dict[str, str]:
        return {
            "coordinator": "true",
            "node-scheduler.include-coordinator": "true",
            "http-server.http.port": str(self.port),
            "discovery.uri": self.url,
            "node.internal-address": "127.0.0.1",
            "query.max-memory": "1GB",
            "query.max-memory-per-node": "1GB",
            "task.concurrency": "2",
            "task.max-worker-threads": "4",
            "plugin.dir": str(self.home / "plugin"),
            # `CREATE CATALOG` at run time (tests/engines/hms_fixtures.py adds the metastore's catalogs once
            # it runs); the catalog files are then read through the file catalog store, configured in
            # etc/catalog-store.properties (in the working folder).
            "catalog.management": "dynamic",
            "catalog.store": "file",
        }

    def write_config(self) -> None:
        etc = self.workdir / "etc"
        (etc / "catalog").mkdir(parents=True, exist_ok=True)
        (etc / "config.properties").write_text(properties(self.server_config()))
        (etc / "log.properties").write_text("io.trino=INFO\n")
        (etc / "catalog-store.properties").write_text(properties({"catalog.config-dir": str(etc / "catalog")}))
        for name, values in self.catalogs.items():
            (etc / "catalog" / f"{name}.properties").write_text(properties(values))

    def command(self) -> list[str]:
        etc = self.workdir / "etc"
        return [str(self.java_home / "bin" / "java"), *self.jvm_options(), "-cp", str(self.home / "lib" / "*"),
                f"-Dconfig={etc / 'config.properties'}", f"-Dlog.levels-file={etc / 'log.properties'}",
                "-Dnode.environment=test", f"-Dnode.id={uuid.uuid4()}",
                f"-Dnode.data-dir={self.workdir / 'data'}", "io.trino.server.TrinoServer"]

    # -- life ----------------------------------------------------------------------------------------

    def start(self) -> TrinoServer:
        if not (self.java_home / "bin" / "java").exists():
            raise EngineUnavailable(f"no Java at {self.java_home} (Trino {TRINO_VERSION} needs Java 24+)")
        self.write_config()
        began = time.monotonic()
        self.proc = subprocess.Popen(self.command(), cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=dict(os.environ, JAVA_HOME=str(self.java_home)))
        self._reader = threading.Thread(target=self.output.extend, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        proc = self.proc

        def started() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"{type(self).__name__} exited {proc.returncode}")
            return self.ready()

        try:
            wait_for(started, f"{type(self).__name__} serves", within=START_TIMEOUT, interval=0.5)
        except (AssertionError, RuntimeError) as exc:
            self.stop()
            raise RuntimeError(f"{exc}:\n{self.log_tail()}") from None
        self.started_in = time.monotonic() - began
        return self

    def ready(self) -> bool:
        try:
            info = self.http.get(self.url + "/v1/info", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        if info.get("starting", True):
            return False
        # The node must also be known as an active worker, or statements that schedule tasks fail ("nodes is
        # empty", NO_NODES_AVAILABLE): seen once under load, a CTAS right after `SELECT 1` had succeeded.
        try:
            if not self._active():
                return False
            if "tpch" in self.catalogs:  # a query with a table scan, scheduled on the worker
                self.scalar("SELECT count(*) FROM tpch.tiny.nation")
        except QueryError:
            return False
        return True

    def _active(self) -> bool:
        """Whether the node counts itself an active worker (statements that schedule tasks need one)."""
        try:
            rows = self._query("SELECT count(*) FROM system.runtime.nodes WHERE state = 'active'",
                               catalog=None, schema=None, session=None)
        except QueryError:
            return False
        return bool(rows) and rows[0][0] >= 1

    def log_tail(self, lines: int = 200) -> str:
        return "".join(list(self.output)[-lines:])

    def stop(self) -> None:
        """Stop the server (if it still runs) and close the pipe its output came through."""
        self.http.close()
        stop_process(self.proc, self._reader)

    def __enter__(self) -> TrinoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queries -------------------------------------------------------------------------------------

    def query(self, sql: str, *, catalog: str | None = None, schema: str | None = None,
              session: dict[str, str] | None = None) -> list[list[Any]]:
        """The rows of one statement; raises QueryError with the engine's message when it fails.

        A statement refused for want of a worker (the node, on a loaded machine, missed a heartbeat to
        itself) is asked again once the node counts itself active again, up to 3 times: it failed before
        scheduling anything."""
        for attempt in range(3):
            try:
                return self._query(sql, catalog=catalog, schema=schema, session=session)
            except QueryError as exc:
                if attempt == 2 or not (exc.name == "NO_NODES_AVAILABLE" or "nodes is empty" in exc.message):
                    raise
                wait_for(self._active, "the node counts itself an active worker again", within=30, interval=0.5)
        raise AssertionError("not reached")

    def _query(self, sql: str, *, catalog: str | None, schema: str | None,
               session: dict[str, str] | None) -> list[list[Any]]:
        headers = {f"{self.header}-User": self.user, f"{self.header}-Source": "s3gw-engine-tests"}
        if catalog:
            headers[f"{self.header}-Catalog"] = catalog
        if schema:
            headers[f"{self.header}-Schema"] = schema
        if session:
            headers[f"{self.header}-Session"] = ",".join(f"{k}={v}" for k, v in session.items())
        answer = self.http.post(self.url + "/v1/statement", content=sql.encode(), headers=headers).raise_for_status().json()
        rows: list[list[Any]] = []
        deadline = time.monotonic() + QUERY_TIMEOUT
        while True:
            rows.extend(answer.get("data") or ())
            if answer.get("error"):
                raise QueryError.from_answer(answer["error"])
            next_uri = answer.get("nextUri")
            if not next_uri:
                return rows
            if time.monotonic() > deadline:
                self.http.delete(next_uri)
                raise AssertionError(f"query did not finish in {QUERY_TIMEOUT}s: {sql}")
            answer = self._next(next_uri)

    def _next(self, uri: str) -> dict[str, Any]:
        for attempt in range(5):  # 502/503/504 mean "ask again" in the client protocol
            response = self.http.get(uri)
            if response.status_code not in (502, 503, 504):
                return response.raise_for_status().json()  # type: ignore[no-any-return]
            time.sleep(0.05 * (attempt + 1))  # not synchronisation: the protocol's pause before asking again
        return response.raise_for_status().json()  # type: ignore[no-any-return]

    def scalar(self, sql: str, **kwargs: Any) -> Any:
        rows = self.query(sql, **kwargs)
        assert len(rows) == 1 and len(rows[0]) == 1, rows
        return rows[0][0]


def stop_process(proc: subprocess.Popen[str] | None, reader: threading.Thread | None) -> None:
    """Stop a server's process (if it still runs: SIGTERM, then SIGKILL after 60 s), let `reader`
    take the rest of its output, up to the end of the pipe, and close that pipe."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    if reader is not None:
        reader.join(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def sorted_rows(rows: Iterable[list[Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)
