"""Contract of UsageCounters (a tenant's stored usage, kept atomically with the record writes, and its metered
counts), run against every metadata store: SQLite and DynamoDB (moto)."""

from __future__ import annotations

import pytest

from kindex.domain.errors import QuotaExceeded
from kindex.domain.quotas import Metered, QuotaLimits, Quotas, Usage
from tests.contract.mixins.metadata_store import make_collection, make_document


def limits(**quotas) -> QuotaLimits:
    return QuotaLimits(plan="small", quotas=Quotas(**quotas))


def create(store, tenant: str, document_id: str, *, chunks: int = 0, size: int = 0, limit: QuotaLimits | None = None):
    document = make_document("docs", document_id, revision=1, chunk_count=chunks, content_length=size)
    store.put_document(tenant, document, create=True, limits=limit)
    return document


class UsageCountersContract:
    """Needs a `store` fixture: a metadata store that implements UsageCounters beside its record ports."""

    def test_counters_follow_every_record_write(self, store):
        # Given a tenant with a collection and two documents
        store.put_collection("acme", make_collection("docs", revision=1), create=True)
        first = create(store, "acme", "d1", chunks=3, size=100)
        create(store, "acme", "d2", chunks=2, size=50)
        assert store.usage("acme") == Usage(documents=2, chunks=5, bytes=150, collections=1)
        # When one is rewritten with other content (its revision before is passed or not) and the other deleted
        store.put_document(
            "acme", first.model_copy(update={"revision": 2, "chunk_count": 7, "content_length": 10}), create=False
        )
        store.put_document(
            "acme",
            first.model_copy(update={"revision": 3, "chunk_count": 8, "content_length": 10}),
            create=False,
            previous=first.model_copy(update={"revision": 2, "chunk_count": 7, "content_length": 10}),
        )
        assert store.delete_document("acme", "docs", "d2", revision=1)
        # Then the counters are what the records count, exactly once each
        assert store.usage("acme") == Usage(documents=1, chunks=8, bytes=10, collections=1)
        # And a write that loses its revision check counts nothing
        with pytest.raises(Exception):  # noqa: B017 - Conflict, as the DocumentStore contract says
            store.put_document("acme", first.model_copy(update={"revision": 2, "chunk_count": 99}), create=False)
        assert store.usage("acme").chunks == 8

    def test_a_write_exactly_at_the_limit_passes_and_one_over_is_refused_with_nothing_stored(self, store):
        # Given a plan of 2 documents and 10 chunks
        plan = limits(documents=2, chunks=10)
        create(store, "acme", "d1", chunks=4, limit=plan)
        # When a second document brings both to exactly the limit / Then it is written
        create(store, "acme", "d2", chunks=6, limit=plan)
        assert store.usage("acme") == Usage(documents=2, chunks=10)
        # When a third one would pass the documents limit / Then QuotaExceeded names it, and nothing is stored
        with pytest.raises(QuotaExceeded) as refused:
            create(store, "acme", "d3", limit=plan)
        assert refused.value.details == {"limit": "documents", "used": 2, "max": 2, "plan": "small"}
        assert store.get_document("acme", "docs", "d3") is None
        # And an update adding one chunk over the limit is refused, while one taking chunks away passes
        d1 = store.get_document("acme", "docs", "d1")
        with pytest.raises(QuotaExceeded) as refused:
            store.put_document(
                "acme", d1.model_copy(update={"revision": 2, "chunk_count": 5}), create=False, limits=plan
            )
        assert refused.value.details["limit"] == "chunks" and refused.value.details["used"] == 10
        assert store.get_document("acme", "docs", "d1").chunk_count == 4
        store.put_document("acme", d1.model_copy(update={"revision": 2, "chunk_count": 1}), create=False, limits=plan)
        assert store.usage("acme") == Usage(documents=2, chunks=7)

    def test_a_limit_below_current_use_refuses_growth_but_not_deletes_or_writes_that_add_nothing(self, store):
        # Given three documents, and then a plan that allows only one
        for name in ("d1", "d2", "d3"):
            create(store, "acme", name, chunks=1)
        lower = limits(documents=1, chunks=1)
        # When a new document is written / Then refused
        with pytest.raises(QuotaExceeded):
            create(store, "acme", "d4", limit=lower)
        # And a title change of a stored document, which adds nothing, is written
        d1 = store.get_document("acme", "docs", "d1")
        store.put_document("acme", d1.model_copy(update={"revision": 2, "title": "t"}), create=False, limits=lower)
        # And deletes give the quota back until the limit is met again
        store.delete_document("acme", "docs", "d2")
        store.delete_document("acme", "docs", "d3")
        assert store.usage("acme") == Usage(documents=1, chunks=1)
        with pytest.raises(QuotaExceeded):
            create(store, "acme", "d4", limit=lower)
        store.delete_document("acme", "docs", "d1")
        create(store, "acme", "d4", chunks=1, limit=lower)
        assert store.usage("acme") == Usage(documents=1, chunks=1)

    def test_collections_count_from_create_until_their_deletion_begins_and_documents_until_deleted(self, store):
        # Given a plan of one collection, holding one
        plan = limits(collections=1)
        collection = make_collection("docs", revision=1)
        store.put_collection("acme", collection, create=True, limits=plan)
        create(store, "acme", "d1", chunks=2, size=9)
        # When a second is created / Then QuotaExceeded, and it does not exist
        with pytest.raises(QuotaExceeded) as refused:
            store.put_collection("acme", make_collection("more", revision=1), create=True, limits=plan)
        assert refused.value.details == {"limit": "collections", "used": 1, "max": 1, "plan": "small"}
        assert store.get_collection("acme", "more") is None
        # When the first one's deletion begins / Then the collection is given back; its documents still count
        store.mark_deleting("acme", collection, "job-1")
        assert store.usage("acme") == Usage(documents=1, chunks=2, bytes=9, collections=0)
        # And once its records are deleted, they are given back too
        store.delete_collection("acme", "docs")
        assert store.usage("acme") == Usage()
        store.end_deletion("acme", "docs", "job-1")
        store.put_collection("acme", make_collection("more", revision=1), create=True, limits=plan)
        assert store.usage("acme").collections == 1

    def test_two_tenants_with_the_same_ids_count_apart(self, store):
        # Given tenant acme at its limit
        plan = limits(documents=1)
        create(store, "acme", "d1", chunks=5, limit=plan)
        # When tenant rival writes the same collection and document ids / Then it is counted alone, and admitted
        create(store, "rival", "d1", chunks=1, limit=plan)
        assert store.usage("acme") == Usage(documents=1, chunks=5)
        assert store.usage("rival") == Usage(documents=1, chunks=1)
        store.delete_document("rival", "docs", "d1")
        assert store.usage("acme") == Usage(documents=1, chunks=5) and store.usage("rival") == Usage()

    def test_reconcile_repairs_counters_from_the_records(self, store):
        # Given counters that agree with the records
        store.put_collection("acme", make_collection("docs", revision=1), create=True)
        create(store, "acme", "d1", chunks=3, size=30)
        # When the recount runs / Then it reports no drift
        assert store.reconcile("acme") == (Usage(1, 3, 30, 1), Usage(1, 3, 30, 1))
        # And a collection deleted with its documents gives all of them back (no drift)
        drifted = make_collection("ghost", revision=1)
        store.put_collection("acme", drifted, create=True)
        store.mark_deleting("acme", drifted, "job")  # gives the collection back
        store.end_deletion("acme", "ghost", "job")
        store.put_document("acme", make_document("ghost", "gone", revision=1, chunk_count=4), create=True)
        store.delete_collection("acme", "ghost")
        assert store.usage("acme") == Usage(1, 3, 30, 1)
        # When the counters are forced off and the recount runs / Then they are set to what the records count
        bump_usage(store, "acme", Usage(documents=5, chunks=-1))
        before, counted = store.reconcile("acme")
        assert before == Usage(6, 2, 30, 1) and counted == Usage(1, 3, 30, 1)
        assert store.usage("acme") == Usage(1, 3, 30, 1)
        # And the next write counts on from the repaired value
        create(store, "acme", "d2", chunks=1)
        assert store.usage("acme") == Usage(2, 4, 30, 1)

    @pytest.mark.slow
    def test_metered_counts_add_up_per_day_and_month_and_tenant(self, store):
        store.add_metered("acme", day="2026-12-01", month="2026-12", queries=1, embedding_tokens=10)
        store.add_metered("acme", day="2026-12-01", month="2026-12", queries=1)
        store.add_metered("acme", day="2026-12-02", month="2026-12", queries=1, embedding_tokens=5)
        store.add_metered("rival", day="2026-12-01", month="2026-12", queries=7)
        store.add_metered("acme", day="2026-11-30", month="2026-11", queries=1, embedding_tokens=100)
        assert store.metered("acme", day="2026-12-01", month="2026-12") == Metered(2, 15)
        assert store.metered("acme", day="2026-11-30", month="2026-11") == Metered(1, 100)
        assert store.metered("acme", day="2026-12-02", month="2027-01") == Metered(1, 0)
        assert store.metered("rival", day="2026-12-01", month="2026-12") == Metered(7, 0)
        assert store.metered("nobody", day="2026-12-01", month="2026-12") == Metered()


def bump_usage(store, tenant: str, delta: Usage) -> None:
    """Force a tenant's counters off the records (drift), through each store's own counter write."""
    if hasattr(store, "db"):
        with store.db.write() as conn:
            store._add_usage(conn, tenant, delta, None)
    else:
        store._add_usage(tenant, delta)
