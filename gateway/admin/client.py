"""A client of a running gateway's admin API, for the CLI: every failure is one clear line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


class AdminError(Exception):
    """The admin API could not be used; the message is one line meant for an operator."""


class AdminClient:
    """`stats`, `evict`, `pin`, `unpin`, `load` against `url` + `path` (admin.path) with `token`."""

    def __init__(self, url: str, token: str, path: str = "/_gateway", timeout: float = 10.0) -> None:
        self.base = url.rstrip("/") + path
        self._headers = {"authorization": f"Bearer {token}"}
        self._timeout = timeout

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/stats")

    def evict(self, bucket: str, prefix: str) -> dict[str, Any]:
        return self._call("POST", "/purge", bucket=bucket, prefix=prefix)

    def pin(self, bucket: str, prefix: str) -> dict[str, Any]:
        return self._call("POST", "/pin", bucket=bucket, prefix=prefix)

    def unpin(self, bucket: str, prefix: str) -> dict[str, Any]:
        return self._call("DELETE", "/pin", bucket=bucket, prefix=prefix)

    def load(self, bucket: str, prefix: str, replicas: int | None = None, *, table: str | None = None,
             snapshot: int | None = None, partitions: tuple[str, ...] = (), footers: bool = False,
             plan: bool = False) -> Iterator[dict[str, Any]]:
        """The progress documents of a load as the gateway sends them; the last has "done"."""
        params: list[tuple[str, str | int | float | bool | None]] = [("bucket", bucket), ("prefix", prefix)]
        params += [("replicas", str(replicas))] if replicas else []
        params += [("table", table)] if table else []
        params += [("snapshot", str(snapshot))] if snapshot is not None else []
        params += [("partition", condition) for condition in partitions]
        params += [("footers", "1")] if footers else []
        params += [("plan", "1")] if plan else []
        try:
            with httpx.stream("POST", self.base + "/load", params=params,
                              headers=self._headers, timeout=httpx.Timeout(self._timeout, read=None)) as response:
                if response.status_code != 200:
                    response.read()
                    self._check(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TimeoutException:
            raise AdminError(f"the gateway at {self.base} did not answer within {self._timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise AdminError(f"cannot reach the gateway at {self.base}: {exc or exc.__class__.__name__}") from None

    def _call(self, method: str, route: str, **params: str) -> dict[str, Any]:
        url = self.base + route
        try:
            response = httpx.request(method, url, params=params, headers=self._headers, timeout=self._timeout)
        except httpx.TimeoutException:
            raise AdminError(f"the gateway at {self.base} did not answer within {self._timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise AdminError(f"cannot reach the gateway at {self.base}: {exc or exc.__class__.__name__}") from None
        return self._check(response)

    def _check(self, response: httpx.Response) -> dict[str, Any]:
        """The answer's JSON document, or AdminError saying in one line what went wrong."""
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise AdminError(f"no admin API at {self.base} (HTTP {response.status_code}; "
                             "is admin.token set on the gateway, and admin.path right?)")
        if response.status_code == 401:
            raise AdminError("the gateway refused the admin token (--token, GATEWAY_ADMIN_TOKEN or admin.token)")
        if response.status_code >= 400:
            raise AdminError(str(document.get("error", f"HTTP {response.status_code}")))
        return document
