"""A small HTTP client of a kindex deployment (local `kindex serve` or AWS), for the commands and adapters that talk
to one: export/import, the MCP server and the LangChain retriever. JSON in and out, the API's errors raised as
`RemoteError(status, error, message)`, retries with backoff on 429/502/503/504 honouring Retry-After.

Kept deliberately small so that it can be swapped for the SDK (`kindex.client`) once that lands: the callers use only
`get`, `post`, `put` and their async twins."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

RETRY_STATUSES = frozenset({429, 502, 503, 504})
ATTEMPTS = 4
MAX_RETRY_AFTER = 30.0


class RemoteError(Exception):
    """The deployment answered an error (`status`, its JSON `error` code and `message`), or could not be reached
    (status 0)."""

    def __init__(self, status: int, error: str, message: str):
        super().__init__(f"{status} {error}: {message}" if status else f"{error}: {message}")
        self.status = status
        self.error = error
        self.message = message


class ConfigurationMissing(Exception):
    """No deployment URL or API key was given."""


def segment(value: str) -> str:
    """An id as one percent-encoded path segment."""
    return quote(value, safe="")


def _delay(response: httpx.Response | None, attempt: int) -> float:
    if response is not None:
        header = response.headers.get("retry-after", "")
        try:
            return min(max(float(header), 0.0), MAX_RETRY_AFTER)
        except ValueError:
            pass
    return min(0.5 * 2 ** attempt, MAX_RETRY_AFTER)


def _result(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
            error, message = str(body.get("error", "error")), str(body.get("message", ""))
        except (ValueError, AttributeError):
            error, message = "http_error", response.text[:300]
        raise RemoteError(response.status_code, error, message)
    if not response.content:
        return None
    return response.json()


@dataclass
class RemoteConfig:
    url: str
    key: str
    timeout: float = 60.0

    @classmethod
    def from_args(cls, url: str | None, key: str | None, timeout: float = 60.0) -> "RemoteConfig":
        """Flags first, then KINDEX_URL / KINDEX_API_KEY."""
        url, key = url or os.environ.get("KINDEX_URL"), key or os.environ.get("KINDEX_API_KEY")
        if not url or not key:
            raise ConfigurationMissing("give --url and --key (or KINDEX_URL and KINDEX_API_KEY)")
        return cls(url.rstrip("/"), key, timeout)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", "User-Agent": "kindex-client"}


class Remote:
    """Synchronous calls to one deployment with one key."""

    def __init__(self, config: RemoteConfig, client: httpx.Client | None = None):
        self.config = config
        self.client = client or httpx.Client(timeout=config.timeout, headers=config.headers)

    def request(self, method: str, path: str, *, params: dict | None = None, json: Any = None) -> Any:
        response = None
        for attempt in range(ATTEMPTS):
            try:
                response = self.client.request(method, self.config.url + path, params=params, json=json)
            except httpx.TransportError as error:
                if attempt == ATTEMPTS - 1:
                    raise RemoteError(0, "unreachable", f"{self.config.url}: {error}") from error
                response = None
            else:
                if response.status_code not in RETRY_STATUSES or attempt == ATTEMPTS - 1:
                    return _result(response)
            time.sleep(_delay(response, attempt))
        raise AssertionError("unreachable")  # the loop always returns or raises

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, json=body)

    def close(self) -> None:
        self.client.close()


class AsyncRemote:
    """The same calls, for asyncio callers (the LangChain retriever's `ainvoke`, the MCP server)."""

    def __init__(self, config: RemoteConfig, client: httpx.AsyncClient | None = None):
        self.config = config
        self.client = client or httpx.AsyncClient(timeout=config.timeout, headers=config.headers)

    async def request(self, method: str, path: str, *, params: dict | None = None, json: Any = None) -> Any:
        response = None
        for attempt in range(ATTEMPTS):
            try:
                response = await self.client.request(method, self.config.url + path, params=params, json=json)
            except httpx.TransportError as error:
                if attempt == ATTEMPTS - 1:
                    raise RemoteError(0, "unreachable", f"{self.config.url}: {error}") from error
                response = None
            else:
                if response.status_code not in RETRY_STATUSES or attempt == ATTEMPTS - 1:
                    return _result(response)
            await asyncio.sleep(_delay(response, attempt))
        raise AssertionError("unreachable")

    async def post(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, json=body)

    async def aclose(self) -> None:
        await self.client.aclose()
