"""Contract of the SecretStore port: what every adapter (owner-only files, Secrets Manager...) must do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kindex.domain.ports import SecretStore


class SecretStoreContract:
    """Subclass in a `Test*` class that provides `secrets`: a fresh, empty SecretStore."""

    @pytest.fixture
    def secrets(self) -> SecretStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `secrets` fixture")

    def test_missing_secret_is_none(self, secrets):
        assert secrets.get_secret("tenants/acme/rights-check-signing") is None

    def test_secret_round_trips_bytes_and_can_be_replaced(self, secrets):
        # Given bytes that are not UTF-8
        secrets.put_secret("tenants/acme/rights-check-signing", b"\x00\xff first")
        assert secrets.get_secret("tenants/acme/rights-check-signing") == b"\x00\xff first"
        # When replaced / Then the new value is read
        secrets.put_secret("tenants/acme/rights-check-signing", b"second")
        assert secrets.get_secret("tenants/acme/rights-check-signing") == b"second"

    def test_secret_names_never_collide(self, secrets):
        # Given names that differ only in characters a secret name cannot hold as they are
        names = [
            "tenants/a b/s",
            "tenants/a_b/s",
            "tenants/a=b/s",
            "tenants/a=3Db/s",
            "tenants/a=20b/s",
            "tenants/é/s",
            "tenants/e/s",
            "tenants/a#b/s",
        ]
        for i, name in enumerate(names):
            secrets.put_secret(name, f"value {i}".encode())
        # Then each reads back its own value
        assert [secrets.get_secret(name) for name in names] == [f"value {i}".encode() for i in range(len(names))]
