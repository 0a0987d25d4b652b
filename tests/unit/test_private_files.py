"""Local adapters used as a library, under a permissive umask: every folder they make is 0700, every file 0600,
SQLite's -wal and -shm included; older, wider files are narrowed; symbolic links are never followed."""

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from kindex.adapters.local import private_files
from kindex.adapters.local.file_secrets import FileSecretStore
from kindex.adapters.local.search import log as search_log
from kindex.adapters.local.search.index import LocalSearchIndex
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore
from kindex.adapters.local.upload_signer import load_or_create_secret
from kindex.domain.models import Collection
from kindex.domain.types import IndexRecord
from kindex_local.deployment import worker_lock, write_admin_key

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def permissive_umask():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def wrong_modes(root: Path) -> dict[str, str]:
    found = {}
    for path in [root, *root.rglob("*")]:
        expected = 0o700 if path.is_dir() else 0o600
        if stat.S_IMODE(path.stat().st_mode) != expected:
            found[str(path.relative_to(root))] = oct(stat.S_IMODE(path.stat().st_mode))
    return found


def test_sqlite_database_and_its_wal_and_shm_are_0600(tmp_path):
    # Given a new database in a folder that does not exist yet / When it is written to
    db = SqliteDatabase(tmp_path / "data" / "nested" / "kindex.sqlite3")
    SqliteMetadataStore(db).put_collection("t", Collection(id="c", embedding_model="hash:8"), create=True)
    # Then the folders are 0700 and the database, -wal and -shm 0600
    names = {p.name for p in (tmp_path / "data" / "nested").iterdir()}
    assert {"kindex.sqlite3", "kindex.sqlite3-wal", "kindex.sqlite3-shm"} <= names
    assert wrong_modes(tmp_path / "data") == {}


def test_an_older_wider_sqlite_database_is_narrowed_when_opened(tmp_path):
    # Given a database and side files left 0644 by an older version (still open elsewhere: modes change by path)
    first = SqliteDatabase(tmp_path / "k.sqlite3")
    SqliteMetadataStore(first).put_collection("t", Collection(id="c", embedding_model="hash:8"), create=True)
    for path in tmp_path.iterdir():
        os.chmod(path, 0o644)
    # When it is opened again / Then every file is 0600, and the first connection still works
    second = SqliteDatabase(tmp_path / "k.sqlite3")
    assert SqliteMetadataStore(second).get_collection("t", "c") is not None
    assert wrong_modes(tmp_path) == {}
    SqliteMetadataStore(first).put_collection("t", Collection(id="c2", embedding_model="hash:8"), create=True)
    assert SqliteMetadataStore(second).get_collection("t", "c2") is not None


@pytest.mark.slow
def test_search_index_keyword_database_vectors_and_snapshots_are_owner_only(tmp_path, monkeypatch):
    # Given compaction after a few records, so both logs and snapshots get written
    monkeypatch.setattr(search_log, "COMPACT_MAX_RECORDS", 3)
    index = LocalSearchIndex(tmp_path / "index")
    seen, wrong = set(), {}
    for i in range(8):
        vector = np.random.RandomState(i).normal(size=8)
        index.upsert(
            "hash:8",
            [
                IndexRecord(
                    tenant="t",
                    collection="c",
                    document_id="d",
                    chunk_id=f"x{i}",
                    vector=tuple(vector / np.linalg.norm(vector)),
                    text=f"word{i}",
                )
            ],
        )
        seen |= {p.name for p in (tmp_path / "index").rglob("*")}
        wrong.update(wrong_modes(tmp_path / "index"))
    # Then the keyword index's files, the logs and the snapshots were 0600 in 0700 folders
    assert {"keywords", "meta.json"} <= seen and any(name.endswith(".idx") for name in seen)
    assert any(name.endswith(".npz") for name in seen) and any(name.endswith(".log") for name in seen)
    assert wrong == {}
    index.close()
    # And files an older version left wider are narrowed when the index is opened again
    for path in (tmp_path / "index").rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    LocalSearchIndex(tmp_path / "index").close()
    assert wrong_modes(tmp_path / "index") == {}


def test_secret_files_upload_secret_admin_key_and_lock_are_owner_only(tmp_path):
    store = FileSecretStore(tmp_path / "data" / "secrets")
    store.put_secret("tenants/acme/rights-check-signing", b"s1")
    store.put_secret("tenants/acme/rights-check-signing", b"s2")
    load_or_create_secret(tmp_path / "data" / "upload-secret")
    write_admin_key(tmp_path / "data", "kdx_x_y")
    lock = worker_lock(tmp_path / "data")
    try:
        assert wrong_modes(tmp_path / "data") == {}
    finally:
        lock.close()
    # And an upload secret an older version left readable is narrowed when loaded
    os.chmod(tmp_path / "data" / "upload-secret", 0o644)
    load_or_create_secret(tmp_path / "data" / "upload-secret")
    assert wrong_modes(tmp_path / "data") == {}


def test_private_data_dir_narrows_an_older_tree_but_never_follows_links(tmp_path):
    # Given an older data directory (0755 / 0644) that links to a file and a folder outside it
    outside_file, outside_dir = tmp_path / "outside.txt", tmp_path / "outside"
    outside_file.write_text("x")
    outside_dir.mkdir()
    os.chmod(outside_file, 0o644)
    os.chmod(outside_dir, 0o755)
    data = tmp_path / "data"
    (data / "blobs" / "a").mkdir(parents=True)
    (data / "blobs" / "a" / "f").write_text("x")
    (data / "index").mkdir()
    for name in ("kindex.sqlite3", "kindex.sqlite3-wal", "kindex.sqlite3-shm", "admin-key", "index/keyword.sqlite"):
        (data / name).write_text("x")
    (data / "blobs" / "file-link").symlink_to(outside_file)
    (data / "secrets").symlink_to(outside_dir)
    for path in [data, *data.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    # When it is opened as a data directory
    private_files.private_data_dir(data)
    # Then everything in it is owner-only, and what the links point to is unchanged
    assert {p: m for p, m in wrong_modes(data).items() if "link" not in p and p != "secrets"} == {}
    assert stat.S_IMODE(outside_file.stat().st_mode) == 0o644
    assert stat.S_IMODE(outside_dir.stat().st_mode) == 0o755
    # And a missing data directory is created 0700 with its missing parents
    fresh = tmp_path / "new" / "deeper" / "data"
    private_files.private_data_dir(fresh)
    for path in (tmp_path / "new", tmp_path / "new" / "deeper", fresh):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_a_folder_that_is_not_only_kindex_data_keeps_its_other_files(tmp_path):
    # Given `--data-dir .` in a project folder: a script and a source folder next to kindex's files
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(project / "run.sh", 0o755)
    os.chmod(project / "src", 0o755)
    os.chmod(project, 0o755)
    (project / "admin-key").write_text("k")
    os.chmod(project / "admin-key", 0o644)
    # When it is opened as a data directory / Then kindex's own files and the folder are narrowed, nothing else
    private_files.private_data_dir(project)
    assert stat.S_IMODE((project / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((project / "src").stat().st_mode) == 0o755
    assert stat.S_IMODE((project / "admin-key").stat().st_mode) == 0o600
    assert stat.S_IMODE(project.stat().st_mode) == 0o700
