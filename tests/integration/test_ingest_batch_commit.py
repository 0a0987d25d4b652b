"""One keyword commit per ingest batch on the embedded index: every document of the batch is marked `indexed` only
after that commit, a failure after it fails only its own record, and a writer killed before it leaves no document
`indexed` (the redelivered messages finish the work)."""

from __future__ import annotations

import os
import time

import pytest

from functions import ingest as ingest_function
from kindex.app.ingest_run import IngestRun
from kindex.domain.models import CollectionInput, DocumentInput
from kindex_local.deployment import build_worker
from kindex_local.server import LambdaContext
from kindex_local.worker import sqs_event
from tests.support.crash import kill_writer_after

pytestmark = pytest.mark.integration

MODEL = "hash:384"


@pytest.fixture
def services(local_container):
    local_container.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
    return local_container


@pytest.fixture
def commits(services, monkeypatch):
    """The real tantivy commits the embedded index makes, counted."""
    keywords = services.adapters.search_index._keywords
    original = keywords._commit
    made = []

    def counted(tenant):
        made.append(1)
        return original(tenant)

    monkeypatch.setattr(keywords, "_commit", counted)
    return made


def text(word: str) -> str:
    return f"This short note is about {word} and nothing else worth a mention."


def put(services, doc_id, content, tenant="t"):
    return services.catalog.put_document(tenant, "c", doc_id, DocumentInput(content=content))[0]


def status(services, doc_id, tenant="t"):
    return services.adapters.metadata.get_document(tenant, "c", doc_id).status.value


def found(services, word, tenant="t") -> set[str]:
    return {hit.document_id for hit in services.adapters.search_index.keyword_search(MODEL, tenant, ["c"], word, 50)}


def before_the_commit(monkeypatch, services, action):
    """Run `action()` just before the batch's deferred keyword commit; returns the real commit (to put it back)."""
    index = services.adapters.search_index
    original = index.commit_deferred
    monkeypatch.setattr(index, "commit_deferred", lambda writes: (action(), original(writes))[1])
    return original


def run_batch(messages):
    return ingest_function.handler(sqs_event(messages), LambdaContext("kindex-ingest"))


def message_of(messages, doc_id):
    return next(m for m in messages if f"/{doc_id}/" in m.body)


def test_a_batch_of_ten_documents_makes_one_keyword_commit_and_all_are_findable_on_return(services, commits):
    # Given ten small documents written through the API, received as one batch
    for i in range(10):
        put(services, f"d{i}", text(f"zebra{i}"))
    messages = services.adapters.queue.receive(10, 30)
    assert len(messages) == 10
    # When the ingest handler runs the batch
    response = run_batch(messages)
    # Then the keyword index was committed once, and every document is indexed and keyword-findable already
    assert response["batchItemFailures"] == []
    assert len(commits) == 1
    for i in range(10):
        assert status(services, f"d{i}") == "indexed"
        assert found(services, f"zebra{i}") == {f"d{i}"}


def test_one_failing_document_does_not_break_the_batch_commit(services, commits):
    # Given nine good documents and one that cannot be extracted, in one batch
    for i in range(9):
        put(services, f"d{i}", text(f"okapi{i}"))
    services.catalog.put_file("t", "c", "broken", "broken.pdf", b"%PDF-1.4 this is not really a pdf")
    messages = services.adapters.queue.receive(10, 30)
    # When the batch runs
    response = run_batch(messages)
    # Then one commit, nine indexed and findable, one failed (not retryable: not a batch item failure)
    assert response["batchItemFailures"] == []
    assert len(commits) == 1
    assert [status(services, f"d{i}") for i in range(9)] == ["indexed"] * 9
    assert all(found(services, f"okapi{i}") == {f"d{i}"} for i in range(9))
    assert status(services, "broken") == "failed"


