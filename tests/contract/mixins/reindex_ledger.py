"""Contract of ReindexLedger (the reindex state per collection and the documents that need attention), run against
every metadata store that implements it."""

from __future__ import annotations

import pytest

from kindex.domain.errors import Conflict
from kindex.domain.models import Document, DocumentStatus
from kindex.domain.reindex import ReindexState
from tests.contract.mixins.metadata_store import MIXED_IDS, make_collection, make_document


def put(store, tenant: str, collection: str, document_id: str, **changes) -> Document:
    stored = store.get_document(tenant, collection, document_id)
    document = make_document(collection, document_id, revision=(stored.revision if stored else 0) + 1, **changes)
    store.put_document(tenant, document, create=stored is None)
    return document


class ReindexLedgerContract:
    """Needs a `store` fixture: an adapter of DocumentStore, CollectionStore and ReindexLedger."""

    def test_missing_state_is_none_and_first_write_creates_it(self, store):
        assert store.get_state("acme", "docs") is None
        state = ReindexState(
            collection="docs", swept_config_version=2, swept_model="hash:384", drift_after="d9", revision=1
        )
        store.put_state("acme", state)
        assert store.get_state("acme", "docs") == state

    def test_state_writes_are_conditional_on_the_revision(self, store):
        # Given a state at revision 2
        store.put_state("acme", ReindexState(collection="docs", revision=1))
        store.put_state("acme", ReindexState(collection="docs", drift_after="a", revision=2))
        # When a writer that read revision 1 writes, or a second writer creates it again / Then Conflict, unchanged
        with pytest.raises(Conflict):
            store.put_state("acme", ReindexState(collection="docs", drift_after="stale", revision=2))
        with pytest.raises(Conflict):
            store.put_state("acme", ReindexState(collection="docs", drift_after="stale", revision=1))
        with pytest.raises(Conflict):
            store.put_state("acme", ReindexState(collection="new", revision=3))
        assert store.get_state("acme", "docs").drift_after == "a"
        assert store.get_state("acme", "new") is None
        # When the next revision is written / Then it wins
        store.put_state("acme", ReindexState(collection="docs", drift_after="b", revision=3))
        assert store.get_state("acme", "docs").revision == 3

    def test_states_are_per_tenant_and_deleted_with_their_collection(self, store):
        store.put_collection("acme", make_collection("docs"), create=True)
        store.put_state("acme", ReindexState(collection="docs", drift_after="acme", revision=1))
        store.put_state("other", ReindexState(collection="docs", drift_after="other", revision=1))
        assert store.get_state("acme", "docs").drift_after == "acme"
        assert store.get_state("other", "docs").drift_after == "other"
        store.delete_collection("acme", "docs")
        assert store.get_state("acme", "docs") is None
        assert store.get_state("other", "docs").drift_after == "other"

    def test_attention_lists_exactly_the_documents_that_need_it_as_they_change(self, store):
        # Given documents in every state
        put(store, "acme", "docs", "indexed", status=DocumentStatus.INDEXED)
        put(store, "acme", "docs", "pending", status=DocumentStatus.PENDING)
        put(store, "acme", "docs", "running", status=DocumentStatus.IN_PROGRESS)
        put(store, "acme", "docs", "failed-for-good", status=DocumentStatus.FAILED, failure_retryable=False)
        put(store, "acme", "docs", "failed-retry", status=DocumentStatus.FAILED, failure_retryable=True)
        # Then only the waiting, running and retryable ones are listed, in order
        assert store.attention_documents("acme", "docs", after=None, limit=100) == [
            "failed-retry",
            "pending",
            "running",
        ]
        # When one is indexed and another fails for good / Then they leave the list; a new failure joins it
        put(store, "acme", "docs", "pending", status=DocumentStatus.INDEXED)
        put(store, "acme", "docs", "running", status=DocumentStatus.FAILED, failure_retryable=False)
        put(store, "acme", "docs", "indexed", status=DocumentStatus.FAILED, failure_retryable=True)
        assert store.attention_documents("acme", "docs", after=None, limit=100) == ["failed-retry", "indexed"]
        # When a document is deleted / Then it is gone from the list
        store.delete_document("acme", "docs", "indexed")
        assert store.attention_documents("acme", "docs", after=None, limit=100) == ["failed-retry"]

    @pytest.mark.slow
    def test_attention_pages_in_code_point_order_within_one_tenant_and_collection(self, store):
        for document_id in MIXED_IDS:
            put(store, "acme", "docs", document_id)  # pending
        put(store, "acme", "other", "x")
        put(store, "other", "docs", "y")
        walked, after = [], None
        while page := store.attention_documents("acme", "docs", after=after, limit=5):
            assert len(page) <= 5
            walked += page
            after = page[-1]
        assert walked == sorted(MIXED_IDS)
        assert store.attention_documents("acme", "docs", after=None, limit=0) == []
        assert store.attention_documents("acme", "nothing", after=None, limit=10) == []
