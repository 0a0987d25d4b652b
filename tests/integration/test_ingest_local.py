"""The ingest path on the local backend: blob event -> queue -> ingest handler -> chunks, vectors, status."""

import time

import numpy as np
import pytest

from functions import ingest as ingest_function
from kindex.domain.errors import EmbeddingFailed
from kindex.domain.keys import blob_key
from kindex.domain.models import Collection, CollectionInput, DocumentInput
from kindex_local.deployment import build_worker
from kindex_local.server import LambdaContext
from kindex_local.worker import sqs_event
from tests.conftest import SHARED_DATA
from tests.support.local_queue import queue_depth
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


class CountingEmbedder:
    """Wraps the deterministic hash embedder and counts what reaches it; can be told to fail."""

    def __init__(self, inner):
        self.inner, self.model, self.dimensions = inner, inner.model, inner.dimensions
        self.calls, self.texts, self.fail = 0, 0, False
        self.delay = 0.0  # seconds per text: a slow provider or a CPU-bound model
        self.sent: list[list[str]] = []

    def embed(self, texts):
        if self.fail:
            raise EmbeddingFailed("provider unavailable (test)")
        self.calls += 1
        self.texts += len(texts)
        self.sent.append(list(texts))
        time.sleep(self.delay * len(texts))
        return self.inner.embed(texts)

    def embed_queries(self, texts):
        return self.inner.embed_queries(texts)


@pytest.fixture
def deployment(local_container):
    from kindex.adapters.embedders.hashing import HashEmbedder

    counting = CountingEmbedder(HashEmbedder(384))
    local_container.embeddings.embedder_for = lambda model: counting
    local_container.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
    worker = build_worker()
    worker.backoff = 0.0
    return local_container, counting, worker


def put(services, doc_id, content, **fields):
    return services.catalog.put_document("t", "c", doc_id, DocumentInput(content=content, **fields))[0]


def doc(services, doc_id):
    return services.adapters.metadata.get_document("t", "c", doc_id)


TEXT = "\n\n".join(f"Paragraph {i} talks about topic {i} with several words to fill the space." for i in range(20))


def test_content_is_indexed_with_chunks_and_vectors(deployment):
    services, embedder, worker = deployment
    # Given a document written through the API service
    put(services, "d1", TEXT, language="en")
    assert doc(services, "d1").status.value == "pending"
    # When the worker processes the queue
    worker.drain()
    # Then it is indexed, with chunks whose offsets point into the text and one vector per chunk
    document = doc(services, "d1")
    assert document.status.value == "indexed" and document.chunk_count > 1 and document.indexed_at
    chunks = services.adapters.chunks.list_chunks("t", "c", "d1")
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(TEXT[c.start : c.end] == c.text for c in chunks)
    indexed_ids = services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert indexed_ids == {c.chunk_id for c in chunks}
    query = embedder.inner.embed([chunks[3].text])[0]
    assert services.adapters.search_index.knn_search("hash:384", "t", ["c"], query, 1)[0].chunk_id == chunks[3].chunk_id


