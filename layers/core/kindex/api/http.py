"""The one place where domain errors become HTTP responses, plus the checks every API function runs first."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestValidationError,
)

from kindex.api import strict_json
from kindex.domain import errors
from kindex.domain.models import Principal, Role, normalize_id
from kindex.domain.validation import describe

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 10 * 1024 * 1024
RETRY_AFTER_S = 2

STATUS_BY_ERROR: dict[type[errors.KindexError], int] = {
    errors.BadRequest: 400,
    errors.Unauthorized: 401,
    errors.Forbidden: 403,
    # 403, not 429 (a retry cannot succeed until the tenant frees storage or changes plan; clients retry 429) nor 402
    # (no payment is asked for here): docs/decisions.md, 2026-12-01.
    errors.QuotaExceeded: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.PayloadTooLarge: 413,
    errors.InvalidInput: 422,
    errors.IngestError: 422,
    errors.DependencyFailed: 503,
}


def status_for(error: errors.KindexError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 500


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> str:
    """`{"error", "message"}`, with an error's own machine-readable details beside them (a quota's limit, use and
    plan)."""
    return json.dumps({"error": code, "message": message, **(details or {})})


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A complete API Gateway proxy response with our error body (for paths that run before the resolver)."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": error_body(code, message),
        "isBase64Encoded": False,
    }


def precheck(event: dict[str, Any], max_body_bytes: int = MAX_BODY_BYTES) -> dict[str, Any] | None:
    """Reject what the resolver should never see: oversized bodies (413), malformed or too deeply nested JSON (400),
    and JSON values no field accepts: duplicate keys, non-finite or out-of-range numbers, lone surrogates (422,
    naming the field). What passes is safe for the resolver's own `json.loads` too (its depth is bounded)."""
    body = event.get("body")
    if body is None or body == "":
        return None
    raw: bytes
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return error_response(400, "bad_request", "request body is not valid base64")
    else:
        raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if len(raw) > max_body_bytes:
        return error_response(413, "payload_too_large", f"request body exceeds {max_body_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return error_response(400, "bad_request", f"request body is not valid JSON: {error}".splitlines()[0][:300])
    try:
        strict_json.parse(text)
    except strict_json.JsonBodyError as error:
        if error.malformed:
            return error_response(400, "bad_request", str(error)[:300])
        return error_response(422, "invalid_input", str(error)[:300])
    _declare_json(event)
    return None


def _declare_json(event: dict[str, Any]) -> None:
    """Every body of this API is JSON: read it as JSON whatever Content-Type the client declared (curl -d sends
    form encoding), so the resolver's validation never takes a JSON body for a form."""
    for section in ("headers", "multiValueHeaders"):
        headers = event.get(section) or {}
        for name in [n for n in headers if n.lower() == "content-type"]:
            del headers[name]
        headers["content-type"] = "application/json" if section == "headers" else ["application/json"]
        event[section] = headers


def _decoded(value: str) -> str:
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError as error:
        raise errors.InvalidInput(f"path segment {value[:100]!r} is not UTF-8 once percent-decoded") from error


def path_param(value: str) -> str:
    """Path parameters arrive percent-encoded (as API Gateway REST delivers them); ids are compared decoded and in
    NFC form (`caf%C3%A9` and `cafe%CC%81` name one collection). Bytes that are not UTF-8 are refused rather than
    replaced: '%FF' and '%FE' would otherwise be one id."""
    return normalize_id(_decoded(value))


T = TypeVar("T")


def stored_or_normalized(call: Callable[..., T], *segments: str) -> T:
    """`call(*ids)` with the ids in NFC form; when that is NotFound and a segment was sent in another form, again
    with the ids exactly as sent: a record stored before ids were normalized keeps the form it was stored under,
    and stays readable and deletable by it (docs/decisions.md, 2026-12-01)."""
    ids = [path_param(s) for s in segments]
    try:
        return call(*ids)
    except errors.NotFound:
        exact = [_decoded(s) for s in segments]
        if exact == ids:
            raise
        return call(*exact)


def principal(router) -> Principal:
    """The caller, as the authorizer resolved it. No authorizer context means no access (fail closed)."""
    context = (router.current_event.raw_event.get("requestContext") or {}).get("authorizer") or {}
    try:
        return Principal(tenant=context["tenant"], role=context["role"], key_id=context.get("key_id", ""))
    except (KeyError, ValueError) as error:
        raise errors.Unauthorized("missing or invalid API key") from error


# Who may call what: every route calls exactly one of the three `require_*` below (README "API keys" has the table).
# The sets name the roles admitted, so a role missing from a set, or added to `Role` later, is refused (fail closed).
WRITE_ROLES = frozenset({Role.ADMIN})
READ_ROLES = frozenset({Role.ADMIN, Role.READER})
QUERY_ROLES = frozenset({Role.ADMIN, Role.READER, Role.QUERY})
_MAY = {Role.READER: "may only read, query and render citations", Role.QUERY: "may only query and render citations"}


def _require(router, allowed: frozenset[Role]) -> Principal:
    caller = principal(router)
    if caller.role not in allowed:
        raise errors.Forbidden(f"this {caller.role.value} key {_MAY.get(caller.role, 'may not do this')}")
    return caller


def require_admin(router) -> Principal:
    """Writes: collections, documents, uploads, reindex jobs, the tenant's rights-check secret."""
    return _require(router, WRITE_ROLES)


def require_reader(router) -> Principal:
    """Reads that bypass the per-user rights check: collection and document lists, documents with their content,
    chunks, reindex jobs. A query key must not: it is handed to applications that serve many users."""
    return _require(router, READ_ROLES)


def require_query(router) -> Principal:
    """Queries (rights-checked per user) and citation rendering (of the caller's own logged queries)."""
    return _require(router, QUERY_ROLES)


def json_response(status: int, body: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type="application/json", body=body, headers=headers)


def register_error_handlers(resolver: APIGatewayRestResolver) -> None:
    """Map domain errors, validation errors, unknown routes and our own faults to `{"error", "message"}`."""

    @resolver.exception_handler(errors.KindexError)
    def _domain_error(error: errors.KindexError) -> Response:
        status = status_for(error)
        if status >= 500:
            logger.warning("dependency failure", extra={"error_code": error.code, "error_type": type(error).__name__})
        # A dependency that failed or did not answer in time: worth retrying, after a pause.
        headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
        return json_response(status, error_body(error.code, error.message, getattr(error, "details", None)), headers)

    @resolver.exception_handler(RequestValidationError)
    def _validation_error(error: RequestValidationError) -> Response:
        details = list(error.errors())
        if any(detail.get("type") == "json_invalid" for detail in details):
            return json_response(400, error_body("bad_request", "request body is not valid JSON"))
        return json_response(422, error_body("invalid_input", describe(details, skip_prefix=("body", "query", "path"))))

    @resolver.not_found
    def _not_found(_: Exception) -> Response:
        return json_response(404, error_body("not_found", "no such route"))

    @resolver.exception_handler(Exception)
    def _unexpected(error: Exception) -> Response:
        logger.exception("unhandled error", extra={"error_type": type(error).__name__})
        return json_response(500, error_body("internal_error", "internal error"))
