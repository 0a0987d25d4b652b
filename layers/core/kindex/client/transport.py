"""What the sync and the async client share around a request: configuration, and turning an answer into a model
or a typed exception. Pure but for the environment read in `ClientConfig.resolve`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel

from kindex.client.calls import ApiCall
from kindex.client.errors import ConfigurationError, error_for_status
from kindex.client.retry import RetryPolicy

USER_AGENT = "kindex-client/0.1"


@dataclass(frozen=True)
class ClientConfig:
    url: str
    key: str
    timeout: float
    retry: RetryPolicy

    @classmethod
    def resolve(cls, url: str | None, key: str | None, timeout: float, retry: RetryPolicy | None) -> "ClientConfig":
        """Arguments first, then KINDEX_URL and KINDEX_API_KEY."""
        url = url or os.environ.get("KINDEX_URL")
        key = key or os.environ.get("KINDEX_API_KEY")
        if not url:
            raise ConfigurationError("no URL: pass url= or set KINDEX_URL")
        if not key:
            raise ConfigurationError("no API key: pass key= or set KINDEX_API_KEY")
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"the URL must start with http:// or https://, not {url[:40]!r}")
        return cls(url.rstrip("/"), key, timeout, retry or RetryPolicy())

    def request(self, call: ApiCall) -> dict[str, Any]:
        """httpx.request arguments of a call (the key goes to the API, never anywhere else)."""
        args: dict[str, Any] = {
            "method": call.method,
            "url": self.url + call.path,
            "headers": {"Authorization": f"Bearer {self.key}", "User-Agent": USER_AGENT, "Accept": "application/json"},
        }
        if call.params:
            args["params"] = call.params
        if call.body is not None:
            args["json"] = call.body
        return args


def raise_for_answer(response: httpx.Response) -> None:
    """The typed exception of an answer that is not a success: the API's `{"error", "message"}` when the body has
    them, else the status and the start of the body (a proxy's or the blob store's own error page)."""
    if response.is_success:
        return
    error, message = f"http_{response.status_code}", response.text[:500]
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        error, message = body["error"], str(body.get("message", ""))
    raise error_for_status(
        response.status_code, error, message, response.headers, body if isinstance(body, dict) else None
    )


def decode(call: ApiCall, response: httpx.Response) -> Any:
    raise_for_answer(response)
    if call.response is None:
        return None
    return call.response.model_validate(known_fields(call.response, response.json()))


def known_fields(model: type[BaseModel], data: Any) -> Any:
    """`data` without the keys `model` does not know, recursively through nested models: a newer server may add
    fields, and models that forbid extra fields (they are the API's input rules too) must still read its answers."""
    if not isinstance(data, dict):
        return data
    kept = {}
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        nested = field.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            kept[name] = known_fields(nested, data[name])
        else:
            kept[name] = data[name]
    return kept
