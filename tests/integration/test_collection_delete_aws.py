"""A collection's delete job on the AWS backend under moto: `DELETE /v1/collections/{c}` (the catalog, as the api
function runs it) takes the collection out of every read at once and queues the job on the reindex queue; the
reindex worker function does its steps, the ingest function gets the blobs' removal events; at the end nothing of
the collection is left in DynamoDB, S3 or the index (the OpenSearch double; the real node runs the same path in
tests/e2e/test_serve_on_opensearch.py). Two tenants hold the same collection and document ids throughout."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from functions import reindex_worker as reindex_worker_function
from kindex.adapters.aws.dynamodb_embedding_cache import embedding_pk
from kindex.adapters.aws.dynamodb_jobs import jobs_pk
from kindex.adapters.aws.dynamodb_metadata import usage_pk
from kindex.domain import keys
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import CollectionInput, DocumentInput, DocumentStatus, PageRequest
from kindex.domain.query import QueryRequest
from kindex.domain.quotas import Usage
from tests.support.aws import BUCKET, TABLE, LambdaContext, sqs_lambda_event
from tests.support.aws_deployment import AwsStack, aws_stack

pytestmark = pytest.mark.integration

DOCUMENTS = 30  # more than one BatchWriteItem (25) of records, and blobs in two versions each


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    """Tenants t and u, each with collection "c" of the same documents (indexed), and an admin key each (the
    scheduled planner finds tenants through keys)."""
    with aws_stack(monkeypatch) as stack:
        services = stack.services
        for tenant in ("t", "u"):
            services.keys.create(tenant, "admin")
            services.catalog.put_collection(tenant, "c", CollectionInput(allow_guests=True, chunking_max_size=60))
            for i in range(DOCUMENTS):
                services.catalog.put_document(
                    tenant, "c", f"d{i:02d}", DocumentInput(content=f"Penguins of colony {i} dive for krill. " * 3)
                )
        stack.drain()
        # A second version of one document: its older blob versions must go too
        services.catalog.put_document("t", "c", "d00", DocumentInput(content="Penguins, rewritten. " * 3))
        stack.drain()
        assert all(
            d.status is DocumentStatus.INDEXED
            for d in services.adapters.metadata.list_documents("t", "c", after=None, offset=0, limit=None)
        )
        yield stack


def tenant_items(stack: AwsStack, tenant: str) -> list[tuple[str, str]]:
    """(pk, sk) of every item the tenant's collection left in the table, its embedding cache, jobs and usage (the
    tenant's own, checked apart) aside."""
    kept = {embedding_pk(tenant, "hash:384"), jobs_pk(tenant), usage_pk(tenant)}
    items = [
        (i["pk"]["S"], i["sk"]["S"])
        for page in stack.dynamodb.get_paginator("scan").paginate(TableName=TABLE)
        for i in page["Items"]
    ]
    return [
        (pk, sk) for pk, sk in items if pk.startswith(f"T#{tenant}#") and pk not in kept and not pk.endswith("#KEYS")
    ]


def object_versions(stack: AwsStack, tenant: str) -> list[str]:
    listing = stack.s3.list_object_versions(Bucket=BUCKET, Prefix=keys.collection_prefix(tenant, "c"))
    return [v["Key"] for v in listing.get("Versions", []) + listing.get("DeleteMarkers", [])]


def vectors(stack: AwsStack, tenant: str) -> set[str]:
    return stack.services.adapters.search_index.chunk_ids("hash:384", tenant, "c")


def ask(stack: AwsStack, tenant: str):
    return stack.services.query.query(tenant, ["c"], QueryRequest(query="penguins krill", k=5), multi=False)


def run_job(stack: AwsStack) -> None:
    """The reindex worker over the job's tasks, and the ingest function over the blobs' removal events."""
    stack.work_reindex()
    stack.drain()


