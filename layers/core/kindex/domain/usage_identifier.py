"""Each tenant's usage identifier: the value of its API Gateway API key, which the authorizer returns as
`usageIdentifierKey` so that API Gateway counts the request against the tenant's usage plan.

It is derived from the deployment's scope (`kindex-<stage>`) and the tenant id, so the authorizer needs no lookup
(and this module imports only hashlib: it is on the authorizer's cold start). It is not a credential: with the API
key source AUTHORIZER, API Gateway ignores any key a client sends, so knowing a value lets nobody choose whose plan a
request counts against. It is still never logged.
"""

from __future__ import annotations

import hashlib

USAGE_IDENTIFIER_PREFIX = "kdxgw"


def usage_identifier(scope: str, tenant: str) -> str:
    """The tenant's API Gateway API key value in the deployment `scope` (`kindex-<stage>`): a SHA-256 of both, so
    two tenants never share one and the same tenant differs between stages. 69 ASCII characters (API Gateway wants
    at least 20)."""
    digest = hashlib.sha256(f"{scope}\x00{tenant}".encode()).hexdigest()
    return f"{USAGE_IDENTIFIER_PREFIX}{digest}"


def usage_key_name(scope: str, tenant: str) -> str:
    """The API key's name: the scope and a short hash of the tenant (tenant ids may hold any character), unique
    within the scope for all practical purposes and findable by prefix."""
    return f"{scope}-tenant-{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"