def test_unchanged_reingest_makes_no_embedding_call_and_edit_embeds_only_new_chunks(deployment):
    services, embedder, worker = deployment
    put(services, "d1", TEXT)
    worker.drain()
    calls, texts = embedder.calls, embedder.texts
    first_ids = {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d1")}
    # Re-sending the same content: nothing to do
    put(services, "d1", TEXT)
    worker.drain()
    assert (embedder.calls, embedder.texts) == (calls, texts)
    # The same text in another document reuses the cache: no embedding either
    put(services, "d2", TEXT)
    worker.drain()
    assert embedder.texts == texts and doc(services, "d2").status.value == "indexed"
    # Editing one paragraph embeds only the chunk(s) whose text changed, and the old chunk disappears
    edited = TEXT.replace("Paragraph 7 talks about topic 7", "Paragraph 7 now discusses something else")
    put(services, "d1", edited)
    worker.drain()
    assert 1 <= embedder.texts - texts <= 2
    new_ids = {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d1")}
    assert new_ids != first_ids
    vectors = services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert not (first_ids - new_ids) & vectors  # stale chunks gone from the index
    assert doc(services, "d1").version == 2


def test_duplicate_and_stale_events_converge_to_the_latest_content(deployment):
    services, embedder, worker = deployment
    put(services, "d1", "first version of the text")
    put(services, "d1", "second version of the text")
    # two events are queued (one per write); both read the current object, so the result is the second version
    worker.drain()
    chunks = services.adapters.chunks.list_chunks("t", "c", "d1")
    assert [c.text for c in chunks] == ["second version of the text"]
    assert doc(services, "d1").status.value == "indexed"


def test_bad_files_fail_with_one_line_reason_and_do_not_affect_others(deployment):
    services, _, worker = deployment
    catalog = services.catalog
    catalog.put_file("t", "c", "corrupt", "broken.pdf", b"%PDF-1.4 this is not really a pdf")
    catalog.put_file("t", "c", "empty", "empty.txt", b"   \n\n  ")
    catalog.put_file("t", "c", "weird", "data.xyz", b"\x00\x01binary")
    catalog.put_file("t", "c", "fine", "fine.md", b"# Fine\n\nThis one is fine.")
    worker.drain()
    reasons = {d: doc(services, d).failure_reason for d in ("corrupt", "empty", "weird")}
    assert reasons["corrupt"].startswith("CorruptFile: ")
    assert reasons["empty"] == "EmptyText: No text could be extracted"
    assert reasons["weird"].startswith("UnsupportedType: ")
    assert all("\n" not in r and len(r) <= 500 for r in reasons.values())
    assert all(doc(services, d).status.value == "failed" for d in reasons)
    assert doc(services, "fine").status.value == "indexed"


def test_file_over_the_limit_fails_clearly(deployment):
    services, _, worker = deployment
    services.ingest.limits.max_file_bytes = 1000
    services.catalog.put_file("t", "c", "big", "big.txt", b"word " * 400)
    worker.drain()
    assert doc(services, "big").failure_reason.startswith("LimitExceeded: File is 2000 bytes")


def test_too_many_chunks_fails_clearly(deployment):
    services, _, worker = deployment
    services.ingest.limits.max_chunks_per_document = 3
    put(services, "long", TEXT)
    worker.drain()
    assert doc(services, "long").failure_reason.startswith("LimitExceeded: Document has")


def test_provider_outage_is_retried_then_dead_lettered_and_redrive_recovers(deployment):
    services, embedder, worker = deployment
    embedder.fail = True
    put(services, "d1", TEXT)
    worker.drain()
    # three deliveries, then the message is dead-lettered and the document says why
    assert queue_depth(services.adapters.queue) == (0, 1)
    document = doc(services, "d1")
    assert document.status.value == "failed" and document.failure_reason.startswith("EmbeddingFailed: ")
    assert document.failure_retryable
    # When the provider is back and the dead letters are redriven, the document is indexed
    embedder.fail = False
    assert services.adapters.queue.redrive() == 1
    worker.drain()
    assert doc(services, "d1").status.value == "indexed"


def test_delete_document_and_collection_leave_nothing_behind(deployment):
    services, _, worker = deployment
    put(services, "d1", TEXT)
    put(services, "d2", TEXT + " extra")
    worker.drain()
    services.catalog.delete_document("t", "c", "d1")
    worker.drain()  # the blob's removal event is a no-op now
    assert services.adapters.chunks.list_chunks("t", "c", "d1") == []
    remaining = services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert remaining == {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d2")}
    services.catalog.delete_collection("t", "c")
    worker.drain()
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()
    assert services.adapters.chunks.list_chunks("t", "c", "d2") == []
    assert services.adapters.blobs.list_blobs("tenants/") == []


def test_blob_removed_directly_deletes_the_document_everywhere(deployment):
    services, _, worker = deployment
    put(services, "d1", TEXT)
    worker.drain()
    source = doc(services, "d1").source
    services.adapters.blobs.delete_blob(source)  # like `aws s3 rm` on the tenant's prefix
    worker.drain()
    assert doc(services, "d1") is None
    assert services.adapters.chunks.list_chunks("t", "c", "d1") == []
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()


def test_file_dropped_into_the_prefix_becomes_a_document(deployment):
    services, _, worker = deployment
    from kindex.domain.keys import blob_key

    services.adapters.blobs.put_blob(
        blob_key("t", "c", "dropped doc", "notes.md"), b"# Notes\n\nDropped in directly.", ""
    )
    worker.drain()
    document = doc(services, "dropped doc")
    assert document.status.value == "indexed" and document.title == "notes.md"


def test_real_pdf_keeps_page_numbers(deployment):
    services, _, worker = deployment
    pdf = SHARED_DATA / "docs" / "pdf" / "docling-multi_page.pdf"
    services.catalog.put_file("t", "c", "pdf", pdf.name, pdf.read_bytes())
    worker.drain()
    chunks = services.adapters.chunks.list_chunks("t", "c", "pdf")
    assert doc(services, "pdf").status.value == "indexed"
    pages = [(c.page_start, c.page_end) for c in chunks]
    assert pages[0][0] == 1 and max(p[1] for p in pages) == 5
    assert all(a <= b for a, b in pages)
    assert [p[0] for p in pages] == sorted(p[0] for p in pages)


def test_embedding_cache_is_keyed_by_tenant_and_model(local_container):
    cache = local_container.adapters.embedding_cache
    cache.put_vectors("t1", "m1", {"h": np.ones(3, dtype=np.float32)})
    assert "h" in cache.get_vectors("t1", "m1", ["h"]) and cache.get_vectors("t1", "m2", ["h"]) == {}
    assert cache.get_vectors("t2", "m1", ["h"]) == {}


def test_document_deleted_while_an_event_is_in_flight_is_not_resurrected(deployment):
    services, _, worker = deployment
    put(services, "d1", TEXT)
    worker.drain()
    # Given a created event still queued for a document that is then deleted
    put(services, "d1", TEXT + " changed")
    services.catalog.delete_document("t", "c", "d1")
    # When the stale events are processed
    worker.drain()
    # Then the document stays deleted and nothing of it is left
    assert doc(services, "d1") is None
    assert services.adapters.chunks.list_chunks("t", "c", "d1") == []
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()


def test_deletion_during_indexing_leaves_nothing_behind(deployment):
    services, embedder, worker = deployment
    put(services, "d1", TEXT)
    original = embedder.embed

    def delete_midway(texts):
        services.catalog.delete_document("t", "c", "d1")  # the API deletes while the worker embeds
        return original(texts)

    embedder.embed = delete_midway
    worker.drain()
    assert doc(services, "d1") is None
    assert services.adapters.chunks.list_chunks("t", "c", "d1") == []
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()


def test_a_batch_of_small_documents_is_embedded_in_one_call(deployment):
    services, embedder, worker = deployment
    # Given ten small documents queued together
    for i in range(10):
        put(services, f"small-{i}", f"Small document number {i} about topic {i}.")
    # When the worker takes them as one SQS-sized batch
    worker.drain()
    # Then their chunks reached the embedder in one call, and every document is indexed
    assert embedder.calls == 1 and embedder.texts == 10
    assert all(doc(services, f"small-{i}").status.value == "indexed" for i in range(10))


def test_an_outage_costs_one_retry_sequence_per_batch_not_per_document(deployment):
    services, embedder, worker = deployment
    put(services, "cached", "Text that is embedded already.")
    worker.drain()
    attempts = []

    def failing(texts):
        attempts.append(len(texts))
        raise EmbeddingFailed("provider unavailable (test)")

    embedder.embed = failing
    for i in range(3):
        put(services, f"new-{i}", f"New text {i} that needs embedding.")
    put(services, "copy", "Text that is embedded already.")  # its only chunk is cached
    worker.max_receives = 1
    worker.drain()
    assert attempts == [3]  # one provider call for the whole batch, none per document
    assert all(doc(services, f"new-{i}").failure_reason.startswith("EmbeddingFailed") for i in range(3))
    assert doc(services, "copy").status.value == "indexed"


def test_each_object_is_read_once_per_batch(deployment, monkeypatch):
    services, _, worker = deployment
    put(services, "once", TEXT)
    reads = []
    original = services.adapters.blobs.get_blob
    monkeypatch.setattr(
        services.adapters.blobs, "get_blob", lambda key, **kwargs: reads.append(key) or original(key, **kwargs)
    )
    worker.drain()
    source = doc(services, "once").source
    assert doc(services, "once").status.value == "indexed" and reads.count(source) == 1


# Fairness, progress and batch isolation

BIG = "\n\n".join(f"Section {i} of the long report covers subject {i} in a few plain words." for i in range(1000))


def write_like_a_client(write, attempts=5):
    """A write racing the ingest of the same document may answer 409 (the API's version check); a client retries."""
    from kindex.domain.errors import Conflict

    for _ in range(attempts - 1):
        try:
            return write()
        except Conflict:
            time.sleep(0.01)
    return write()


def test_small_documents_are_indexed_within_seconds_while_a_large_one_runs(deployment):
    services, embedder, _ = deployment
    catalog = services.catalog
    # Given two tenants, and an embedder slow enough that a 1,000-chunk document takes several seconds
    embedder.delay = 0.005
    for tenant in ("big-tenant", "small-tenant"):
        catalog.put_collection(tenant, "c", CollectionInput(chunking_max_size=100))
    pool = build_worker()  # the pool `kindex serve` runs
    pool.threads, pool.poll_interval = 3, 0.02  # the default KINDEX_INGEST_WORKERS, whatever the environment says
    pool.start()
    try:
        # When one tenant's large document is being indexed
        write_like_a_client(lambda: catalog.put_document("big-tenant", "c", "big", DocumentInput(content=BIG)))
        big = lambda: services.adapters.metadata.get_document("big-tenant", "c", "big")  # noqa: E731
        wait_until(
            lambda: big().status.value,
            until=lambda status: status == "in_progress",
            message="the large document did not start",
        )
        # And another tenant, then the same tenant, each write a one-line document
        for tenant, content in (("small-tenant", "One line about cats."), ("big-tenant", "One line about dogs.")):
            write_like_a_client(
                lambda tenant=tenant, content=content: catalog.put_document(
                    tenant, "c", "one-line", DocumentInput(content=content)
                )
            )
        progress = []

        def small_ones_indexed():
            progress.append((big().status.value, big().chunks_done, big().chunk_count))
            return all(
                services.adapters.metadata.get_document(t, "c", "one-line").status.value == "indexed"
                for t in ("small-tenant", "big-tenant")
            )

        wait_until(small_ones_indexed, message="the one-line documents were not indexed")
        # Then both are indexed while the large one is still in progress, with partial progress: they never waited
        # behind it (no wall-clock bound: a loaded machine makes the one-liners slow too, which is no bug)
        assert big().status.value == "in_progress"

        def big_one_indexed():
            progress.append((big().status.value, big().chunks_done, big().chunk_count))
            return progress[-1][0] == "indexed"

        wait_until(big_one_indexed, message="the large document was not indexed")
        assert any(status == "in_progress" and 0 < done < count == 1000 for status, done, count in progress), progress
    finally:
        pool.stop()
    # And once indexed, every chunk is done and searchable
    assert (big().chunk_count, big().chunks_done) == (1000, 1000)
    assert len(services.adapters.search_index.chunk_ids("hash:384", "big-tenant", "c")) == 1001


def test_new_content_written_during_indexing_wins_over_the_stale_run(deployment):
    services, embedder, worker = deployment
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=100))
    put(services, "d1", BIG)
    original, calls = embedder.embed, []

    def write_new_content_midway(texts):
        calls.append(len(texts))
        if len(calls) == 2:  # after the first slice and its progress write
            put(services, "d1", "Entirely new content.")
        return original(texts)

    embedder.embed = write_new_content_midway
    # When the worker runs the stale event (its next progress write conflicts) and the new one
    worker.drain()
    # Then the stored, indexed and searchable content is the new write's, and nothing of the old one is left
    document = doc(services, "d1")
    assert (document.status.value, document.version, document.chunk_count, document.chunks_done) == ("indexed", 2, 1, 1)
    chunks = services.adapters.chunks.list_chunks("t", "c", "d1")
    assert [c.text for c in chunks] == ["Entirely new content."]
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == {chunks[0].chunk_id}
    assert services.catalog.get_document("t", "c", "d1")[1] == "Entirely new content."


def test_a_batch_runs_its_small_documents_first_and_embeds_them_together(deployment):
    services, embedder, worker = deployment
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=100))
    # Given a large document queued before three small ones, all in one batch
    put(services, "big", BIG)
    for i in range(3):
        put(services, f"small-{i}", f"Small note {i}.")
    worker.drain()
    # Then the small ones were embedded first, in one call, then the large one in slices of at most 128 texts
    assert embedder.sent[0] == ["Small note 0.", "Small note 1.", "Small note 2."]
    assert [len(call) for call in embedder.sent[1:]] == [128] * 7 + [104]
    assert all(doc(services, d).status.value == "indexed" for d in ("big", "small-0", "small-1", "small-2"))


