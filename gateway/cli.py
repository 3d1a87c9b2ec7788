"""The `gateway` command: serve, demo, config check; stats, evict, pin, unpin (admin API); advise (offline)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from gateway import log
from gateway.admin.client import AdminClient, AdminError
from gateway.admin.summary import ProgressBar, size, summary
from gateway.advisor.command import advise
from gateway.config import ConfigError, Settings, load
from gateway.supervisor import become_supervisor, worker_count

DEFAULT_URL = "http://127.0.0.1:8080"


def _load(path: str | None) -> Settings:
    try:
        return load(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """An S3 caching gateway: a drop-in S3 endpoint in front of a real bucket."""


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file (GATEWAY_* env vars override it).")
@click.option("--host", help="Listen address (server.host).")
@click.option("--port", type=int, help="Listen port (server.port).")
@click.option("--workers", type=click.IntRange(min=0), help="Processes serving the port (server.workers; 0: one per core).")
@click.option("--log-level", default="INFO", show_default=True, help="Python log level; access lines are INFO.")
@click.option("--skip-checks", is_flag=True,
              help="Start even if the origin or Redis does not answer (cached objects are then served "
                   "within metadata.stale_if_error).")
def serve(config_path: str | None, host: str | None, port: int | None, workers: int | None, log_level: str,
          skip_checks: bool) -> None:
    """Serve the S3 endpoint in front of the configured origin. It first checks that the origin
    and (when configured) Redis answer, and exits with a one-line error if not."""
    import asyncio
    import dataclasses

    from gateway.admin.ready import startup_problems

    settings = _load(config_path)
    server = settings.server
    if host or port is not None or workers is not None:
        try:
            server = dataclasses.replace(server, host=host or server.host, port=server.port if port is None else port,
                                         workers=server.workers if workers is None else workers)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        settings = dataclasses.replace(settings, server=server)
    if not skip_checks:
        problems = asyncio.run(startup_problems(settings))
        if problems:
            raise click.ClickException("; ".join(problems) + " (--skip-checks starts anyway)")
    log.configure(log_level.upper())
    scheme = "https" if server.tls_cert_file else "http"

    banner = f"gateway listening on {scheme}://{server.host}:{{port}} -> origin {settings.origin.endpoint}"
    count = worker_count(server)
    if count > 1:
        become_supervisor(settings, count, log_level.upper(), banner)
    from gateway.run import run_server

    try:
        run_server(settings, lambda port: click.echo(banner.replace("{port}", str(port)), err=True))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--port", type=int, default=8080, show_default=True, help="Gateway port.")
def demo(port: int) -> None:
    """Start a demo: moto S3 on loopback with sample objects, and the gateway in front of it with
    its admin API on ($GATEWAY_ADMIN_TOKEN, else a token made for the run). What to try, the
    dashboard's URL and the `gateway stats` command are printed once the gateway serves."""
    from gateway.demo import run_demo

    log.configure("INFO")
    run_demo(port)


@main.group()
def config() -> None:
    """Work with configuration files."""


@config.command("check")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file.")
def config_check(config_path: str | None) -> None:
    """Validate the configuration and print the effective settings, secrets hidden."""
    settings = _load(config_path)
    json.dump(settings.redacted(), sys.stdout, indent=2)
    sys.stdout.write("\n")


# --- commands that talk to a running gateway's admin API --------------------------------------

def admin_options(command: Callable[..., None]) -> Callable[..., None]:
    """--url, --token, --config: where the admin API is and its token."""
    command = click.option("--config", "config_path", type=click.Path(dir_okay=False),
                           help="Take the URL, admin.path and admin.token from this gateway config.")(command)
    command = click.option("--token", envvar="GATEWAY_ADMIN_TOKEN", show_envvar=True,
                           help="The admin token (admin.token).")(command)
    return click.option("--url", help=f"The gateway's URL.  [default: {DEFAULT_URL}]")(command)


def _admin(url: str | None, token: str | None, config_path: str | None) -> AdminClient:
    path = "/_gateway"
    if config_path is not None:
        settings = _load(config_path)
        host = settings.server.host if settings.server.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        url = url or f"http://{host}:{settings.server.port}"
        token = token or settings.admin.token
        path = settings.admin.path
    if not token:
        raise click.ClickException("no admin token: pass --token, set GATEWAY_ADMIN_TOKEN, or use --config")
    return AdminClient(url or DEFAULT_URL, token, path)


def _target(value: str, *, what: str) -> tuple[str, str]:
    """BUCKET[/PREFIX] (an s3:// in front is allowed) as (bucket, prefix)."""
    bucket, _, prefix = value.removeprefix("s3://").partition("/")
    if not bucket:
        raise click.ClickException(f"{what} takes BUCKET[/PREFIX], got {value!r}")
    return bucket, prefix