def test_the_delete_is_a_job_gone_from_reads_at_once_that_leaves_nothing(stack):
    services = stack.services
    before_u = (tenant_items(stack, "u"), object_versions(stack, "u"), vectors(stack, "u"))
    assert tenant_items(stack, "t") and object_versions(stack, "t") and vectors(stack, "t")
    # When tenant t deletes its collection
    job = services.catalog.delete_collection("t", "c")
    # Then a running delete job answers, and the collection is gone from every read and refuses writes at once
    assert (job.kind, job.status, job.collection, job.done, job.total) == ("delete", "running", "c", 0, 3)
    with pytest.raises(NotFound):
        services.catalog.get_collection("t", "c")
    assert services.catalog.list_collections("t", PageRequest()).ids == []
    for read in (
        lambda: services.catalog.list_documents("t", "c", PageRequest()),
        lambda: services.catalog.get_document("t", "c", "d01"),
        lambda: ask(stack, "t"),
        lambda: services.transfer.export_page("t", "c", None),
        lambda: services.catalog.put_document("t", "c", "new", DocumentInput(content="x")),
        lambda: services.reindex_jobs.start("t", "c", clean=False),
    ):
        with pytest.raises(NotFound):
            read()
    with pytest.raises(Conflict, match="being deleted"):
        services.catalog.put_collection("t", "c", CollectionInput(title="again"))
    # And nothing was deleted inside the request: the work waits on the reindex queue, one task
    assert len(stack.reindex_tasks()) == 1 and vectors(stack, "t")
    # When the worker runs the job (and the ingest gets the blobs' removal events)
    run_job(stack)
    # Then the job is completed and nothing of the collection is left: no item, no object version, no vector
    assert services.reindex_jobs.get_job("t", job.id).model_dump(include={"status", "done", "total"}) == {
        "status": "completed",
        "done": 3,
        "total": 3,
    }
    assert tenant_items(stack, "t") == []
    assert stack.services.adapters.metadata.usage("t") == Usage()  # everything the collection counted given back
    assert object_versions(stack, "t") == []
    assert vectors(stack, "t") == set()
    # And tenant u's collection of the same ids is whole and answers
    assert (tenant_items(stack, "u"), object_versions(stack, "u"), vectors(stack, "u")) == before_u
    assert ask(stack, "u").results
    # And the id can be created again, empty: nothing of the old collection comes back
    services.catalog.put_collection("t", "c", CollectionInput(allow_guests=True))
    assert services.catalog.get_collection("t", "c").document_count == 0
    assert ask(stack, "t").results == []


def test_a_delete_retried_while_running_answers_the_same_job(stack):
    first = stack.services.catalog.delete_collection("t", "c")
    assert stack.services.catalog.delete_collection("t", "c").id == first.id
    run_job(stack)
    with pytest.raises(NotFound):
        stack.services.catalog.delete_collection("t", "c")


def test_a_worker_that_dies_before_acknowledging_redoes_its_step_and_the_job_ends(stack):
    # Given a delete whose first step ran in a worker that died before its message was deleted (as when a Lambda
    # times out after the work): the message comes back, beside the next step's
    job = stack.services.catalog.delete_collection("t", "c")
    (message,) = stack.reindex_tasks()
    reindex_worker_function.handler(sqs_lambda_event([message], stack.reindex_queue[1]), LambdaContext())
    assert stack.services.reindex_jobs.get_job("t", job.id).done == 1
    # When the queue is worked again (the redelivered step, then the chains it and the first run sent)
    run_job(stack)
    # Then the job completed once, and nothing is left
    assert stack.services.reindex_jobs.get_job("t", job.id).status == "completed"
    assert (tenant_items(stack, "t"), object_versions(stack, "t"), vectors(stack, "t")) == ([], [], set())


def test_a_lost_task_is_sent_again_by_the_scheduled_planner(stack):
    # Given a delete whose task never reached the worker (lost with the request that sent it)
    job = stack.services.catalog.delete_collection("t", "c")
    for message in stack.reindex_tasks():
        stack.sqs.delete_message(QueueUrl=stack.reindex_queue[0], ReceiptHandle=message["ReceiptHandle"])
    # When the scheduled reindex runs
    stack.reindex_pass()
    stack.drain()
    # Then the planner resumed the deletion and it ended with nothing left
    assert stack.services.reindex_jobs.get_job("t", job.id).status == "completed"
    assert (tenant_items(stack, "t"), object_versions(stack, "t"), vectors(stack, "t")) == ([], [], set())
    assert stack.services.adapters.metadata.pending_deletions("t") == []


def test_a_task_of_an_ended_deletion_never_touches_the_collection_created_again(stack):
    # Given a deletion that ended, and the collection created again with a document
    services = stack.services
    job = services.catalog.delete_collection("t", "c")
    (task,) = stack.reindex_tasks()
    run_job(stack)
    services.catalog.put_collection("t", "c", CollectionInput(allow_guests=True))
    services.catalog.put_document("t", "c", "fresh", DocumentInput(content="Penguins return. " * 3))
    stack.drain()
    fresh = vectors(stack, "t")
    assert fresh
    # When the deletion's first task is delivered once more (SQS delivers at least once)
    reindex_worker_function.handler(sqs_lambda_event([task], stack.reindex_queue[1]), LambdaContext())
    # Then it does nothing: the new collection keeps its blob, record and vectors
    assert services.reindex_jobs.get_job("t", job.id).status == "completed"
    assert vectors(stack, "t") == fresh and object_versions(stack, "t")
    assert services.catalog.get_collection("t", "c").document_count == 1
