"""Linearizable document writes on the local backend (SQLite + folder blobs + the worker).

The content that is stored, chunked and indexed is always that of a write that succeeded, the latest of them; a
write that lost its version check (409) leaves no blob, chunk or vector. Races are forced deterministically by
letting another write (or the worker) run at the exact moment between a write's blob and its commit."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from kindex.domain import keys
from kindex.domain.errors import Conflict, DependencyFailed
from kindex.domain.models import CollectionInput, DocumentInput, utc_now
from kindex_local.deployment import build_worker
from tests.support.interleave import Interleave
from tests.support.local_queue import queue_depth
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def services(local_container):
    local_container.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
    local_container.catalog.put_collection("u", "c", CollectionInput(chunking_max_size=200))
    return local_container


@pytest.fixture
def worker(services):
    worker = build_worker()
    worker.backoff = 0.0
    return worker


def put(services, doc_id, content, tenant="t", **fields):
    return services.catalog.put_document(tenant, "c", doc_id, DocumentInput(content=content, **fields))


def doc_blobs(services, doc_id="d", tenant="t"):
    return services.adapters.blobs.list_blobs(keys.document_prefix(tenant, "c", doc_id))


def indexed_texts(services, doc_id="d", tenant="t"):
    """The chunk texts of the document, after checking each one has its vector (and no other vector exists)."""
    chunks = services.adapters.chunks.list_chunks(tenant, "c", doc_id)
    assert services.adapters.search_index.chunk_ids("hash:384", tenant, "c") == {c.chunk_id for c in chunks}
    return [c.text for c in chunks]


@pytest.mark.parametrize("moment", ["after_read", "before_commit"])
def test_a_write_that_loses_its_version_check_leaves_no_trace(services, worker, moment):
    # Given an indexed document
    put(services, "d", "the original text")
    worker.drain()
    catalog = services.catalog
    winner = {}

    def another_write_wins():
        # Another write commits in the middle of the loser's, and the worker handles every event so far (before
        # the commit, the loser's created event too: it comes before the loser even knows it lost).
        winner["doc"], _ = put(services, "d", "the winning text", title="winner")
        worker.drain()

    catalog.documents = Interleave(catalog.documents, another_write_wins, moment)
    # When a write whose version check then fails runs
    with pytest.raises(Conflict):
        put(services, "d", "the losing text", title="loser")
    worker.drain()
    # Then the winner is what is stored, returned and indexed
    document, content = catalog.get_document("t", "c", "d")
    assert (content, document.title, document.version) == ("the winning text", "winner", winner["doc"].version)
    assert document.status.value == "indexed"
    assert indexed_texts(services) == ["the winning text"]
    # And the loser left no blob: the document's folder holds exactly the winner's
    assert doc_blobs(services) == [winner["doc"].source]
    assert queue_depth(services.adapters.queue) == (0, 0)


@pytest.mark.parametrize("moment", ["after_read", "before_commit"])
def test_a_create_that_loses_leaves_no_trace(services, worker, moment):
    catalog = services.catalog
    catalog.documents = Interleave(catalog.documents, lambda: put(services, "new", "created first"), moment)
    with pytest.raises(Conflict):
        put(services, "new", "created second")
    worker.drain()
    assert catalog.get_document("t", "c", "new")[1] == "created first"
    assert indexed_texts(services, "new") == ["created first"]
    assert len(doc_blobs(services, "new")) == 1


class WaitsForTheCommit:
    """The ingest's blob store, telling when the ingest looks for a blob: it does only while it waits for the write
    that stored the blob to commit (its document does not point at the blob yet)."""

    def __init__(self, inner):
        self.inner = inner
        self.looked = threading.Event()

    def list_blobs(self, prefix):
        found = self.inner.list_blobs(prefix)
        self.looked.set()
        return found

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("existing", [False, True], ids=["create", "update"])
def test_an_event_that_comes_before_its_commit_waits_for_it(services, worker, existing, monkeypatch):
    if existing:
        put(services, "d", "the text before")
        worker.drain()
    failures = []
    handler = worker.handler

    def recording_handler(event, context):
        response = handler(event, context)
        failures.extend(response.get("batchItemFailures", []))
        return response

    worker.handler = recording_handler
    catalog = services.catalog
    waiting = WaitsForTheCommit(services.ingest.blobs)
    monkeypatch.setattr(services.ingest, "blobs", waiting)

    def hold_until_the_worker_waits_for_the_commit():
        # The ingest has read the document, seen that it does not point at the blob yet, and checked that the blob
        # is still there: it is waiting for this very commit.
        assert waiting.looked.wait(60), "the worker never waited for the commit"

    # Given the worker running, and a write held between its blob and its commit until the worker waits for it
    worker.start()
    try:
        catalog.documents = Interleave(catalog.documents, hold_until_the_worker_waits_for_the_commit, "before_commit")
        document, created = put(services, "d", "text whose event came first")
        # Then the event still indexes the committed write, on its first delivery
        wait_until(
            lambda: services.adapters.metadata.get_document("t", "c", "d"),
            until=lambda d: d.status.value == "indexed" and d.version == document.version,
            message="the committed write was not indexed",
        )
    finally:
        worker.stop()
    assert created is not existing and failures == []
    assert indexed_texts(services) == ["text whose event came first"]
    assert queue_depth(services.adapters.queue) == (0, 0)


def test_an_event_of_a_write_that_never_commits_is_retried_then_ignored(services, worker, monkeypatch):
    import kindex.app.ingest as ingest

    monkeypatch.setattr(ingest, "COMMIT_WAIT_SECONDS", 0.1)
    put(services, "d", "committed text")
    worker.drain()
    current = services.adapters.metadata.get_document("t", "c", "d")
    # Given the blob of a write that is still deciding (its writer hangs between the blob and the commit)
    pending = keys.write_blob_key("t", "c", "d", "content.txt", version=current.version + 1)
    services.adapters.blobs.put_blob(pending, b"undecided text", "text/plain")
    # When its event is processed: not indexed, retried rather than acknowledged
    worker.max_receives = 10
    worker.run_once()
    assert queue_depth(services.adapters.queue) == (1, 0)  # still queued, for a retry
    # When the write then loses (another one commits and deletes nothing of it; the loser deletes its blob)
    put(services, "d", "the winner")
    services.adapters.blobs.delete_blob(pending)
    worker.drain()
    # Then the event is ignored: the winner is indexed, the undecided text never was
    assert indexed_texts(services) == ["the winner"]
    assert queue_depth(services.adapters.queue) == (0, 0)


def test_concurrent_writers_while_the_worker_runs_keep_the_last_successful_write(services, worker):
    # Given the other tenant's document with the same ids
    put(services, "d", "tenant u keeps this", tenant="u")
    worker.start()
    try:
        for round_ in range(4):
            # When 12 threads write different content to one document at once, the worker running meanwhile
            barrier = threading.Barrier(12)
            outcomes: list = [None] * 12

            def write(i, round_=round_, barrier=barrier, outcomes=outcomes):
                barrier.wait()
                try:
                    outcomes[i] = put(services, "d", f"round {round_} writer {i} text")[0]
                except Conflict:
                    outcomes[i] = "409"

            threads = [threading.Thread(target=write, args=(i,)) for i in range(12)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            succeeded = [o for o in outcomes if o != "409"]
            assert succeeded and None not in outcomes
            last = max(succeeded, key=lambda d: d.version)
            assert len({d.version for d in succeeded}) == len(succeeded)
            expected = f"round {round_} writer {outcomes.index(last)} text"
            # Then the last successful write is stored, indexed and returned, and only its blob is left
            wait_until(
                lambda: services.adapters.metadata.get_document("t", "c", "d"),
                until=lambda d, last=last: d.version == last.version and d.status.value == "indexed",
                message="the last successful write was not indexed",
            )
            document, content = services.catalog.get_document("t", "c", "d")
            assert (document.version, document.status.value, content) == (last.version, "indexed", expected)
            assert indexed_texts(services) == [expected]
            assert doc_blobs(services) == [last.source]
    finally:
        worker.stop()
    # And the other tenant's document was not touched
    assert services.catalog.get_document("u", "c", "d")[1] == "tenant u keeps this"
    assert len(doc_blobs(services, tenant="u")) == 1
    assert indexed_texts(services, tenant="u") == ["tenant u keeps this"]
    assert queue_depth(services.adapters.queue)[1] == 0


def test_a_read_between_two_writes_returns_one_write_whole(services):
    # Given a document, and a write that lands between a GET's two reads (record, then content)
    first, _ = put(services, "d", "first content", title="first")
    catalog = services.catalog
    blobs = catalog.blobs
    original = blobs.get_blob
    latest = {}

    def get_blob(key):
        if not latest:
            latest["doc"], _ = put(services, "d", "second content", title="second")  # deletes the first blob
        return original(key)

    blobs.get_blob = get_blob
    try:
        document, content = catalog.get_document("t", "c", "d")
    finally:
        blobs.get_blob = original
    # Then the GET shows the second write, record and content together, not the first record without content
    assert (document.title, document.version, content) == ("second", latest["doc"].version, "second content")


def test_a_failed_commit_that_did_not_happen_deletes_its_blob_and_one_that_did_keeps_it(services):
    put(services, "d", "stored")
    catalog = services.catalog
    store = catalog.documents

    class Flaky:
        def __init__(self, applies):
            self.applies = applies

        def put_document(self, tenant, document, **kwargs):
            if self.applies:
                store.put_document(tenant, document, **kwargs)
            raise DependencyFailed("metadata store timed out")

        def __getattr__(self, name):
            return getattr(store, name)

    # When the store times out without applying the write, the write's blob goes
    catalog.documents = Flaky(applies=False)
    before = doc_blobs(services)
    with pytest.raises(DependencyFailed):
        put(services, "d", "never committed")
    assert doc_blobs(services) == before and catalog.get_document("t", "c", "d")[1] == "stored"
    # When it times out after applying it, the blob the record now points at stays
    catalog.documents = Flaky(applies=True)
    with pytest.raises(DependencyFailed):
        put(services, "d", "committed after all")
    catalog.documents = store
    assert catalog.get_document("t", "c", "d")[1] == "committed after all"


def test_files_and_upload_tickets_follow_the_same_rules(services, worker):
    catalog = services.catalog
    # put_file (`kindex ingest`): a new key per write, the old blob goes, the same file is not written again
    first, written = catalog.put_file("t", "c", "f", "notes.md", b"# Notes\n\nfirst")
    assert written and doc_blobs(services, "f") == [first.source]
    assert catalog.put_file("t", "c", "f", "notes.md", b"# Notes\n\nfirst") == (first, False)
    second, written = catalog.put_file("t", "c", "f", "notes.md", b"# Notes\n\nsecond")
    assert written and second.source != first.source and doc_blobs(services, "f") == [second.source]
    worker.drain()
    assert indexed_texts(services, "f") == ["# Notes\n\nsecond"]


def test_an_upload_to_a_superseded_ticket_is_not_indexed(services, worker, monkeypatch):
    from kindex.adapters.local.upload_signer import LocalUploadSigner

    catalog = services.catalog
    catalog.presigner = LocalUploadSigner(b"k" * 32, "http://localhost")
    old = catalog.prepare_upload("t", "c", "up", "a.md", None, size=30)
    new = catalog.prepare_upload("t", "c", "up", "b.md", None, size=31)
    assert new.document.version == old.document.version + 1
    # When both uploads happen, the superseded one last
    catalog.blobs.put_blob(new.document.source, b"# New\n\nfrom the current ticket", "text/markdown")
    catalog.blobs.put_blob(old.document.source, b"# Old\n\nfrom the superseded ticket", "text/markdown")
    worker.drain()
    # Then only the current ticket's file is indexed
    assert services.adapters.metadata.get_document("t", "c", "up").source == new.document.source
    assert indexed_texts(services, "up") == ["# New\n\nfrom the current ticket"]
    # And reindex deletes the superseded upload once it is clearly abandoned, not before
    import kindex.app.reindex.pages as reindex_pages

    collection = services.adapters.metadata.get_collection("t", "c")
    assert services.reindex_worker.reindex_collection("t", collection, clean=False).repaired["abandoned_blobs"] == 0
    assert old.document.source in doc_blobs(services, "up")
    monkeypatch.setattr(
        reindex_pages, "ABANDONED_AFTER", timedelta(seconds=-1)
    )  # now: reindex's clock is whole seconds
    assert services.reindex_worker.reindex_collection("t", collection, clean=False).repaired["abandoned_blobs"] == 1
    assert doc_blobs(services, "up") == [new.document.source]


def test_reindex_deletes_abandoned_write_blobs_and_still_adopts_dropped_files(services, worker):
    put(services, "d", "committed text")
    worker.drain()
    current = services.adapters.metadata.get_document("t", "c", "d")
    long_ago = utc_now() - timedelta(hours=2)
    services.adapters.blobs.notify = None  # as if written by writers that died before their commit (no event either)
    abandoned = [
        keys.write_blob_key("t", "c", "d", "content.txt", version=current.version + 1, written_at=long_ago),
        keys.write_blob_key("t", "c", "never created", "content.txt", version=1, written_at=long_ago),
    ]
    fresh = keys.write_blob_key("t", "c", "being created", "content.txt", version=1)  # a write still deciding
    dropped = keys.blob_key("t", "c", "dropped", "notes.md")
    other_tenant = keys.write_blob_key("u", "c", "d", "content.txt", version=9, written_at=long_ago)
    for key in (*abandoned, fresh, dropped, other_tenant):
        services.adapters.blobs.put_blob(key, b"some bytes", "text/plain")
    from kindex.adapters.local.queue_notifier import QueueNotifier

    services.adapters.blobs.notify = QueueNotifier(services.adapters.queue)
    report = services.reindex_worker.reindex_collection(
        "t", services.adapters.metadata.get_collection("t", "c"), clean=False
    )
    worker.drain()
    assert report.repaired["abandoned_blobs"] == 2 and report.repaired["blobs_without_documents"] == 1
    remaining = services.adapters.blobs.list_blobs(keys.collection_prefix("t", "c"))
    assert not set(abandoned) & set(remaining)
    assert {current.source, fresh}.issubset(remaining)
    assert services.adapters.metadata.get_document("t", "c", "dropped").status.value == "indexed"
    assert services.adapters.metadata.get_document("t", "c", "never created") is None
    assert services.adapters.metadata.get_document("t", "c", "d").source == current.source
    # another tenant's blobs are not this collection's business
    assert other_tenant in services.adapters.blobs.list_blobs(keys.collection_prefix("u", "c"))


def test_a_binary_file_uploaded_as_content_txt_reads_without_content(services):
    # (the text content's file name is a legal upload name; its bytes need not be UTF-8)
    services.catalog.put_file("t", "c", "bin", "content.txt", b"\xff\xfe\x00binary")
    document, content = services.catalog.get_document("t", "c", "bin")
    assert content is None and document.content_length == 9


def test_an_ingest_overtaken_by_a_newer_write_leaves_none_of_its_chunks(services):
    # Given a document whose first version is being indexed (on AWS two events of one document can run at once)
    put(services, "d", "first version " * 30)
    source = services.adapters.metadata.get_document("t", "c", "d").source
    chunks = services.ingest.chunks
    original = chunks.put_chunks
    overtaken = {}

    def put_chunks(tenant, stored):
        if not overtaken:
            # When, before its chunks are written, a newer write commits and is indexed completely
            overtaken["doc"], _ = put(services, "d", "second version " * 30)
            services.ingest.object_created(overtaken["doc"].source)
        return original(tenant, stored)

    chunks.put_chunks = put_chunks
    try:
        with pytest.raises(Conflict):
            services.ingest.object_created(source)  # the first version's work ends in a lost version check
    finally:
        chunks.put_chunks = original
    # Then only the newer version's chunks and vectors are left
    texts = indexed_texts(services)
    assert texts and all("second version" in text and "first" not in text for text in texts)
    assert services.adapters.metadata.get_document("t", "c", "d").status.value == "indexed"
