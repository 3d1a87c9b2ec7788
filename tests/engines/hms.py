"""A Hive Metastore service for the engine tests: Apache Hive's standalone metastore (`HMS_VERSION`) from
Maven Central, embedded Derby, its warehouse on the gateway through Hadoop S3A.

- `hms_home()`: the metastore's binary tarball (`org.apache.hive:hive-standalone-metastore-server:
  <HMS_VERSION>:tar.gz:bin`, 78 MB, with Derby and the JDBC drivers in lib/ but no Hadoop), unpacked once
  into the cache folder of tests/engines/jvm.py; the tarball is then deleted.
- `HADOOP_JARS`: the Hadoop it runs on, the same as Spark's (hadoop-client-api/-runtime 3.5.0, shaded)
  with S3A (tests/engines/support.py S3A_JARS), fetched one by one by `maven_artifact`.
- `SPARK_METASTORE_JARS`: Spark's Hive 4.0.1 client (tests/engines/hms_job.py), also fetched one by one.
- `metastore_site()` / `core_site()`: the two configuration files docs/clients.md shows, and
  `hms_catalog()`: Trino's Hive connector on the metastore (added with `create_catalog()`).
- `HiveMetastore`: one metastore process on a free loopback port, its Derby database copied from a
  template made once by the metastore's schema tool (kept in the cache folder, as the schema tool takes
  a JVM start of its own).

The Java is `$HMS_JAVA_HOME`, by default the Java 17 Spark runs on (the metastore 4.0.1 wants 17).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from xml.sax.saxutils import escape

from tests.engines.jvm import CACHE, FETCH_TIMEOUT, START_TIMEOUT, EngineUnavailable, maven_artifact, stop_process
from tests.engines.support import BUCKET, S3A_JARS, SPARK_JAVA_HOME, s3_catalog
from tests.servers import free_port
from tests.waiting import wait_for

HMS_VERSION = "4.0.1"
HMS_JAVA_HOME = Path(os.environ.get("HMS_JAVA_HOME", str(SPARK_JAVA_HOME)))
HADOOP_JARS = ("org.apache.hadoop:hadoop-client-api:3.5.0", "org.apache.hadoop:hadoop-client-runtime:3.5.0", *S3A_JARS,
               # what the metastore uses that hadoop-client-runtime has only under shaded names
               "commons-io:commons-io:2.16.1", "org.slf4j:slf4j-api:1.7.36",
               "javax.servlet:javax.servlet-api:3.1.0", "commons-collections:commons-collections:3.2.2",
               "org.apache.httpcomponents:httpclient:4.5.13",
               "com.google.code.gson:gson:2.9.0",
               # HDFS's SnapshotException, which the metastore's Warehouse.mkdirs catches
               "org.apache.hadoop:hadoop-hdfs:3.5.0")
# Spark's Hive client for the metastore 4 (`spark.sql.hive.metastore.jars.path`): Spark's built-in one is Hive
# 2.3's, whose `get_table` the metastore 4 no longer serves. hive-exec is Hive's jar with its dependencies in
# it, but for these four; Hadoop comes from Spark's own.
SPARK_METASTORE_JARS = (f"org.apache.hive:hive-exec:{HMS_VERSION}", "commons-io:commons-io:2.16.1",
                        "org.apache.httpcomponents:httpcore:4.4.13", "org.apache.httpcomponents:httpclient:4.5.13",
                        "javax.servlet:javax.servlet-api:3.1.0")
WAREHOUSE = f"s3a://{BUCKET}/warehouse"
MAIN = "org.apache.hadoop.hive.metastore.HiveMetaStore"
SCHEMA_TOOL = "org.apache.hadoop.hive.metastore.tools.schematool.MetastoreSchemaTool"


def hms_home(version: str = HMS_VERSION) -> Path:
    """The metastore's folder in the cache (lib/ and the Derby schema scripts), unpacked once."""
    home = CACHE / f"apache-hive-metastore-{version}-bin"
    if (home / ".unpacked").exists():
        return home
    tarball = maven_artifact(f"org.apache.hive:hive-standalone-metastore-server:{version}:tar.gz:bin")
    partial = CACHE / f"apache-hive-metastore-{version}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    subprocess.run(["tar", "xzf", str(tarball), "-C", str(partial)], check=True, timeout=FETCH_TIMEOUT)
    shutil.rmtree(home, ignore_errors=True)
    (partial / home.name).rename(home)
    shutil.rmtree(partial)
    (home / ".unpacked").write_text(f"{version}\n")
    tarball.unlink()
    return home


def hadoop_classpath() -> list[Path]:
    return [maven_artifact(c) for c in HADOOP_JARS]


def spark_metastore_jars() -> list[str]:
    return [str(maven_artifact(c)) for c in SPARK_METASTORE_JARS]


def core_site(endpoint: str, keys: tuple[str, str], region: str) -> dict[str, str]:
    """The metastore's core-site.xml: S3A at `endpoint` with `keys`, as docs/clients.md shows it."""
    return {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": region,
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": keys[0],
        "fs.s3a.secret.key": keys[1],
    }


