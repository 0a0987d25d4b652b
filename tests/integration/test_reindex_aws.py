"""Reindex on the AWS backend under moto: jobs in DynamoDB, the scheduled planner function filling the reindex
queue, the worker function draining it, documents re-sent by SqsIngestTrigger to the ingest queue that S3 notifies,
drained through the ingest function; vectors in the OpenSearch double. Mirrors test_reindex_local.py: config
change, zero-downtime model switch, drift repair, and the scheduled functions."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from kindex.adapters.aws.dynamodb_jobs import DynamoDbJobStore, jobs_pk
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.keys import blob_key, decode_s3_event_key
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, utc_now
from kindex.domain.query import QueryRequest
from kindex.domain.transfer import ImportRequest
from kindex.domain.types import IndexRecord
from tests.support.aws import BUCKET, TABLE
from tests.support.aws_deployment import AwsStack, aws_stack, created_keys

pytestmark = pytest.mark.integration

DOCS = {
    f"d{i}": f"Document {i} is about {topic}. " * 4
    for i, topic in enumerate(["volcanoes", "penguins", "violins", "taxes", "marathons", "reefs"])
}


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    """A tenant with an admin key (the scheduled pass finds tenants through keys) and six indexed documents."""
    with aws_stack(monkeypatch) as stack:
        services = stack.services
        services.keys.create("t", "admin")
        services.catalog.put_collection("t", "c", CollectionInput(allow_guests=True, chunking_max_size=60))
        for doc_id, text in DOCS.items():
            services.catalog.put_document("t", "c", doc_id, DocumentInput(content=text))
        stack.drain()
        assert all(document(stack, d).status is DocumentStatus.INDEXED for d in DOCS)
        yield stack


def document(stack: AwsStack, doc_id: str):
    return stack.services.adapters.metadata.get_document("t", "c", doc_id)


def ask(stack: AwsStack, mode: str, text: str = "penguins"):
    return stack.services.query.query("t", ["c"], QueryRequest(query=text, k=3, mode=mode), multi=False)


def stored_chunk_ids(stack: AwsStack) -> set[str]:
    return {c.chunk_id for d in DOCS for c in stack.services.adapters.chunks.list_chunks("t", "c", d)}


def vectors_in_double(stack: AwsStack, model: str) -> int:
    """Tenant t's documents in every physical index of the double that serves `model` (read past the adapter)."""
    slug = model.replace(":", "-")
    return sum(
        1
        for name, state in stack.double.indices.items()
        if f"-{slug}-" in name
        for doc in state.live.values()
        if doc.source.get("tenant") == "t"
    )


def test_config_change_reindexes_every_document_through_the_queue(stack):
    services = stack.services
    before = {d: document(stack, d).chunk_count for d in DOCS}
    # Given the collection's chunking changes (config_version 2)
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=2000))
    # When a reindex job starts
    job = services.reindex_jobs.start("t", "c", clean=False)
    # Then it is running with every document enqueued, and stored in the tenant's partition for 30 days
    assert job.enqueued == len(DOCS) and job.status == "running"
    assert isinstance(services.adapters.jobs, DynamoDbJobStore)
    item = stack.dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": jobs_pk("t")}, "sk": {"S": job.id}})["Item"]
    assert int(item["expires_at"]["N"]) > 0
    # When the ingest function drains the queue
    bodies = stack.drain()
    # Then the queue carried one S3-shaped created-event per document source, on this bucket
    assert sorted(decode_s3_event_key(k) for k in created_keys(bodies)) == sorted(
        document(stack, d).source for d in DOCS
    )
    assert {r["s3"]["bucket"]["name"] for b in bodies for r in b["Records"]} == {BUCKET}
    # And the job is completed and every document re-chunked under config 2, chunks and vectors in step
    job = services.reindex_jobs.get_job("t", job.id)
    assert job.status == "completed" and job.done == job.total == len(DOCS)
    for doc_id in DOCS:
        rebuilt = document(stack, doc_id)
        assert rebuilt.indexed_config_version == 2 and rebuilt.chunk_count == 1 < before[doc_id]
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == stored_chunk_ids(stack)
    # And another tenant cannot read the job
    with pytest.raises(NotFound):
        services.reindex_jobs.get_job("other", job.id)


