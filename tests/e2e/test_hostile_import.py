"""Hostile and unlucky imports over HTTP against `kindex serve` (issue 26, items 1, 6, 8, 14): a batch whose chunk
offsets would rebuild gigabytes of text, a batch whose embedding fails, forged cursors, a batch that would embed
more than one request's time allows."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from kindex.client import Kindex
from kindex.domain.transfer import MAX_EMBED_CHARS, MAX_EMBED_TEXTS
from tests.conftest import RunningServer, start_server
from tests.support.openai_stub import OpenAIStub, Reply, error_body

pytestmark = pytest.mark.e2e

MODEL = "openai:text-embedding-3-small"


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(dimensions=1536) as running:
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory, stub) -> RunningServer:
    running = start_server(
        tmp_path_factory.mktemp("kindex-hostile-import"),
        {"OPENAI_API_KEY": "sk-test-0123456789abcdef", "OPENAI_BASE_URL": stub.base_url},
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def admin(server):
    session = server.session(server.admin_key)
    yield session
    session.close()


def batch(model: str, dimensions: int, documents: list[dict], chunks: list[dict]) -> dict:
    return {
        "format_version": 1,
        "embedding_model": model,
        "dimensions": dimensions,
        "documents": documents,
        "chunks": chunks,
    }


def blob_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file() and "tenants" in p.parts)


def test_chunk_offsets_cannot_turn_a_small_body_into_gigabytes_of_blob(server, admin):
    # Given the reproduction: 8 documents of one chunk "x" at offset 2^26 - 1
    assert admin.put(server.url("/v1/collections/amp"), json={"embedding_model": "hash:8"}).status_code == 201
    before = blob_bytes(server.data_dir)
    body = batch(
        "hash:8",
        8,
        [{"id": f"x{n}", "chunk_count": 1} for n in range(8)],
        [
            {
                "document_id": f"x{n}",
                "index": 0,
                "start": 67108863,
                "end": 67108864,
                "text": "x",
                "vector": [1, 0, 0, 0, 0, 0, 0, 0],
            }
            for n in range(8)
        ],
    )
    # When it is imported
    response = admin.post(server.url("/v1/collections/amp/import"), json=body)
    # Then it is a 422 naming the field, nothing is stored, and the blobs did not grow
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_input" and "chunks[0].end" in response.json()["message"]
    assert admin.get(server.url("/v1/collections/amp/documents")).json()["documents"] == []
    assert blob_bytes(server.data_dir) - before < 64 * 1024


def test_gaps_are_bounded_by_the_text_the_chunks_carry_also_over_several_batches(server, admin):
    admin.put(server.url("/v1/collections/gaps"), json={"embedding_model": "hash:8"})
    vector = [1, 0, 0, 0, 0, 0, 0, 0]
    # Given a document whose first batch brings chunk 0 (100 characters at 0)
    first = admin.post(
        server.url("/v1/collections/gaps/import"),
        json=batch(
            "hash:8",
            8,
            [{"id": "d", "chunk_count": 2}],
            [{"document_id": "d", "index": 0, "start": 0, "end": 100, "text": "a" * 100, "vector": vector}],
        ),
    )
    assert first.status_code == 200 and first.json()["incomplete_documents"] == ["d"]
    # When a later batch puts chunk 1 far past what the two chunks hold / Then 422, and the document waits as it was
    far = admin.post(
        server.url("/v1/collections/gaps/import"),
        json=batch(
            "hash:8",
            8,
            [],
            [{"document_id": "d", "index": 1, "start": 10_000, "end": 10_010, "text": "b" * 10, "vector": vector}],
        ),
    )
    assert far.status_code == 422 and "chunks[0].end" in far.json()["message"]
    assert admin.get(server.url("/v1/collections/gaps/documents/d")).json()["status"] == "in_progress"
    # And a gap no longer than the chunks' text (whitespace a chunker skipped) completes it
    near = admin.post(
        server.url("/v1/collections/gaps/import"),
        json=batch(
            "hash:8",
            8,
            [],
            [{"document_id": "d", "index": 1, "start": 150, "end": 160, "text": "b" * 10, "vector": vector}],
        ),
    )
    assert near.status_code == 200 and near.json()["documents_completed"] == 1
    document = admin.get(server.url("/v1/collections/gaps/documents/d")).json()
    assert document["status"] == "indexed" and document["content"] == "a" * 100 + " " * 50 + "b" * 10


def test_a_batch_over_the_file_limit_is_refused(tmp_path):
    # Given a deployment whose file limit is 1,000 bytes
    running = start_server(tmp_path / "data", {"KINDEX_MAX_FILE_BYTES": "1000"})
    try:
        session = running.session(running.admin_key)
        session.put(running.url("/v1/collections/small"), json={"embedding_model": "hash:8"})
        text = "é" * 600  # 600 characters, 1,200 bytes
        response = session.post(
            running.url("/v1/collections/small/import"),
            json=batch(
                "hash:8",
                8,
                [{"id": "d", "chunk_count": 1}],
                [{"document_id": "d", "index": 0, "start": 0, "end": 600, "text": text, "vector": [1] + [0] * 7}],
            ),
        )
        # Then 422 naming the bound, and nothing stored
        assert response.status_code == 422 and "file limit of 1000 bytes" in response.json()["message"]
        assert session.get(running.url("/v1/collections/small/documents")).json()["documents"] == []
    finally:
        running.stop()


def indexed_document(server, admin, collection: str) -> dict:
    """An indexed document `d` of an OpenAI-model collection (imported with its vector, under the collection's own
    chunking, so that no re-ingest follows)."""
    created = admin.put(server.url(f"/v1/collections/{collection}"), json={"embedding_model": MODEL}).json()
    text = "The original text."
    body = batch(
        MODEL,
        1536,
        [{"id": "d", "chunk_count": 1}],
        [{"document_id": "d", "index": 0, "start": 0, "end": len(text), "text": text, "vector": [1.0] + [0.0] * 1535}],
    )
    body["chunking"] = {
        name: created[name] for name in ("chunking_method", "chunking_max_size", "chunking_overlap_offset")
    }
    response = admin.post(server.url(f"/v1/collections/{collection}/import"), json=body)
    assert response.status_code == 200 and response.json()["documents_completed"] == 1
    return admin.get(server.url(f"/v1/collections/{collection}/documents/d")).json()


@pytest.mark.parametrize(
    "reply, status",
    [
        (
            Reply(400, {}, error_body("This model's maximum context length is 8192 tokens", "context_length_exceeded")),
            422,
        ),
        (Reply(500, {}, error_body("The server had an error", error_type="server_error")), 422),
    ],
)
def test_a_batch_whose_embedding_fails_changes_nothing(server, admin, stub, reply, status):
    # Given an indexed document
    collection = f"atomic-{reply.status}"
    before = indexed_document(server, admin, collection)
    chunks_before = admin.get(server.url(f"/v1/collections/{collection}/documents/d/chunks")).json()
    # When a batch replacing it must embed (no vector) and the provider fails every attempt
    stub.script(*[reply] * 8)
    text = "A replacement text."
    response = admin.post(
        server.url(f"/v1/collections/{collection}/import"),
        json=batch(
            MODEL,
            1536,
            [{"id": "d", "chunk_count": 1}],
            [{"document_id": "d", "index": 0, "start": 0, "end": len(text), "text": text}],
        ),
    )
    with stub._lock:  # what is left of the script is not for the next test
        stub._replies.clear()
    # Then the batch fails whole, and the document is exactly as it was, chunks and all
    assert response.status_code == status, response.text
    after = admin.get(server.url(f"/v1/collections/{collection}/documents/d")).json()
    assert (after["status"], after["version"], after["content"]) == ("indexed", before["version"], before["content"])
    assert admin.get(server.url(f"/v1/collections/{collection}/documents/d/chunks")).json() == chunks_before


def forged(inner) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": json.dumps(inner)}).encode()).decode().rstrip("=")


def plain(value: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": value}).encode()).decode().rstrip("=")


def test_forged_cursors_are_422_on_every_listing(server, admin):
    admin.put(server.url("/v1/collections/cursors"), json={"embedding_model": "hash:8"})
    admin.put(server.url("/v1/collections/cursors/documents/d"), json={"content": "Some text to list."})
    export = "/v1/collections/cursors/export"
    cases = [
        (export, forged(["in", "d", 2**63, "c"])),
        (export, forged(["in", "d", 3, "\ud800"])),
        (export, forged(["in", "\ud800", 3, "c"])),
        (export, forged(["after", "\ud800"])),
        (export, forged(["in", "d", -2, "c"])),
        ("/v1/collections/cursors/documents", plain("\ud800")),
        ("/v1/collections", plain("\ud800")),
        ("/v1/collections/cursors/documents/d/chunks", plain("99999999999:c")),
        ("/v1/collections/cursors/documents/d/chunks", plain("3:\ud800")),
    ]
    for path, cursor in cases:
        response = admin.get(server.url(path), params={"cursor": cursor})
        assert response.status_code == 422, (path, cursor, response.status_code, response.text)
        assert response.json()["error"] == "invalid_input" and "cursor" in response.json()["message"]


def test_a_batch_that_must_embed_more_than_a_request_allows_is_413_and_the_sdk_splits_it(server, admin):
    # Given a hash:8 collection and a batch of 2 x MAX_EMBED_TEXTS chunks exported under another model
    admin.put(server.url("/v1/collections/big"), json={"embedding_model": "hash:8"})
    count = 2 * MAX_EMBED_TEXTS + 1
    texts = [f"chunk number {i} of the long document. " for i in range(count)]
    starts = [sum(len(t) for t in texts[:i]) for i in range(count)]
    body = batch(
        "hash:16",
        16,
        [{"id": "long", "chunk_count": count}],
        [
            {"document_id": "long", "index": i, "start": starts[i], "end": starts[i] + len(t), "text": t}
            for i, t in enumerate(texts)
        ],
    )
    # When it is posted as one request / Then 413 naming the bounds, and nothing is stored
    response = admin.post(server.url("/v1/collections/big/import"), json=body)
    assert response.status_code == 413, response.text
    message = response.json()["message"]
    assert f"at most {MAX_EMBED_TEXTS} texts and {MAX_EMBED_CHARS} characters" in message and "chunks" in message
    assert admin.get(server.url("/v1/collections/big/documents")).json()["documents"] == []
    # And the SDK sends it in parts that fit, as one result
    with Kindex(server.base_url, key=server.admin_key) as client:
        result = client.import_batch("big", body)
    assert (
        result.documents_started,
        result.documents_completed,
        result.chunks_written,
        result.texts_embedded,
        result.incomplete_documents,
    ) == (1, 1, count, count, [])
    document = admin.get(server.url("/v1/collections/big/documents/long")).json()
    assert document["status"] == "indexed" and document["content"] == "".join(texts)
