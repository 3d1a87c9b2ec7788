"""An S3-compatible caching gateway."""

__version__ = "0.1.0"