def test_model_change_keeps_queries_answering_then_switches(stack):
    services = stack.services
    old_vectors = vectors_in_double(stack, "hash:384")
    assert old_vectors == len(stored_chunk_ids(stack)) > len(DOCS)
    # Given the model changes: the old model keeps answering
    collection, _ = services.catalog.put_collection("t", "c", CollectionInput(embedding_model="hash:256"))
    assert collection.query_model == "hash:384" and collection.switching
    job = services.reindex_jobs.start("t", "c", clean=False)
    assert job.enqueued == len(DOCS)
    answered = []

    def queries_answer_with_the_old_model():
        for mode in ("vector", "hybrid"):
            response = ask(stack, mode)
            assert response.results and response.results[0].document_id == "d1"
            assert all(r.content for r in response.results)
        assert services.adapters.metadata.get_collection("t", "c").query_model == "hash:384"
        answered.append(True)

    # When the queue is processed one message at a time, queries are asked after every message
    stack.drain(batch_size=1, after_each=queries_answer_with_the_old_model)
    assert len(answered) == len(DOCS)
    # And the new vectors were built beside the old ones
    assert vectors_in_double(stack, "hash:384") == old_vectors
    assert services.adapters.search_index.chunk_ids("hash:256", "t", "c") == stored_chunk_ids(stack)
    # When the job is looked at after the last document
    job = services.reindex_jobs.get_job("t", job.id)
    # Then it switched the collection, and the old model's vectors are gone from OpenSearch
    assert job.status == "completed" and job.done == job.total == len(DOCS)
    collection = services.adapters.metadata.get_collection("t", "c")
    assert collection.query_model == "hash:256" and not collection.switching
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()
    assert vectors_in_double(stack, "hash:384") == 0
    # And queries answer from the new model
    for mode in ("vector", "hybrid"):
        response = ask(stack, mode)
        assert response.results[0].document_id == "d1" and response.results[0].content
    assert services.model_switch.finish_switches() == 0


def test_scheduled_function_rebuilds_model_and_chunking_change_then_switches(stack):
    services = stack.services
    # Given a model and chunking change together
    services.catalog.put_collection("t", "c", CollectionInput(embedding_model="hash:256", chunking_max_size=2000))
    # When the scheduled functions run (the planner, then the worker over its tasks)
    summary = stack.reindex_pass()
    # Then the planner sent one task for the tenant and one for its collection, and every document was enqueued
    assert summary == {"tenants": 1, "collections": 1, "tasks": 2}
    assert len(stack.receive(10)) == len(DOCS)
    assert services.adapters.metadata.get_collection("t", "c").query_model == "hash:384"

    # And while the work is processed, the old chunks still serve the old model
    def old_chunks_answer():
        top = ask(stack, "hybrid").results[0]
        assert top.document_id == "d1" and top.content

    stack.drain(batch_size=2, after_each=old_chunks_answer)
    assert services.adapters.metadata.get_collection("t", "c").query_model == "hash:384"
    # When the scheduled functions run again
    stack.reindex_pass()
    # Then they switched the collection, enqueued nothing, and collected the old chunks and vectors
    assert stack.receive(10) == []
    assert services.adapters.metadata.get_collection("t", "c").query_model == "hash:256"
    assert all(len(services.adapters.chunks.list_chunks("t", "c", d)) == 1 for d in DOCS)
    assert services.adapters.search_index.chunk_ids("hash:256", "t", "c") == stored_chunk_ids(stack)
    assert vectors_in_double(stack, "hash:384") == 0
    assert ask(stack, "vector").results[0].document_id == "d1"


