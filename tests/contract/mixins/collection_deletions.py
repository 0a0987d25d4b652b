"""Contract of CollectionDeletions (a collection taken out of every read while its delete job runs), run against
every metadata store that implements it."""

from __future__ import annotations

import pytest

from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import PendingDeletion
from tests.contract.mixins.metadata_store import make_collection, make_document


def created(store, tenant: str, collection_id: str, **changes):
    collection = make_collection(collection_id, revision=1, **changes)
    store.put_collection(tenant, collection, create=True)
    return collection


class CollectionDeletionsContract:
    """Needs a `store` fixture: an adapter of CollectionStore, DocumentStore and CollectionDeletions."""

    def test_a_collection_marked_deleting_is_gone_from_reads_and_cannot_be_created(self, store):
        # Given a collection with a document, and the same collection id in another tenant
        collection = created(store, "acme", "docs", title="old", query_groups=["staff"])
        created(store, "rival", "docs", title="rival's")
        store.put_document("acme", make_document("docs", "d1"), create=True)
        # When its deletion begins
        store.mark_deleting("acme", collection, "job-1")
        # Then it is not read, not listed, and not created again; its document records stay for the job
        assert store.get_collection("acme", "docs") is None
        assert store.list_collections("acme", after=None, offset=0, limit=None) == []
        with pytest.raises(Conflict):
            store.put_collection("acme", make_collection("docs", revision=1), create=True)
        with pytest.raises(NotFound):
            store.put_collection("acme", collection.model_copy(update={"revision": 2}), create=False)
        assert store.get_document("acme", "docs", "d1") is not None
        # And the pending deletion holds the record as it was, with its job
        assert store.pending_deletion("acme", "docs") == PendingDeletion(collection=collection, job="job-1")
        assert store.pending_deletions("acme") == [PendingDeletion(collection=collection, job="job-1")]
        # And the other tenant's collection of that id is untouched
        assert store.get_collection("rival", "docs").title == "rival's"
        assert store.pending_deletion("rival", "docs") is None and store.pending_deletions("rival") == []

    def test_marking_is_conditional_on_the_revision_read(self, store):
        # Given a collection updated since it was read
        read = created(store, "acme", "docs")
        store.put_collection("acme", read.model_copy(update={"title": "new", "revision": 2}), create=False)
        # When its deletion begins over the stale revision / Then Conflict, and nothing changed
        with pytest.raises(Conflict):
            store.mark_deleting("acme", read, "job-1")
        assert store.get_collection("acme", "docs").title == "new"
        assert store.pending_deletion("acme", "docs") is None
        # And a collection that does not exist is NotFound
        with pytest.raises(NotFound):
            store.mark_deleting("acme", make_collection("nope", revision=1), "job-2")
        assert store.pending_deletions("acme") == []

    def test_ending_the_deletion_frees_the_id_for_a_new_collection(self, store):
        # Given a collection being deleted whose records are deleted
        collection = created(store, "acme", "docs")
        store.put_document("acme", make_document("docs", "d1"), create=True)
        store.mark_deleting("acme", collection, "job-1")
        store.delete_collection("acme", "docs")
        assert store.get_document("acme", "docs", "d1") is None
        # When another job tries to end it / Then it stays pending
        assert store.end_deletion("acme", "docs", "job-other") is False
        assert store.pending_deletion("acme", "docs") is not None
        # When its own job ends it / Then it is gone (ending it again is False) and the id can be created afresh
        assert store.end_deletion("acme", "docs", "job-1") is True
        assert store.end_deletion("acme", "docs", "job-1") is False
        assert store.pending_deletion("acme", "docs") is None
        fresh = created(store, "acme", "docs", title="fresh")
        assert store.get_collection("acme", "docs") == fresh
        assert store.list_documents("acme", "docs", after=None, offset=0, limit=None) == []

    def test_pending_deletions_list_every_collection_of_the_tenant_in_order(self, store):
        ids = ["b", "a", "é", "a#b"]
        for collection_id in ids:
            store.mark_deleting("acme", created(store, "acme", collection_id), f"job-{collection_id}")
        created(store, "acme", "kept")
        assert [(p.collection.id, p.job) for p in store.pending_deletions("acme")] == [
            (c, f"job-{c}") for c in sorted(ids)
        ]
        assert store.list_collections("acme", after=None, offset=0, limit=None) == ["kept"]

    def test_unaddressable_ids_have_no_pending_deletion(self, store):
        assert store.pending_deletion("acme", "") is None
        assert store.pending_deletion("acme", "\U0001f600" * 400) is None
        assert store.end_deletion("acme", "\U0001f600" * 400, "job") is False
