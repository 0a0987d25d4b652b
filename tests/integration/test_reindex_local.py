"""Reindex on the local backend: config change, zero-downtime model switch, drift repair, jobs."""

from datetime import timedelta

import pytest

from kindex.domain.errors import Conflict
from kindex.domain.keys import blob_key
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, utc_now
from kindex.domain.query import QueryRequest
from kindex.domain.transfer import ImportRequest
from kindex_local.deployment import build_worker

pytestmark = pytest.mark.integration

DOCS = {
    f"d{i}": f"Document {i} is about {topic}. " * 4
    for i, topic in enumerate(["volcanoes", "penguins", "violins", "taxes", "marathons", "reefs"])
}


@pytest.fixture
def setup(local_container):
    services = local_container
    services.keys.create("t", "admin")  # the scheduled pass finds tenants through their keys
    services.catalog.put_collection("t", "c", CollectionInput(allow_guests=True, chunking_max_size=60))
    for doc_id, text in DOCS.items():
        services.catalog.put_document("t", "c", doc_id, DocumentInput(content=text))
    worker = build_worker()
    worker.drain()
    return services, worker


def ask(services, text="penguins"):
    return services.query.query("t", ["c"], QueryRequest(query=text, k=3), multi=False)


def test_chunking_change_reindexes_every_document(setup):
    services, worker = setup
    before = {d: services.adapters.metadata.get_document("t", "c", d).chunk_count for d in DOCS}
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=2000))
    job = services.reindex_jobs.start("t", "c", clean=False)
    assert job.enqueued == len(DOCS) and job.status == "running"
    worker.drain()
    job = services.reindex_jobs.get_job("t", job.id)
    assert job.status == "completed" and job.done == job.total == len(DOCS)
    for doc_id in DOCS:
        document = services.adapters.metadata.get_document("t", "c", doc_id)
        assert document.indexed_config_version == 2 and document.chunk_count == 1 < before[doc_id]
    ids = {c.chunk_id for d in DOCS for c in services.adapters.chunks.list_chunks("t", "c", d)}
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == ids


def test_model_change_keeps_queries_answering_then_switches(setup):
    services, worker = setup
    # When the model changes, the old model keeps answering
    collection, _ = services.catalog.put_collection("t", "c", CollectionInput(embedding_model="hash:256"))
    assert collection.query_model == "hash:384" and collection.switching
    assert ask(services).results[0].document_id == "d1"
    services.reindex_jobs.start("t", "c", clean=False)
    worker.batch_size = 1
    # Throughout the rebuild, every query answers with content from the old model
    while worker.run_once():
        response = ask(services)
        assert response.results and response.results[0].document_id == "d1" and response.results[0].content
        assert services.adapters.metadata.get_collection("t", "c").query_model == "hash:384"
    # The scheduler's check switches once every document is done
    assert services.model_switch.finish_switches() == 1
    collection = services.adapters.metadata.get_collection("t", "c")
    assert collection.query_model == "hash:256" and not collection.switching
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()
    assert ask(services).results[0].document_id == "d1"
    live = services.adapters.search_index.chunk_ids("hash:256", "t", "c")
    assert live == {c.chunk_id for d in DOCS for c in services.adapters.chunks.list_chunks("t", "c", d)}


def test_model_and_chunking_change_together_switch_cleanly(setup):
    services, worker = setup
    services.catalog.put_collection("t", "c", CollectionInput(embedding_model="hash:256", chunking_max_size=2000))
    services.reindex_planner.plan()
    worker.batch_size = 1
    while worker.run_once():
        assert ask(services).results[0].content  # old chunks still there for the old model
    services.reindex_planner.plan()  # the scheduled pass switches too (its sweep finds every document done)
    worker.drain()
    assert services.adapters.metadata.get_collection("t", "c").query_model == "hash:256"
    assert all(len(services.adapters.chunks.list_chunks("t", "c", d)) == 1 for d in DOCS)  # old chunks collected
    assert ask(services).results[0].document_id == "d1"


