"""Local secret files: owner-only, and any name maps to a valid file name."""

import os
import stat

import pytest

from kindex.adapters.local.file_secrets import FileSecretStore

pytestmark = pytest.mark.unit


def test_secrets_are_owner_only_and_long_names_work(tmp_path):
    store = FileSecretStore(tmp_path / "secrets")
    long_name = "tenants/" + "😀" * 255 + "/rights-check-signing"
    store.put_secret(long_name, b"v1")
    store.put_secret("tenants/a/x", b"short")
    store.put_secret(long_name, b"v2")
    assert store.get_secret(long_name) == b"v2" and store.get_secret("tenants/a/x") == b"short"
    assert store.get_secret("tenants/b/x") is None
    for path in (tmp_path / "secrets").rglob("*"):
        assert stat.S_IMODE(os.stat(path).st_mode) == (0o700 if path.is_dir() else 0o600), path
    assert stat.S_IMODE(os.stat(tmp_path / "secrets").st_mode) == 0o700


def test_two_tenants_writing_at_once_never_swap_secrets(tmp_path, monkeypatch):
    # Given tenants whose names once mapped to one temp file ("a.b" and "a.c": the suffix after the dot was
    # replaced by ".tmp"), and a write of one landing between the other's write and rename
    store = FileSecretStore(tmp_path / "secrets")
    real_replace = os.replace
    nested = []

    def replace_with_a_write_in_between(src, dst):
        if not nested:
            nested.append(dst)
            store.put_secret("tenants/a.c/rights-check-signing", b"secret of a.c")
        return real_replace(src, dst)

    monkeypatch.setattr("kindex.adapters.local.file_secrets.os.replace", replace_with_a_write_in_between)
    # When both rotate / Then each has its own secret, and no temp file is left over
    store.put_secret("tenants/a.b/rights-check-signing", b"secret of a.b")
    assert store.get_secret("tenants/a.b/rights-check-signing") == b"secret of a.b"
    assert store.get_secret("tenants/a.c/rights-check-signing") == b"secret of a.c"
    assert sorted(p.name for p in (tmp_path / "secrets").iterdir() if p.is_file()) == [
        "tenants%2Fa.b%2Frights-check-signing",
        "tenants%2Fa.c%2Frights-check-signing",
    ]
    assert list((tmp_path / "secrets" / ".tmp").iterdir()) == []


@pytest.mark.parametrize("name", [".", "..", ".tmp", ".x"])
def test_dot_names_stay_files_of_their_own(tmp_path, name):
    store = FileSecretStore(tmp_path / "secrets")
    store.put_secret(name, b"v")
    assert store.get_secret(name) == b"v"
    assert not (tmp_path / "v").exists() and (tmp_path / "secrets" / ".tmp").is_dir()
    assert [p.name for p in (tmp_path / "secrets").iterdir() if p.is_file()] == ["%2E" + name[1:]]
