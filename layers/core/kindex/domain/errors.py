"""Domain errors. Each maps to exactly one HTTP status in `kindex.api.errors`; nothing branches on message text."""


class KindexError(Exception):
    """Base of every error the domain raises on purpose. `code` is the stable machine-readable name."""

    code = "internal_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(KindexError):
    """The request is well-formed but a value is not acceptable (HTTP 422)."""

    code = "invalid_input"


class BadRequest(KindexError):
    """The request cannot be parsed at all, for example malformed JSON (HTTP 400)."""

    code = "bad_request"


class Unauthorized(KindexError):
    """No credentials, or credentials that do not resolve to a live key (HTTP 401)."""

    code = "unauthorized"


class Forbidden(KindexError):
    """The caller is known but may not do this (HTTP 403)."""

    code = "forbidden"


class NotFound(KindexError):
    """The resource does not exist for this tenant; another tenant's resource is also 'not found' (HTTP 404)."""

    code = "not_found"


class Conflict(KindexError):
    """A conditional write lost a race or the resource is in a conflicting state (HTTP 409)."""

    code = "conflict"


class PayloadTooLarge(KindexError):
    """The request body or file exceeds a configured limit (HTTP 413)."""

    code = "payload_too_large"


class DependencyFailed(KindexError):
    """A dependency we rely on (embedding provider, search cluster, metadata store) failed or did not answer within
    the request's time budget; retryable (HTTP 503 `dependency_unavailable`, with Retry-After)."""

    code = "dependency_unavailable"


class IngestError(KindexError):
    """A document cannot be indexed. `kind` names the failure class in `failure_reason` ("{kind}: {message}").

    `retryable` tells the reindex job whether trying again later may help (provider outage: yes; corrupt PDF: no).
    """

    code = "ingest_failed"
    kind = "IngestError"
    retryable = False


class UnsupportedType(IngestError):
    kind = "UnsupportedType"


class CorruptFile(IngestError):
    kind = "CorruptFile"


class EncryptedFile(IngestError):
    kind = "EncryptedFile"


class EmptyText(IngestError):
    kind = "EmptyText"


class LimitExceeded(IngestError):
    kind = "LimitExceeded"


class InvalidSidecar(IngestError):
    """A file's metadata sidecar (`<file>.metadata.json`) is refused: its document fails closed, never served with
    attributes or an access list other than those the sidecar meant."""

    kind = "InvalidSidecar"


class EmbeddingFailed(IngestError):
    kind = "EmbeddingFailed"
    retryable = True


class UnknownModel(IngestError):
    """The collection's embedding model is not one this deployment can run. Retryable: the fix is in the
    deployment or the collection, after which a redrive or the reindex job tries again."""

    kind = "UnknownModel"
    retryable = True


class QuotaExceeded(KindexError):
    """A write would take the tenant past one of its plan's quotas (HTTP 403 `quota_exceeded`, see
    docs/decisions.md): nothing was stored. `details` names the limit, the current use and the plan."""

    code = "quota_exceeded"
    kind = "QuotaExceeded"  # the document's `failure_reason` when its ingest finds the chunk limit passed

    def __init__(self, *, limit: str, used: int, maximum: int, adding: int, plan: str):
        super().__init__(
            f"{limit} quota exceeded: {used:,} of {maximum:,} used on plan {plan!r}, and this write adds {adding:,}"
        )
        self.details = {"limit": limit, "used": used, "max": maximum, "plan": plan}