def test_drift_is_repaired(setup):
    services, worker = setup
    # vectors without chunks: a vector of a document that does not exist
    from kindex.domain.types import IndexRecord

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
    # a document that lost a chunk text (its vector is then an orphan, and the document incomplete)
    victim = services.adapters.chunks.list_chunks("t", "c", "d2")[0]
    services.adapters.chunks.delete_chunks("t", "c", document_id="d2", chunk_ids=[victim.chunk_id])
    # a document without its vectors
    services.adapters.search_index.delete("hash:384", "t", "c", document_ids=["d3"])
    # a blob without a document (its event was lost), and a blob of a collection that no longer exists
    services.adapters.blobs.notify = None  # as if the events were lost
    services.adapters.blobs.put_blob(
        blob_key("t", "c", "lost", "lost.md"), b"# Lost\n\nA lost upload.", "text/markdown"
    )
    services.adapters.blobs.put_blob(blob_key("t", "gone", "x", "x.txt"), b"orphan", "text/plain")
    from kindex.adapters.local.queue_notifier import QueueNotifier

    services.adapters.blobs.notify = QueueNotifier(services.adapters.queue)
    assert services.reindex_planner.plan() == {"tenants": 1, "collections": 1, "tasks": 2}
    assert services.adapters.blobs.list_blobs("tenants/t/collections/gone/")  # the planner only plans
    worker.drain()
    indexed = services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert "ghost-chunk" not in indexed
    # d2 was rebuilt: its chunk text and vector are both back
    assert victim in services.adapters.chunks.list_chunks("t", "c", "d2") and victim.chunk_id in indexed
    d3 = {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d3")}
    assert d3 and d3 <= services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert services.adapters.metadata.get_document("t", "c", "lost").status.value == "indexed"
    assert services.adapters.blobs.list_blobs("tenants/t/collections/gone/") == []


def test_failed_retryable_documents_are_retried(setup):
    services, worker = setup
    document = services.adapters.metadata.get_document("t", "c", "d0")
    services.adapters.metadata.put_document(
        "t",
        document.model_copy(
            update={
                "status": DocumentStatus.FAILED,
                "failure_reason": "EmbeddingFailed: outage",
                "failure_retryable": True,
                "revision": document.revision + 1,
            }
        ),
        create=False,
    )
    services.reindex_planner.plan()
    worker.drain()
    assert services.adapters.metadata.get_document("t", "c", "d0").status.value == "indexed"


def test_clean_reindex_rebuilds_from_scratch(setup):
    services, worker = setup
    job = services.reindex_jobs.start("t", "c", clean=True)
    assert job.enqueued == len(DOCS)
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()
    worker.drain()
    assert services.reindex_jobs.get_job("t", job.id).status == "completed"
    assert len(ask(services).results) == 3


def test_jobs_are_tenant_scoped(setup):
    services, _ = setup
    job = services.reindex_jobs.start("t", "c", clean=False)
    from kindex.domain.errors import NotFound

    with pytest.raises(NotFound):
        services.reindex_jobs.get_job("other", job.id)


def test_a_poisoned_task_is_dead_lettered_locally_without_holding_back_the_others(setup):
    services, worker = setup
    worker.backoff = 0.0  # retry at once, so one drain sees every receive
    # Given a retryable failed document and, on the same queue, a task body the worker cannot read
    document = services.adapters.metadata.get_document("t", "c", "d0")
    services.adapters.metadata.put_document(
        "t",
        document.model_copy(
            update={
                "status": DocumentStatus.FAILED,
                "failure_reason": "EmbeddingFailed: outage",
                "failure_retryable": True,
                "revision": document.revision + 1,
            }
        ),
        create=False,
    )
    services.adapters.queue.send('{"kindex_reindex": {"kind": "drop tables"}}', lane="t")
    # When the planner runs and the worker drains the queue
    assert services.reindex_planner.plan() == {"tenants": 1, "collections": 1, "tasks": 2}
    worker.drain()
    # Then the planned tasks did their work, and the poisoned one was dead-lettered (redrive finds exactly it)
    assert services.adapters.metadata.get_document("t", "c", "d0").status is DocumentStatus.INDEXED
    assert services.adapters.queue.redrive() == 1


def test_two_tenants_with_the_same_collection_id_get_their_own_state(setup):
    services, worker = setup
    # Given another tenant with a collection of the same id and a document of the same id
    services.keys.create("u", "admin")
    services.catalog.put_collection("u", "c", CollectionInput(allow_guests=True))
    services.catalog.put_document("u", "c", "d0", DocumentInput(content="Tenant u's own document."))
    worker.drain()
    services.reindex_planner.plan()
    worker.drain()
    # When t's collection changes its chunking
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=2000))
    services.reindex_planner.plan()
    worker.drain()
    # Then only t's documents were rebuilt, and u's collection stays covered at its own configuration
    assert services.adapters.metadata.get_document("t", "c", "d0").indexed_config_version == 2
    assert services.adapters.metadata.get_document("u", "c", "d0").indexed_config_version == 1
    assert services.adapters.metadata.get_state("u", "c").swept_config_version == 1
    services.reindex_planner.plan()
    worker.drain()
    assert services.adapters.metadata.get_state("t", "c").swept_config_version == 2


