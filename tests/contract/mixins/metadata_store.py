"""Contracts of the metadata ports: CollectionStore, DocumentStore and KeyStore, one mixin each, and
MetadataStoreContract for an adapter that is all three (as SQLite's and DynamoDB's are), which adds what holds
between collections and their documents (deleting a collection deletes its documents; tenants and ids never mix)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import pytest

from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import (
    ApiKey,
    ChunkingMethod,
    Collection,
    Document,
    DocumentStatus,
    Role,
)

if TYPE_CHECKING:
    from kindex.domain.ports import CollectionStore, DocumentStore, KeyStore

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)

# Ascii, unicode, spaces and punctuation; U+FB01 vs U+1F600 tells code point order from UTF-16 order.
MIXED_IDS = [
    "a",
    "B",
    "a b",
    "a#b",
    "a%20b",
    "a%b",
    "#a",
    "a#",
    "é",
    "ü x",
    "日本",
    "\ufb01",
    "\U0001f600",
    "z",
    "Z-1",
    "a.b",
    "~",
    "a-b",
    "a_b",
    "A",
    "0",
    "9 9",
    "T#x#C#y",
    "KEYS",
]


def make_collection(collection_id: str = "docs", **changes) -> Collection:
    return Collection(id=collection_id, embedding_model="hash:384", **changes)


def make_document(collection_id: str, document_id: str, **changes) -> Document:
    return Document(id=document_id, collection=collection_id, **changes)


def make_key(
    key_id: str, tenant: str = "acme", created_at: datetime = T0, role: Role = Role.ADMIN, **changes
) -> ApiKey:
    return ApiKey(key_id=key_id, tenant=tenant, role=role, secret_sha256="ab" * 32, created_at=created_at, **changes)


def ids_of(documents: list[Document]) -> list[str]:
    return [document.id for document in documents]


def expected_page(ids: list[str], *, after: str | None, offset: int, limit: int | None) -> list[str]:
    remaining = [i for i in sorted(ids) if after is None or i > after][offset:]
    return remaining if limit is None else remaining[:limit]


class CollectionStoreContract:
    """Subclass in a `Test*` class that provides `store`: a fresh, empty CollectionStore."""

    @pytest.fixture
    def store(self) -> CollectionStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `store` fixture")

    def test_missing_collection_is_none(self, store):
        # Given an empty store / When reading a collection that was never written / Then it is None
        assert store.get_collection("acme", "nope") is None

    def test_collection_round_trips_every_field(self, store):
        # Given a collection using every field, with an id full of awkward characters
        collection = make_collection(
            "Ünïcode id #1 100% sure",
            title="Hand-book ✓",
            chunking_method=ChunkingMethod.TOKENS,
            chunking_max_size=512,
            chunking_overlap_offset=128,
            document_spaces=["Main", "Sandbox space"],
            allow_guests=True,
            query_groups=["XWiki.Admins", "ops"],
            rights_check_method="external",
            rights_check_method_configuration={
                "url": "https://rights.example/check",
                "timeout": 2.5,
                "nested": {"a": [1]},
            },
            created_at=T0,
            updated_at=T0 + timedelta(seconds=5),
            document_count=3,
            config_version=4,
            revision=7,
        )
        # When it is created and read back
        store.put_collection("acme", collection, create=True)
        # Then every field survives, types included
        loaded = store.get_collection("acme", collection.id)
        assert loaded == collection
        assert loaded.chunking_method is ChunkingMethod.TOKENS
        assert loaded.created_at == T0 and loaded.created_at.tzinfo is not None

    def test_creating_a_collection_twice_conflicts_and_keeps_the_first(self, store):
        # Given a stored collection
        store.put_collection("acme", make_collection(title="first"), create=True)
        # When the same id is created again / Then Conflict, and the stored one is unchanged
        with pytest.raises(Conflict):
            store.put_collection("acme", make_collection(title="second"), create=True)
        assert store.get_collection("acme", "docs").title == "first"

    def test_updating_a_collection(self, store):
        # Given a stored collection / When it is updated over its revision / Then the new value is read back
        store.put_collection("acme", make_collection(title="first", revision=1), create=True)
        store.put_collection("acme", make_collection(title="second", revision=2), create=False)
        assert (store.get_collection("acme", "docs").title, store.get_collection("acme", "docs").revision) == (
            "second",
            2,
        )

    def test_updating_a_missing_collection_is_not_found(self, store):
        # Given no collection / When updating one, as the first write after a read or not / Then NotFound and
        # nothing was created
        with pytest.raises(NotFound):
            store.put_collection("acme", make_collection(revision=1), create=False)
        with pytest.raises(NotFound):
            store.put_collection("acme", make_collection(revision=5), create=False)
        assert store.get_collection("acme", "docs") is None

    def test_collection_updates_are_conditional_on_the_revision_they_read(self, store):
        # Given a collection at revision 1
        store.put_collection("acme", make_collection(revision=1, query_groups=["staff"]), create=True)
        # When an update claims to follow revision 0 (it read nothing, or a record before this one) / Then Conflict
        with pytest.raises(Conflict):
            store.put_collection("acme", make_collection(revision=1, query_groups=["stale"]), create=False)
        # When an update follows revision 1 / Then it is written with revision 2
        store.put_collection("acme", make_collection(revision=2, query_groups=[]), create=False)
        # When a second writer that also read revision 1 commits (it would bring the revoked group back), or one
        # claims a revision not yet written / Then Conflict both times, and the first writer's record stays whole
        with pytest.raises(Conflict):
            store.put_collection(
                "acme", make_collection(revision=2, query_groups=["staff"], allow_guests=True), create=False
            )
        with pytest.raises(Conflict):
            store.put_collection("acme", make_collection(revision=4, title="ahead"), create=False)
        stored = store.get_collection("acme", "docs")
        assert stored == make_collection(
            revision=2, query_groups=[], created_at=stored.created_at, updated_at=stored.updated_at
        )

    def test_collection_revisions_are_per_tenant(self, store):
        # Given the same collection id in two tenants, written a different number of times
        for tenant, writes in [("acme", 3), ("other", 1)]:
            store.put_collection(tenant, make_collection(revision=1, title=tenant), create=True)
            for revision in range(2, writes + 1):
                store.put_collection(tenant, make_collection(revision=revision, title=tenant), create=False)
        # When one is updated over the other's revision / Then Conflict; over its own / Then written
        with pytest.raises(Conflict):
            store.put_collection("other", make_collection(revision=4, title="x"), create=False)
        store.put_collection("other", make_collection(revision=2, title="other 2"), create=False)
        assert [
            (c.revision, c.title) for c in (store.get_collection("acme", "docs"), store.get_collection("other", "docs"))
        ] == [(3, "acme"), (2, "other 2")]

    def test_delete_collection_reports_whether_it_existed(self, store):
        # Given a stored collection
        store.put_collection("acme", make_collection(), create=True)
        # When deleting it twice / Then True, then False
        assert store.delete_collection("acme", "docs") is True
        assert store.delete_collection("acme", "docs") is False
        assert store.get_collection("acme", "docs") is None

    def test_collections_list_in_code_point_order(self, store):
        # Given collections with mixed ids written in a shuffled order
        for collection_id in reversed(MIXED_IDS):
            store.put_collection("acme", make_collection(collection_id), create=True)
        # When listing all / Then ids come in code point order
        assert store.list_collections("acme", after=None, offset=0, limit=None) == sorted(MIXED_IDS)

    @pytest.mark.slow
    def test_collection_listing_pages(self, store):
        # Given more collections than one DynamoDB page
        ids = [f"c{i:03d}" for i in range(40)]
        for collection_id in ids:
            store.put_collection("acme", make_collection(collection_id), create=True)
        # When listing with after/offset/limit / Then the expected slices
        for after, offset, limit in [(None, 0, None), ("c010", 4, 9), (None, 38, 10), ("c039", 0, None)]:
            assert store.list_collections("acme", after=after, offset=offset, limit=limit) == expected_page(
                ids, after=after, offset=offset, limit=limit
            )


PAGED_IDS = [f"doc-{i:03d}" for i in range(0, 240, 2)] + ["Ä", "é x", "#1", "~"]

PAGING_CASES = [
    (None, 0, None),
    (None, 0, 10),
    (None, 5, 10),
    (None, 15, None),
    (None, 0, 0),
    (None, 200, 5),
    ("doc-050", 0, 20),  # `after` is an existing id
    ("doc-051", 0, 20),  # `after` falls between ids
    ("doc-051", 13, 9),
    ("doc-100", 3, None),
    ("doc-238", 0, None),
    ("", 0, 4),
    ("\U0010ffff", 0, None),
    ("a", 0, None),
    ("#", 2, 2),
    (None, 123, None),
    (None, 0, len(PAGED_IDS) + 10),
    (None, 7, 7),
    (None, 6, 8),
    ("doc-050" + "\U0001f600" * 300, 0, 3),  # longer than any key DynamoDB can hold
]


class DocumentStoreContract:
    """Subclass in a `Test*` class that provides `store`: a fresh, empty DocumentStore."""

    @pytest.fixture
    def store(self) -> DocumentStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `store` fixture")

    @pytest.fixture
    def paged_store(self, store):
        for document_id in PAGED_IDS:
            store.put_document("acme", make_document("docs", document_id), create=True)
        store.put_document("acme", make_document("other", "doc-001"), create=True)
        return store

    def test_missing_document_is_none(self, store):
        assert store.get_document("acme", "docs", "nope") is None

    @pytest.mark.slow
    def test_batch_read_returns_the_existing_documents_of_any_collections(self, store):
        # Given 130 documents in "docs" (more than one DynamoDB batch), one in "other", and the same ids in another
        # tenant with other titles
        for i in range(130):
            store.put_document("acme", make_document("docs", f"d{i:03d}", title=f"acme {i}"), create=True)
            store.put_document("rival", make_document("docs", f"d{i:03d}", title=f"rival {i}"), create=True)
        store.put_document("acme", make_document("other", "d000", title="other"), create=True)
        # When reading them in one call, with missing ids, a missing collection, duplicates and a mixed-id document
        refs = [("docs", f"d{i:03d}") for i in range(130)] + [
            ("other", "d000"),
            ("docs", "missing"),
            ("nowhere", "d001"),
            ("docs", "d007"),
            ("other", "d000"),
        ]
        found = store.get_documents("acme", refs)
        # Then every existing one is there once, keyed by (collection, id), as get_document reads it; missing are absent
        assert set(found) == {("docs", f"d{i:03d}") for i in range(130)} | {("other", "d000")}
        assert all(found[("docs", f"d{i:03d}")] == store.get_document("acme", "docs", f"d{i:03d}") for i in range(130))
        assert found[("other", "d000")].title == "other"
        assert {document.title for key, document in found.items() if key[0] == "docs"} == {
            f"acme {i}" for i in range(130)
        }

    def test_batch_read_of_nothing_or_of_unaddressable_ids_is_empty(self, store):
        store.put_document("acme", make_document("docs", "d1"), create=True)
        assert store.get_documents("acme", []) == {}
        assert store.get_documents("acme", [("docs", ""), ("docs", "\U0001f600" * 400), ("", "d1")]) == {}
        assert store.get_documents("rival", [("docs", "d1")]) == {}

    def test_document_round_trips_every_field(self, store):
        # Given a document using every field, in a collection and with an id full of awkward characters
        document = make_document(
            "col #1 %41",
            "dök #2 50% ✓",
            title="Title",
            language="fr",
            url="https://wiki.example/x?y=1#z",
            mimetype="application/pdf",
            status=DocumentStatus.FAILED,
            failure_reason="CorruptFile: bad xref",
            chunk_count=12,
            chunks_done=5,
            content_sha256="f" * 64,
            content_length=1234,
            source="upload",
            version=3,
            indexed_version=2,
            indexed_at=T0,
            created_at=T0 - timedelta(days=1),
            updated_at=T0,
        )
        # When created and read back / Then every field survives
        store.put_document("acme", document, create=True)
        loaded = store.get_document("acme", "col #1 %41", "dök #2 50% ✓")
        assert loaded == document
        assert loaded.status is DocumentStatus.FAILED and loaded.indexed_at == T0

    def test_creating_a_document_twice_conflicts(self, store):
        store.put_document("acme", make_document("docs", "d1", title="first"), create=True)
        with pytest.raises(Conflict):
            store.put_document("acme", make_document("docs", "d1", title="second"), create=True)
        assert store.get_document("acme", "docs", "d1").title == "first"

    def test_updating_a_missing_document_is_not_found(self, store):
        # Given no document / When updating it, as the first write after a read or not / Then NotFound, nothing created
        with pytest.raises(NotFound):
            store.put_document("acme", make_document("docs", "d1", revision=1), create=False)
        with pytest.raises(NotFound):
            store.put_document("acme", make_document("docs", "d1", revision=5), create=False)
        assert store.get_document("acme", "docs", "d1") is None

    def test_updates_are_conditional_on_the_revision_they_read(self, store):
        # Given a document at revision 1
        store.put_document("acme", make_document("docs", "d1", version=1, revision=1, title="v1"), create=True)
        # When an update claims to follow revision 0 (it read nothing, or a record before this one) / Then Conflict
        with pytest.raises(Conflict):
            store.put_document("acme", make_document("docs", "d1", version=1, revision=1, title="stale"), create=False)
        assert store.get_document("acme", "docs", "d1").title == "v1"
        # When an update follows revision 1, keeping the content version / Then it is written with revision 2
        store.put_document("acme", make_document("docs", "d1", version=1, revision=2, title="v2"), create=False)
        stored = store.get_document("acme", "docs", "d1")
        assert (stored.title, stored.version, stored.revision) == ("v2", 1, 2)
        # When a second writer that also read revision 1 commits, or one claims a revision not yet written / Then
        # Conflict both times, and the first writer's record stays whole
        with pytest.raises(Conflict):
            store.put_document(
                "acme", make_document("docs", "d1", version=1, revision=2, url="https://b"), create=False
            )
        with pytest.raises(Conflict):
            store.put_document(
                "acme", make_document("docs", "d1", version=1, revision=4, url="https://c"), create=False
            )
        assert store.get_document("acme", "docs", "d1") == make_document(
            "docs", "d1", version=1, revision=2, title="v2", created_at=stored.created_at, updated_at=stored.updated_at
        )

    def test_progress_writes_lose_to_a_newer_write(self, store):
        # Given a document being indexed at version 2
        store.put_document(
            "acme",
            make_document("docs", "d1", version=2, revision=1, status=DocumentStatus.IN_PROGRESS, chunk_count=300),
            create=True,
        )
        # When the ingest records progress over the revision it read / Then the count is stored, the version kept
        store.put_document(
            "acme",
            make_document(
                "docs", "d1", version=2, revision=2, status=DocumentStatus.IN_PROGRESS, chunk_count=300, chunks_done=128
            ),
            create=False,
        )
        assert (
            store.get_document("acme", "docs", "d1").chunks_done,
            store.get_document("acme", "docs", "d1").version,
        ) == (128, 2)
        # When new content makes it version 3 / Then the ingest's next progress write (over the revision it wrote)
        # conflicts and changes nothing
        store.put_document(
            "acme", make_document("docs", "d1", version=3, revision=3, title="new content"), create=False
        )
        with pytest.raises(Conflict):
            store.put_document(
                "acme",
                make_document(
                    "docs",
                    "d1",
                    version=2,
                    revision=3,
                    status=DocumentStatus.IN_PROGRESS,
                    chunk_count=300,
                    chunks_done=256,
                ),
                create=False,
            )
        stored = store.get_document("acme", "docs", "d1")
        assert (stored.version, stored.revision, stored.title, stored.chunks_done, stored.status) == (
            3,
            3,
            "new content",
            0,
            DocumentStatus.PENDING,
        )

    def test_revisions_are_per_tenant_and_collection(self, store):
        # Given the same document id in two tenants and two collections, each written a different number of times
        for tenant, collection, writes in [("acme", "docs", 3), ("other", "docs", 1), ("acme", "more", 2)]:
            store.put_document(
                tenant, make_document(collection, "d", revision=1, title=f"{tenant}/{collection}"), create=True
            )
            for revision in range(2, writes + 1):
                store.put_document(
                    tenant,
                    make_document(collection, "d", revision=revision, title=f"{tenant}/{collection}"),
                    create=False,
                )
        # When each is updated over another's revision / Then Conflict; over its own / Then written
        with pytest.raises(Conflict):
            store.put_document("other", make_document("docs", "d", revision=4, title="x"), create=False)
        store.put_document("other", make_document("docs", "d", revision=2, title="other 2"), create=False)
        assert [
            (d.revision, d.title)
            for d in (
                store.get_document("acme", "docs", "d"),
                store.get_document("other", "docs", "d"),
                store.get_document("acme", "more", "d"),
            )
        ] == [(3, "acme/docs"), (2, "other 2"), (2, "acme/more")]

    def test_delete_document_reports_whether_it_existed(self, store):
        store.put_document("acme", make_document("docs", "d1"), create=True)
        assert store.delete_document("acme", "docs", "d1") is True
        assert store.delete_document("acme", "docs", "d1") is False
        assert store.get_document("acme", "docs", "d1") is None

    def test_a_delete_at_a_revision_deletes_only_the_record_still_at_it(self, store):
        # Given a document at revision 2, and the same id in another tenant at revision 1
        store.put_document("acme", make_document("docs", "d", revision=1), create=True)
        store.put_document("acme", make_document("docs", "d", revision=2, title="second"), create=False)
        store.put_document("other", make_document("docs", "d", revision=1), create=True)
        # When deleted at a revision it no longer has / Then Conflict, and the record is unchanged
        with pytest.raises(Conflict):
            store.delete_document("acme", "docs", "d", revision=1)
        assert store.get_document("acme", "docs", "d").title == "second"
        # When deleted at its own revision / Then it is gone, and only it
        assert store.delete_document("acme", "docs", "d", revision=2) is True
        assert store.get_document("acme", "docs", "d") is None
        assert store.get_document("other", "docs", "d") is not None
        # And a conditional delete of a missing record reports that it did not exist
        assert store.delete_document("acme", "docs", "d", revision=2) is False
        assert store.delete_document("acme", "docs", "never", revision=0) is False

    def test_a_delete_at_revision_zero_matches_a_record_written_before_revisions(self, store):
        store.put_document("acme", make_document("docs", "old", revision=0), create=True)
        with pytest.raises(Conflict):
            store.delete_document("acme", "docs", "old", revision=1)
        assert store.delete_document("acme", "docs", "old", revision=0) is True

    def test_documents_list_in_code_point_order_like_every_adapter(self, store):
        # Given documents with mixed ids
        for document_id in MIXED_IDS:
            store.put_document("acme", make_document("docs", document_id), create=True)
        # When listing / Then code point order (the same list for every adapter), and the count matches
        assert ids_of(store.list_documents("acme", "docs", after=None, offset=0, limit=None)) == sorted(MIXED_IDS)
        assert store.count_documents("acme", "docs") == len(MIXED_IDS)
        assert ids_of(store.list_documents("acme", "docs", after="a#", offset=0, limit=3)) == expected_page(
            MIXED_IDS, after="a#", offset=0, limit=3
        )

    def test_document_pages_hold_whole_records_in_code_point_order(self, store):
        # Given documents of mixed ids, and others of another collection and another tenant
        for document_id in MIXED_IDS:
            store.put_document("acme", make_document("docs", document_id, title=f"title of {document_id}"), create=True)
        store.put_document("acme", make_document("other", "x"), create=True)
        store.put_document("other", make_document("docs", "y"), create=True)
        # When walking pages of 5 after the last id / Then each record is the stored one, each once, in order
        walked, after = [], None
        while page := store.list_documents("acme", "docs", after=after, offset=0, limit=5):
            assert len(page) <= 5
            assert all(d == store.get_document("acme", "docs", d.id) for d in page)
            walked += ids_of(page)
            after = page[-1].id
        assert walked == sorted(MIXED_IDS)
        assert store.list_documents("acme", "docs", after=None, offset=0, limit=0) == []
        assert store.list_documents("acme", "docs", after="\U0010ffff", offset=0, limit=3) == []

    def test_documents_list_as_their_stored_records(self, store):
        # Given two tenants with the same collection and document ids, holding different records
        for tenant, status in (("acme", DocumentStatus.FAILED), ("other", DocumentStatus.INDEXED)):
            for document_id in ("d1", "d2"):
                store.put_document(
                    tenant,
                    make_document(
                        "docs",
                        document_id,
                        title=f"{tenant} {document_id}",
                        status=status,
                        failure_reason=f"{tenant} broke",
                        chunk_count=3,
                        version=2,
                    ),
                    create=True,
                )
        # When listing one tenant's documents
        listed = store.list_documents("acme", "docs", after=None, offset=0, limit=None)
        # Then each record is exactly what a GET of it returns: that tenant's, nothing of the other's
        assert listed == [store.get_document("acme", "docs", d) for d in ("d1", "d2")]
        assert {(d.title, d.status, d.failure_reason) for d in listed} == {
            ("acme d1", DocumentStatus.FAILED, "acme broke"),
            ("acme d2", DocumentStatus.FAILED, "acme broke"),
        }

    @pytest.mark.slow
    def test_document_listing_pages(self, paged_store):
        # Given more documents than one DynamoDB page
        for after, offset, limit in PAGING_CASES:
            # When listing a page / Then exactly the expected slice
            assert ids_of(
                paged_store.list_documents("acme", "docs", after=after, offset=offset, limit=limit)
            ) == expected_page(PAGED_IDS, after=after, offset=offset, limit=limit), (after, offset, limit)

    @pytest.mark.slow
    def test_walking_pages_with_after_visits_every_document_once(self, paged_store):
        # Given many documents / When walking pages of 11 using the last id as `after`
        seen: list[str] = []
        after = None
        while page := paged_store.list_documents("acme", "docs", after=after, offset=0, limit=11):
            seen.extend(ids_of(page))
            after = page[-1].id
        # Then every id is seen once, in order
        assert seen == sorted(PAGED_IDS)

    @pytest.mark.slow
    def test_count_documents_over_many_pages(self, paged_store):
        assert paged_store.count_documents("acme", "docs") == len(PAGED_IDS)
        assert paged_store.count_documents("acme", "other") == 1
        assert paged_store.count_documents("acme", "none") == 0
        assert paged_store.count_documents("stranger", "docs") == 0


class KeyStoreContract:
    """Subclass in a `Test*` class that provides `store`: a fresh, empty KeyStore."""

    @pytest.fixture
    def store(self) -> KeyStore:
        raise NotImplementedError(f"{type(self).__name__} must provide the `store` fixture")

    def test_key_round_trip_and_missing_key(self, store):
        # Given a stored key / When reading it and a missing one / Then the record and None
        key = make_key("k1", description="CI key ✓")
        store.put_key(key)
        assert store.get_key("k1") == key
        assert store.get_key("k2") is None

    def test_duplicate_key_id_conflicts(self, store):
        store.put_key(make_key("k1", tenant="acme"))
        with pytest.raises(Conflict):
            store.put_key(make_key("k1", tenant="other"))
        assert store.get_key("k1").tenant == "acme"
        assert [k.key_id for k in store.list_keys()] == ["k1"]

    @pytest.mark.slow
    def test_keys_list_oldest_first_by_tenant_and_all(self, store):
        # Given keys of two tenants written out of order, two of them created at the same second
        keys = [
            make_key("k3", "acme", T0 + timedelta(minutes=3)),
            make_key("k1", "other", T0),
            make_key("kb", "acme", T0 + timedelta(minutes=1)),
            make_key("ka", "acme", T0 + timedelta(minutes=1)),
            make_key("k0", "acme", T0 - timedelta(days=400), role=Role.QUERY),
        ]
        for key in keys:
            store.put_key(key)
        # When listing / Then oldest first, ties by key id, filtered by tenant when asked
        assert [k.key_id for k in store.list_keys()] == ["k0", "k1", "ka", "kb", "k3"]
        assert [k.key_id for k in store.list_keys("acme")] == ["k0", "ka", "kb", "k3"]
        assert [k.key_id for k in store.list_keys("other")] == ["k1"]
        assert store.list_keys("nobody") == []
        assert store.list_keys("acme")[0].role is Role.QUERY

    def test_revoke_key(self, store):
        # Given a key / When revoking it / Then it stays readable and listed, marked revoked everywhere
        store.put_key(make_key("k1"))
        assert store.revoke_key("k1") is True
        assert store.get_key("k1").revoked is True
        assert [k.revoked for k in store.list_keys()] == [True]
        assert [k.revoked for k in store.list_keys("acme")] == [True]
        # And revoking again still succeeds, while an unknown key is False
        assert store.revoke_key("k1") is True
        assert store.revoke_key("nope") is False
        assert store.get_key("nope") is None


class MetadataStoreContract(CollectionStoreContract, DocumentStoreContract, KeyStoreContract):
    """Subclass in a `Test*` class that provides `store`: a fresh, empty adapter of all three metadata ports."""

    @pytest.mark.slow
    def test_deleting_a_collection_deletes_only_its_documents(self, store):
        # Given two collections of one tenant and the same collection id in another tenant, all with documents
        for tenant, collection_id in [("acme", "docs"), ("acme", "docs#2"), ("other", "docs")]:
            store.put_collection(tenant, make_collection(collection_id), create=True)
        doc_ids = [f"d{i:02d}" for i in range(60)]  # more than two BatchWriteItem batches of 25
        for document_id in doc_ids:
            store.put_document("acme", make_document("docs", document_id), create=True)
        store.put_document("acme", make_document("docs#2", "d00"), create=True)
        store.put_document("other", make_document("docs", "d00"), create=True)
        # When deleting acme's "docs"
        assert store.delete_collection("acme", "docs") is True
        # Then its documents are gone and the others remain
        assert store.count_documents("acme", "docs") == 0
        assert store.get_document("acme", "docs", "d00") is None
        assert store.list_documents("acme", "docs", after=None, offset=0, limit=None) == []
        assert store.get_document("acme", "docs#2", "d00") is not None
        assert store.get_document("other", "docs", "d00") is not None
        assert store.list_collections("acme", after=None, offset=0, limit=None) == ["docs#2"]

    def test_deleting_a_missing_collection_still_clears_stray_documents(self, store):
        # Given documents whose collection record does not exist (a half-finished earlier delete)
        store.put_document("acme", make_document("gone", "d1"), create=True)
        # When deleting the collection / Then it reports False but leaves no documents behind
        assert store.delete_collection("acme", "gone") is False
        assert store.count_documents("acme", "gone") == 0

    def test_tenants_are_isolated(self, store):
        # Given the same collection and document ids in two tenants (one tenant name looks like a key fragment)
        for tenant, title in [("acme", "A"), ("acme#C#docs", "B")]:
            store.put_collection(tenant, make_collection("docs", title=title), create=True)
            store.put_document(tenant, make_document("docs", "readme", title=title), create=True)
        # When one tenant's data is changed and deleted
        store.put_document("acme", make_document("docs", "readme", title="A2", revision=1), create=False)
        assert store.delete_document("acme", "docs", "readme") is True
        # Then the other tenant sees only its own, untouched records
        assert store.get_collection("acme#C#docs", "docs").title == "B"
        assert store.get_document("acme#C#docs", "docs", "readme").title == "B"
        assert store.get_document("acme", "docs", "readme") is None
        assert store.get_collection("nobody", "docs") is None
        assert store.list_collections("nobody", after=None, offset=0, limit=None) == []

    def test_tenant_and_collection_parts_cannot_collide(self, store):
        # Given pairs whose naive '#'-joined keys would be equal
        store.put_document("a#C#b", make_document("c", "d", title="first"), create=True)
        store.put_document("a", make_document("b#C#c", "d", title="second"), create=True)
        store.put_document("a%23C%23b", make_document("c", "d", title="third"), create=True)
        # When reading each back / Then each is its own record
        assert store.get_document("a#C#b", "c", "d").title == "first"
        assert store.get_document("a", "b#C#c", "d").title == "second"
        assert store.get_document("a%23C%23b", "c", "d").title == "third"
        # And a collection named like the collections partition does not mix with the tenant's collections
        store.put_document("a", make_document("OLLECTIONS", "x"), create=True)
        assert store.list_collections("a", after=None, offset=0, limit=None) == []

    def test_unaddressable_ids_are_simply_missing(self, store):
        # Given ids no model would accept (empty, far too long) / When reading or deleting them / Then "missing"
        too_long = "\U0001f600" * 400
        assert store.get_document("acme", "docs", "") is None
        assert store.get_document("acme", "docs", too_long) is None
        assert store.get_collection("acme", too_long) is None
        assert store.delete_document("acme", "docs", too_long) is False
        assert store.delete_collection("acme", "") is False