def test_an_unexpected_error_in_one_deferred_status_write_fails_only_its_record(services, commits, monkeypatch):
    # Given a batch whose status write for d3 (after the commit) fails unexpectedly
    for i in range(6):
        put(services, f"d{i}", text(f"lemur{i}"))
    original = services.ingest._indexed

    def flaky(tenant, collection, stored, fields):
        if stored.id == "d3":
            raise OSError("metadata store unavailable (test)")
        return original(tenant, collection, stored, fields)

    monkeypatch.setattr(services.ingest, "_indexed", flaky)
    messages = services.adapters.queue.receive(10, 30)
    # When the batch runs
    response = run_batch(messages)
    # Then only d3's record is a batch item failure (SQS redelivers it), d3 is not `indexed`, the others are
    assert response["batchItemFailures"] == [{"itemIdentifier": message_of(messages, "d3").message_id}]
    assert status(services, "d3") == "in_progress"
    assert [status(services, f"d{i}") for i in (0, 1, 2, 4, 5)] == ["indexed"] * 5
    assert len(commits) == 1
    # And the redelivered message finishes it
    monkeypatch.setattr(services.ingest, "_indexed", original)
    assert run_batch([message_of(messages, "d3")])["batchItemFailures"] == []
    assert status(services, "d3") == "indexed" and found(services, "lemur3") == {"d3"}


def test_newer_content_written_before_the_deferred_status_write_wins(services, monkeypatch):
    # Given a batch of documents, and new content for d5 committed just before the batch's keyword commit
    for i in range(8):
        put(services, f"d{i}", text(f"tapir{i}"))
    messages = services.adapters.queue.receive(10, 30)
    original = before_the_commit(monkeypatch, services, lambda: put(services, "d5", text("capybara")))
    # When the batch runs
    response = run_batch(messages)
    # Then d5's stale record fails (Conflict: retried and then ignored), and d5 keeps the newer write's state,
    # never `indexed` for content it does not hold; its old chunks are gone; the other documents are indexed
    assert response["batchItemFailures"] == [{"itemIdentifier": message_of(messages, "d5").message_id}]
    d5 = services.adapters.metadata.get_document("t", "c", "d5")
    assert (d5.status.value, d5.version) == ("pending", 2)
    assert found(services, "tapir5") == set()
    assert [status(services, f"d{i}") for i in range(8) if i != 5] == ["indexed"] * 7
    # And the newer write's own event indexes the new content (once the batch is done with: a local receive never
    # hands out a document that another message holds in flight)
    monkeypatch.setattr(services.adapters.search_index, "commit_deferred", original)
    for message in messages:
        services.adapters.queue.acknowledge(message.message_id)
    assert run_batch(services.adapters.queue.receive(10, 30))["batchItemFailures"] == []
    assert status(services, "d5") == "indexed" and found(services, "capybara") == {"d5"}


def test_a_document_deleted_before_the_batch_commit_leaves_nothing_behind(services, monkeypatch):
    # Given a batch, and one of its documents deleted through the API after its chunk writes, before the commit
    for i in range(4):
        put(services, f"d{i}", text(f"jackal{i}"))
    messages = services.adapters.queue.receive(10, 30)
    before_the_commit(monkeypatch, services, lambda: services.catalog.delete_document("t", "c", "d2"))
    # When the batch runs
    assert run_batch(messages)["batchItemFailures"] == []
    # Then the deleted document has no record, no chunks, nothing in the index; the others are indexed
    assert services.adapters.metadata.get_document("t", "c", "d2") is None
    assert services.adapters.chunks.list_chunks("t", "c", "d2") == []
    assert found(services, "jackal2") == set()
    assert [status(services, f"d{i}") for i in (0, 1, 3)] == ["indexed"] * 3


def test_a_failed_batch_commit_fails_every_record_that_waited_for_it(services, monkeypatch):
    from kindex.domain.errors import DependencyFailed

    # Given a batch whose keyword commit fails (its writes were rolled back)
    for i in range(3):
        put(services, f"d{i}", text(f"dingo{i}"))
    messages = services.adapters.queue.receive(10, 30)

    def lost():
        raise DependencyFailed("keyword writes rolled back (test)")

    original = before_the_commit(monkeypatch, services, lost)
    # When the batch runs
    response = run_batch(messages)
    # Then every record is retried and no document says `indexed`
    assert sorted(item["itemIdentifier"] for item in response["batchItemFailures"]) == sorted(
        m.message_id for m in messages
    )
    assert [status(services, f"d{i}") for i in range(3)] == ["in_progress"] * 3
    # And the retries index them
    monkeypatch.setattr(services.adapters.search_index, "commit_deferred", original)
    assert run_batch(messages)["batchItemFailures"] == []
    assert all(status(services, f"d{i}") == "indexed" and found(services, f"dingo{i}") == {f"d{i}"} for i in range(3))