def store_collection_with_unknown_model(services, tenant):
    """A collection saved before the API checked models against the registry (written straight to the store)."""
    services.adapters.metadata.put_collection(tenant, Collection(id="old", embedding_model="local:foo"), create=True)


def test_an_unknown_model_fails_only_its_own_record(deployment):
    services, _, _ = deployment
    services.embeddings.embedder_for = services.adapters.embedder  # the real registry
    # Given one tenant's collection with a model the registry does not know, and another tenant's valid collection
    store_collection_with_unknown_model(services, "x")
    services.catalog.put_collection("t", "c", CollectionInput(embedding_model="hash:384"))
    services.catalog.put_document("x", "old", "bad", DocumentInput(content="Text for an unknown model."))
    put(services, "good", "Text for a known model.")
    # When both records come in one batch (locally a receive serves one tenant: two receives make the batch)
    messages = services.adapters.queue.receive(10, 30) + services.adapters.queue.receive(10, 30)
    bad_message = next(m for m in messages if "/x/" in m.body)
    response = ingest_function.handler(sqs_event(messages), LambdaContext("kindex-ingest"))
    # Then only the bad record is reported failed, and each document says what happened to it
    assert response["batchItemFailures"] == [{"itemIdentifier": bad_message.message_id}]
    assert doc(services, "good").status.value == "indexed"
    bad = services.adapters.metadata.get_document("x", "old", "bad")
    assert bad.status.value == "failed" and bad.failure_retryable
    assert bad.failure_reason.startswith("UnknownModel: unknown embedding model 'local:foo'")