def test_drift_is_repaired_by_the_scheduled_function(stack):
    services = stack.services
    # Given a vector without a chunk (of a document that does not exist)
    services.adapters.search_index.upsert(
        "hash:384",
        [
            IndexRecord(
                tenant="t",
                collection="c",
                document_id="ghost",
                chunk_id="ghost-chunk",
                vector=[1.0] * 384,
                text="ghost",
            )
        ],
    )
    # And a document that lost a chunk text in DynamoDB (its vector is then an orphan, the document incomplete)
    victim = services.adapters.chunks.list_chunks("t", "c", "d2")[0]
    services.adapters.chunks.delete_chunks("t", "c", document_id="d2", chunk_ids=[victim.chunk_id])
    # And a document without its vectors
    services.adapters.search_index.delete("hash:384", "t", "c", document_ids=["d3"])
    # And a blob without a document, and a blob of a collection that no longer exists, whose events were lost
    lost_key = blob_key("t", "c", "lost", "lost.md")
    gone_key = blob_key("t", "gone", "x", "x.txt")
    stack.s3.put_object(Bucket=BUCKET, Key=lost_key, Body=b"# Lost\n\nA lost upload.")
    stack.s3.put_object(Bucket=BUCKET, Key=gone_key, Body=b"orphan")
    assert stack.lose_events() == 2
    # When the scheduled functions run
    stack.reindex_pass()
    # Then they deleted the orphan blob and enqueued exactly d2, d3 and the lost blob
    assert stack.s3.list_objects_v2(Bucket=BUCKET, Prefix="tenants/t/collections/gone/").get("KeyCount") == 0
    bodies = stack.drain()
    assert sorted(decode_s3_event_key(k) for k in created_keys(bodies)) == sorted(
        [document(stack, "d2").source, document(stack, "d3").source, lost_key]
    )
    # And the orphan vectors are gone, d2 and d3 are whole again, and the lost upload became a document
    indexed = services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert "ghost-chunk" not in indexed
    assert victim in services.adapters.chunks.list_chunks("t", "c", "d2") and victim.chunk_id in indexed
    assert indexed == stored_chunk_ids(stack) | {
        c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "lost")
    }
    lost = document(stack, "lost")
    assert lost.status is DocumentStatus.INDEXED and lost.title == "lost.md" and lost.chunk_count == 1
    # And no version of the dead collection's blob is left in the versioned bucket
    assert stack.s3.list_object_versions(Bucket=BUCKET, Prefix="tenants/t/collections/gone/").get("Versions") is None


def test_failed_retryable_document_is_retried_and_clean_job_rebuilds(stack):
    services = stack.services
    # Given a document that failed for a reason worth retrying
    stored = document(stack, "d0")
    failed = stored.model_copy(
        update={
            "status": DocumentStatus.FAILED,
            "failure_reason": "EmbeddingFailed: outage",
            "failure_retryable": True,
            "revision": stored.revision + 1,
        }
    )
    services.adapters.metadata.put_document("t", failed, create=False)
    # When the scheduled functions run and the queue drains / Then exactly it is enqueued, and indexed again
    stack.reindex_pass()
    assert sorted(decode_s3_event_key(k) for k in created_keys(stack.drain())) == [document(stack, "d0").source]
    assert document(stack, "d0").status is DocumentStatus.INDEXED
    # When a clean reindex starts / Then the vectors are gone at once, and back after the queue drains
    job = services.reindex_jobs.start("t", "c", clean=True)
    assert job.enqueued == len(DOCS) and services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()
    stack.drain()
    assert services.reindex_jobs.get_job("t", job.id).status == "completed"
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == stored_chunk_ids(stack)
    assert len(ask(stack, "hybrid").results) == 3


def pass_at(stack: AwsStack, **later) -> None:
    """The scheduled functions, with the worker's clock `later` (a timedelta's fields) from now, then the ingest."""
    stack.services.reindex_worker.clock = lambda: utc_now() + timedelta(**later)
    stack.reindex_pass()
    stack.drain()


def import_of(document_id: str, chunk_count: int, *indexes: int, record: bool = True) -> ImportRequest:
    texts = [f"Imported part {i} of {document_id}. " for i in range(chunk_count)]
    starts = [sum(len(t) for t in texts[:i]) for i in range(chunk_count)]
    return ImportRequest(
        format_version=1,
        embedding_model="hash:384",
        dimensions=384,
        documents=[{"id": document_id, "title": "Imported", "chunk_count": chunk_count}] if record else [],
        chunks=[
            {
                "document_id": document_id,
                "index": i,
                "start": starts[i],
                "end": starts[i] + len(texts[i]),
                "text": texts[i],
            }
            for i in indexes
        ],
    )


