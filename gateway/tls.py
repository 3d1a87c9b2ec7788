"""HTTPS for the listener (the S3 endpoint and the admin API under it), with certificates
that can be replaced while the gateway runs. (Python's server contexts refuse TLS before
1.2 by default; tests/test_tls.py checks that this stays so.)"""

from __future__ import annotations

import signal
import ssl

from gateway import log


def reload_on_sighup(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    """On SIGHUP, load the certificate and key again into the live context: new connections
    get the new certificate, open ones keep theirs. Files that do not load leave the
    previous certificate in place (and say why in the log)."""

    def reload(signum: int, frame: object) -> None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            log.s3api.error("TLS certificate not reloaded, the previous one stays: %s", exc)
            return
        log.s3api.warning("TLS certificate reloaded from %s", cert_file)

    signal.signal(signal.SIGHUP, reload)