def test_an_unexpected_error_in_one_documents_preparation_fails_only_that_record(deployment, monkeypatch):
    services, _, _ = deployment
    from kindex.text.extract import extract

    def extract_that_breaks_on_one_file(data, **kwargs):
        if b"poison" in data:
            raise ValueError("a defect deep inside a parser")
        return extract(data, **kwargs)

    monkeypatch.setattr(services.ingest, "_extract", extract_that_breaks_on_one_file)
    services.catalog.put_file("t", "c", "broken", "broken.txt", b"poison")
    put(services, "fine", "Perfectly fine text.")
    messages = services.adapters.queue.receive(10, 30)
    broken_message = next(m for m in messages if "broken" in m.body)
    # When the batch runs / Then only the broken record fails, its document says so without internals
    response = ingest_function.handler(sqs_event(messages), LambdaContext("kindex-ingest"))
    assert response["batchItemFailures"] == [{"itemIdentifier": broken_message.message_id}]
    assert doc(services, "fine").status.value == "indexed"
    broken = doc(services, "broken")
    assert (broken.status.value, broken.failure_reason) == (
        "failed",
        "InternalError: indexing failed unexpectedly (ValueError)",
    )


def test_an_unreadable_blob_fails_only_its_own_record(deployment, monkeypatch):
    services, _, _ = deployment
    services.catalog.put_file("t", "c", "unreadable", "u.txt", b"some text")
    put(services, "fine", "Perfectly fine text.")
    original = services.adapters.blobs.get_blob

    def flaky_storage(key, **kwargs):
        if "unreadable" in key:
            raise OSError("disk read error")
        return original(key, **kwargs)

    monkeypatch.setattr(services.adapters.blobs, "get_blob", flaky_storage)
    messages = services.adapters.queue.receive(10, 30)
    unreadable_message = next(m for m in messages if "unreadable" in m.body)
    response = ingest_function.handler(sqs_event(messages), LambdaContext("kindex-ingest"))
    assert response["batchItemFailures"] == [{"itemIdentifier": unreadable_message.message_id}]
    assert doc(services, "fine").status.value == "indexed"


