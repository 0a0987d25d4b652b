"""Documents whose content never came, through `kindex serve`: a record created with a title only and an import
whose chunks stopped coming are failed by the reindex pass once their wait is over (here: their records dated back
two days, as time would leave them), with a reason a client reads over HTTP; content that comes later still
indexes them. Another tenant with the same ids, whose wait is not over, is left alone."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

import pytest

from tests.conftest import start_server

pytestmark = pytest.mark.e2e

CHUNKS = ["Imported part one about glaciers. ", "Imported part two about fjords. "]


def import_body(*indexes: int) -> dict:
    starts = [0, len(CHUNKS[0])]
    return {
        "format_version": 1,
        "embedding_model": "hash:384",
        "dimensions": 384,
        "documents": [{"id": "imp", "title": "Imported", "chunk_count": 2}],
        "chunks": [
            {"document_id": "imp", "index": i, "start": starts[i], "end": starts[i] + len(CHUNKS[i]), "text": CHUNKS[i]}
            for i in indexes
        ],
    }


def wait_for(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value


@pytest.fixture
def server(tmp_path):
    running = start_server(tmp_path / "data")
    yield running
    running.stop()


def age(server, tenant: str, collection: str, document_id: str, by: timedelta) -> None:
    """Date the record's last write back by `by`, straight in the server's store (what waiting would do)."""
    from kindex.adapters.local.sqlite_db import SqliteDatabase
    from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore

    store = SqliteMetadataStore(SqliteDatabase(server.data_dir / "kindex.sqlite3"))
    stored = store.get_document(tenant, collection, document_id)
    store.put_document(
        tenant,
        stored.model_copy(update={"updated_at": stored.updated_at - by, "revision": stored.revision + 1}),
        create=False,
    )


def test_waits_that_are_over_fail_with_a_readable_reason_and_late_content_still_indexes(server):
    sessions = {
        "default": server.session(server.admin_key),
        "other": server.session(server.create_key("other", "admin")),
    }
    base = server.url("/v1/collections/wait")
    # Given in two tenants, with the same ids, a document created with a title only and an import of a 2-chunk
    # document that got 1 chunk
    for session in sessions.values():
        assert session.put(base, json={"allow_guests": True}).status_code == 201
        assert session.put(f"{base}/documents/later", json={"title": "A title first"}).status_code == 201
        imported = session.post(f"{base}/import", json=import_body(0))
        assert imported.status_code == 200 and imported.json()["incomplete_documents"] == ["imp"], imported.text
    later = sessions["default"].get(f"{base}/documents/later").json()
    assert (later["status"], later["version"], later["failure_reason"]) == ("pending", 0, None)
    # And tenant default's waits are over (two days without a write), other's are not
    for document_id in ("later", "imp"):
        age(server, "default", "wait", document_id, timedelta(days=2))
    # When the reindex pass runs (the server's worker does its tasks)
    ran = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "reindex", "--data-dir", str(server.data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    admin = sessions["default"]
    failed = wait_for(
        lambda: all(admin.get(f"{base}/documents/{d}").json()["status"] == "failed" for d in ("later", "imp"))
    )
    assert failed
    # Then each says over HTTP, in its GET and in the list, why and what brings it back; retrying will not help
    later, imp = (admin.get(f"{base}/documents/{d}").json() for d in ("later", "imp"))
    assert later["failure_reason"].startswith("NoContent: ") and later["failure_retryable"] is False
    assert imp["failure_reason"].startswith("ImportIncomplete: 1 of 2 chunks arrived")
    assert imp["failure_retryable"] is False
    listed = {d["id"]: d for d in admin.get(f"{base}/documents").json()["items"]}
    assert listed["later"]["failure_reason"] == later["failure_reason"]
    # And the other tenant's documents of the same ids still wait
    other = sessions["other"]
    assert other.get(f"{base}/documents/later").json()["status"] == "pending"
    assert other.get(f"{base}/documents/imp").json()["status"] == "in_progress"
    # When a file is uploaded for the first, and the second is imported again
    notes = b"# Glacier notes\n\nThey came two days after their title."
    ticket = admin.post(f"{base}/documents/later/upload", json={"filename": "notes.md", "size": len(notes)})
    assert ticket.status_code == 200, ticket.text
    grant = ticket.json()
    uploaded = server.session().request(grant["method"], grant["url"], data=notes, headers=grant["headers"])
    assert uploaded.status_code in (200, 201, 204), uploaded.text
    assert admin.post(f"{base}/import", json=import_body(0, 1)).json()["documents_completed"] == 1
    # Then both are indexed and answer queries
    wait_for(lambda: all(admin.get(f"{base}/documents/{d}").json()["status"] == "indexed" for d in ("later", "imp")))
    hits = admin.post(f"{base}/query", json={"query": "glacier notes", "k": 5}).json()["results"]
    assert {"later", "imp"} <= {hit["document_id"] for hit in hits}