def test_two_tenants_with_the_same_ids_in_one_batch_each_find_only_their_own(services, commits):
    # Given two tenants with the same collection and document ids, in one batch (a local receive serves one tenant)
    services.catalog.put_collection("u", "c", CollectionInput(chunking_max_size=200))
    for i in range(5):
        put(services, f"d{i}", text(f"walrus{i} shared"), tenant="t")
        put(services, f"d{i}", text(f"narwhal{i} shared"), tenant="u")
    messages = services.adapters.queue.receive(10, 30) + services.adapters.queue.receive(10, 30)
    assert len(messages) == 10
    # When the batch runs
    assert run_batch(messages)["batchItemFailures"] == []
    # Then one commit of each tenant's keyword index, and each tenant finds its own document only
    assert len(commits) == 2
    for i in range(5):
        assert status(services, f"d{i}", "t") == status(services, f"d{i}", "u") == "indexed"
        assert found(services, f"walrus{i}", "t") == {f"d{i}"} and found(services, f"walrus{i}", "u") == set()
        assert found(services, f"narwhal{i}", "u") == {f"d{i}"} and found(services, f"narwhal{i}", "t") == set()
    hits = services.adapters.search_index.keyword_search(MODEL, "t", ["c"], "shared", 50)
    assert {services.adapters.chunks.list_chunks("t", "c", hit.document_id)[0].text for hit in hits} == {
        text(f"walrus{i} shared") for i in range(5)
    }


def test_a_delete_in_the_batch_commits_at_once_and_carries_the_pending_writes(services, commits):
    # Given a document indexed earlier, then a batch that writes new documents and removes the first one
    put(services, "old", text("gnu"))
    run_batch(services.adapters.queue.receive(10, 30))
    commits.clear()
    for i in range(3):
        put(services, f"d{i}", text(f"ibex{i}"))
    services.catalog.delete_document("t", "c", "old")
    messages = services.adapters.queue.receive(10, 30)
    # When the batch runs
    assert run_batch(messages)["batchItemFailures"] == []
    # Then the removed document is never found again, the new ones are indexed and found
    assert found(services, "gnu") == set()
    assert all(status(services, f"d{i}") == "indexed" and found(services, f"ibex{i}") == {f"d{i}"} for i in range(3))
    assert 1 <= len(commits) <= 2  # the delete's commit, and the batch's own unless the delete carried it all


def test_a_re_chunked_document_stays_findable_by_keyword_right_up_to_its_batch_commit(services, monkeypatch):
    from kindex.domain.query import QueryRequest

    # Given a document indexed in several chunks, then the collection's chunking changed and a reindex job started
    put(services, "d0", " ".join(text(f"quokka{i}") for i in range(6)))
    first = services.adapters.queue.receive(10, 30)
    assert run_batch(first)["batchItemFailures"] == []
    for message in first:  # as the worker does: a local receive never hands out a document held in flight
        services.adapters.queue.acknowledge(message.message_id)
    old = {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d0")}
    assert len(old) > 1
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=120, allow_guests=True))
    services.reindex_jobs.start("t", "c", clean=False)

    def keyword_answer() -> list[str]:
        response = services.query.query("t", ["c"], QueryRequest(query="quokka3", k=3, mode="keyword"), multi=False)
        return [result.document_id for result in response.results]

    def look() -> tuple[list[str], set[str], set[str]]:
        hits = services.adapters.search_index.keyword_search(MODEL, "t", ["c"], "quokka3", 50)
        rows = {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d0")}
        return keyword_answer(), {hit.chunk_id for hit in hits}, rows

    seen = []
    before_the_commit(monkeypatch, services, lambda: seen.append(look()))
    # When the worker runs the job, whose ingest batch re-chunks it: new chunks written, the replaced ones removed
    # (that removal's keyword commit carries the batch's pending writes), then the batch's own commit
    build_worker().drain()
    # Then just before that commit a keyword query found it: every keyword hit was a chunk whose row exists (a hit
    # whose row is gone is dropped, and the document would have vanished until the commit)
    ((answer, hit_ids, rows),) = seen
    assert answer == ["d0"] and hit_ids and hit_ids <= rows
    # And afterwards it is indexed under the new chunking, found through its new chunks only: no old chunk is left
    new = {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "d0")}
    assert status(services, "d0") == "indexed" and len(new) > len(old) and not new & old
    assert services.adapters.search_index.chunk_ids(MODEL, "t", "c") == new
    assert keyword_answer() == ["d0"]


