"""Issue 26.3 over HTTP: the embedding cache is a tenant's own, so one tenant's export or import never shows
whether another tenant indexed a text."""

import time

import pytest

pytestmark = pytest.mark.e2e

TEXT = "Dear customer, your account 4471 has been closed."
BOGUS = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def wait_indexed(session, url, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        status = session.get(url).json().get("status")
        if status == "indexed":
            return
        assert status != "failed" and time.monotonic() < deadline, f"document is {status}"
        time.sleep(0.1)


def exported_vector(session, base):
    page = session.get(base + "/export").json()
    return [chunk["vector"] for chunk in page["chunks"]]


def test_an_export_does_not_change_when_another_tenant_indexes_the_same_text(server):
    acme, evil = server.session(server.create_key("acme", "admin")), server.session(server.create_key("evil", "admin"))
    # Given evil imported the text with a vector of its own making
    probe = server.url("/v1/collections/amp")
    assert evil.put(probe, json={"embedding_model": "hash:8"}).status_code == 201
    collection = evil.get(probe).json()
    # (chunked as the collection chunks, so no reindex pass re-chunks and re-embeds it meanwhile)
    chunking = {name: collection[name] for name in ("chunking_method", "chunking_max_size", "chunking_overlap_offset")}
    imported = evil.post(
        probe + "/import",
        json={
            "format_version": 1,
            "embedding_model": "hash:8",
            "dimensions": 8,
            "chunking": chunking,
            "documents": [{"id": "x1", "chunk_count": 1}],
            "chunks": [{"document_id": "x1", "index": 0, "start": 0, "end": len(TEXT), "text": TEXT, "vector": BOGUS}],
        },
    )
    assert imported.status_code == 200, imported.text
    assert exported_vector(evil, probe) == [BOGUS]
    # When acme indexes that very text (same collection and document ids too)
    target = server.url("/v1/collections/amp")
    assert acme.put(target, json={"embedding_model": "hash:8"}).status_code == 201
    assert acme.put(target + "/documents/x1", json={"content": TEXT}).status_code in (200, 201)
    wait_indexed(acme, target + "/documents/x1")
    # Then evil's export still serves evil's own vector, not the model's embedding acme's ingest cached
    assert exported_vector(evil, probe) == [BOGUS]
    # And acme's export serves the real embedding
    assert exported_vector(acme, target) != [BOGUS]