def metastore_site(port: int, derby: str, host: str = "127.0.0.1") -> dict[str, str]:
    """The metastore's metastore-site.xml, as docs/clients.md shows it: Thrift on `host`:`port`, Derby at
    `derby`, the warehouse on S3A, and no metadata transformer (it turns the managed tables of clients
    that do not say what they can into external ones, whose folders the metastore leaves alone)."""
    return {
        "metastore.thrift.port": str(port),
        "metastore.thrift.bind.host": host,
        "metastore.warehouse.dir": WAREHOUSE,
        "metastore.warehouse.external.dir": WAREHOUSE,
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={derby}",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "metastore.schema.verification": "true",
        "metastore.metadata.transformer.class": " ",
        "metastore.event.db.notification.api.auth": "false",
        "metastore.metrics.enabled": "false",
        "metastore.compactor.initiator.on": "false",
    }


def hms_catalog(uri: str, endpoint: str, keys: tuple[str, str]) -> dict[str, str]:
    """Trino's Hive connector on the metastore at `uri`, its data through `endpoint` with `keys`."""
    return {
        "connector.name": "hive",
        "hive.metastore.uri": uri,
        "hive.non-managed-table-writes-enabled": "true",
        **s3_catalog(endpoint, keys),
    }


def create_catalog(name: str, values: dict[str, str]) -> str:
    """Trino's `CREATE CATALOG` statement for the catalog file `values`."""
    connector = values["connector.name"]
    props = ", ".join(f"\"{k}\" = '{v}'" for k, v in values.items() if k != "connector.name")
    return f"CREATE CATALOG {name} USING {connector} WITH ({props})"


def xml_configuration(values: dict[str, str]) -> str:
    props = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                    for k, v in values.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n'


LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %-5p %c{1}: %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
logger.datanucleus.name = DataNucleus
logger.datanucleus.level = warn
"""


class HiveMetastore:
    """One standalone metastore in `workdir`, its S3A client at `endpoint` with `keys`; `uri` is what
    Trino's `hive.metastore.uri` and Spark's `hive.metastore.uris` take."""

    def __init__(self, home: Path, workdir: Path, endpoint: str, keys: tuple[str, str], region: str, *,
                 heap: str = "512m", java_home: Path = HMS_JAVA_HOME) -> None:
        self.home, self.workdir, self.java_home, self.heap = home, workdir, java_home, heap
        self.endpoint, self.keys, self.region = endpoint, keys, region
        self.port = free_port()  # written into metastore-site.xml before the server starts
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.output: deque[str] = deque(maxlen=5000)
        self.started_in = 0.0

    def java(self, main: str, *args: str, conf: Path) -> list[str]:
        classpath = [str(conf), str(self.home / "lib" / "*"), *map(str, hadoop_classpath())]
        return [str(self.java_home / "bin" / "java"), f"-Xmx{self.heap}", "-XX:+UseSerialGC",
                f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}", "-Dderby.stream.error.file=/dev/null",
                "-cp", ":".join(classpath), main, *args]

    def write_conf(self, conf: Path, derby: Path) -> None:
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "metastore-site.xml").write_text(xml_configuration(metastore_site(self.port, str(derby))))
        (conf / "core-site.xml").write_text(xml_configuration(core_site(self.endpoint, self.keys, self.region)))
        (conf / "log4j2.properties").write_text(LOG4J2)

    def derby_template(self) -> Path:
        """A Derby database with the metastore's schema, made once by its schema tool (in the cache)."""
        template = CACHE / f"hms-{HMS_VERSION}-derby"
        if (template / ".made").exists():
            return template
        partial = CACHE / f"hms-{HMS_VERSION}-derby.partial"
        shutil.rmtree(partial, ignore_errors=True)
        conf = partial / "conf"
        self.write_conf(conf, partial / "db;create=true")
        done = subprocess.run(self.java(SCHEMA_TOOL, "-dbType", "derby", "-initSchema", conf=conf), cwd=partial,
                              capture_output=True, text=True, timeout=START_TIMEOUT, check=False,
                              env=dict(os.environ, JAVA_HOME=str(self.java_home), METASTORE_HOME=str(self.home)))
        if done.returncode != 0:
            raise RuntimeError(f"the metastore's schema tool exited {done.returncode}:\n{done.stdout[-4000:]}"
                               f"\n{done.stderr[-4000:]}")
        shutil.rmtree(template, ignore_errors=True)
        (partial / "db").rename(template)
        shutil.rmtree(partial)
        (template / ".made").write_text(f"{HMS_VERSION}\n")
        return template

    def start(self) -> HiveMetastore:
        if not (self.java_home / "bin" / "java").exists():
            raise EngineUnavailable(f"no Java at {self.java_home} (the Hive metastore {HMS_VERSION} needs Java 17)")
        derby = self.workdir / "metastore_db"
        shutil.copytree(self.derby_template(), derby)
        conf = self.workdir / "conf"
        self.write_conf(conf, derby)
        began = time.monotonic()
        self.proc = subprocess.Popen(self.java(MAIN, conf=conf), cwd=self.workdir, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, JAVA_HOME=str(self.java_home), HADOOP_CONF_DIR=str(conf)))
        self._reader = threading.Thread(target=self.output.extend, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        proc = self.proc

        def serving() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the metastore exited {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        try:
            wait_for(serving, "the metastore serves Thrift", within=START_TIMEOUT, interval=0.2)
        except (AssertionError, RuntimeError) as exc:
            self.stop()
            raise RuntimeError(f"{exc}:\n{self.log_tail()}") from None
        self.started_in = time.monotonic() - began
        return self

    def log_tail(self, lines: int = 200) -> str:
        return "".join(list(self.output)[-lines:])

    def stop(self) -> None:
        stop_process(self.proc, self._reader)

    def __enter__(self) -> HiveMetastore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
