"""Fair ingest through `kindex serve`: a worker pool over a tenant-fair queue, progress while a large document is
indexed, and one record's failure kept to itself. The embedder is the OpenAI stub made deliberately slow, so a
large document takes seconds, as it does with a real model."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.conftest import RunningServer, start_server
from tests.support.openai_stub import OpenAIStub, hashed_vector
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

DIMENSIONS = 64
MODEL = f"openai:text-embedding-3-small@{DIMENSIONS}"
SECONDS_PER_TEXT = 0.005  # a 1,000-chunk document takes about 5 s to embed
BIG = "\n\n".join(f"Section {i} of the long report covers subject {i} in a few plain words." for i in range(1000))


def slow_vector(text: str) -> list[float]:
    time.sleep(SECONDS_PER_TEXT)
    return hashed_vector(text, DIMENSIONS)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory) -> Iterator[RunningServer]:
    with OpenAIStub(dimensions=DIMENSIONS, embed_fn=slow_vector) as stub:
        running = start_server(
            tmp_path_factory.mktemp("kindex-fair"),
            {
                "OPENAI_API_KEY": "sk-test-0123456789abcdef",
                "OPENAI_BASE_URL": stub.base_url,
                "KINDEX_REMOTE_EMBED_SLICE": "128",  # progress every 128 of the large document's 1,000 chunks
                "KINDEX_INGEST_WORKERS": "3",
            },
        )
        yield running
        running.stop()


def put(session, url, body) -> int:
    """PUT like a client: a write racing the ingest of the same document may answer 409, and is retried."""
    for _ in range(5):
        status = session.put(url, json=body).status_code
        if status != 409:
            return status
        time.sleep(0.05)
    return status


def document(session, server, collection, doc_id):
    return session.get(server.url(f"/v1/collections/{collection}/documents/{doc_id}")).json()


def test_another_tenants_one_line_document_is_indexed_while_a_large_one_runs(slow_server):
    server = slow_server
    big_tenant = server.session(server.admin_key)
    small_tenant = server.session(server.create_key("small", "admin"))
    for session in (big_tenant, small_tenant):
        assert (
            session.put(
                server.url("/v1/collections/reports"), json={"embedding_model": MODEL, "chunking_max_size": 100}
            ).status_code
            == 201
        )
    # Given a 1,000-chunk document being indexed for one tenant
    assert put(big_tenant, server.url("/v1/collections/reports/documents/big"), {"content": BIG}) in (200, 201)
    big = lambda: document(big_tenant, server, "reports", "big")  # noqa: E731
    wait_until(big, until=lambda body: body["status"] == "in_progress", message="the large document did not start")
    # When another tenant writes a one-line document
    assert put(
        small_tenant, server.url("/v1/collections/reports/documents/note"), {"content": "One line about cats."}
    ) in (200, 201)
    wait_until(
        lambda: document(small_tenant, server, "reports", "note"),
        until=lambda body: body["status"] == "indexed",
        message="the one-line document was not indexed",
    )
    # Then it is indexed while the large one is still being worked on: it never waited behind it. (No wall-clock
    # bound: on a loaded machine the one line took 6 s while the large one still ran, which is no bug.)
    assert big()["status"] == "in_progress"
    # And the large one shows its progress on the way, then is indexed with every chunk done
    seen = []

    def big_indexed():
        body = big()
        seen.append((body["status"], body["chunks_done"], body["chunk_count"]))
        return body["status"] == "indexed"

    wait_until(big_indexed, message="the large document was not indexed")
    assert any(status == "in_progress" and 0 < done < total == 1000 for status, done, total in seen), seen
    assert (seen[-1][1], seen[-1][2]) == (1000, 1000)
    chunks = big_tenant.get(server.url("/v1/collections/reports/documents/big/chunks"), params={"number": 1000}).json()[
        "chunks"
    ]
    assert len(chunks) == 1000


def test_a_collection_with_an_unknown_model_fails_alone(slow_server):
    from kindex.adapters.local.sqlite_db import SqliteDatabase
    from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore
    from kindex.domain.models import Collection

    server = slow_server
    legacy = server.session(server.create_key("legacy", "admin"))
    other = server.session(server.create_key("other", "admin"))
    # Given a collection saved (straight into the store) with a model this deployment does not know
    store = SqliteMetadataStore(SqliteDatabase(server.data_dir / "kindex.sqlite3"))
    store.put_collection("legacy", Collection(id="old", embedding_model="local:foo"), create=True)
    # When a document is written there, and another tenant writes one at the same time
    assert put(legacy, server.url("/v1/collections/old/documents/bad"), {"content": "Some text."}) in (200, 201)
    assert other.put(server.url("/v1/collections/fine"), json={"embedding_model": MODEL}).status_code == 201
    assert put(other, server.url("/v1/collections/fine/documents/good"), {"content": "Some text."}) in (200, 201)
    # Then the other tenant's document is indexed, and the bad one fails with a reason naming the model
    wait_until(
        lambda: document(other, server, "fine", "good"),
        until=lambda body: body["status"] == "indexed",
        timeout=20,
        message="the other tenant's document was not indexed",
    )
    wait_until(
        lambda: document(legacy, server, "old", "bad"),
        until=lambda body: body["status"] == "failed",
        timeout=20,
        message="the document of the unknown model did not fail",
    )
    bad = document(legacy, server, "old", "bad")
    assert bad["failure_reason"].startswith("UnknownModel: unknown embedding model 'local:foo'")
