"""Authorizer function: resolves `Authorization: Bearer <key>` to a tenant and role (REQUEST authorizer).

On AWS (KINDEX_GATEWAY_KEY_SCOPE set) it also returns the tenant's `usageIdentifierKey`: the value of the tenant's
API Gateway key, derived from the scope and the tenant id without any lookup, which puts the request under the
tenant's usage plan. A tenant whose key is not in a plan gets API Gateway's 403 `no_usage_plan`.

API Gateway caches the result per key; the local server calls this same handler on every request."""

from __future__ import annotations

from typing import Any

from kindex.compose import container
from kindex.domain import budget
from kindex.domain.errors import Unauthorized
from kindex.domain.usage_identifier import usage_identifier
from kindex.settings import AuthorizerSettings, load_settings

AUTHORIZER_BUDGET_S = 6.0  # of the function's 10 s
SETTINGS = load_settings(model=AuthorizerSettings)  # at cold start: a misconfigured function fails here, saying why


def _bearer(event: dict[str, Any]) -> str | None:
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    value = headers.get("authorization") or event.get("authorizationToken") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _api_wide(method_arn: str | None) -> str:
    """The cached policy must cover every route of the API, not only the one that was called first."""
    if not method_arn:
        return "*"
    api_arn, _, _ = method_arn.partition("/")
    stage = method_arn.split("/")[1] if method_arn.count("/") >= 1 else "*"
    return f"{api_arn}/{stage}/*/*"


def handler(event: dict[str, Any], context: Any, keys=None, scope: str | None = None) -> dict[str, Any]:
    """Allow with the principal as context, or raise Exception('Unauthorized'), which API Gateway turns into 401."""
    keys = keys or container().keys
    scope = scope or SETTINGS.gateway_key_scope
    try:
        # The key lookup within a budget too: a hung store fails the authorizer (a JSON 503 from API Gateway).
        with budget.for_request(context, limit_s=AUTHORIZER_BUDGET_S):
            caller = keys.authenticate(_bearer(event))
    except Unauthorized as error:
        raise Exception("Unauthorized") from error  # the exact text API Gateway maps to 401
    allowed = {
        "principalId": f"{caller.tenant}/{caller.key_id}",
        "policyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "execute-api:Invoke", "Effect": "Allow", "Resource": _api_wide(event.get("methodArn"))}
            ],
        },
        "context": {"tenant": caller.tenant, "role": caller.role.value, "key_id": caller.key_id},
    }
    if scope:
        allowed["usageIdentifierKey"] = usage_identifier(scope, caller.tenant)  # never logged
    return allowed