def test_a_job_larger_than_a_page_chains_its_pages_and_reports_honest_progress(setup):
    from kindex.app.reindex import ReindexLimits

    services, worker = setup
    limits = ReindexLimits(job_first_page_documents=2, sweep_page_documents=2)
    services.reindex_jobs.limits = services.reindex_worker.limits = limits
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=2000))
    # When a job starts / Then its request did one page (2 documents), and progress counts every document
    job = services.reindex_jobs.start("t", "c", clean=False)
    assert (job.enqueued, job.total, job.status) == (2, 2, "running")
    progress = services.reindex_jobs.get_job("t", job.id)
    assert (progress.total, progress.done, progress.status) == (len(DOCS), 0, "running")
    # When the worker drains the queue (the job's next pages, then the documents they re-sent)
    worker.drain()
    # Then every document was rebuilt, the job says so, and its enqueued count covers all pages
    job = services.reindex_jobs.get_job("t", job.id)
    assert (job.total, job.done, job.status) == (len(DOCS), len(DOCS), "completed")
    assert job.enqueued == len(DOCS)
    assert all(services.adapters.metadata.get_document("t", "c", d).indexed_config_version == 2 for d in DOCS)


def test_a_full_plan_sweeps_covered_collections_and_finds_what_drift_pages_cannot(setup):
    services, worker = setup
    services.reindex_planner.plan()
    worker.drain()  # the collection is covered now
    # Given a chunk text lost from the chunk store while its vector remains (the counts still match)
    victim = services.adapters.chunks.list_chunks("t", "c", "d2")[0]
    services.adapters.chunks.delete_chunks("t", "c", document_id="d2", chunk_ids=[victim.chunk_id])
    # When a scheduled pass runs / Then its drift page (counts only) does not see it
    services.reindex_planner.plan()
    worker.drain()
    assert victim not in services.adapters.chunks.list_chunks("t", "c", "d2")
    # When `kindex reindex --full` plans / Then the sweep compares the chunk store and rebuilds d2
    assert services.reindex_planner.plan(full=True) == {"tenants": 1, "collections": 1, "tasks": 2}
    worker.drain()
    assert victim in services.adapters.chunks.list_chunks("t", "c", "d2")
    assert victim.chunk_id in services.adapters.search_index.chunk_ids("hash:384", "t", "c")


def pass_at(services, worker, full: bool = False, **later) -> None:
    """One scheduled pass (`full`: a sweep of every document) whose clock reads `later` (a timedelta's fields) from
    now: what time does to waits."""
    services.reindex_worker.clock = lambda: utc_now() + timedelta(**later)
    services.reindex_planner.plan(full=full)
    worker.drain()


def import_of(document_id: str, chunk_count: int, *indexes: int, record: bool = True) -> ImportRequest:
    """An import batch: the document's record (unless `record` is False) and the chunks at `indexes` of its text."""
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


