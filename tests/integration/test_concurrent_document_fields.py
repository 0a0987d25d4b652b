"""Concurrent writes of different fields of one document all land (no lost update), on SQLite and on DynamoDB (moto).

A metadata-only PUT keeps the content `version`, so version checks cannot order such writes: every committed write
bumps the record's `revision`, every update is conditional on the revision it read, and a write that finds the
record changed reads it again and applies only its own fields on top. The written records therefore form one chain:
revisions follow each other without a gap, and each record is its predecessor with exactly that write's field
changed. Ingest's status writes take part in the same chain, and still never mark superseded content indexed."""

from __future__ import annotations

import pytest

from kindex.app import document_writes, record_writes
from kindex.domain import keys
from kindex.domain.errors import Conflict
from kindex.domain.models import CollectionInput, Document, DocumentInput, DocumentStatus
from tests.integration.test_ingest_aws import Deployment, deploy  # noqa: F401 (the moto deployment fixture)
from tests.integration.test_linearizable_writes_aws import atomic_requests  # noqa: F401 (atomic moto requests)
from tests.support.together import run_together
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

WRITERS = 16
ROUNDS = 6
FIELDS = ("title", "language", "url", "mimetype")
# What a metadata write must not touch: the content and what the ingest owns.
CONTENT_FIELDS = ("version", "source", "content_sha256", "status", "chunk_count", "indexed_version")


def value(tenant: str, round_: int, writer: int) -> str:
    """A value every field accepts (a media type, so that the mimetype field does too), unique to the write."""
    return f"text/{tenant}-r{round_}-w{writer}"


def field_of(writer: int) -> str:
    return FIELDS[writer % len(FIELDS)]


def write_together(catalog, writes: list[tuple[str, str, dict]]) -> list:
    """Each (tenant, document id, fields) PUT from its own thread, all released by one barrier; returns what each
    PUT returned (the document) or raised."""
    return run_together(
        [
            lambda t=tenant, d=document_id, f=fields: catalog.put_document(t, "c", d, DocumentInput(**f))[0]
            for tenant, document_id, fields in writes
        ]
    )


def assert_one_chain(start: Document, written: list[Document], changed: list[dict], final: Document) -> None:
    """The written records, in revision order, follow `start` one revision at a time, each being its predecessor
    with exactly its own write's fields changed; `final` (read afterwards) is the last of them."""
    order = sorted(range(len(written)), key=lambda i: written[i].revision)
    assert [written[i].revision for i in order] == list(range(start.revision + 1, start.revision + 1 + len(written)))
    previous = start
    for i in order:
        # A change of a filter field (language, mimetype) also bumps the fields version, and an indexed document
        # shows in_progress until the index has the new fields (issue 23 item 6)
        bumped = {}
        if document_writes.filter_fields_change(previous, changed[i]):
            bumped["fields_version"] = previous.fields_version + 1
            if previous.status is DocumentStatus.INDEXED:
                bumped["status"] = DocumentStatus.IN_PROGRESS
        expected = previous.model_copy(
            update={**changed[i], **bumped, "revision": previous.revision + 1, "updated_at": written[i].updated_at}
        )
        assert written[i] == expected, (i, changed[i])
        previous = written[i]
    assert final == previous


