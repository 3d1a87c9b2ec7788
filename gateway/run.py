"""Running a node: the gateway's app on uvicorn, with the transport's limits and TLS."""

from __future__ import annotations

import ssl

import uvicorn

from gateway.app import create_app
from gateway.config import ConfigError, Settings
from gateway.httpserver import raise_open_files_limit, uvicorn_options
from gateway.s3api.responses import error_page
from gateway.tls import reload_on_sighup


def run_server(settings: Settings) -> None:
    """Serve until stopped (SIGINT/SIGTERM drain within server.shutdown_timeout; SIGHUP reloads
    TLS files). Raises ConfigError when the TLS files do not load."""
    server = settings.server
    tls = {"ssl_certfile": server.tls_cert_file, "ssl_keyfile": server.tls_key_file} if server.tls_cert_file else {}
    raise_open_files_limit(server.max_connections)
    app = create_app(settings)
    config = uvicorn.Config(
        app, host=server.host, port=server.port,
        loop="uvloop", lifespan="on", access_log=False, log_level="warning",
        server_header=False, date_header=True, **uvicorn_options(server, error_page, app.hit), **tls,  # type: ignore[arg-type]
    )
    if tls:
        try:
            config.load()  # builds the SSL context, which the server then uses as it is
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"server.tls_cert_file / tls_key_file do not load: {exc}") from None
        assert config.ssl is not None
        reload_on_sighup(config.ssl, server.tls_cert_file, server.tls_key_file)
    uvicorn.Server(config).run()