def test_a_document_created_without_content_fails_after_its_bound_and_a_later_upload_indexes_it(setup):
    services, worker = setup
    catalog = services.catalog
    # Given tenant t's document created with a title only, and tenant u's of the same ids, which got its content
    services.keys.create("u", "admin")
    catalog.put_collection("u", "c", CollectionInput(allow_guests=True))
    for tenant in ("t", "u"):
        catalog.put_document(tenant, "c", "later", DocumentInput(title="A title first"))
    catalog.put_document("u", "c", "later", DocumentInput(content="Tenant u sent its content in time."))
    worker.drain()
    # When the passes of the next hour run / Then it still waits (pending, no content yet: version 0)
    pass_at(services, worker, minutes=59)
    waiting = services.adapters.metadata.get_document("t", "c", "later")
    assert (waiting.status, waiting.version, waiting.failure_reason) == (DocumentStatus.PENDING, 0, None)
    # When a pass runs past the bound
    pass_at(services, worker, minutes=61)
    # Then it failed for good, saying what brings it back; u's document of the same ids is untouched
    failed = services.adapters.metadata.get_document("t", "c", "later")
    assert failed.status is DocumentStatus.FAILED and not failed.failure_retryable
    assert failed.failure_reason.startswith("NoContent: ") and "upload a file" in failed.failure_reason
    assert services.adapters.metadata.get_document("u", "c", "later").status is DocumentStatus.INDEXED
    # And it left the documents a pass looks at (nothing to retry)
    assert "later" not in services.adapters.metadata.attention_documents("t", "c", after=None, limit=100)
    # When its file is uploaded later / Then it is indexed like any upload
    notes = b"# Penguin notes\n\nPenguins came later than their title."
    ticket = catalog.prepare_upload("t", "c", "later", "notes.md", None, size=len(notes))
    assert ticket.document.status is DocumentStatus.PENDING and ticket.document.failure_reason is None
    services.adapters.blobs.put_blob(ticket.document.source, notes, "text/markdown")
    worker.drain()
    indexed = services.adapters.metadata.get_document("t", "c", "later")
    assert indexed.status is DocumentStatus.INDEXED and indexed.failure_reason is None
    assert [c.text for c in services.adapters.chunks.list_chunks("t", "c", "later")] == [notes.decode()]


def test_an_upload_url_never_used_fails_its_document_after_its_bound_and_content_still_indexes_it(setup):
    services, worker = setup
    catalog = services.catalog
    # Given an upload URL asked for and never used (t), and one used (u, same ids)
    services.keys.create("u", "admin")
    catalog.put_collection("u", "c", CollectionInput())
    tickets = {tenant: catalog.prepare_upload(tenant, "c", "up", "report.md", None, size=9) for tenant in ("t", "u")}
    services.adapters.blobs.put_blob(tickets["u"].document.source, b"# Report\n", "text/markdown")
    worker.drain()
    # When the passes of the next hour run / Then it still waits for its file
    pass_at(services, worker, minutes=59)
    assert services.adapters.metadata.get_document("t", "c", "up").status is DocumentStatus.PENDING
    # When a pass runs past the bound / Then it failed for good, saying so; u's is indexed
    pass_at(services, worker, minutes=61)
    failed = services.adapters.metadata.get_document("t", "c", "up")
    assert failed.status is DocumentStatus.FAILED and not failed.failure_retryable
    assert failed.failure_reason.startswith("UploadMissing: ") and "new upload URL" in failed.failure_reason
    assert services.adapters.metadata.get_document("u", "c", "up").status is DocumentStatus.INDEXED
    # When its content is PUT later / Then it is indexed
    catalog.put_document("t", "c", "up", DocumentInput(content="The report, sent as text instead."))
    worker.drain()
    assert services.adapters.metadata.get_document("t", "c", "up").status is DocumentStatus.INDEXED


def test_an_import_whose_chunks_stop_coming_fails_after_a_day_and_a_rerun_completes_it(setup):
    services, worker = setup
    # Given tenant t's import of a 2-chunk document that got 1 chunk, and tenant u's complete one of the same ids
    services.keys.create("u", "admin")
    services.catalog.put_collection("u", "c", CollectionInput())
    assert services.transfer.import_batch("t", "c", import_of("imp", 2, 0)).incomplete_documents == ["imp"]
    assert services.transfer.import_batch("u", "c", import_of("imp", 2, 0, 1)).documents_completed == 1
    # When the passes of the next 23 hours run / Then it is still being imported
    pass_at(services, worker, hours=23)
    assert services.adapters.metadata.get_document("t", "c", "imp").status is DocumentStatus.IN_PROGRESS
    # When a full pass (a sweep: the other path that reads documents) runs a day after its last chunk
    pass_at(services, worker, full=True, hours=25)
    # Then it failed for good, saying how far it got and what completes it; u's is indexed
    failed = services.adapters.metadata.get_document("t", "c", "imp")
    assert failed.status is DocumentStatus.FAILED and not failed.failure_retryable
    assert failed.failure_reason.startswith("ImportIncomplete: 1 of 2 chunks arrived")
    assert "import the document again" in failed.failure_reason
    assert services.adapters.metadata.get_document("u", "c", "imp").status is DocumentStatus.INDEXED
    # And the missing chunk alone is refused (the document is no longer being imported)...
    with pytest.raises(Conflict):
        services.transfer.import_batch("t", "c", import_of("imp", 2, 1, record=False))
    # ...while importing the document again completes it
    assert services.transfer.import_batch("t", "c", import_of("imp", 2, 0, 1)).documents_completed == 1
    indexed = services.adapters.metadata.get_document("t", "c", "imp")
    assert indexed.status is DocumentStatus.INDEXED and indexed.failure_reason is None


