"""Deleting a collection through `kindex serve`: 202 with a delete job at once, the collection gone from every read
while the worker deletes the rest, nothing left at the end (records, chunks, blobs, the embedded index), and a
server killed with SIGKILL while the job runs finishes it after its restart. Two tenants hold the same ids."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import RunningServer, start_server

pytestmark = pytest.mark.e2e

DOCUMENTS = 400
TENANTS = ("default", "acme")


def wait(predicate, timeout: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what} not reached in {timeout:.0f} s"
        time.sleep(0.1)
    return value


def fill(server: RunningServer, sessions: dict) -> None:
    """Collection `big` of DOCUMENTS documents in each tenant (same ids), all indexed."""
    for tenant, session in sessions.items():
        url = server.url("/v1/collections/big")
        assert session.put(url, json={"allow_guests": True, "chunking_max_size": 80}).status_code == 201
        for i in range(DOCUMENTS):
            response = session.put(
                f"{url}/documents/d{i:03d}",
                json={"content": f"Walruses of herd {i} ({tenant}) haul out on the ice. " * 4},
            )
            assert response.status_code == 201, response.text
    for tenant in sessions:
        wait(lambda t=tenant: indexed(server, t) == DOCUMENTS, what=f"{tenant}'s documents indexed")


def db(server_or_dir) -> sqlite3.Connection:
    data_dir = server_or_dir.data_dir if isinstance(server_or_dir, RunningServer) else server_or_dir
    return sqlite3.connect(f"file:{Path(data_dir) / 'kindex.sqlite3'}?mode=ro", uri=True, timeout=30)


def indexed(server: RunningServer, tenant: str) -> int:
    with db(server) as conn:
        return conn.execute(
            "SELECT COUNT(*) FROM documents WHERE tenant = ? AND collection = 'big' AND"
            " json_extract(body, '$.status') = 'indexed'",
            (tenant,),
        ).fetchone()[0]


def left_of(data_dir: Path, tenant: str) -> dict[str, int]:
    """What the data directory still holds of the tenant's collection `big`: records, chunks, blob files."""
    with db(data_dir) as conn:
        counts = {
            table: conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE tenant = ? AND collection = 'big'", (tenant,)
            ).fetchone()[0]
            for table in ("documents", "chunks")
        }
        counts["collection"] = conn.execute(
            "SELECT COUNT(*) FROM collections WHERE tenant = ? AND id = 'big'", (tenant,)
        ).fetchone()[0]
        counts["pending"] = conn.execute(
            "SELECT COUNT(*) FROM deleting_collections WHERE tenant = ?", (tenant,)
        ).fetchone()[0]
    blobs = data_dir / "blobs" / "tenants" / tenant / "collections" / "big"
    counts["blobs"] = sum(1 for p in blobs.rglob("*") if p.is_file()) if blobs.exists() else 0
    return counts


