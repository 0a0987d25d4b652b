"""Local secret files: owner-only, and any name maps to a valid file name."""

import os
import stat

import pytest

from kindex.adapters.local_secrets import FileSecretStore

pytestmark = pytest.mark.unit


def test_secrets_are_owner_only_and_long_names_work(tmp_path):
    store = FileSecretStore(tmp_path / "secrets")
    long_name = "tenants/" + "😀" * 255 + "/rights-check-signing"
    store.put_secret(long_name, b"v1")
    store.put_secret("tenants/a/x", b"short")
    store.put_secret(long_name, b"v2")
    assert store.get_secret(long_name) == b"v2" and store.get_secret("tenants/a/x") == b"short"
    assert store.get_secret("tenants/b/x") is None
    for path in (tmp_path / "secrets").iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
