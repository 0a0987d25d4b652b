"""The Python SDK of kindex: `Kindex` (sync) and `AsyncKindex` (asyncio) over httpx, typed with the API's own
pydantic models, raising the typed exceptions of `kindex.client.errors`.

    from kindex.client import F, Kindex
    with Kindex("https://...", "kdx_...") as kx:           # or KINDEX_URL / KINDEX_API_KEY
        kx.put_collection("handbook", title="Staff handbook", query_groups=["staff"])
        kx.upload_file("handbook", "leave", "leave-policy.pdf", attributes={"region": "eu", "year": 2024},
                       access={"groups": ["staff"]})
        answer = kx.query("handbook", "How many days of leave?", user="ann", groups=["staff"],
                          filters=F.eq("region", "eu") & F.gte("year", 2020))

It imports only httpx, pydantic and the standard library (the server's dependencies never load), and installs
alone as the `kindex-client` distribution (clients/python)."""

from kindex.client.aio import AsyncKindex
from kindex.client.errors import (
    ApiError,
    BadRequest,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidFilter,
    InvalidInput,
    KindexClientError,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServerError,
    ServiceUnavailable,
    Throttled,
    Unauthorized,
)
from kindex.client.filters import F, Filter
from kindex.client.retry import RetryPolicy
from kindex.client.sync import Kindex

__all__ = [
    "ApiError",
    "AsyncKindex",
    "BadRequest",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "F",
    "Filter",
    "Forbidden",
    "InvalidFilter",
    "InvalidInput",
    "Kindex",
    "KindexClientError",
    "NotFound",
    "PayloadTooLarge",
    "QuotaExceeded",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "Throttled",
    "Unauthorized",
]
