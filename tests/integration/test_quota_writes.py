"""Quotas on both backends, the same app-layer code over the local adapters (SQLite, folder, worker) and the AWS
ones (DynamoDB, S3, SQS under moto, the OpenSearch double): a write that loses the quota race at the moment between
its blob and its commit stores nothing; a document past the chunk quota fails with nothing of it indexed; the
reindex pass repairs counters that drifted, and logs it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from kindex.domain import keys
from kindex.domain.errors import QuotaExceeded
from kindex.domain.models import CollectionInput, DocumentInput, Role
from kindex.domain.quotas import Usage
from kindex_local.deployment import build_worker
from tests.contract.mixins.usage_counters import bump_usage
from tests.support.aws_deployment import aws_stack
from tests.support.interleave import Interleave

pytestmark = pytest.mark.integration

PLANS = {
    "default": {"rate_limit": 100, "burst_limit": 100, "quotas": {"documents": 3, "chunks": 12}},
}


@dataclass
class Backend:
    services: object
    drain: Callable[[], object]  # deliver every ingest event
    reindex_pass: Callable[[], object]  # the scheduled pass, and the tasks it sends
    recount_pass: Callable[[], object]  # a full pass (`kindex reindex --full`), which recounts the usage counters


@pytest.fixture(params=["local", "aws"])
def backend(request, monkeypatch) -> Iterator[Backend]:
    monkeypatch.setenv("KINDEX_USAGE_PLANS", json.dumps(PLANS))
    if request.param == "local":
        services = request.getfixturevalue("local_container")
        worker = build_worker()
        worker.backoff = 0.0

        def local_pass(full: bool = False):
            services.reindex_planner.plan(full=full)
            worker.drain()

        yield Backend(services, worker.drain, local_pass, lambda: local_pass(full=True))
        return
    with aws_stack(monkeypatch, {"KINDEX_USAGE_PLANS": json.dumps(PLANS)}) as stack:

        def full_pass():
            stack.services.reindex_planner.plan(full=True)
            stack.work_reindex()

        yield Backend(stack.services, stack.drain, stack.reindex_pass, full_pass)


def put(services, document_id: str, content: str, tenant: str = "t"):
    return services.catalog.put_document(tenant, "c", document_id, DocumentInput(content=content))


def test_a_write_that_loses_the_quota_race_between_its_blob_and_its_commit_stores_nothing(backend):
    # Given a tenant of the 3-document plan holding 2 documents
    services = backend.services
    services.catalog.put_collection("t", "c", CollectionInput())
    put(services, "d1", "one")
    put(services, "d2", "two")
    catalog = services.catalog
    # When another write takes the last document while this one has checked the usage and stored its blob
    catalog.documents = Interleave(catalog.documents, lambda: put(services, "winner", "first"), "before_commit")
    # Then this one's commit is refused by the store's own atomic check
    with pytest.raises(QuotaExceeded) as refused:
        put(services, "loser", "second")
    assert refused.value.details == {"limit": "documents", "used": 3, "max": 3, "plan": "default"}
    # And it left no record and no blob; the counters hold exactly the three stored documents
    assert services.adapters.metadata.get_document("t", "c", "loser") is None
    assert services.adapters.blobs.list_blobs(keys.document_prefix("t", "c", "loser")) == []
    assert services.usage.report("t").documents == 3


def test_a_document_past_the_chunk_quota_fails_with_nothing_of_it_indexed(backend):
    # Given a collection of 20-character chunks and a document of 8 chunks (the plan allows 12)
    services = backend.services
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=20))
    put(services, "fits", " ".join(f"a{n:03d}" for n in range(32)))
    backend.drain()
    fits = services.adapters.metadata.get_document("t", "c", "fits")
    assert fits.status.value == "indexed" and fits.chunk_count == 8
    # When a second document of 8 chunks is ingested
    put(services, "over", " ".join(f"b{n:03d}" for n in range(32)))
    backend.drain()
    # Then it failed for the chunk quota, not retried, and none of its chunks or vectors exists
    over = services.adapters.metadata.get_document("t", "c", "over")
    assert over.status.value == "failed" and not over.failure_retryable
    assert over.failure_reason.startswith("QuotaExceeded: chunks quota exceeded: 8 of 12 used on plan 'default'")
    assert services.adapters.chunks.list_chunks("t", "c", "over") == []
    indexed = services.adapters.search_index.chunk_ids("hash:384", "t", "c")
    assert indexed == {c.chunk_id for c in services.adapters.chunks.list_chunks("t", "c", "fits")}
    assert services.usage.report("t").chunks == 8


def test_the_recounting_reindex_pass_repairs_drifted_counters_and_logs_it(backend, caplog):
    # Given a tenant (with a key, so the planner finds it) whose counters drifted from its records
    services = backend.services
    services.keys.create("t", Role.ADMIN)
    services.catalog.put_collection("t", "c", CollectionInput())
    put(services, "d1", "some text")
    backend.drain()
    truth = services.usage.report("t")
    bump_usage(services.adapters.metadata, "t", Usage(documents=7, bytes=-3))
    assert services.usage.report("t").documents == 8
    # When a pass that recounts runs (the daily one, or a full one)
    with caplog.at_level(logging.WARNING, logger="kindex.app.usage"):
        backend.recount_pass()
    # Then the counters are those of the records again, and the repair was logged with both counts
    repaired = services.usage.report("t")
    assert (
        (repaired.documents, repaired.chunks, repaired.bytes, repaired.collections)
        == (
            truth.documents,
            truth.chunks,
            truth.bytes,
            truth.collections,
        )
        == (1, 1, 9, 1)
    )
    drift = [r for r in caplog.records if r.getMessage() == "usage counters drifted; repaired from the records"]
    assert len(drift) == 1 and drift[0].tenant == "t"
    assert drift[0].counted_before["documents"] == 8 and drift[0].counted["documents"] == 1
    # And a pass over counters that agree repairs and logs nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kindex.app.usage"):
        backend.recount_pass()
    assert not [r for r in caplog.records if "drifted" in r.getMessage()]
