"""Named loggers; the access log writes one JSON line per request."""

from __future__ import annotations

import logging

access = logging.getLogger("gateway.access")
s3api = logging.getLogger("gateway.s3api")
engine = logging.getLogger("gateway.engine")
origin = logging.getLogger("gateway.origin")
cluster = logging.getLogger("gateway.cluster")


def configure(level: str = "INFO") -> None:
    """Plain stderr logging for the CLI; the access log lines are already JSON."""
    logging.basicConfig(level=level, format="%(message)s" if level == "INFO" else "%(asctime)s %(name)s %(levelname)s %(message)s")