def test_a_write_after_the_pass_read_the_document_keeps_it_from_failing(setup):
    from tests.support.interleave import Interleave

    services, worker = setup
    pass_at(services, worker)  # the collection is covered: the pass reads the documents needing attention
    # Given a title-only document past its bound, and a title PUT that commits just before the pass writes
    services.catalog.put_document("t", "c", "racy", DocumentInput(title="First title"))
    services.reindex_worker.pages.documents = Interleave(
        services.adapters.metadata,
        lambda: services.catalog.put_document("t", "c", "racy", DocumentInput(title="Second title")),
        "before_commit",
    )
    collection = services.adapters.metadata.get_collection("t", "c")
    services.reindex_worker.clock = lambda: utc_now() + timedelta(hours=2)
    # When the pass runs / Then it did not fail it: the record it judged is no longer the one stored
    report = services.reindex_worker.reindex_collection("t", collection, clean=False)
    assert services.reindex_worker.pages.documents.fired and report.repaired["documents_without_content"] == 0
    current = services.adapters.metadata.get_document("t", "c", "racy")
    assert (current.status, current.title) == (DocumentStatus.PENDING, "Second title")
    # When the next pass runs, the PUT's own hour later / Then it fails it
    services.reindex_worker.pages.documents = services.adapters.metadata
    services.reindex_worker.clock = lambda: current.updated_at + timedelta(minutes=61)
    assert (
        services.reindex_worker.reindex_collection("t", collection, clean=False).repaired["documents_without_content"]
        == 1
    )
    assert services.adapters.metadata.get_document("t", "c", "racy").status is DocumentStatus.FAILED


def test_sixteen_writers_and_passes_at_once_never_leave_content_failed(setup):
    from kindex.domain.errors import Conflict as Lost
    from tests.support.together import run_together

    services, worker = setup
    pass_at(services, worker)  # covered: the passes below read the attention documents (with the real clock)
    collection = services.adapters.metadata.get_collection("t", "c")
    for round_ in range(5):
        # Given a title-only document well past its bound (its record dated back: the writes below are fresh, and a
        # clock moved on would also judge their blobs abandoned)
        doc_id = f"race{round_}"
        created, _ = services.catalog.put_document("t", "c", doc_id, DocumentInput(title="Title first"))
        services.adapters.metadata.put_document(
            "t",
            created.model_copy(
                update={"updated_at": created.updated_at - timedelta(hours=2), "revision": created.revision + 1}
            ),
            create=False,
        )
        # When 8 passes and 8 content PUTs (each its own text) run at once
        calls = [lambda: services.reindex_worker.reindex_collection("t", collection, clean=False)] * 8 + [
            (lambda i=i, d=doc_id: services.catalog.put_document("t", "c", d, DocumentInput(content=f"Text {i}.")))
            for i in range(8)
        ]
        outcomes = run_together(calls)
        assert not [o for o in outcomes if isinstance(o, Exception) and not isinstance(o, Lost)], outcomes
        # Then the content that won waits for its ingest: a pass that judged the record before it changed nothing
        stored = services.adapters.metadata.get_document("t", "c", doc_id)
        assert stored.source is not None and stored.status is DocumentStatus.PENDING, stored
        worker.drain()
        # And is indexed
        document = services.adapters.metadata.get_document("t", "c", doc_id)
        assert (document.status, document.failure_reason) == (DocumentStatus.INDEXED, None), document
        assert [c.text for c in services.adapters.chunks.list_chunks("t", "c", doc_id)] == [
            services.adapters.blobs.get_blob(document.source).decode()
        ]
