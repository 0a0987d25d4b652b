"""API keys: shown once, stored hashed, verified in constant time, revocable."""

import pytest

from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore
from kindex.app.keys import KeyService
from kindex.domain.errors import InvalidInput, NotFound, Unauthorized
from kindex.domain.models import Role

pytestmark = pytest.mark.unit


@pytest.fixture
def service(tmp_path):
    return KeyService(SqliteMetadataStore(SqliteDatabase(tmp_path / "k.sqlite3")))


def test_created_key_authenticates_and_only_its_hash_is_stored(service, tmp_path):
    key, token = service.create("acme", "query")
    assert len(token.split("_", 2)[2]) >= 43  # >= 32 random bytes, url-safe base64
    principal = service.authenticate(token)
    assert (principal.tenant, principal.role, principal.key_id) == ("acme", Role.QUERY, key.key_id)
    raw = (tmp_path / "k.sqlite3").read_bytes() + (tmp_path / "k.sqlite3-wal").read_bytes()
    assert token.encode() not in raw and token.split("_", 2)[2].encode() not in raw


@pytest.mark.parametrize("token", [None, "", "Bearer", "kdx_nope_" + "a" * 43, "garbage"])
def test_unknown_tokens_are_unauthorized(service, token):
    with pytest.raises(Unauthorized):
        service.authenticate(token)


def test_tampered_secret_and_revoked_key_are_unauthorized(service):
    key, token = service.create("acme", "admin")
    with pytest.raises(Unauthorized):
        service.authenticate(token[:-1] + ("A" if token[-1] != "A" else "B"))
    service.revoke(key.key_id)
    with pytest.raises(Unauthorized):
        service.authenticate(token)
    with pytest.raises(NotFound):
        service.revoke("missing")


def test_bootstrap_key_only_once(service):
    assert service.ensure_bootstrap_key("default") is not None
    assert service.ensure_bootstrap_key("default") is None
    assert [k.tenant for k in service.list()] == ["default"]


def test_invalid_role_or_tenant(service):
    with pytest.raises(InvalidInput, match="role must be one of admin, reader, query"):
        service.create("acme", "root")
    with pytest.raises(InvalidInput, match="tenant"):
        service.create("a/b", "admin")
    for tenant in (".", ".."):
        with pytest.raises(InvalidInput, match="tenant must not be '.' or '..'"):
            service.create(tenant, "admin")
    assert service.list() == []


def test_reader_keys_authenticate_with_their_role(service):
    _, token = service.create("acme", "reader")
    assert service.authenticate(token).role is Role.READER
