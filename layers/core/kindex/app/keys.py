"""API keys: creation (shown once), hashing, constant-time verification, revocation."""

from __future__ import annotations

import builtins
import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING

from kindex.domain.errors import InvalidInput, NotFound, Unauthorized
from kindex.domain.models import ApiKey, Principal, Role, check_id
from kindex.domain.ports import KeyStore

if TYPE_CHECKING:
    from kindex.app.usage_plans import UsagePlanService

KEY_PREFIX = "kdx"


def hash_secret(token: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


def parse_token(token: str) -> str | None:
    """The key id of a `kdx_<key_id>_<secret>` token, or None when the token has another shape."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != KEY_PREFIX or not parts[1] or len(parts[2]) < 43:
        return None
    return parts[1]


class KeyService:
    """Issues and checks API keys. A key belongs to one tenant and has one role (`Role`: admin, reader, query).

    With `usage_plans` (AWS, where keys are created with operator credentials), creating a key first puts the
    tenant's API Gateway key into its usage plan, idempotently: a key is never stored for a tenant whose requests
    API Gateway would refuse for want of a plan."""

    def __init__(self, store: KeyStore, usage_plans: UsagePlanService | None = None):
        self.store = store
        self.usage_plans = usage_plans

    def create(self, tenant: str, role: Role | str, description: str = "") -> tuple[ApiKey, str]:
        """A new key and its secret token; the token is never stored and cannot be shown again."""
        try:
            check_id(tenant)
        except ValueError as error:
            raise InvalidInput(f"tenant {error}") from error
        try:
            role = Role(role)
        except ValueError as error:
            raise InvalidInput(f"role must be one of {', '.join(r.value for r in Role)}") from error
        if self.usage_plans is not None:
            self.usage_plans.assign(tenant)
        key_id = secrets.token_hex(8)
        token = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        key = ApiKey(key_id=key_id, tenant=tenant, role=role, secret_sha256=hash_secret(token), description=description)
        self.store.put_key(key)
        return key, token

    def authenticate(self, token: str | None) -> Principal:
        """The principal for a bearer token; Unauthorized for anything that is not a live key."""
        key_id = parse_token(token or "")
        key = self.store.get_key(key_id) if key_id else None
        # compare_digest even on a miss, so timing does not tell a known key id from an unknown one.
        expected = key.secret_sha256 if key else "0" * 64
        matches = hmac.compare_digest(hash_secret(token or ""), expected)
        if key is None or not matches or key.revoked:
            raise Unauthorized("missing or invalid API key")
        return Principal(tenant=key.tenant, role=key.role, key_id=key.key_id)

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        return self.store.list_keys(tenant)

    def tenants(self) -> builtins.list[str]:  # `list` in this class is the method above
        """Every tenant with at least one live key, in order of its first key."""
        return list(dict.fromkeys(key.tenant for key in self.store.list_keys() if not key.revoked))

    def revoke(self, key_id: str) -> None:
        if not self.store.revoke_key(key_id):
            raise NotFound(f"key {key_id!r} does not exist")

    def ensure_bootstrap_key(self, tenant: str) -> str | None:
        """On first start: an admin key for `tenant` if no key exists at all; returns its token, else None."""
        if self.store.list_keys():
            return None
        _, token = self.create(tenant, Role.ADMIN, "bootstrap admin key")
        return token
