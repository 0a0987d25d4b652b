"""The data directory at rest: it holds every tenant's texts, vectors and secrets, so only its owner may read it."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from kindex.adapters.local.private_files import DATA_DIR_ENTRIES
from kindex.adapters.local.search.keyword import tenant_folder
from tests.conftest import start_server
from tests.e2e.test_local_ingest import wait_for_status

pytestmark = pytest.mark.e2e

# The keyword index of the tenant the admin key writes as (one tantivy index per tenant).
KEYWORDS_META = f"index/keywords/{tenant_folder('default')}/meta.json"


def modes(root: Path) -> dict[str, int]:
    """Every entry under `root` (and `root` itself) with its permission bits."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            found[path.relative_to(root).as_posix()] = stat.S_IMODE(path.lstat().st_mode)
    return found


def wrong_modes(root: Path) -> dict[str, str]:
    return {
        name: oct(mode) for name, mode in modes(root).items() if mode != (0o700 if (root / name).is_dir() else 0o600)
    }


def widen_like_an_older_version(data_dir: Path) -> None:
    """0755 folders and 0644 files, as versions before modes were enforced left whatever they wrote."""
    for name in modes(data_dir):
        path = data_dir / name
        top = name.split("/")[0]
        if name == "." or top in DATA_DIR_ENTRIES or top.startswith("kindex.sqlite3-"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)


def stop(server) -> None:
    server.stop()


@pytest.fixture
def permissive_umask():
    """The umask most shells have: the server must not depend on a stricter one."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_every_folder_is_0700_and_every_file_0600_after_real_use(tmp_path, permissive_umask):
    # Given a server on a new data directory, used for everything that writes files: keys, collections, a content
    # PUT, a presigned upload, a CLI ingest of a folder, a rights-check secret, queries
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    try:
        admin = server.session(server.admin_key)
        querier = server.session(server.create_key("default", "query"))
        assert admin.put(server.url("/v1/collections/c"), json={"allow_guests": True}).status_code == 201
        assert (
            admin.put(
                server.url("/v1/collections/c/documents/put"), json={"content": "Tenant text about glaciers."}
            ).status_code
            == 201
        )
        uploaded = b"Uploaded text about moraines."
        ticket = admin.post(
            server.url("/v1/collections/c/documents/up/upload"), json={"filename": "up.txt", "size": len(uploaded)}
        ).json()
        assert requests.put(ticket["url"], data=uploaded, headers=ticket["headers"]).status_code == 200
        folder = tmp_path / "folder"
        folder.mkdir()
        (folder / "cli.md").write_text("# CLI\n\nIngested text about fjords.")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "kindex_local.cli",
                "ingest",
                str(folder),
                "--collection",
                "c",
                "--quiet",
                "--data-dir",
                str(data_dir),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        assert admin.post(server.url("/v1/rights-check-secret"), json={}).status_code == 200
        for document in ("put", "up"):
            status = wait_for_status(admin, server.url(f"/v1/collections/c/documents/{document}"))[0]["status"]
            assert status == "indexed"
        hits = querier.post(server.url("/v1/collections/c/query"), json={"query": "glaciers moraines fjords"}).json()
        assert len(hits["results"]) == 3
        # When the data directory is walked while the server runs (its SQLite side files exist now)
        found = modes(data_dir)
        for side_file in (
            "kindex.sqlite3-wal",
            "kindex.sqlite3-shm",
            KEYWORDS_META,
            "secrets",
            "upload-secret",
            "admin-key",
            "worker.lock",
        ):
            assert side_file in found, sorted(found)
        assert any(name.startswith("index/vectors/") for name in found)
        assert any(name.startswith("blobs/tenants/default/collections/c/documents/") for name in found)
        # Then the directory and every folder in it are 0700, and every file 0600
        assert wrong_modes(data_dir) == {}
    finally:
        stop(server)


def test_a_data_directory_of_an_older_version_is_narrowed_at_start(tmp_path, permissive_umask):
    # Given a used data directory whose folders and files an older version left 0755 and 0644
    data_dir = tmp_path / "data"
    server = start_server(data_dir)
    try:
        admin = server.session(server.admin_key)
        assert admin.put(server.url("/v1/collections/c"), json={}).status_code == 201
        assert admin.put(server.url("/v1/collections/c/documents/d"), json={"content": "text"}).status_code == 201
        wait_for_status(admin, server.url("/v1/collections/c/documents/d"))
    finally:
        stop(server)
    widen_like_an_older_version(data_dir)
    assert {"admin-key", "upload-secret", "worker.lock", "kindex.sqlite3", "blobs", KEYWORDS_META} <= set(
        wrong_modes(data_dir)
    )
    # When a key command, then the server, opens it
    subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "keys", "list", "--data-dir", str(data_dir)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert wrong_modes(data_dir) == {}
    widen_like_an_older_version(data_dir)
    server = start_server(data_dir)
    try:
        # Then every folder is 0700 and every file 0600 again, and the data is still served
        assert wrong_modes(data_dir) == {}
        document = server.session(server.admin_key).get(server.url("/v1/collections/c/documents/d")).json()
        assert document["content"] == "text"
    finally:
        stop(server)