def test_a_busy_pool_keeps_tenants_apart_embeds_each_text_once_and_ends_on_the_latest_writes(deployment):
    services, embedder, _ = deployment
    catalog = services.catalog
    embedder.delay = 0.001
    tenants = ("t1", "t2", "t3")
    for tenant in tenants:
        catalog.put_collection(tenant, "c", CollectionInput(chunking_max_size=100))
    pool = build_worker()
    pool.threads, pool.poll_interval = 3, 0.01
    pool.start()
    try:
        # Given three tenants writing documents with the same ids and partly the same texts, while the pool runs
        for round_ in range(4):
            for tenant in tenants:
                for i in range(5):
                    content = f"Shared paragraph {i}.\n\nRound {round_} text of {tenant} document {i}."
                    write_like_a_client(
                        lambda tenant=tenant, i=i, content=content: catalog.put_document(
                            tenant, "c", f"d{i}", DocumentInput(content=content)
                        )
                    )
        # When the queue drains
        wait_until(
            lambda: queue_depth(services.adapters.queue),
            until=lambda depth: depth == (0, 0),
            message="the queue did not drain",
        )
    finally:
        pool.stop()
    # Then every document holds its tenant's last write, in its chunks and in the index, and nothing else
    for tenant in tenants:
        indexed_ids = services.adapters.search_index.chunk_ids("hash:384", tenant, "c")
        expected_ids = set()
        for i in range(5):
            document = services.adapters.metadata.get_document(tenant, "c", f"d{i}")
            chunks = services.adapters.chunks.list_chunks(tenant, "c", f"d{i}")
            assert document.status.value == "indexed" and document.chunks_done == document.chunk_count == len(chunks)
            assert "".join(c.text for c in chunks).endswith(f"Round 3 text of {tenant} document {i}.")
            expected_ids |= {c.chunk_id for c in chunks}
        assert indexed_ids == expected_ids
    # And no text reached the embedder twice, however the threads overlapped
    sent = [text for call in embedder.sent for text in call]
    assert len(sent) == len(set(sent))