def job_status(data_dir: Path, job_id: str) -> str:
    with db(data_dir) as conn:
        body = conn.execute("SELECT json_extract(body, '$.status') FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return body[0]


def index_vectors(data_dir: Path, tenant: str) -> int:
    """Vectors the embedded index holds for the tenant's collection (opened once its server has stopped)."""
    from kindex.adapters.local.search.index import LocalSearchIndex
    from kindex.adapters.local.sqlite_chunks import SqliteChunkStore
    from kindex.adapters.local.sqlite_db import SqliteDatabase

    index = LocalSearchIndex(data_dir / "index", chunks=SqliteChunkStore(SqliteDatabase(data_dir / "kindex.sqlite3")))
    try:
        return len(index.chunk_ids("hash:384", tenant, "big"))
    finally:
        index.close()


@pytest.fixture
def running(tmp_path):
    server = start_server(tmp_path / "data")
    sessions = {"default": server.session(server.admin_key), "acme": server.session(server.create_key("acme", "admin"))}
    fill(server, sessions)
    holder = {"server": server}
    yield holder, sessions
    holder["server"].stop()


def test_a_large_collection_is_deleted_by_a_job_and_leaves_nothing(running):
    holder, sessions = running
    server: RunningServer = holder["server"]
    admin = sessions["default"]
    url = server.url("/v1/collections/big")
    # When the collection of 400 documents is deleted
    deleted = admin.delete(url)
    # Then the answer is 202 with a running delete job, and the collection is gone from every read at once
    assert deleted.status_code == 202, deleted.text
    job = deleted.json()
    assert (job["kind"], job["collection"], job["total"]) == ("delete", "big", 3)
    assert admin.get(url).status_code == 404
    assert "big" not in admin.get(server.url("/v1/collections")).json()["collections"]
    assert admin.get(f"{url}/documents").status_code == 404
    assert admin.get(f"{url}/documents/d001").status_code == 404
    assert admin.post(f"{url}/query", json={"query": "walruses"}).status_code == 404
    assert admin.post(server.url("/v1/query"), json={"query": "walruses", "collections": ["big"]}).status_code == 404
    assert admin.get(f"{url}/export").status_code == 404
    # And it refuses writes: documents 404, and a create of the same id 409 while the job runs
    assert admin.put(f"{url}/documents/new", json={"content": "x"}).status_code == 404
    recreate = admin.put(url, json={})
    assert recreate.status_code in (201, 409), recreate.text
    if recreate.status_code == 201:  # only once the job had completed
        assert job_status(server.data_dir, job["id"]) == "completed"
        admin.delete(url)
    else:
        assert recreate.json()["error"] == "conflict" and "being deleted" in recreate.json()["message"]
    # When the job completes
    wait(lambda: admin.get(server.url(f"/v1/jobs/{job['id']}")).json()["status"] == "completed", what="job done")
    # Then nothing of the collection is left, and acme's collection of the same ids is whole and answers
    if recreate.status_code == 201:
        wait(lambda: admin.get(url).status_code == 404 and not left_of(server.data_dir, "default")["pending"])
    assert left_of(server.data_dir, "default") == {
        "documents": 0,
        "chunks": 0,
        "collection": 0,
        "pending": 0,
        "blobs": 0,
    }
    acme = left_of(server.data_dir, "acme")
    assert acme["documents"] == DOCUMENTS and acme["chunks"] > 0 and acme["blobs"] == DOCUMENTS
    assert sessions["acme"].post(f"{url}/query", json={"query": "walruses herd"}).json()["results"]
    # And the same id created again is empty and finds nothing
    assert admin.put(url, json={"allow_guests": True}).status_code == 201
    assert admin.get(url).json()["document_count"] == 0
    assert admin.post(f"{url}/query", json={"query": "walruses herd"}).json()["results"] == []
    # And the embedded index holds no vector of it (read once the server stopped)
    server.stop()
    assert index_vectors(server.data_dir, "default") == 0
    assert index_vectors(server.data_dir, "acme") > 0


def test_a_server_killed_while_the_job_runs_finishes_it_after_restart(running):
    holder, sessions = running
    server: RunningServer = holder["server"]
    # When the collection is deleted and the server is killed (SIGKILL) at once, while its job runs
    deleted = sessions["default"].delete(server.url("/v1/collections/big"))
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait(timeout=30)
    assert deleted.status_code == 202, deleted.text
    job = deleted.json()
    # Then the job was left unfinished, with parts of the collection still on disk
    assert job_status(server.data_dir, job["id"]) == "running"
    assert left_of(server.data_dir, "default")["pending"] == 1
    # When the server starts again on the same data directory
    restarted = start_server(server.data_dir)
    holder["server"] = restarted
    admin = restarted.session(restarted.admin_key)
    # Then the collection stayed gone, the job completes and nothing of the collection is left
    assert admin.get(restarted.url("/v1/collections/big")).status_code == 404
    wait(lambda: admin.get(restarted.url(f"/v1/jobs/{job['id']}")).json()["status"] == "completed", what="job done")
    assert left_of(restarted.data_dir, "default") == {
        "documents": 0,
        "chunks": 0,
        "collection": 0,
        "pending": 0,
        "blobs": 0,
    }
    assert left_of(restarted.data_dir, "acme")["documents"] == DOCUMENTS
    restarted.stop()
    assert index_vectors(restarted.data_dir, "default") == 0
    assert index_vectors(restarted.data_dir, "acme") > 0