def _run(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return call()
    except AdminError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@admin_options
@click.option("--json", "as_json", is_flag=True, help="Print the stats document as JSON.")
def stats(url: str | None, token: str | None, config_path: str | None, as_json: bool) -> None:
    """Show a running gateway's hit ratio, tiers against their quotas, hot objects and members."""
    document = _run(_admin(url, token, config_path).stats)
    click.echo(json.dumps(document, indent=2) if as_json else summary(document))


@main.command()
@click.argument("target", metavar="BUCKET[/PREFIX]")
@admin_options
def evict(target: str, url: str | None, token: str | None, config_path: str | None) -> None:
    """Drop the cached blocks, metadata and listings of a bucket or of every key under a prefix."""
    bucket, prefix = _target(target, what="evict")
    answer = _run(lambda: _admin(url, token, config_path).evict(bucket, prefix))
    click.echo(f"evicted {bucket}/{prefix}: {answer['blocks_removed']} blocks removed" + _partial(answer))


@main.command("load")
@click.argument("target", metavar="s3://BUCKET[/PREFIX]")
@click.option("--table", type=click.Choice(["iceberg", "delta"]),
              help="Load the table at the path: the data and delete files of an Iceberg table's current snapshot "
                   "(the path may name its metadata file), or of a Delta table's current version.")
@click.option("--snapshot", type=int, help="With --table: this Iceberg snapshot id, or this Delta version.")
@click.option("--partitions", "partitions", multiple=True, metavar="FILTER",
              help="Only files whose partitions pass: COLUMN=V, !=, <, <=, >, >= or 'COLUMN in (V1,V2)', over "
                   "key=value/ path segments (and the partition values a table records). Repeat to require each.")
@click.option("--footers", is_flag=True,
              help="Only what engines read first: each file's tail, and of Parquet files the footer and page "
                   "indexes, of ORC files the postscript, footer, stripe statistics and stripe footers.")
@click.option("--plan", is_flag=True, help="Print the files, their count and bytes; load nothing.")
@click.option("--replicas", type=click.IntRange(1, 1000), default=None,
              help="In a fleet: keep each block on this many nodes (default: the object's replica count).")
@admin_options
def load_prefix(target: str, table: str | None, snapshot: int | None, partitions: tuple[str, ...], footers: bool,
                plan: bool, replicas: int | None, url: str | None, token: str | None, config_path: str | None) -> None:
    """Load every object under a prefix, or a table's current files, into a running gateway's
    cache (Alluxio's distributedLoad; in a fleet, each block by its owners in parallel), with a
    progress bar; exits 1 if any object could not be loaded."""
    bucket, prefix = _target(target, what="load")
    if snapshot is not None and table is None:
        raise click.ClickException("--snapshot goes with --table")
    client = _admin(url, token, config_path)
    last: dict[str, Any] = {}
    bar = ProgressBar(sys.stderr)
    try:
        for last in client.load(bucket, prefix, replicas, table=table, snapshot=snapshot, partitions=partitions,
                                footers=footers, plan=plan):
            bar.show(last)
    except AdminError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        bar.close()
    if "error" in last:
        raise click.ClickException(f"load of {bucket}/{prefix} stopped: {last['error']}")
    what = f"of the {table} table {bucket}/{prefix}" if table else f"under {bucket}/{prefix}"
    if plan:
        for name, length in last.get("files", []):
            click.echo(f"{'?' if length is None else length:>14}  s3://{name}")
        click.echo(f"plan: {last.get('objects', 0)} files {what}, {size(last.get('bytes', 0))}"
                   + _read_of(last) + "; nothing loaded" + (_FOOTERS_PLAN if footers else ""))
        return
    failed = last.get("failed", [])
    click.echo(f"loaded {last.get('loaded', 0)} of {last.get('objects', 0)} {'files' if table else 'objects'} "
               + f"{what}, {size(last.get('bytes', 0))}" + (_footers_of(last) if footers else "") + _read_of(last)
               + (f"; {len(failed)} failed:" if failed else ""))
    for line in failed:
        click.echo(f"  {line}")
    if failed:
        sys.exit(1)


_FOOTERS_PLAN = ("; with --footers: each file's tail (one origin request a file), then each page index or ORC "
                 "stripe footer before it in a cache block of its own (one origin request each)")


def _footers_of(last: dict[str, Any]) -> str:
    return f" (footers), {last.get('footer_reads', 0)} ranges read before the tails"


def _read_of(last: dict[str, Any]) -> str:
    return f" (found in {last['metadata_files']} metadata files)" if "metadata_files" in last else ""


@main.command()
@click.argument("target", metavar="BUCKET/PREFIX")
@admin_options
def pin(target: str, url: str | None, token: str | None, config_path: str | None) -> None:
    """Keep the cached blocks of keys under BUCKET/PREFIX from being evicted (kept in Redis
    when the gateway has one, so every node and a restarted node apply it)."""
    _set_pin(target, url, token, config_path, pinned=True)


@main.command()
@click.argument("target", metavar="BUCKET/PREFIX")
@admin_options
def unpin(target: str, url: str | None, token: str | None, config_path: str | None) -> None:
    """Undo a pin made with `gateway pin` (pins from the configuration stay)."""
    _set_pin(target, url, token, config_path, pinned=False)


def _set_pin(target: str, url: str | None, token: str | None, config_path: str | None, *, pinned: bool) -> None:
    what = "pin" if pinned else "unpin"
    bucket, prefix = _target(target, what=what)
    client = _admin(url, token, config_path)
    answer = _run(lambda: (client.pin if pinned else client.unpin)(bucket, prefix))
    click.echo(f"{what}ned {bucket}/{prefix}" + ("" if answer["shared"] else " (on this node; Redis did not take it yet)")
               + _partial(answer))


def _partial(answer: dict[str, Any]) -> str:
    """What an action on a node of several workers did not reach (a worker restarting)."""
    workers = answer.get("workers")
    if not workers or not workers.get("missing"):
        return ""
    return f" (not on worker {', '.join(map(str, workers['missing']))}: it did not answer)"


main.add_command(advise)  # offline: replays a trace, talks to no gateway (gateway/advisor/)

if __name__ == "__main__":
    main()
