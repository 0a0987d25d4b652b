"""Rights checks: which of the candidate documents may this user see? Every failure denies, and says so.

A collection's `rights_check_method` is `public` (everyone who passes the collection gate) or `external` (a signed
POST to the tenant's endpoint). External checks are bounded so that no tenant can slow down or starve another:

- one time budget per query: it starts at the query's first rights call and each collection's calls, over-fetch
  rounds included, end by budget start + that collection's `timeout` (so a query waits at most its longest timeout,
  however many collections it names); the calls of one round run in parallel;
- one absolute deadline per call, enforced on every socket operation (see `kindex.adapters.http_rights`), answers
  capped at 1 MiB;
- at most `per_tenant_calls` calls in flight per tenant in this process, on threads of the query that asked, never
  on a pool shared between tenants.

A collection whose check fails is denied for the rest of the query and gets one warning in the response. A failed
call returns at its deadline, whatever made it fail: an answer that came back sooner for a closed port than for a
filtered one would turn the rights check into a port scanner; the cause goes to the operator's log only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from kindex.app import cpu_slots
from kindex.domain import budget
from kindex.domain.errors import Conflict, InvalidInput
from kindex.domain.metering import RIGHTS_CHECK_CALLS
from kindex.domain.models import Collection
from kindex.domain.ports import MetricsRecorder, RightsEndpoint, SecretStore
from kindex.domain.query import QueryWarning
from kindex.domain.rights_policy import RightsCallFailed, RightsUrlPolicy, UrlRefused

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 2.0
MIN_TIMEOUT = 0.05
MAX_TIMEOUT = 10.0
PER_TENANT_CALLS = 8
SIGNATURE_HEADER = "X-Kindex-Signature"
SECRET_ROUTE = "POST /v1/rights-check-secret"
# How long a query waits past a call's deadline for its thread to report (the call itself ends at the deadline).
JOIN_GRACE = 0.05

SECRET_MISSING = "rights_check_secret_missing"
CHECK_FAILED = "rights_check_failed"
SECRET_MISSING_MESSAGE = (
    f"this collection's external rights check needs the tenant's signing secret, which is not "
    f"set: create it with {SECRET_ROUTE}. Its results are denied."
)
CHECK_FAILED_MESSAGE = (
    "this collection's rights check gave no valid answer within its time budget (the endpoint is "
    "unreachable or refused by this deployment's address policy, too slow, answered an error, or "
    "sent an invalid answer or one over 1 MiB). Its results are denied."
)


def rights_secret_name(tenant: str) -> str:
    return f"tenants/{tenant}/rights-check-signing"


def sign(secret: bytes, body: bytes, timestamp: int) -> str:
    """`t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, as Stripe-style webhooks sign."""
    digest = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def build_rights_request(
    user: str | None, collection_id: str, document_ids: Sequence[str], secret: bytes, now: int
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"document_ids": list(document_ids), "username": user, "xwiki_username": user, "collection": collection_id}
    ).encode()
    return body, {"Content-Type": "application/json", SIGNATURE_HEADER: sign(secret, body, now)}


def parse_rights_response(status: int, payload: bytes, document_ids: Sequence[str]) -> set[str] | None:
    """Allowed ids from the endpoint's answer, or None when it is no valid answer: not a 200 with a JSON object, or
    a value for a requested id that is not a boolean (an endpoint answering "true" would otherwise deny everything
    without a word). In a valid answer, a missing id denies that document; unknown ids are ignored."""
    if status != 200:
        return None
    try:
        decisions = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(decisions, dict):
        return None
    if any(not isinstance(decisions[doc_id], bool) for doc_id in document_ids if doc_id in decisions):
        return None
    return {doc_id for doc_id in document_ids if decisions.get(doc_id) is True}


class TenantLimiter:
    """At most `limit` rights calls in flight per tenant; a caller waits for a free slot until its deadline."""

    def __init__(self, limit: int = PER_TENANT_CALLS, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.clock = clock
        self._busy: dict[str, int] = {}
        self._changed = threading.Condition()

    def acquire(self, tenant: str, deadline: float) -> bool:
        with self._changed:
            while self._busy.get(tenant, 0) >= self.limit:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            self._busy[tenant] = self._busy.get(tenant, 0) + 1
            return True

    def release(self, tenant: str) -> None:
        with self._changed:
            left = self._busy.get(tenant, 1) - 1
            if left:
                self._busy[tenant] = left
            else:
                self._busy.pop(tenant, None)
            self._changed.notify_all()

    def in_flight(self, tenant: str) -> int:
        with self._changed:
            return self._busy.get(tenant, 0)


def collection_timeout(collection: Collection) -> float:
    try:
        timeout = float(collection.rights_check_method_configuration.get("timeout", DEFAULT_TIMEOUT))
    except (TypeError, ValueError):
        timeout = DEFAULT_TIMEOUT
    return min(max(timeout, MIN_TIMEOUT), MAX_TIMEOUT)


class RightsChecks:
    """The deployment's rights checking: judges a collection's rights configuration when it is saved, and gives each
    query a `RightsSession`. `endpoint` carries external calls (its policy judges the addresses at call time)."""

    def __init__(
        self,
        policy: RightsUrlPolicy,
        secrets: SecretStore,
        endpoint: RightsEndpoint,
        *,
        per_tenant_calls: int = PER_TENANT_CALLS,
        metrics: MetricsRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.policy = policy
        self.secrets = secrets
        self.endpoint = endpoint
        self.per_tenant_calls = per_tenant_calls
        self.metrics = metrics
        self.limiter = TenantLimiter(per_tenant_calls, clock)
        self.clock = clock
        self.wall_clock = wall_clock
        self.sleep = sleep

    def check_collection(self, tenant: str, collection: Collection) -> None:
        """Before a collection is saved: an external check needs a URL this deployment calls (InvalidInput naming
        the rule) and the tenant's signing secret (Conflict naming the route that creates it)."""
        if collection.rights_check_method != "external":
            return
        try:
            self.policy.check_url(collection.rights_check_method_configuration.get("url"))
        except UrlRefused as error:
            raise InvalidInput(str(error)) from None
        if self.secrets.get_secret(rights_secret_name(tenant)) is None:
            raise Conflict(
                "rights_check_method: external checks are signed with the tenant's secret, which is not "
                f"set: create it first with {SECRET_ROUTE}"
            )

    def session(self, tenant: str, collections: Sequence[Collection]) -> "RightsSession":
        """The rights checks of one query over `collections` (reads the tenant's secret once, if needed)."""
        secret = None
        if any(c.rights_check_method == "external" for c in collections):
            secret = self.secrets.get_secret(rights_secret_name(tenant))
        return RightsSession(self, tenant, collections, secret)


class RightsSession:
    """One query's rights checks: one budget, parallel calls per round, a failed collection denied for the rest of
    the query with one warning. Not shared between queries."""

    def __init__(self, checks: RightsChecks, tenant: str, collections: Sequence[Collection], secret: bytes | None):
        self.checks = checks
        self.tenant = tenant
        self.collections = {c.id: c for c in collections}
        self.secret = secret
        self.warnings: list[QueryWarning] = []
        self._failed: set[str] = set()
        self._started: float | None = None

    def allowed(self, user: str | None, candidates: dict[str, list[str]]) -> dict[str, set[str]]:
        """For each collection id, the subset of its candidate document ids the user may see."""
        decided: dict[str, set[str]] = {}
        remote: dict[str, list[str]] = {}
        for collection_id, document_ids in candidates.items():
            collection = self.collections[collection_id]
            if not document_ids or collection_id in self._failed:
                decided[collection_id] = set()
            elif collection.rights_check_method == "public":
                decided[collection_id] = set(document_ids)
            elif collection.rights_check_method != "external":
                decided[collection_id] = self._fail(collection_id, "unknown_method")
            elif self.secret is None:
                decided[collection_id] = self._fail(collection_id, "no_secret", code=SECRET_MISSING)
            else:
                remote[collection_id] = document_ids
        if remote:
            decided.update(self._call_all(user, remote))
        return decided

    def _call_all(self, user: str | None, remote: dict[str, list[str]]) -> dict[str, set[str]]:
        clock = self.checks.clock
        if self._started is None:
            self._started = clock()
        deadlines = {cid: self._started + collection_timeout(self.collections[cid]) for cid in remote}
        left = budget.remaining()
        if left is not None:  # never past the request's own budget (API Gateway's limit)
            deadlines = {cid: min(deadline, clock() + max(left, 0.0)) for cid, deadline in deadlines.items()}
        # One call per collection of the round, answered or not: each costs the tenant's endpoint a request.
        if self.checks.metrics is not None:
            self.checks.metrics.meter(self.tenant, RIGHTS_CHECK_CALLS, len(remote))
        # Threads of this query only: what one tenant's endpoint does can never hold a thread another tenant needs.
        executor = ThreadPoolExecutor(
            max_workers=min(len(remote), self.checks.per_tenant_calls),
            thread_name_prefix=f"rights-check-{self.tenant[:20]}",
        )
        try:
            futures = {cid: executor.submit(self._call, user, cid, ids, deadlines[cid]) for cid, ids in remote.items()}
        finally:
            executor.shutdown(wait=False, cancel_futures=False)
        decided: dict[str, set[str]] = {}
        failed_deadlines: list[float] = []
        for cid, future in futures.items():
            try:
                with cpu_slots.away():  # the endpoint's time is not this machine's: the request's slot is free
                    status, payload = future.result(timeout=max(deadlines[cid] - clock() + JOIN_GRACE, 0))
                allowed = parse_rights_response(status, payload, remote[cid])
                if allowed is None:
                    raise RightsCallFailed("status" if status != 200 else "invalid_answer", str(status))
            except FutureTimeout:
                future.cancel()
                allowed = self._fail(cid, "timeout")
                failed_deadlines.append(deadlines[cid])
            except RightsCallFailed as error:
                allowed = self._fail(cid, error.reason, detail=error.detail)
                failed_deadlines.append(deadlines[cid])
            except Exception as error:  # fail closed on anything unforeseen
                allowed = self._fail(cid, "error", detail=type(error).__name__)
                failed_deadlines.append(deadlines[cid])
            decided[cid] = allowed
        if failed_deadlines:
            # A failure costs its whole budget: a closed port must look exactly like a filtered one.
            self.checks.sleep(max(0.0, max(failed_deadlines) - clock()))
        return decided

    def _call(
        self, user: str | None, collection_id: str, document_ids: list[str], deadline: float
    ) -> tuple[int, bytes]:
        checks = self.checks
        if not checks.limiter.acquire(self.tenant, deadline):
            raise RightsCallFailed("busy")
        assert self.secret is not None  # a tenant without one fails its checks before any call (no_secret)
        try:
            body, headers = build_rights_request(
                user, collection_id, document_ids, self.secret, int(checks.wall_clock())
            )
            # Without a url the policy refuses "" as it refuses any URL it does not allow.
            url = self.collections[collection_id].rights_check_method_configuration.get("url") or ""
            return checks.endpoint.post(url, body, headers, deadline)
        finally:
            checks.limiter.release(self.tenant)

    def _fail(self, collection_id: str, reason: str, *, code: str = CHECK_FAILED, detail: str = "") -> set[str]:
        if collection_id not in self._failed:
            self._failed.add(collection_id)
            message = SECRET_MISSING_MESSAGE if code == SECRET_MISSING else CHECK_FAILED_MESSAGE
            self.warnings.append(QueryWarning(collection=collection_id, code=code, message=message))
            logger.warning(
                "rights check failed, results denied",
                extra={"tenant": self.tenant, "collection": collection_id, "reason": reason, "detail": detail},
            )
        return set()


class RightsSecretService:
    """The tenant's HMAC secret for signing rights-check requests: generated here, shown once, kept in the secret
    store."""

    def __init__(self, secrets: SecretStore):
        self.secrets = secrets

    def rotate(self, tenant: str) -> str:
        import secrets as random

        value = random.token_hex(32)
        self.secrets.put_secret(rights_secret_name(tenant), value.encode())
        return value