def test_outside_a_batch_an_object_event_is_indexed_and_findable_on_return(services, commits):
    # Given a document, and its event handled without any ingest batch (tools, tests)
    document = put(services, "solo", text("quokka"))
    # When the service handles the event directly
    services.ingest.object_created(document.source)
    # Then it is indexed with its own commit, durable and findable on return
    assert status(services, "solo") == "indexed" and found(services, "quokka") == {"solo"}
    assert len(commits) == 1


# -- a writer killed before the batch commit -------------------------------------------------------------------

CRASH_DOCUMENTS = 10


def _ingest_until_the_batch_commit(root: str, ready) -> None:
    """Write ten documents, run their batch, and stop dead (waiting to be killed) just before its keyword commit."""
    os.environ.update(KINDEX_BACKEND="local", KINDEX_DATA_DIR=root, KINDEX_DEFAULT_EMBEDDING_MODEL=MODEL)
    from kindex.compose import container

    services = container()
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
    for i in range(CRASH_DOCUMENTS):
        put(services, f"d{i}", text(f"pangolin{i}"))

    def stop_before_the_commit(writes):
        ready.set()
        time.sleep(3600)

    services.adapters.search_index.commit_deferred = stop_before_the_commit
    run_batch(services.adapters.queue.receive(10, 3600))


def test_a_writer_killed_before_the_batch_commit_leaves_no_indexed_document_and_redelivery_finishes(
    tmp_path, monkeypatch
):
    from kindex.compose import container

    root = tmp_path / "data"
    # Given a worker killed (SIGKILL) after its batch's chunk writes and before the batch's keyword commit
    kill_writer_after(_ingest_until_the_batch_commit, root, 0.2, ready_timeout=120)
    monkeypatch.setenv("KINDEX_BACKEND", "local")
    monkeypatch.setenv("KINDEX_DATA_DIR", str(root))
    monkeypatch.setenv("KINDEX_DEFAULT_EMBEDDING_MODEL", MODEL)
    container.cache_clear()
    try:
        services = container()
        # Then no document says `indexed` (their chunks were written, the keyword commit never happened)
        assert [status(services, f"d{i}") for i in range(CRASH_DOCUMENTS)] == ["in_progress"] * CRASH_DOCUMENTS
        assert len(services.adapters.chunks.list_chunks("t", "c", "d0")) == 1
        assert all(found(services, f"pangolin{i}") == set() for i in range(CRASH_DOCUMENTS))
        # When the restarted process takes back the in-flight messages and drains the queue
        assert services.adapters.queue.recover_in_flight() == CRASH_DOCUMENTS
        worker = build_worker()
        worker.backoff = 0.0
        worker.drain()
        # Then every document is indexed and keyword-findable
        for i in range(CRASH_DOCUMENTS):
            assert status(services, f"d{i}") == "indexed"
            assert found(services, f"pangolin{i}") == {f"d{i}"}
    finally:
        container.cache_clear()


def test_the_batch_commit_covers_the_writes_of_documents_that_failed_after_writing(services, commits):
    from kindex.domain.types import IndexRecord

    # Given a deferring batch where a document wrote chunks and then failed (no `indexed` status write waits)
    run = IngestRun(services.ingest)
    run.batch.upsert(
        "hash:384",
        [
            IndexRecord(
                tenant="t",
                collection="c",
                document_id="half",
                chunk_id="half-0",
                vector=tuple([1.0] + [0.0] * 383),
                text="orphaned wombat",
                language="en",
            )
        ],
    )
    # When the batch finishes
    assert run.finish() == set()
    # Then its writes were committed with the batch, not left pending for some later commit to carry
    assert len(commits) == 1
    hits = services.adapters.search_index.keyword_search("hash:384", "t", ["c"], "wombat", 5)
    assert [hit.chunk_id for hit in hits] == ["half-0"]