def test_documents_whose_content_never_came_fail_after_their_bound_and_late_content_indexes_them(stack):
    services = stack.services
    catalog = services.catalog
    # Given in tenant t a document created with a title only and one whose upload URL was never used; and tenant u
    # with the same ids, whose content came
    services.keys.create("u", "admin")
    catalog.put_collection("u", "c", CollectionInput())
    for tenant in ("t", "u"):
        catalog.put_document(tenant, "c", "later", DocumentInput(title="A title first"))
        ticket = catalog.prepare_upload(tenant, "c", "up", "report.md", None, size=9)
    stack.s3.put_object(Bucket=BUCKET, Key=ticket.document.source, Body=b"# Report\n")
    catalog.put_document("u", "c", "later", DocumentInput(content="Tenant u sent its content in time."))
    stack.drain()
    # When the scheduled functions run within the hour (a first sweep of t's collection, then its pass)
    pass_at(stack, minutes=59)
    pass_at(stack, minutes=59)
    # Then both still wait
    assert document(stack, "later").status is DocumentStatus.PENDING
    assert document(stack, "up").status is DocumentStatus.PENDING
    # When they run past the bound
    pass_at(stack, minutes=61)
    # Then both failed for good, each saying what brings it back; u's documents of the same ids are indexed
    later, up = document(stack, "later"), document(stack, "up")
    assert (later.status, later.failure_retryable, up.status, up.failure_retryable) == (
        DocumentStatus.FAILED,
        False,
        DocumentStatus.FAILED,
        False,
    )
    assert later.failure_reason.startswith("NoContent: ") and up.failure_reason.startswith("UploadMissing: ")
    metadata = services.adapters.metadata
    assert {metadata.get_document("u", "c", d).status for d in ("later", "up")} == {DocumentStatus.INDEXED}
    # And they left the sparse attention index (no pass reads them again)
    assert not {"later", "up"} & set(services.adapters.metadata.attention_documents("t", "c", after=None, limit=100))
    # When a file comes through a new upload URL, and content is PUT / Then both are indexed
    notes = b"# Penguin notes\n\nThey came later than their title."
    ticket = catalog.prepare_upload("t", "c", "later", "notes.md", None, size=len(notes))
    stack.s3.put_object(Bucket=BUCKET, Key=ticket.document.source, Body=notes)
    catalog.put_document("t", "c", "up", DocumentInput(content="The report, sent as text instead."))
    stack.drain()
    assert {document(stack, d).status for d in ("later", "up")} == {DocumentStatus.INDEXED}
    assert [c.text for c in services.adapters.chunks.list_chunks("t", "c", "later")] == [notes.decode()]


def test_an_import_whose_chunks_stop_coming_fails_after_a_day_and_a_rerun_completes_it(stack):
    services = stack.services
    # Given tenant t's import of a 2-chunk document that got 1 chunk, and tenant u's complete one of the same ids
    services.keys.create("u", "admin")
    services.catalog.put_collection("u", "c", CollectionInput())
    assert services.transfer.import_batch("t", "c", import_of("imp", 2, 0)).incomplete_documents == ["imp"]
    assert services.transfer.import_batch("u", "c", import_of("imp", 2, 0, 1)).documents_completed == 1
    # When the scheduled functions run 23 hours later / Then it is still being imported
    pass_at(stack, hours=23)
    assert document(stack, "imp").status is DocumentStatus.IN_PROGRESS
    # When they run a day after its last chunk / Then it failed for good, saying how far it got; u's is indexed
    pass_at(stack, hours=25)
    failed = document(stack, "imp")
    assert failed.status is DocumentStatus.FAILED and not failed.failure_retryable
    assert failed.failure_reason.startswith("ImportIncomplete: 1 of 2 chunks arrived")
    assert services.adapters.metadata.get_document("u", "c", "imp").status is DocumentStatus.INDEXED
    # And the missing chunk alone is refused, while importing the document again completes it
    with pytest.raises(Conflict):
        services.transfer.import_batch("t", "c", import_of("imp", 2, 1, record=False))
    assert services.transfer.import_batch("t", "c", import_of("imp", 2, 0, 1)).documents_completed == 1
    assert document(stack, "imp").status is DocumentStatus.INDEXED
