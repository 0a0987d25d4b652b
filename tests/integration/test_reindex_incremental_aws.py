"""The incremental reindex on the AWS backend under moto, watched at the DynamoDB API: a pass over unchanged
collections reads no chunk item and a bounded number of document items, the drift cursor spreads a full drift
sweep over passes, a configuration change is swept in chained pages, a poisoned task is dead-lettered without
holding the others back, and two tenants with the same collection ids are planned and repaired separately."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kindex.app.reindex import ReindexLimits
from kindex.domain.keys import decode_s3_event_key
from kindex.domain.models import Collection, CollectionInput, DocumentInput, DocumentStatus
from kindex.domain.reindex import MAX_TASK_BYTES, ReindexTask
from tests.support.aws import MAX_RECEIVES
from tests.support.aws_deployment import AwsStack, aws_stack, created_keys

pytestmark = pytest.mark.integration

DOCUMENTS = 12


class DynamoDbSpy:
    """Every request the adapters send to DynamoDB (operation, params), and the items each answer carried."""

    def __init__(self, client):
        self.calls: list[tuple[str, dict]] = []
        self.items_returned = 0
        client.meta.events.register("provide-client-params.dynamodb.*", self._request)
        client.meta.events.register("after-call.dynamodb.*", self._response)

    def _request(self, params, model, **_):
        self.calls.append((model.name, dict(params)))

    def _response(self, parsed, **_):
        self.items_returned += len(parsed.get("Items", [])) + int("Item" in parsed)

    def clear(self) -> None:
        self.calls, self.items_returned = [], 0

    def partitions(self) -> list[str]:
        """The partition key of every request that names one."""
        found = []
        for _, params in self.calls:
            key = params.get("Key") or {}
            values = params.get("ExpressionAttributeValues") or {}
            pk = key.get("pk", {}).get("S") or values.get(":pk", {}).get("S")
            if pk:
                found.append(pk)
            for request in (params.get("RequestItems") or {}).values():
                keys = request.get("Keys", []) if isinstance(request, dict) else []
                found += [k["pk"]["S"] for k in keys]
        return found


def chunk_partitions(partitions: list[str]) -> list[str]:
    """Partitions of chunk items (`T#..#C#..#D#..`, or hashed `H#`) and chunk markers (`#CHUNKDOCS`)."""
    return [pk for pk in partitions if "#D#" in pk or pk.startswith("H#") or pk.endswith("#CHUNKDOCS")]


def put_collection(stack: AwsStack, tenant: str, collection: str, count: int = DOCUMENTS) -> None:
    services = stack.services
    services.catalog.put_collection(tenant, collection, CollectionInput(allow_guests=True, chunking_max_size=60))
    for i in range(count):
        services.catalog.put_document(
            tenant, collection, f"d{i:02d}", DocumentInput(content=f"Document {i} of {tenant} is about topic {i}. " * 4)
        )


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    with aws_stack(monkeypatch) as stack:
        stack.services.keys.create("t", "admin")
        put_collection(stack, "t", "c")
        stack.drain()
        # small pages, so a dozen documents span several of them
        stack.services.reindex_worker.limits = ReindexLimits(
            drift_page_documents=5, sweep_page_documents=5, attention_documents=100, blob_page=4
        )
        yield stack


def test_a_pass_over_unchanged_collections_reads_no_chunk_item(stack):
    # Given a first pass that swept the collection and found it complete
    stack.reindex_pass()
    assert stack.receive(10) == []
    state = stack.services.adapters.metadata.get_state("t", "c")
    assert state.swept_config_version == 1 and state.swept_model == "hash:384"
    spy = DynamoDbSpy(stack.services.adapters.metadata.client)
    # When the next pass runs (planner and worker)
    stack.reindex_pass()
    # Then nothing was enqueued, no chunk item and no chunk marker was read, nothing was scanned
    assert stack.receive(10) == []
    operations = {operation for operation, _ in spy.calls}
    assert "Scan" not in operations and "BatchGetItem" not in operations
    assert chunk_partitions(spy.partitions()) == []
    # And the document items read are the drift page's (one Query, Limit 5) and the blob page's (4 blobs: 4
    # GetItems), not the collection's 12
    document_pk = "T#t#C#c"
    document_gets = [p for op, p in spy.calls if op == "GetItem" and p["Key"]["pk"]["S"] == document_pk]
    [page] = [
        p
        for op, p in spy.calls
        if op == "Query" and "IndexName" not in p and p["ExpressionAttributeValues"][":pk"]["S"] == document_pk
    ]
    assert len(document_gets) == 4 and page["Limit"] == 5
    # And the attention index was asked once, keys only
    [attention] = [p for op, p in spy.calls if p.get("IndexName") == "attention"]
    assert attention["ProjectionExpression"] == "sk" and "ConsistentRead" not in attention


def test_the_drift_cursor_spreads_a_full_sweep_over_passes_and_finds_drift_anywhere(stack):
    services = stack.services
    stack.reindex_pass()  # the covering sweep
    # Given a document, in the last drift page, whose vectors are gone
    services.adapters.search_index.delete("hash:384", "t", "c", document_ids=["d11"])
    # When passes run, each drift page moving the cursor 5 documents on
    cursors = []
    for _ in range(3):
        stack.reindex_pass()
        cursors.append(services.adapters.metadata.get_state("t", "c").drift_after)
        if stack.receive(10):
            break
    # Then the first two pages found nothing, the third found and re-sent d11, and the cursor went back to the start
    assert cursors == ["d04", "d09", None]
    assert [decode_s3_event_key(k) for k in created_keys(stack.drain())] == [
        services.adapters.metadata.get_document("t", "c", "d11").source
    ]
    assert services.adapters.metadata.get_document("t", "c", "d11").status is DocumentStatus.INDEXED
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c", after_document="d10")


def test_a_configuration_change_is_swept_in_chained_bounded_pages(stack):
    services = stack.services
    stack.reindex_pass()
    # Given the chunking changes
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=2000))
    # When the planner runs and the worker does its tasks
    stack.reindex_pass()
    # Then the sweep ran in pages of at most 5 documents (the first in the collection task, then 2 chained), and
    # every document was re-sent once
    keys = [decode_s3_event_key(k) for k in created_keys(stack.drain())]
    assert sorted(keys) == sorted(
        services.adapters.metadata.get_document("t", "c", f"d{i:02d}").source for i in range(DOCUMENTS)
    )
    assert all(
        services.adapters.metadata.get_document("t", "c", f"d{i:02d}").indexed_config_version == 2
        for i in range(DOCUMENTS)
    )
    # And the next pass sweeps again to confirm, shallow (no chunk item read: every page's counts agree), finds
    # every document done and marks the configuration covered
    spy = DynamoDbSpy(services.adapters.metadata.client)
    stack.reindex_pass()
    assert stack.receive(10) == []
    assert chunk_partitions(spy.partitions()) == []
    state = services.adapters.metadata.get_state("t", "c")
    assert (state.swept_config_version, state.sweeping_since) == (2, None)


def test_every_task_message_is_bounded(stack):
    # Given stored tenant and collection ids as long as stored ids get, in 4-byte characters (written before the
    # rules for new ids tightened), and a pass that plans them
    tenant, collection = "\U0001f600" * 255, "\U0001f680" * 255
    admin = stack.services.adapters.metadata.list_keys("t")[0]
    stack.services.adapters.metadata.put_key(admin.model_copy(update={"key_id": "long", "tenant": tenant}))
    stack.services.adapters.metadata.put_collection(
        tenant, Collection(id=collection, embedding_model="hash:384"), create=True
    )
    stack.services.reindex_planner.plan()
    # Then every queued task is a small JSON body, far below SQS's 256 KiB
    bodies = [m["Body"] for m in stack.reindex_tasks(10)]
    assert len(bodies) == 4
    assert max(len(b.encode("utf-8")) for b in bodies) <= MAX_TASK_BYTES < 256 * 1024
    # And the longest task any page could chain stays within the bound too
    longest = ReindexTask(
        kind="sweep",
        tenant=tenant,
        collection=collection,
        after="\U0001f600" * 255,
        job="f" * 32,
        total=10**9,
        done=10**9,
        enqueued=10**9,
        clean=True,
    )
    assert len(longest.encode().encode("utf-8")) <= MAX_TASK_BYTES


def test_a_poisoned_task_is_dead_lettered_without_holding_back_the_others(stack):
    services = stack.services
    url, _, dlq_url = stack.reindex_queue
    # Given a retryable failed document, and a poisoned message ahead of the planned tasks
    stored = services.adapters.metadata.get_document("t", "c", "d03")
    failed = stored.model_copy(
        update={
            "status": DocumentStatus.FAILED,
            "failure_reason": "EmbeddingFailed: outage",
            "failure_retryable": True,
            "revision": stored.revision + 1,
        }
    )
    services.adapters.metadata.put_document("t", failed, create=False)
    stack.sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"kindex_reindex": {"kind": "drop tables"}}))
    stack.sqs.send_message(QueueUrl=url, MessageBody="not json at all")
    # When the planner runs and the worker drains the queue (failed messages come back until dead-lettered)
    stack.reindex_pass()
    # Then the good tasks did their work: the failed document was re-sent and is indexed again
    assert [decode_s3_event_key(k) for k in created_keys(stack.drain())] == [failed.source]
    assert services.adapters.metadata.get_document("t", "c", "d03").status is DocumentStatus.INDEXED
    # And both poisoned messages are in the dead-letter queue after MAX_RECEIVES receives, the work queue empty
    dead = stack.sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=10, AttributeNames=["All"]).get(
        "Messages", []
    )
    assert sorted(m["Body"] for m in dead) == sorted(['{"kindex_reindex": {"kind": "drop tables"}}', "not json at all"])
    assert all(int(m["Attributes"]["ApproximateReceiveCount"]) >= MAX_RECEIVES for m in dead)
    assert stack.reindex_tasks(10) == []


def test_two_tenants_with_the_same_collection_ids_are_planned_and_repaired_separately(stack):
    services = stack.services
    services.keys.create("u", "admin")
    put_collection(stack, "u", "c", count=3)
    stack.drain()
    stack.reindex_pass()
    # Given tenant u's d01 failed (retryable) and tenant t's d01 lost its vectors
    stored = services.adapters.metadata.get_document("u", "c", "d01")
    failed = stored.model_copy(
        update={
            "status": DocumentStatus.FAILED,
            "failure_reason": "EmbeddingFailed: outage",
            "failure_retryable": True,
            "revision": stored.revision + 1,
        }
    )
    services.adapters.metadata.put_document("u", failed, create=False)
    services.adapters.search_index.delete("hash:384", "t", "c", document_ids=["d01"])
    # When the planner runs
    summary = services.reindex_planner.plan()
    # Then each tenant's collection got its own task
    tasks = [json.loads(m["Body"])["kindex_reindex"] for m in stack.reindex_tasks(10)]
    assert summary == {"tenants": 2, "collections": 2, "tasks": 4}
    assert sorted((t["kind"], t["tenant"], t.get("collection")) for t in tasks) == [
        ("collection", "t", "c"),
        ("collection", "u", "c"),
        ("tenant", "t", None),
        ("tenant", "u", None),
    ]
    # When the worker does them
    stack.work_reindex()
    # Then exactly u's failed document and t's document without vectors were re-sent, each in its own tenant
    resent = sorted(decode_s3_event_key(k) for k in created_keys(stack.drain()))
    assert resent == sorted([failed.source, services.adapters.metadata.get_document("t", "c", "d01").source])
    assert services.adapters.search_index.chunk_ids("hash:384", "t", "c", after_document="d00", through_document="d01")
    # And each tenant has its own reindex state: t's 12 documents need more drift pages, u's 3 fit in one
    assert services.adapters.metadata.get_state("t", "c").drift_after == "d04"
    assert services.adapters.metadata.get_state("u", "c").drift_after is None


def test_the_planner_reads_only_the_key_listing_and_collection_ids(stack):
    from functions import reindex as planner
    from tests.support.aws import LambdaContext
    from tests.support.aws_deployment import SCHEDULED_EVENT

    spy = DynamoDbSpy(stack.services.adapters.metadata.client)
    # When the scheduled planner runs
    assert planner.handler(SCHEDULED_EVENT, LambdaContext()) == {"tenants": 1, "collections": 1, "tasks": 2}
    # Then it sent Queries only: the key listing, the tenant's collection ids (sort keys only) and its pending
    # collection deletions (none here)
    assert {operation for operation, _ in spy.calls} == {"Query"}
    assert sorted(set(spy.partitions())) == ["KEYS", "T#t#COLLECTIONS", "T#t#DELETING"]
    [listing] = [p for _, p in spy.calls if p["ExpressionAttributeValues"][":pk"]["S"] == "T#t#COLLECTIONS"]
    assert listing["ProjectionExpression"] == "sk"


def reads_model():
    """scripts/reindex_reads.py, the read-unit model docs/scale.md quotes."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "reindex_reads.py"
    spec = importlib.util.spec_from_file_location("reindex_reads", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up by name
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def request_category(operation: str, params: dict) -> str:
    """The model's name for a request the adapters sent."""
    pk = (params.get("Key") or {}).get("pk", {}).get("S") or params["ExpressionAttributeValues"][":pk"]["S"]
    if chunk_partitions([pk]):
        return "Query chunks"
    if params.get("IndexName") == "attention":
        return "Query attention index"
    if pk == "KEYS":
        return "Query key listing"
    if pk.endswith("#COLLECTIONS"):
        return "Query collection ids" if operation == "Query" else "GetItem collection"
    if pk.endswith("#REINDEX"):
        return "GetItem reindex state"
    if pk.endswith("#DELETING"):
        return "Query pending deletions"
    return "Query document page" if operation == "Query" else "GetItem blob's document"


def test_the_read_model_counts_the_requests_a_pass_really_sends(stack):
    # Given a covered collection and the model of the same workload and limits
    stack.reindex_pass()
    model = reads_model()
    workload = model.Workload(
        "test",
        chunks=DOCUMENTS * 3,
        chunks_per_document=3,
        tenants=1,
        collections=1,
        keys_per_tenant=1,
        attention_fraction=0.0,
    )
    expected: dict[str, float] = {}
    for row in model.rows(workload, stack.services.reindex_worker.limits, model.sample_items(1800)):
        expected[row.request] = expected.get(row.request, 0) + row.requests
    # When a pass runs, watched at the DynamoDB API
    spy = DynamoDbSpy(stack.services.adapters.metadata.client)
    stack.reindex_pass()
    sent: dict[str, int] = {}
    for operation, params in spy.calls:
        if operation in ("GetItem", "Query"):
            category = request_category(operation, params)
            sent[category] = sent.get(category, 0) + 1
    # Then every read request the model counts is one the pass sent, and no other
    assert sent == {name: count for name, count in expected.items() if count}
