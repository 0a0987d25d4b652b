"""The metadata contracts (CollectionStore, DocumentStore, KeyStore: tests/contract/mixins/metadata_store.py) run
against SQLite and DynamoDB (moto), plus DynamoDB's paging, layout, retries and error translation.

The DynamoDB store is built with a small Query page size so every listing of the contract crosses several pages.
Both also run CollectionDeletions' contract (tests/contract/mixins/collection_deletions.py).
"""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest
from botocore.stub import Stubber

from kindex.adapters.aws import dynamodb_table
from kindex.adapters.aws.dynamodb_metadata import DynamoDbMetadataStore
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore
from kindex.domain.errors import Conflict, DependencyFailed, QuotaExceeded
from kindex.domain.models import Collection, Document
from kindex.domain.quotas import Metered, QuotaLimits, Quotas, Usage
from tests.contract.mixins.collection_deletions import CollectionDeletionsContract
from tests.contract.mixins.metadata_store import MetadataStoreContract, make_collection, make_document
from tests.contract.mixins.reindex_ledger import ReindexLedgerContract
from tests.contract.mixins.usage_counters import UsageCountersContract
from tests.support.aws import TABLE, fake_aws_env, moto_client
from tests.support.together import run_together

pytestmark = pytest.mark.contract

SMALL_PAGE = 7


def legacy_body(record: Document | Collection) -> str:
    """The JSON body a store wrote before documents (or collections) had revisions."""
    body = json.loads(record.model_dump_json())
    del body["revision"]
    return json.dumps(body)


class TestSqliteMetadataStore(
    MetadataStoreContract, ReindexLedgerContract, CollectionDeletionsContract, UsageCountersContract
):
    @pytest.fixture
    def store(self, tmp_path) -> SqliteMetadataStore:
        return SqliteMetadataStore(SqliteDatabase(tmp_path / "x.sqlite3"))

    def test_a_data_directory_from_before_quotas_counts_its_records_once_when_opened(self, tmp_path):
        # Given a data directory with records but no usage table (written before quotas)
        path = tmp_path / "x.sqlite3"
        store = SqliteMetadataStore(SqliteDatabase(path))
        store.put_collection("acme", make_collection("docs", revision=1), create=True)
        store.put_document(
            "acme", make_document("docs", "d1", revision=1, chunk_count=4, content_length=7), create=True
        )
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TABLE tenant_usage")
        # When it is opened again / Then the counters are those of its records, and counted on from there
        reopened = SqliteMetadataStore(SqliteDatabase(path))
        assert reopened.usage("acme") == Usage(documents=1, chunks=4, bytes=7, collections=1)
        reopened.put_document("acme", make_document("docs", "d2", revision=1), create=True)
        assert SqliteMetadataStore(SqliteDatabase(path)).usage("acme").documents == 2

    def test_a_data_directory_from_before_revisions_keeps_working(self, tmp_path):
        # Given a database of the first release (no attention, no revision column) holding a document whose body
        # has no revision
        path = tmp_path / "old.sqlite3"
        old = make_document("docs", "d1", title="old", version=2)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TABLE documents (tenant TEXT NOT NULL, collection TEXT NOT NULL, id TEXT NOT NULL,"
                " version INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (tenant, collection, id))"
                " WITHOUT ROWID"
            )
            conn.execute("INSERT INTO documents VALUES ('acme', 'docs', 'd1', 2, ?)", (legacy_body(old),))
        conn.close()
        # When the store opens it / Then the document reads at revision 0
        store = SqliteMetadataStore(SqliteDatabase(path))
        assert store.get_document("acme", "docs", "d1") == old and old.revision == 0
        # And an update over revision 0 is written, while one that claims a later revision is refused
        with pytest.raises(Conflict):
            store.put_document("acme", old.model_copy(update={"revision": 2, "title": "stale"}), create=False)
        store.put_document("acme", old.model_copy(update={"revision": 1, "title": "new"}), create=False)
        with pytest.raises(Conflict):
            store.put_document("acme", old.model_copy(update={"revision": 1, "title": "lost"}), create=False)
        assert (store.get_document("acme", "docs", "d1").title, store.get_document("acme", "docs", "d1").revision) == (
            "new",
            1,
        )
        # And opening it again (another process of the same data directory) changes nothing
        again = SqliteMetadataStore(SqliteDatabase(path))
        assert again.get_document("acme", "docs", "d1").revision == 1

    def test_collections_from_before_revisions_keep_working(self, tmp_path):
        # Given a database whose collections table has no revision column, holding a collection whose body has none
        path = tmp_path / "old.sqlite3"
        old = make_collection(title="old", query_groups=["staff"], config_version=3)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TABLE collections (tenant TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL,"
                " PRIMARY KEY (tenant, id)) WITHOUT ROWID"
            )
            conn.execute("INSERT INTO collections VALUES ('acme', 'docs', ?)", (legacy_body(old),))
        conn.close()
        # When the store opens it / Then the collection reads at revision 0
        store = SqliteMetadataStore(SqliteDatabase(path))
        assert store.get_collection("acme", "docs") == old and old.revision == 0
        # And the first update over revision 0 is written, while one claiming a later revision, or a second one
        # over revision 0, is refused
        with pytest.raises(Conflict):
            store.put_collection("acme", old.model_copy(update={"revision": 2, "title": "stale"}), create=False)
        store.put_collection("acme", old.model_copy(update={"revision": 1, "query_groups": []}), create=False)
        with pytest.raises(Conflict):
            store.put_collection("acme", old.model_copy(update={"revision": 1, "title": "lost"}), create=False)
        stored = SqliteMetadataStore(SqliteDatabase(path)).get_collection("acme", "docs")
        assert (stored.revision, stored.query_groups, stored.title, stored.config_version) == (1, [], "old", 3)


