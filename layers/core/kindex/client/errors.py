"""Typed exceptions of the client: one class per HTTP status the API answers, each carrying the API's `error` code,
its `message` and the status. Catch `ApiError` for any answer that is not a success, `KindexClientError` for
everything the client raises (the transport's failures included)."""

from __future__ import annotations

from collections.abc import Mapping

from kindex.client.retry import retry_after_seconds


class KindexClientError(Exception):
    """Base of everything the client raises on purpose."""


class ConfigurationError(KindexClientError, ValueError):
    """The client cannot be built: no URL or no API key was given (arguments, KINDEX_URL, KINDEX_API_KEY)."""


class ConnectionFailed(KindexClientError):
    """The deployment could not be reached, or the connection broke before an answer (DNS, refused, timeout)."""


class ApiError(KindexClientError):
    """The API answered with a status that is not a success. `error` is the stable machine-readable code,
    `message` the human one; `headers` are the answer's."""

    status: int = 0

    def __init__(self, status: int, error: str, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(f"{status} {error}: {message}")
        self.status = status
        self.error = error
        self.message = message
        self.headers = dict(headers or {})


class InvalidFilter(KindexClientError, ValueError):
    """An attribute filter the API would refuse (422), caught as it is built (`kindex.client.filters`); the message
    names the place, e.g. `filter.$or[1].year.$gte: $gte compares numbers, not a string`."""


class BadRequest(ApiError):
    """400: the request could not be parsed (malformed JSON, nesting too deep)."""


class Unauthorized(ApiError):
    """401: no key, or a key that is unknown or revoked."""


class Forbidden(ApiError):
    """403: the key's role may not do this, or the end user may not query the collection."""


class QuotaExceeded(Forbidden):
    """403 `quota_exceeded`: the write would take the tenant past its plan's quota; nothing was stored. `limit`
    (documents, chunks, bytes or collections), `used`, `max` and `plan` say which and where it stands."""

    def __init__(self, status: int, error: str, message: str, headers: Mapping[str, str] | None = None, **details):
        super().__init__(status, error, message, headers)
        self.limit: str | None = details.get("limit")
        self.used: int | None = details.get("used")
        self.max: int | None = details.get("max")
        self.plan: str | None = details.get("plan")


class NotFound(ApiError):
    """404: no such collection, document or job for this tenant (another tenant's is also 'not found')."""


class Conflict(ApiError):
    """409: a write raced another one and lost (read and retry), or the resource is in a conflicting state."""


class PayloadTooLarge(ApiError):
    """413: the body or the file is over the deployment's limit."""


class InvalidInput(ApiError):
    """422: a value is not acceptable; the message names the field."""


class Throttled(ApiError):
    """429: too many requests, still refused after the client's retries. `retry_after` is the server's hint in
    seconds when it gave one."""

    @property
    def retry_after(self) -> float | None:
        return retry_after_seconds(self.headers)


class ServerError(ApiError):
    """5xx: the deployment failed; the message says nothing internal."""


class ServiceUnavailable(ServerError):
    """503: the deployment is overloaded or starting, still after the client's retries."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidInput,
    429: Throttled,
    503: ServiceUnavailable,
}


def error_for_status(
    status: int, error: str, message: str, headers: Mapping[str, str] | None = None, body: Mapping | None = None
) -> ApiError:
    """The typed exception of an answer's status (ServerError for any other 5xx, ApiError for the rest; a quota's
    403 is QuotaExceeded, with the details `body` carries)."""
    if status == 403 and error == "quota_exceeded":
        details = {name: (body or {}).get(name) for name in ("limit", "used", "max", "plan")}
        return QuotaExceeded(status, error, message, headers, **details)
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(status, error, message, headers)