def test_a_batch_keeps_read_bytes_only_of_objects_within_its_budget(deployment, monkeypatch):
    services, embedder, worker = deployment
    # Given a budget for kept bytes that holds the first of two documents but not the longer second
    services.ingest.limits.prepare_max_bytes = len(TEXT.encode()) + 10
    put(services, "first", TEXT)
    put(services, "second", TEXT + " And one more sentence that makes it longer than the budget.")
    reads = []
    original = services.adapters.blobs.get_blob
    monkeypatch.setattr(
        services.adapters.blobs, "get_blob", lambda key, **kwargs: reads.append(key) or original(key, **kwargs)
    )
    # When one batch processes both
    worker.drain()
    # Then both indexed; the first was kept from the batch's first pass, the second read again in its own record
    first, second = doc(services, "first"), doc(services, "second")
    assert first.status.value == second.status.value == "indexed"
    assert reads.count(first.source) == 1 and reads.count(second.source) == 2


def test_file_over_the_limit_fails_alone_without_being_read(deployment, monkeypatch):
    services, _, worker = deployment
    # Given a file over the file limit dropped into the store next to an ordinary one
    services.ingest.limits.max_file_bytes = 1000
    services.adapters.blobs.put_blob(blob_key("t", "c", "big", "big.txt"), b"x" * 1001, "text/plain")
    put(services, "small", "A small document.")
    reads = []
    original = services.adapters.blobs.get_blob
    monkeypatch.setattr(
        services.adapters.blobs, "get_blob", lambda key, **kwargs: reads.append(key) or original(key, **kwargs)
    )
    # When the worker processes them
    worker.drain()
    # Then the big one failed with LimitExceeded and was never read; the other indexed
    big = doc(services, "big")
    assert big.status.value == "failed"
    assert big.failure_reason == "LimitExceeded: File is 1001 bytes; the limit is 1000 bytes"
    assert big.source not in reads
    assert doc(services, "small").status.value == "indexed"