class SerializedCalls:
    """A client that sends one request at a time. moto applies a TransactWriteItems without any lock (two threads'
    transactions check their conditions against the same state and both commit), where DynamoDB serializes
    transactions; this gives moto that isolation per request, while the writers' reads and writes still interleave."""

    def __init__(self, client):
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name):
        call = getattr(self._client, name)

        def locked(**request):
            with self._lock:
                return call(**request)

        return locked


class TestDynamoDbMetadataStore(
    MetadataStoreContract, ReindexLedgerContract, CollectionDeletionsContract, UsageCountersContract
):
    """Beyond the contract: paging really happens, error translation, retries, layout."""

    @pytest.fixture
    def store(self, dynamodb) -> DynamoDbMetadataStore:
        return DynamoDbMetadataStore(TABLE, client=dynamodb, page_size=SMALL_PAGE)

    @pytest.mark.slow
    def test_sixteen_concurrent_creates_at_the_limit_never_pass_it(self, dynamodb):
        # Given a plan of 10 documents and a tenant holding 9
        plan = QuotaLimits(plan="small", quotas=Quotas(documents=10))
        store = DynamoDbMetadataStore(TABLE, client=SerializedCalls(dynamodb))
        for n in range(9):
            store.put_document("acme", make_document("docs", f"d{n}", revision=1), create=True, limits=plan)

        def put(n: int):
            store.put_document("acme", make_document("docs", f"new{n}", revision=1), create=True, limits=plan)
            return "written"

        # When 16 writers each create a new document at once
        outcomes = run_together([lambda n=n: put(n) for n in range(16)])
        # Then exactly one is written, the others are QuotaExceeded (or lost a transaction race: Conflict)
        assert outcomes.count("written") == 1, outcomes
        assert all(isinstance(o, (QuotaExceeded, Conflict)) for o in outcomes if o != "written"), outcomes
        assert store.usage("acme").documents == 10
        assert store.count_documents("acme", "docs") == 10

    def test_a_query_meters_its_count_and_tokens_in_one_update_and_old_month_items_still_count(self, dynamodb):
        # Given a store recording its UpdateItems, and tokens metered the old way (a month item of their own)
        updates = []
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.UpdateItem", lambda **kwargs: updates.append(kwargs["params"])
        )
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        dynamodb.put_item(
            TableName=TABLE,
            Item={"pk": {"S": "T#acme#USAGE"}, "sk": {"S": "M#2026-12"}, "embedding_tokens": {"N": "7"}},
        )
        # When a query with 12 tokens is metered
        store.add_metered("acme", day="2026-12-02", month="2026-12", queries=1, embedding_tokens=12)
        # Then it was one write to the day's item, and the month counts the day and the old month item
        assert [u["Key"]["sk"]["S"] for u in updates] == ["D#2026-12-02"]
        assert store.metered("acme", day="2026-12-02", month="2026-12") == Metered(1, 19)

    def test_reading_the_meter_reads_the_day_once(self, dynamodb):
        # Given a store recording the keys its reads name, with a day of this month metered
        gets, queries = [], []
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.BatchGetItem",
            lambda **kwargs: gets.extend(
                k["sk"]["S"] for t in kwargs["params"]["RequestItems"].values() for k in t["Keys"]
            ),
        )
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.Query", lambda **kwargs: queries.append(kwargs["params"])
        )
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        store.add_metered("acme", day="2026-12-02", month="2026-12", queries=3, embedding_tokens=12)
        # When the day and its month are read
        assert store.metered("acme", day="2026-12-02", month="2026-12") == Metered(3, 12)
        # Then one Query of the month's days (which holds the day) and one get of the old-style month item
        assert len(queries) == 1
        assert gets == ["M#2026-12"]
        # And a day outside the month is read by its key
        gets.clear()
        assert store.metered("acme", day="2026-12-02", month="2027-01") == Metered(3, 0)
        assert sorted(gets) == ["D#2026-12-02", "M#2027-01"]

    def test_a_counted_write_is_one_transaction_with_a_conditional_add(self, dynamodb):
        # Given a store recording its requests
        requests = []
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.TransactWriteItems", lambda **kwargs: requests.append(kwargs["params"])
        )
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        plan = QuotaLimits(plan="small", quotas=Quotas(documents=5, chunks=100))
        # When a document with 3 chunks and 10 bytes is created under the plan
        store.put_document(
            "acme", make_document("docs", "d1", revision=1, chunk_count=3, content_length=10), create=True, limits=plan
        )
        # Then the record's put and the counters' ADD are one transaction, conditional on the counters' ceilings
        (put, add) = requests[-1]["TransactItems"]
        assert put["Put"]["ConditionExpression"] == "attribute_not_exists(pk)"
        update = add["Update"]
        assert update["Key"] == {"pk": {"S": "T#acme#USAGE"}, "sk": {"S": "STORED"}}
        assert update["UpdateExpression"] == "ADD #writes :one, #documents :documents, #chunks :chunks, #bytes :bytes"
        assert update["ConditionExpression"] == (
            "(attribute_not_exists(#documents) OR #documents <= :max_documents)"
            " AND (attribute_not_exists(#chunks) OR #chunks <= :max_chunks)"
        )
        assert update["ExpressionAttributeValues"][":max_documents"] == {"N": "4"}
        assert update["ExpressionAttributeValues"][":max_chunks"] == {"N": "97"}
        # And a write that changes no counter is a plain conditional put, as before quotas
        count = len(requests)
        stored = store.get_document("acme", "docs", "d1")
        store.put_document("acme", stored.model_copy(update={"revision": 2, "title": "t"}), create=False, limits=plan)
        assert len(requests) == count

    @pytest.mark.slow
    def test_listing_really_spans_pages(self, dynamodb):
        # Given 30 documents and a store counting its Query calls
        calls = []
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.Query", lambda **kwargs: calls.append(dict(kwargs["params"]))
        )
        store = DynamoDbMetadataStore(TABLE, client=dynamodb, page_size=4)
        for i in range(30):
            store.put_document("acme", make_document("docs", f"d{i:02d}"), create=True)
        # When listing all / Then several pages were read and joined in order
        assert [d.id for d in store.list_documents("acme", "docs", after=None, offset=0, limit=None)] == [
            f"d{i:02d}" for i in range(30)
        ]
        assert len(calls) >= 8
        # When asking for a small slice / Then no more than needed is read
        calls.clear()
        assert [d.id for d in store.list_documents("acme", "docs", after=None, offset=2, limit=1)] == ["d02"]
        assert [c["Limit"] for c in calls] == [3]

    @pytest.mark.slow
    def test_a_page_of_document_records_is_one_query_without_item_reads(self, dynamodb):
        # Given 300 documents, written with a store that leaves DynamoDB's own page size alone
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        for i in range(300):
            store.put_document("acme", make_document("docs", f"d{i:03d}", title=f"title {i}"), create=True)
        calls: list[str] = []
        dynamodb.meta.events.register("before-call.dynamodb", lambda model, **kwargs: calls.append(model.name))
        # When listing a page of 101 records after skipping 50
        listed = store.list_documents("acme", "docs", after=None, offset=50, limit=101)
        # Then they are the stored records, read by one Query (no GetItem per document)
        assert [(d.id, d.title) for d in listed] == [(f"d{i:03d}", f"title {i}") for i in range(50, 151)]
        assert calls == ["Query"]

    @pytest.mark.slow
    def test_one_megabyte_pages_are_followed(self, dynamodb):
        # Given documents big enough that DynamoDB splits a query into 1 MB pages, and no page size of our own
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        pages = []
        dynamodb.meta.events.register(
            "after-call.dynamodb.Query", lambda **kwargs: pages.append(kwargs["parsed"].get("Count"))
        )
        for i in range(120):
            store.put_document("acme", make_document("docs", f"d{i:03d}", failure_reason="x" * 10_000), create=True)
        # When listing and counting / Then every item is returned across pages
        listed = store.list_documents("acme", "docs", after="d005", offset=3, limit=None)
        assert [d.id for d in listed] == [f"d{i:03d}" for i in range(9, 120)]
        assert all(d.failure_reason == "x" * 10_000 for d in listed)
        assert store.count_documents("acme", "docs") == 120
        assert len(pages) >= 4

    def test_item_layout(self, dynamodb):
        # Given a document written by the store
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        store.put_document("a#b", make_document("c%d", "x#y", version=7, revision=3), create=True)
        # When reading the raw item / Then keys are escaped in pk, raw in sk, with body, a numeric version and revision
        item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "T#a%23b#C#c%25d"}, "sk": {"S": "x#y"}})["Item"]
        assert item["version"] == {"N": "7"} and item["revision"] == {"N": "3"}
        assert Document.model_validate_json(item["body"]["S"]).id == "x#y"

    def test_the_conditional_write_refuses_a_stale_revision(self, dynamodb):
        # Given a document at revision 2
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        store.put_document("acme", make_document("docs", "d1", revision=1, title="one"), create=True)
        store.put_document("acme", make_document("docs", "d1", revision=2, title="two"), create=False)
        requests = []
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.PutItem", lambda **kwargs: requests.append(dict(kwargs["params"]))
        )
        # When a writer that read revision 1 commits / Then DynamoDB refuses it: Conflict, the item unchanged
        with pytest.raises(Conflict):
            store.put_document("acme", make_document("docs", "d1", revision=2, title="stale"), create=False)
        assert requests[-1]["ConditionExpression"] == "attribute_exists(pk) AND #revision = :expected"
        assert requests[-1]["ExpressionAttributeValues"] == {":expected": {"N": "1"}}
        raw = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "T#acme#C#docs"}, "sk": {"S": "d1"}})["Item"]
        assert raw["revision"] == {"N": "2"} and Document.model_validate_json(raw["body"]["S"]).title == "two"

    def test_an_item_written_before_revisions_is_updatable(self, dynamodb):
        # Given an item as the store wrote it before documents had revisions: no attribute, no field in the body
        old = make_document("docs", "d1", title="old", version=4)
        dynamodb.put_item(
            TableName=TABLE,
            Item={
                "pk": {"S": "T#acme#C#docs"},
                "sk": {"S": "d1"},
                "body": {"S": legacy_body(old)},
                "version": {"N": "4"},
            },
        )
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        assert store.get_document("acme", "docs", "d1") == old and old.revision == 0
        # When a write that claims to follow revision 1 comes / Then it is refused (the item is at 0)
        with pytest.raises(Conflict):
            store.put_document("acme", old.model_copy(update={"revision": 2, "title": "stale"}), create=False)
        # When the first write over it comes (it read revision 0) / Then it is written, with revision 1
        store.put_document("acme", old.model_copy(update={"revision": 1, "title": "new"}), create=False)
        raw = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "T#acme#C#docs"}, "sk": {"S": "d1"}})["Item"]
        assert raw["revision"] == {"N": "1"} and store.get_document("acme", "docs", "d1").title == "new"
        # And another writer that also read revision 0 now loses
        with pytest.raises(Conflict):
            store.put_document("acme", old.model_copy(update={"revision": 1, "title": "lost"}), create=False)
        assert store.get_document("acme", "docs", "d1").title == "new"

    def test_the_conditional_write_refuses_a_stale_collection_revision(self, dynamodb):
        # Given a collection at revision 2, whose second write revoked a group
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        store.put_collection("acme", make_collection(revision=1, query_groups=["staff", "guests"]), create=True)
        store.put_collection("acme", make_collection(revision=2, query_groups=["staff"]), create=False)
        requests = []
        dynamodb.meta.events.register(
            "before-parameter-build.dynamodb.PutItem", lambda **kwargs: requests.append(dict(kwargs["params"]))
        )
        # When a writer that read revision 1 commits another field (and the groups it read) / Then DynamoDB refuses
        # it: Conflict, and the revoked group stays revoked
        with pytest.raises(Conflict):
            store.put_collection(
                "acme", make_collection(revision=2, query_groups=["staff", "guests"], title="t"), create=False
            )
        assert requests[-1]["ConditionExpression"] == "attribute_exists(pk) AND #revision = :expected"
        assert requests[-1]["ExpressionAttributeValues"] == {":expected": {"N": "1"}}
        raw = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "T#acme#COLLECTIONS"}, "sk": {"S": "docs"}})["Item"]
        stored = Collection.model_validate_json(raw["body"]["S"])
        assert raw["revision"] == {"N": "2"} and (stored.query_groups, stored.title) == (["staff"], "")

    def test_a_collection_item_written_before_revisions_is_updatable_once(self, dynamodb):
        # Given a collection item as the store wrote it before collections had revisions: no attribute, none in body
        old = make_collection(title="old", query_groups=["staff"])
        key = {"pk": {"S": "T#acme#COLLECTIONS"}, "sk": {"S": "docs"}}
        dynamodb.put_item(TableName=TABLE, Item={**key, "body": {"S": legacy_body(old)}})
        store = DynamoDbMetadataStore(TABLE, client=dynamodb)
        assert store.get_collection("acme", "docs") == old and old.revision == 0
        # When a write that claims to follow revision 1 comes / Then it is refused (the item is at 0)
        with pytest.raises(Conflict):
            store.put_collection("acme", old.model_copy(update={"revision": 2, "title": "stale"}), create=False)
        # When the first write over it comes (it read revision 0) / Then it is written, with revision 1
        store.put_collection("acme", old.model_copy(update={"revision": 1, "query_groups": []}), create=False)
        raw = dynamodb.get_item(TableName=TABLE, Key=key)["Item"]
        assert raw["revision"] == {"N": "1"} and store.get_collection("acme", "docs").query_groups == []
        # And another writer that also read revision 0 now loses: the item is guarded from then on
        with pytest.raises(Conflict):
            store.put_collection("acme", old.model_copy(update={"revision": 1, "title": "lost"}), create=False)
        assert store.get_collection("acme", "docs") == old.model_copy(update={"revision": 1, "query_groups": []})

    @pytest.mark.parametrize(
        "code",
        [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "ResourceNotFoundException",
            "InternalServerError",
        ],
    )
    def test_errors_become_dependency_failed(self, monkeypatch, code):
        # Given a client whose calls fail with an AWS error
        fake_aws_env(monkeypatch)
        client = moto_client("dynamodb")
        store = DynamoDbMetadataStore(TABLE, client=client)
        with Stubber(client) as stub:
            stub.add_client_error("get_item", service_error_code=code)
            stub.add_client_error("put_item", service_error_code=code)
            # When reading or writing / Then only domain errors escape
            with pytest.raises(DependencyFailed):
                store.get_collection("acme", "docs")
            with pytest.raises(DependencyFailed):
                store.put_collection("acme", make_collection(), create=True)

    def test_unprocessed_batch_items_are_retried(self, monkeypatch):
        # Given a collection of two documents whose first batch delete is partly throttled
        fake_aws_env(monkeypatch)
        monkeypatch.setattr(dynamodb_table, "_pause", lambda attempt: None)
        client = moto_client("dynamodb")
        store = DynamoDbMetadataStore(TABLE, client=client)
        pk = "T#acme#C#docs"
        second = {"DeleteRequest": {"Key": {"pk": {"S": pk}, "sk": {"S": "d2"}}}}
        with Stubber(client) as stub:
            bodies = [make_document("docs", d, chunk_count=2).model_dump_json() for d in ("d1", "d2")]
            stub.add_response(
                "query",
                {"Items": [{"sk": {"S": d}, "body": {"S": b}} for d, b in zip(("d1", "d2"), bodies)], "Count": 2},
            )
            stub.add_response("batch_write_item", {"UnprocessedItems": {TABLE: [second]}})
            stub.add_response(
                "batch_write_item", {"UnprocessedItems": {}}, expected_params={"RequestItems": {TABLE: [second]}}
            )
            stub.add_response("delete_item", {"Attributes": {"pk": {"S": "T#acme#COLLECTIONS"}}})
            # (and the usage the records and the collection counted is given back)
            stub.add_response("update_item", {})
            # When deleting the collection / Then the unprocessed item is sent again and the delete succeeds
            assert store.delete_collection("acme", "docs") is True
            stub.assert_no_pending_responses()

    def test_batch_delete_gives_up_with_dependency_failed(self, monkeypatch):
        # Given a table that never processes the batch
        fake_aws_env(monkeypatch)
        monkeypatch.setattr(dynamodb_table, "_pause", lambda attempt: None)
        client = moto_client("dynamodb")
        store = DynamoDbMetadataStore(TABLE, client=client)
        stuck = {TABLE: [{"DeleteRequest": {"Key": {"pk": {"S": "T#acme#C#docs"}, "sk": {"S": "d1"}}}}]}
        with Stubber(client) as stub:
            body = make_document("docs", "d1").model_dump_json()
            stub.add_response("query", {"Items": [{"sk": {"S": "d1"}, "body": {"S": body}}], "Count": 1})
            for _ in range(dynamodb_table.BATCH_WRITE_ATTEMPTS):
                stub.add_response("batch_write_item", {"UnprocessedItems": stuck})
            # When deleting the collection / Then DependencyFailed, not an endless loop
            with pytest.raises(DependencyFailed):
                store.delete_collection("acme", "docs")

    def test_client_is_created_lazily(self, dynamodb):
        # Given a store without a client / When it is first used / Then the shared factory's client serves it
        dynamodb_table.dynamodb_client.cache_clear()
        try:
            store = DynamoDbMetadataStore(TABLE)
            assert store._client is None
            store.put_collection("acme", make_collection(), create=True)
            assert store.client is dynamodb_table.dynamodb_client()
            assert DynamoDbMetadataStore(TABLE, client=dynamodb).get_collection("acme", "docs") is not None
        finally:
            dynamodb_table.dynamodb_client.cache_clear()
