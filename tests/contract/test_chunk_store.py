"""The ChunkStore contract (tests/contract/mixins/chunk_store.py) run against SQLite and DynamoDB (moto), plus
SQLite's batched reads and DynamoDB's layout, batching and retries."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber

from kindex.adapters.aws import dynamodb_table
from kindex.adapters.aws.dynamodb_chunks import DynamoDbChunkStore, chunks_pk
from kindex.adapters.local.sqlite_chunks import SqliteChunkStore
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.domain.errors import DependencyFailed
from kindex.domain.types import ChunkRange, ChunkRef
from tests.contract.mixins.chunk_store import ChunkStoreContract, chunk, ref
from tests.support.aws import TABLE, fake_aws_env, moto_client

pytestmark = pytest.mark.contract


class TestSqliteChunkStore(ChunkStoreContract):
    @pytest.fixture
    def store(self, tmp_path) -> SqliteChunkStore:
        return SqliteChunkStore(SqliteDatabase(tmp_path / "x.sqlite3"))

    def test_iter_chunks_reads_one_batch_at_a_time(self, tmp_path):
        # Given a document of 1,000 chunks of 10 KB
        store = SqliteChunkStore(SqliteDatabase(tmp_path / "x.sqlite3"))
        store.put_chunks("t", [chunk("d1", i, text=f"{i:05d}" + "x" * 10_000) for i in range(1000)])
        selects: list[str] = []
        store.db.connection().set_trace_callback(lambda sql: selects.append(sql) if sql.startswith("SELECT") else None)
        # When a caller takes 101 chunks and stops
        iterator = store.iter_chunks("t", "c", "d1")
        taken = [next(iterator).index for _ in range(101)]
        # Then two reads of 100 chunks served it, not one read of the whole 10 MB document
        assert taken == list(range(101))
        assert len(selects) == 2 and all("LIMIT 100" in sql for sql in selects)


def test_a_sqlite_file_written_before_sections_gains_the_columns_and_its_chunks_read_none(tmp_path):
    # Given a chunks table as stored before chunks had sections, holding one chunk
    db = SqliteDatabase(tmp_path / "old.sqlite3")
    db.add_schema("""CREATE TABLE chunks (
        tenant TEXT NOT NULL, collection TEXT NOT NULL, document_id TEXT NOT NULL, chunk_id TEXT NOT NULL,
        idx INTEGER NOT NULL, start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL,
        page_start INTEGER, page_end INTEGER, text TEXT NOT NULL,
        PRIMARY KEY (tenant, collection, document_id, chunk_id)) WITHOUT ROWID;""")
    with db.write() as conn:
        conn.execute("INSERT INTO chunks VALUES ('t', 'c', 'd1', 'd1-0', 0, 0, 9, 1, 1, 'old chunk')")
    # When the store opens it
    store = SqliteChunkStore(db)
    # Then the old chunk reads with no section, and new chunks keep theirs beside it
    (old,) = store.list_chunks("t", "c", "d1")
    assert (old.text, old.page_start, old.section, old.table_header) == ("old chunk", 1, None, None)
    store.put_chunks("t", [chunk("d1", 1, section="A > B")])
    assert [c.section for c in store.list_chunks("t", "c", "d1")] == [None, "A > B"]
    # And opening it again changes nothing
    assert SqliteChunkStore(db).list_chunks("t", "c", "d1")[1].section == "A > B"


def test_a_dynamodb_chunk_item_written_before_sections_reads_none():
    from kindex.adapters.aws.dynamodb_chunks import build_chunk_item, parse_chunk_item

    # Given an item as written before chunks had sections (no section or table_header attribute)
    item = build_chunk_item("t", chunk("d1", 0))
    assert "section" not in item and "table_header" not in item
    # Then it reads as a chunk without them; and a chunk with them writes and reads both
    assert parse_chunk_item(item).section is None
    rich = chunk("d1", 1, section="A > B", table_header="| x |\n| --- |")
    assert parse_chunk_item(build_chunk_item("t", rich)) == rich


def count_calls(client, operation: str) -> list[int]:
    """Records the number of keys (BatchGetItem) or writes (BatchWriteItem) of each call of `operation`."""
    sizes: list[int] = []

    def record(params, **_):
        (entry,) = params["RequestItems"].values()
        sizes.append(len(entry["Keys"]) if isinstance(entry, dict) else len(entry))

    client.meta.events.register(f"before-parameter-build.dynamodb.{operation}", record)
    return sizes


class Unprocessed:
    """Wraps a client so that the first batch call with several keys (or writes) leaves half of them unprocessed."""

    def __init__(self, client):
        self.client, self.calls, self.halved = client, [], False

    def __getattr__(self, name):
        return getattr(self.client, name)

    def _halve(self, operation, unprocessed_key, request_items):
        self.calls.append(operation)
        ((table, entry),) = request_items.items()
        reading = operation == "batch_get_item"
        items = entry["Keys"] if reading else entry
        if self.halved or len(items) < 2:
            return getattr(self.client, operation)(RequestItems=request_items)
        self.halved = True
        half = len(items) // 2
        sent, held = (
            ({**entry, "Keys": items[:half]}, {**entry, "Keys": items[half:]})
            if reading
            else (items[:half], items[half:])
        )
        response = getattr(self.client, operation)(RequestItems={table: sent})
        return {**response, unprocessed_key: {table: held}}

    def batch_get_item(self, RequestItems):  # noqa: N803 (boto3's parameter name)
        return self._halve("batch_get_item", "UnprocessedKeys", RequestItems)

    def batch_write_item(self, RequestItems):  # noqa: N803
        return self._halve("batch_write_item", "UnprocessedItems", RequestItems)


class TestDynamoDbChunkStore(ChunkStoreContract):
    """Beyond the contract: the layout, one batched read per 100 refs, retries of unprocessed items."""

    @pytest.fixture
    def store(self, dynamodb) -> DynamoDbChunkStore:
        return DynamoDbChunkStore(TABLE, client=dynamodb)

    @pytest.mark.slow
    def test_iter_chunks_fetches_texts_one_batch_at_a_time(self, dynamodb):
        # Given 250 chunks of one document
        store = DynamoDbChunkStore(TABLE, client=dynamodb)
        store.put_chunks("t", [chunk("d1", i) for i in range(250)])
        gets = count_calls(dynamodb, "BatchGetItem")
        # When a caller takes 101 chunks and stops
        iterator = store.iter_chunks("t", "c", "d1")
        taken = [next(iterator) for _ in range(101)]
        # Then the texts came from two BatchGetItem calls of 100 keys, not from the whole document
        assert [c.index for c in taken] == list(range(101))
        assert gets == [100, 100]

    @pytest.mark.slow
    def test_get_chunks_is_one_batch_read_per_hundred_refs(self, dynamodb):
        # Given 250 stored chunks of several documents
        store = DynamoDbChunkStore(TABLE, client=dynamodb)
        chunks = [chunk(f"d{i % 3}", i) for i in range(250)]
        store.put_chunks("t", chunks)
        reads = count_calls(dynamodb, "BatchGetItem")
        # When reading them all by ref
        found = store.get_chunks("t", [ref(c) for c in chunks])
        # Then three BatchGetItem calls did it: 100, 100 and 50 keys
        assert len(found) == 250
        assert reads == [100, 100, 50]

    def test_chunk_ranges_are_one_key_query_per_document_and_one_batch_read(self, dynamodb):
        # Given 3 documents of 50 chunks
        store = DynamoDbChunkStore(TABLE, client=dynamodb)
        store.put_chunks("t", [chunk(f"d{n}", i) for n in range(3) for i in range(50)])
        reads = count_calls(dynamodb, "BatchGetItem")
        queries: list[dict] = []
        dynamodb.meta.events.register(
            "provide-client-params.dynamodb.Query", lambda params, **_: queries.append(params)
        )
        # When 7 chunks of each are read by range
        found = store.get_chunk_ranges("t", [ChunkRange("c", f"d{n}", 10, 16) for n in range(3)])
        # Then one Query per document read only keys and indexes, and one BatchGetItem read the 21 texts
        assert len(found) == 21
        assert [q["ProjectionExpression"] for q in queries] == ["sk, idx"] * 3
        assert reads == [21]

    def test_writes_batches_of_at_most_25(self, dynamodb):
        store = DynamoDbChunkStore(TABLE, client=dynamodb)
        writes = count_calls(dynamodb, "BatchWriteItem")
        # When storing 60 chunks of one document / Then one marker write, then 25 + 25 + 10 chunk writes
        store.put_chunks("t", [chunk("d1", i) for i in range(60)])
        assert writes == [1, 25, 25, 10]

    def test_chunk_items_live_in_the_document_partition(self, dynamodb):
        # Given a stored chunk
        store = DynamoDbChunkStore(TABLE, client=dynamodb)
        store.put_chunks("acme", [chunk("my doc#1", 3, collection="c%1", page_start=4, page_end=5)])
        # When reading the raw item / Then its key is the escaped document partition and the chunk id
        item = dynamodb.get_item(
            TableName=TABLE, Key={"pk": {"S": "T#acme#C#c%251#D#my doc%231"}, "sk": {"S": "my doc#1-3"}}
        )["Item"]
        assert item["idx"] == {"N": "3"} and item["page_start"] == {"N": "4"}
        assert item["text"] == {"S": "chunk 3 of my doc#1"}

    def test_over_long_partition_keys_are_hashed(self):
        # Given ids whose escaped partition key would exceed 2,048 bytes / Then a short hashed key is used
        longest = "\U0001f600" * 255
        pk = chunks_pk(longest, longest, longest)
        assert pk.startswith("H#") and len(pk) == 66
        assert chunks_pk(longest, longest, longest[:-1]) != pk
        assert chunks_pk("t", "c", "d") == "T#t#C#c#D#d"

    def test_unprocessed_keys_and_items_are_retried(self, dynamodb, monkeypatch):
        monkeypatch.setattr(dynamodb_table, "_pause", lambda attempt: None)
        chunks = [chunk("d1", i) for i in range(20)]
        # Given a table that leaves half of the first batch write unprocessed
        writer = Unprocessed(dynamodb)
        DynamoDbChunkStore(TABLE, client=writer).put_chunks("t", chunks)
        # Then every chunk was written anyway
        assert writer.calls == ["batch_write_item"] * 3  # the marker, the chunks, the unprocessed half again
        assert len(DynamoDbChunkStore(TABLE, client=dynamodb).list_chunks("t", "c", "d1")) == 20
        # Given a table that leaves half of the first batch read unprocessed / When reading / Then all come back
        reader = Unprocessed(dynamodb)
        assert len(DynamoDbChunkStore(TABLE, client=reader).get_chunks("t", [ref(c) for c in chunks])) == 20
        assert reader.calls == ["batch_get_item", "batch_get_item"]

    def test_errors_become_dependency_failed(self, monkeypatch):
        # Given a client whose calls fail with AWS errors
        fake_aws_env(monkeypatch)
        client = moto_client("dynamodb")
        store = DynamoDbChunkStore(TABLE, client=client)
        with Stubber(client) as stub:
            stub.add_client_error("batch_get_item", service_error_code="ProvisionedThroughputExceededException")
            stub.add_client_error("query", service_error_code="ResourceNotFoundException")
            # When reading or listing / Then only DependencyFailed escapes
            with pytest.raises(DependencyFailed):
                store.get_chunks("t", [ChunkRef("c", "d", "x")])
            with pytest.raises(DependencyFailed):
                store.list_chunks("t", "c", "d")

    def test_client_is_created_lazily(self, dynamodb):
        dynamodb_table.dynamodb_client.cache_clear()
        try:
            store = DynamoDbChunkStore(TABLE)
            store.put_chunks("t", [chunk("d1", 0)])
            assert store.client is dynamodb_table.dynamodb_client()
            assert len(DynamoDbChunkStore(TABLE, client=dynamodb).list_chunks("t", "c", "d1")) == 1
        finally:
            dynamodb_table.dynamodb_client.cache_clear()
