"""Rights checks: which of the candidate documents may this user see? Pluggable by name; every failure denies."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import lru_cache
from typing import Protocol

from kindex.domain.models import Collection

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 2.0
MAX_TIMEOUT = 10.0
SIGNATURE_HEADER = "X-Kindex-Signature"


class RightsChecker(Protocol):
    """Decides per document. Must fail closed: a document it cannot vouch for is not in the returned set."""

    def allowed(self, user: str | None, collection_id: str, document_ids: Sequence[str]) -> set[str]:
        """The subset of `document_ids` the user may see."""


class PublicRights:
    """Everyone may see every document of the collection (the collection gate still applies)."""

    def allowed(self, user: str | None, collection_id: str, document_ids: Sequence[str]) -> set[str]:
        return set(document_ids)


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """`t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, as Stripe-style webhooks sign."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def build_rights_request(user: str | None, collection_id: str, document_ids: Sequence[str], secret: bytes,
                         now: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"document_ids": list(document_ids), "username": user, "xwiki_username": user,
                       "collection": collection_id}).encode()
    return body, {"Content-Type": "application/json", SIGNATURE_HEADER: sign(secret, body, now)}


def parse_rights_response(status: int, payload: bytes, document_ids: Sequence[str]) -> set[str]:
    """Allowed ids from the endpoint's answer. Anything but a 200 with a JSON object of booleans denies; a
    missing id or a non-boolean value denies that document."""
    if status != 200:
        return set()
    try:
        decisions = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return set()
    if not isinstance(decisions, dict):
        return set()
    return {doc_id for doc_id in document_ids if decisions.get(doc_id) is True}


_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rights-check")


@lru_cache(maxsize=1)
def _http_client():
    """One pooled client for every rights check: a new client per call cost ~30 ms (setup and a new connection)."""
    import httpx

    return httpx.Client(follow_redirects=False, limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))


class ExternalRights:
    """POSTs the candidates to the tenant's endpoint, signed with the tenant's secret. One instance serves one
    query: `timeout` is the total budget of all its calls (over-fetch rounds included), so a slow endpoint can
    never hold a query longer than the timeout."""

    def __init__(self, url: str, secret: bytes | None, timeout: float = DEFAULT_TIMEOUT, clock=time.time):
        self.url = url
        self.secret = secret
        self.timeout = min(max(timeout, 0.05), MAX_TIMEOUT)
        self.clock = clock
        self._deadline: float | None = None

    def allowed(self, user: str | None, collection_id: str, document_ids: Sequence[str]) -> set[str]:
        if not document_ids:
            return set()
        if self.secret is None:
            logger.warning("rights check denied: no signing secret set for the tenant", extra={"collection": collection_id})
            return set()
        if self._deadline is None:
            self._deadline = time.monotonic() + self.timeout
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            logger.warning("rights check denied: the query's time budget is spent", extra={"collection": collection_id})
            return set()
        body, headers = build_rights_request(user, collection_id, document_ids, self.secret, int(self.clock()))
        future = _pool.submit(self._post, body, headers, remaining)
        try:
            status, payload = future.result(timeout=remaining)
        except FutureTimeout:
            logger.warning("rights check timed out", extra={"collection": collection_id, "timeout_s": self.timeout})
            return set()
        except Exception as error:  # any transport failure denies (fail closed)
            logger.warning("rights check failed", extra={"collection": collection_id, "error_type": type(error).__name__})
            return set()
        allowed = parse_rights_response(status, payload, document_ids)
        if status != 200:
            logger.warning("rights check refused", extra={"collection": collection_id, "status": status})
        return allowed

    def _post(self, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        response = _http_client().post(self.url, content=body, headers=headers, timeout=timeout)
        return response.status_code, response.content


RightsFactory = Callable[[Collection, "bytes | None"], RightsChecker]


def _external(collection: Collection, secret: bytes | None) -> RightsChecker:
    config = collection.rights_check_method_configuration
    try:
        timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
    except (TypeError, ValueError):
        timeout = DEFAULT_TIMEOUT
    return ExternalRights(config["url"], secret, timeout)


RIGHTS_METHODS: dict[str, RightsFactory] = {
    "public": lambda collection, secret: PublicRights(),
    "external": _external,
}


def rights_checker_for(collection: Collection, secret: bytes | None) -> RightsChecker:
    """The collection's checker from the registry; an unknown method denies everything."""
    factory = RIGHTS_METHODS.get(collection.rights_check_method)
    if factory is None:
        return _DenyAll()
    return factory(collection, secret)


class _DenyAll:
    def allowed(self, user: str | None, collection_id: str, document_ids: Sequence[str]) -> set[str]:
        return set()


class RightsSecretService:
    """The tenant's HMAC secret for signing rights-check requests: generated here, shown once, kept in the secret store."""

    def __init__(self, secrets):
        self.secrets = secrets

    def rotate(self, tenant: str) -> str:
        import secrets as random

        from kindex.services.query import rights_secret_name

        value = random.token_hex(32)
        self.secrets.put_secret(rights_secret_name(tenant), value.encode())
        return value
