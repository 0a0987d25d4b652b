"""API Gateway adapter of the `UsagePlanKeys` port: one API key per tenant, attached to one usage plan.

The key's value is `usage_identifier(scope, tenant)`, derived rather than stored, so the authorizer returns it without
reading anything; its name is `usage_key_name(scope, tenant)`, which this adapter finds keys by (GetApiKeys
`nameQuery` is a prefix match, so the name and the value are both checked). An API key may be in one usage plan per
API stage: moving a tenant detaches its key from the old plan before attaching it to the new one, so for that moment
its requests are refused (403 `no_usage_plan`), never counted against another tenant's plan.

This runs where keys are created (`kindex keys create`, `kindex keys sync-plans` with operator credentials), never
in a Lambda function: the functions have no API Gateway permission. Values are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from kindex.domain.errors import DependencyFailed, NotFound
from kindex.domain.usage_identifier import usage_identifier, usage_key_name

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def apigateway_client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("apigateway", config=Config(retries={"mode": "standard", "max_attempts": 5}))


def build_create_key_request(scope: str, tenant: str) -> dict[str, Any]:
    """CreateApiKey for the tenant's key (enabled, not tied to a stage: the usage plan ties it to the API)."""
    return {
        "name": usage_key_name(scope, tenant),
        "value": usage_identifier(scope, tenant),
        "enabled": True,
        "description": f"kindex usage identifier of tenant {tenant}"[:1000],
    }


class ApiGatewayUsagePlanKeys:
    """Implements UsagePlanKeys. `plan_ids` maps plan names (`default`, named plans) to usage plan ids."""

    def __init__(self, scope: str, plan_ids: dict[str, str], client: Any | None = None):
        self.scope = scope
        self.plan_ids = dict(plan_ids)
        self._plan_names = {plan_id: name for name, plan_id in self.plan_ids.items()}
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = apigateway_client()
        return self._client

    def attach(self, tenant: str, plan: str) -> bool:
        if plan not in self.plan_ids:
            raise NotFound(f"usage plan {plan!r} is not deployed")
        key_id, changed = self._ensure_key(tenant)
        current = self._plans_of(key_id)
        target = self.plan_ids[plan]
        for plan_id in current - {target}:
            self._call("delete_usage_plan_key", usagePlanId=plan_id, keyId=key_id)
            changed = True
        if target not in current:
            try:
                self._call("create_usage_plan_key", usagePlanId=target, keyId=key_id, keyType="API_KEY")
            except _Conflict:
                # A concurrent run attached it: fine if to this plan, else the runs disagree and this one says so.
                if target not in self._plans_of(key_id):
                    raise DependencyFailed(
                        "API Gateway: the tenant's key was attached to another plan meanwhile; "
                        "run `kindex keys sync-plans` again"
                    ) from None
            changed = True
        if changed:
            logger.info("usage plan assigned", extra={"plan": plan, "api_key_id": key_id})
        return changed

    def attached_plan(self, tenant: str) -> str | None:
        key = self._find_key(tenant)
        if key is None:
            return None
        plans = self._plans_of(key["id"])
        return next((self._plan_names[plan_id] for plan_id in sorted(plans)), None)

    # API key lookup and creation
    def _find_key(self, tenant: str) -> dict[str, Any] | None:
        name, value = usage_key_name(self.scope, tenant), usage_identifier(self.scope, tenant)
        for key in self._pages("get_api_keys", "items", nameQuery=name, includeValues=True):
            if key.get("name") == name and key.get("value") == value:
                return key
        return None

    def _ensure_key(self, tenant: str) -> tuple[str, bool]:
        """The key's id, and whether it was created now. A key someone disabled stays disabled: that is how an
        operator blocks a tenant at the gateway."""
        key = self._find_key(tenant)
        if key is not None:
            return key["id"], False
        try:
            created = self._call("create_api_key", **build_create_key_request(self.scope, tenant))
            return created["id"], True
        except _Conflict:
            key = self._find_key(tenant)  # created meanwhile by a concurrent run
            if key is None:
                raise DependencyFailed("API Gateway: the tenant's key value exists under another name") from None
            return key["id"], False

    def _plans_of(self, key_id: str) -> set[str]:
        """This deployment's usage plans the key is attached to (plans of other APIs are not ours to change)."""
        return {
            plan["id"]
            for plan in self._pages("get_usage_plans", "items", keyId=key_id)
            if plan["id"] in self._plan_names
        }

    def _pages(self, operation: str, field: str, **params: Any) -> Iterator[dict[str, Any]]:
        while True:
            page = self._call(operation, limit=500, **params)
            yield from page.get(field) or []
            if not page.get("position"):
                return
            params["position"] = page["position"]

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, operation)(**params)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code == "ConflictException":
                raise _Conflict from None
            if code == "NotFoundException":
                raise NotFound(f"API Gateway {operation}: not found (is the usage plan deployed?)") from None
            raise DependencyFailed(f"API Gateway {operation} failed: {code}") from None
        except BotoCoreError as error:
            raise DependencyFailed(f"API Gateway {operation} failed: {type(error).__name__}") from None


class _Conflict(Exception):
    """ConflictException: the key value exists, or the key is already in the plan."""
