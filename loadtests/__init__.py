"""Locust scenarios and their prepare step, run headless against any S3 endpoint (see README.md)."""
