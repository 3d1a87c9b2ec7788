"""The `gateway` command: serve, demo, config check."""

from __future__ import annotations

import json
import sys

import click
import uvicorn

from gateway import log
from gateway.config import ConfigError, Settings, load


def run_server(settings: Settings) -> None:
    from gateway.app import create_app

    config = uvicorn.Config(
        create_app(settings), host=settings.server.host, port=settings.server.port,
        loop="uvloop", http="httptools", lifespan="on", access_log=False, log_level="warning",
        server_header=False, date_header=True,
    )
    uvicorn.Server(config).run()


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
@click.option("--log-level", default="INFO", show_default=True, help="Python log level; access lines are INFO.")
def serve(config_path: str | None, host: str | None, port: int | None, log_level: str) -> None:
    """Serve the S3 endpoint in front of the configured origin."""
    import dataclasses

    settings = _load(config_path)
    server = settings.server
    if host or port:
        server = dataclasses.replace(server, host=host or server.host, port=port if port is not None else server.port)
        settings = dataclasses.replace(settings, server=server)
    log.configure(log_level.upper())
    click.echo(f"gateway listening on http://{server.host}:{server.port} -> origin {settings.origin.endpoint}", err=True)
    run_server(settings)


@main.command()
@click.option("--port", type=int, default=8080, show_default=True, help="Gateway port.")
def demo(port: int) -> None:
    """Start a demo: moto S3 on loopback with sample objects, and the gateway in front of it."""
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


if __name__ == "__main__":
    main()