def sixteen_writers_round(catalog, tenants: list[str], round_: int) -> None:
    """One round: WRITERS PUTs at the same instant, spread over `tenants` (same collection and document ids), each
    setting one field to a value of its own; then every change is checked to be present."""
    starts = {}
    for tenant in tenants:
        # Given the document with every field at this round's starting value
        starts[tenant], _ = catalog.put_document(
            tenant, "c", "d", DocumentInput(**{name: f"text/{tenant}-start-{round_}" for name in FIELDS})
        )
    writes = []
    for i in range(WRITERS):
        tenant = tenants[i % len(tenants)]
        writes.append((tenant, "d", {field_of(i // len(tenants)): value(tenant, round_, i)}))
    # When all of them PUT at once
    outcomes = write_together(catalog, writes)
    # Then every PUT succeeded (none lost a race for good)
    assert all(isinstance(o, Document) for o in outcomes), outcomes
    for tenant in tenants:
        mine = [i for i in range(WRITERS) if writes[i][0] == tenant]
        final, _ = catalog.get_document(tenant, "c", "d")
        # And every field holds the value of one of its own tenant's writers: none kept its starting value, none
        # has another tenant's value
        for name in FIELDS:
            assert getattr(final, name) in {writes[i][2][name] for i in mine if name in writes[i][2]}, (
                tenant,
                name,
                final,
            )
        # And the content and status were not touched
        assert [getattr(final, name) for name in CONTENT_FIELDS] == [
            getattr(starts[tenant], name) for name in CONTENT_FIELDS
        ]
        # And each change was applied on top of all the earlier ones: one chain of revisions, nothing lost
        assert_one_chain(starts[tenant], [outcomes[i] for i in mine], [writes[i][2] for i in mine], final)


# SQLite (the local backend)
@pytest.fixture
def services(local_container):
    for tenant in ("t", "u"):
        local_container.catalog.put_collection(tenant, "c", CollectionInput(chunking_max_size=200))
    return local_container


def test_sixteen_writers_of_different_fields_all_land(services):
    for round_ in range(ROUNDS):
        sixteen_writers_round(services.catalog, ["t"], round_)


def test_two_tenants_with_the_same_ids_never_mix(services):
    for round_ in range(ROUNDS):
        sixteen_writers_round(services.catalog, ["t", "u"], round_)


def test_writers_of_a_document_with_content_keep_it(services):
    # Given an indexed document with content
    document, _ = services.catalog.put_document("t", "c", "d", DocumentInput(content="Some text about leave."))
    services.ingest.object_created(document.source)
    for round_ in range(2):
        sixteen_writers_round(services.catalog, ["t"], round_)
    # Then its content is still what was written
    assert services.catalog.get_document("t", "c", "d")[1] == "Some text about leave."


def test_a_content_write_among_fifteen_field_writes_lands_with_all_of_them(services):
    catalog = services.catalog
    for round_ in range(3):
        # Given a document with content and every field at this round's starting value
        start, _ = catalog.put_document(
            "t",
            "c",
            "d",
            DocumentInput(content=f"Round {round_} starts here.", **{name: f"text/start-{round_}" for name in FIELDS}),
        )
        # When one writer PUTs new content while 15 others each PUT one field, all at once
        writes = [("t", "d", {"content": f"Round {round_} new content."})]
        writes += [("t", "d", {field_of(i): value("t", round_, i)}) for i in range(1, WRITERS)]
        outcomes = write_together(catalog, writes)
        # Then all 16 succeed: the content write loses to no one (no other content), it only re-applies itself
        assert all(isinstance(o, Document) for o in outcomes), outcomes
        final, content = catalog.get_document("t", "c", "d")
        assert content == f"Round {round_} new content." and final.version == start.version + 1
        assert final.source == outcomes[0].source and final.status is DocumentStatus.PENDING
        for name in FIELDS:
            assert getattr(final, name) in {writes[i][2].get(name) for i in range(1, WRITERS)}, name
        # And it is one chain: the content write changed only the content, each other write only its field
        content_change = {
            name: getattr(outcomes[0], name)
            for name in ("version", "source", "content_sha256", "content_length", "status", "failure_reason")
        }
        assert_one_chain(start, outcomes, [content_change] + [writes[i][2] for i in range(1, WRITERS)], final)
        # And only the current content's blob is left
        assert services.adapters.blobs.list_blobs(keys.document_prefix("t", "c", "d")) == [final.source]


class StatusWriteHook:
    """Wraps the ingest's document store: runs `hook()` once, just before the ingest's first write of `status`
    (after it has read the record it writes over)."""

    def __init__(self, inner, status: DocumentStatus, hook):
        self.inner, self.status, self.hook, self.fired = inner, status, hook, False

    def put_document(self, tenant, document, **kwargs):
        if document.status is self.status and not self.fired:
            self.fired = True
            self.hook()
        return self.inner.put_document(tenant, document, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def put(services, tenant="t", **fields) -> Document:
    return services.catalog.put_document(tenant, "c", "d", DocumentInput(**fields))[0]


@pytest.mark.parametrize("status", [DocumentStatus.IN_PROGRESS, DocumentStatus.INDEXED])
def test_a_metadata_put_just_before_an_ingest_status_write_keeps_both(services, status):
    # Given a document whose content is being ingested, and a metadata PUT that commits just before the ingest
    # writes a status over the record it read
    document = put(services, content="The leave policy: 25 days a year.")
    ingest = services.ingest
    ingest.documents = StatusWriteHook(
        ingest.documents, status, lambda: put(services, title="Leave", url="https://wiki/leave")
    )
    # When the ingest runs
    indexed = ingest.object_created(document.source)
    # Then the document is indexed and keeps the PUT's fields
    stored, content = services.catalog.get_document("t", "c", "d")
    assert ingest.documents.fired and indexed == stored
    assert (stored.status, stored.title, stored.url, stored.version, stored.indexed_version) == (
        DocumentStatus.INDEXED,
        "Leave",
        "https://wiki/leave",
        document.version,
        document.version,
    )
    assert stored.chunk_count == len(services.adapters.chunks.list_chunks("t", "c", "d")) > 0


def test_an_ingest_that_runs_between_a_metadata_put_read_and_commit_keeps_both(services):
    # Given a document waiting for its ingest
    document = put(services, content="The leave policy: 25 days a year.")
    catalog = services.catalog
    store = catalog.documents

    class IngestAfterRead:
        """The metadata PUT reads the record, then the whole ingest runs, then the PUT commits."""

        fired = False

        def get_document(self, *args):
            found = store.get_document(*args)
            if not self.fired:
                self.fired = True
                services.ingest.object_created(document.source)
            return found

        def __getattr__(self, name):
            return getattr(store, name)

    catalog.documents = IngestAfterRead()
    # When the PUT commits over the record it read before the ingest's writes
    written = put(services, title="Leave")
    # Then the PUT applied its title on top of the indexed record instead of writing back the pending one
    stored = services.adapters.metadata.get_document("t", "c", "d")
    assert written == stored
    assert (stored.status, stored.title, stored.indexed_version) == (DocumentStatus.INDEXED, "Leave", document.version)


def test_superseded_content_is_never_marked_indexed(services):
    # Given the first content being ingested, and new content committing just before its `indexed` write
    first = put(services, content="First version of the text.")
    ingest = services.ingest
    newer = {}
    ingest.documents = StatusWriteHook(
        ingest.documents,
        DocumentStatus.INDEXED,
        lambda: newer.update(doc=put(services, content="Second version.", title="2")),
    )
    # When the first content's ingest finishes / Then it loses (the message is retried, and will be stale)
    with pytest.raises(Conflict):
        ingest.object_created(first.source)
    # And the record is the new content's, pending: not marked indexed from the first content
    stored = services.adapters.metadata.get_document("t", "c", "d")
    assert (stored.version, stored.status, stored.title, stored.source) == (
        newer["doc"].version,
        DocumentStatus.PENDING,
        "2",
        newer["doc"].source,
    )
    assert stored.indexed_version < stored.version
    # When the new content's ingest runs / Then it is indexed, with the new text only
    ingest.documents = ingest.documents.inner
    ingest.object_created(stored.source)
    assert services.adapters.metadata.get_document("t", "c", "d").status is DocumentStatus.INDEXED
    assert [c.text for c in services.adapters.chunks.list_chunks("t", "c", "d")] == ["Second version."]


def test_metadata_puts_while_the_worker_indexes_all_land(services):
    from kindex_local.deployment import build_worker

    worker = build_worker()
    worker.backoff = 0.0
    services.ingest.limits.embed_slice = 2  # many progress writes to race with
    text = "\n\n".join(
        f"Paragraph {i} about topic {i}, with enough words to make its own chunk of text." for i in range(40)
    )
    document = put(services, content=text)
    worker.start()
    try:
        # When 16 PUTs of different fields come while the worker indexes the document
        outcomes = write_together(
            services.catalog, [("t", "d", {field_of(i): value("t", 0, i)}) for i in range(WRITERS)]
        )
        assert all(isinstance(o, Document) for o in outcomes), outcomes
        wait_until(
            lambda: services.adapters.metadata.get_document("t", "c", "d").status,
            until=lambda status: status in (DocumentStatus.INDEXED, DocumentStatus.FAILED),
            message="the document was neither indexed nor failed",
        )
    finally:
        worker.stop()
    # Then the document is indexed from its content, and every field holds one of its writers' values
    stored = services.adapters.metadata.get_document("t", "c", "d")
    assert (stored.status, stored.indexed_version, stored.version) == (
        DocumentStatus.INDEXED,
        document.version,
        document.version,
    ), stored.failure_reason
    for name in FIELDS:
        assert getattr(stored, name) in {value("t", 0, i) for i in range(WRITERS) if field_of(i) == name}
    assert stored.chunk_count == stored.chunks_done == len(services.adapters.chunks.list_chunks("t", "c", "d")) > 1


def test_reindex_writes_keep_a_concurrent_metadata_put(services):
    # Given an indexed document, and a metadata PUT that commits between a clean reindex's read and its write
    document = put(services, content="Text to rebuild.")
    services.ingest.object_created(document.source)
    pages = services.reindex_worker.pages  # the page worker writes the document
    pages.documents = StatusWriteHook(pages.documents, DocumentStatus.PENDING, lambda: put(services, title="T"))
    # When the clean reindex resets the document
    collection = services.adapters.metadata.get_collection("t", "c")
    services.reindex_worker.reindex_collection("t", collection, clean=True)
    # Then it is pending for the rebuild and keeps the title
    stored = services.adapters.metadata.get_document("t", "c", "d")
    assert pages.documents.fired
    assert (stored.status, stored.title, stored.indexed_config_version) == (DocumentStatus.PENDING, "T", 0)


def test_a_write_that_keeps_losing_gives_up_with_conflict(services, monkeypatch):
    monkeypatch.setattr(record_writes, "FIRST_PAUSE", 0.0)
    put(services, title="start")
    store = services.adapters.metadata
    attempts = []

    class AlwaysOvertaken:
        """Before each of the write's commits, another write commits."""

        def put_document(self, tenant, document, **kwargs):
            attempts.append(document.revision)
            current = store.get_document(tenant, "c", "d")
            store.put_document(tenant, current.model_copy(update={"revision": current.revision + 1}), create=False)
            return store.put_document(tenant, document, **kwargs)

        def __getattr__(self, name):
            return getattr(store, name)

    services.catalog.documents = AlwaysOvertaken()
    with pytest.raises(Conflict):
        put(services, title="never")
    # Tried WRITE_ATTEMPTS times, each over the revision it had just read, and nothing of it was written
    assert attempts == list(range(2, 2 + record_writes.WRITE_ATTEMPTS))
    assert store.get_document("t", "c", "d").title == "start"


def test_a_change_that_refuses_is_not_retried(services):
    put(services, title="start")
    calls = []

    def refuse(current):
        calls.append(current)
        raise Conflict("superseded")

    with pytest.raises(Conflict, match="superseded"):
        document_writes.write_document(
            services.adapters.metadata, "t", "c", "d", services.adapters.metadata.get_document("t", "c", "d"), refuse
        )
    assert len(calls) == 1


def test_a_metadata_put_racing_a_delete_creates_the_document_afresh(services):
    # Given a document with content, deleted between a metadata PUT's read and its commit
    first = put(services, content="Some content.")
    catalog = services.catalog
    store = catalog.documents
    catalog.documents = StatusWriteHook(store, DocumentStatus.PENDING, lambda: catalog.delete_document("t", "c", "d"))
    # When the metadata PUT commits / Then it creates a fresh document with only its fields (PUT creates: as if it
    # came after the delete), without the deleted content
    written = put(services, title="after delete")
    catalog.documents = store
    stored, content = catalog.get_document("t", "c", "d")
    assert (stored.title, stored.source, stored.version, content) == ("after delete", None, 0, None)
    assert written == stored and stored.revision == 1
    # And the deleted content's event, processed late, indexes nothing into the new document
    assert services.ingest.object_created(first.source) is None
    assert services.adapters.metadata.get_document("t", "c", "d").status is DocumentStatus.PENDING
    assert services.adapters.chunks.list_chunks("t", "c", "d") == []


# DynamoDB (the AWS backend, moto)
@pytest.fixture
def aws(deploy, atomic_requests) -> Deployment:  # noqa: F811
    deployment = deploy()
    for tenant in ("t", "u"):
        deployment.services.catalog.put_collection(tenant, "c", CollectionInput(chunking_max_size=200))
    return deployment


def test_sixteen_writers_of_different_fields_all_land_on_dynamodb(aws):
    for round_ in range(3):
        sixteen_writers_round(aws.services.catalog, ["t", "u"], round_)


def test_a_metadata_put_just_before_the_ingest_marks_indexed_keeps_both_on_dynamodb(aws):
    services = aws.services
    document = put(services, content="The leave policy: 25 days a year.")
    ingest = services.ingest
    ingest.documents = StatusWriteHook(ingest.documents, DocumentStatus.INDEXED, lambda: put(services, title="Leave"))
    ingest.object_created(document.source)
    stored = services.adapters.metadata.get_document("t", "c", "d")
    assert ingest.documents.fired
    assert (stored.status, stored.title, stored.indexed_version) == (DocumentStatus.INDEXED, "Leave", document.version)
