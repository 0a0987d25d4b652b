"""Contract of the ChunkStore port, run against SQLite and DynamoDB (moto), plus DynamoDB's batching and retries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.stub import Stubber
from kindex.adapters.aws import dynamodb_table
from kindex.adapters.aws.dynamodb_chunks import DynamoDbChunkStore, chunks_pk
from kindex.adapters.local.sqlite_chunks import SqliteChunkStore
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.domain.errors import DependencyFailed
from kindex.domain.types import ChunkRef, StoredChunk

from tests.support.aws import TABLE, fake_aws_env, moto_client

pytestmark = pytest.mark.contract

# Ids that stress key building: separators, escapes, spaces, unicode, and the longest ids the API accepts.
AWKWARD = ["a#b", "a%23b", "T#x#C#y", "é 日本", "D", "\U0001F600" * 255]



@pytest.fixture(params=["local", "aws"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator:
    if request.param == "local":
        yield SqliteChunkStore(SqliteDatabase(tmp_path / "x.sqlite3"))
    else:
        yield DynamoDbChunkStore(TABLE, client=request.getfixturevalue("dynamodb"))


def chunk(document_id: str, index: int, *, collection: str = "c", text: str | None = None, **changes) -> StoredChunk:
    text = f"chunk {index} of {document_id}" if text is None else text
    fields = dict(chunk_id=f"{document_id}-{index}", collection=collection, document_id=document_id, index=index,
                  start=index * 100, end=index * 100 + len(text), text=text)
    return StoredChunk(**{**fields, **changes})


def ref(c: StoredChunk) -> ChunkRef:
    return ChunkRef(c.collection, c.document_id, c.chunk_id)


def test_chunks_round_trip_every_field(store):
    # Given chunks with and without pages, unicode, an empty text and a text of tens of KB
    chunks = [chunk("d1", 0, page_start=1, page_end=2, text="Ünïcode ✓ 日本語\nline two"),
              chunk("d1", 1, page_start=2, page_end=2, text=""),
              chunk("d1", 2, text="x" * 40_000)]
    # When stored and read back by ref and by listing
    store.put_chunks("t", chunks)
    # Then every field is identical, and None pages stay None
    assert store.get_chunks("t", [ref(c) for c in chunks]) == {c.chunk_id: c for c in chunks}
    assert store.list_chunks("t", "c", "d1") == chunks
    assert store.list_chunks("t", "c", "d1")[2].page_start is None


def test_list_chunks_is_in_index_order_whatever_the_ids(store):
    # Given chunks written out of order, whose ids sort differently from their indexes
    chunks = [chunk("d1", i, chunk_id=f"id-{(7 * i) % 12:02d}") for i in range(12)]
    store.put_chunks("t", list(reversed(chunks)))
    # When listing / Then index order
    assert [c.index for c in store.list_chunks("t", "c", "d1")] == list(range(12))


def test_iter_chunks_walks_index_then_id_order_from_any_position(store):
    # Given 250 chunks (more than one read batch) written out of order, two of them sharing an index (a document
    # being re-chunked holds old and new chunks for a moment), and a neighbouring document
    chunks = [chunk("d1", i, chunk_id=f"id-{(7 * i) % 250:03d}") for i in range(250)]
    twin = chunk("d1", 5, chunk_id="id-000-twin")
    store.put_chunks("t", list(reversed(chunks)) + [twin, chunk("d2", 0)])
    expected = sorted(chunks + [twin], key=lambda c: (c.index, c.chunk_id))
    # When iterating from the start, from a position, from a position that no longer exists, and with an offset
    everything = list(store.iter_chunks("t", "c", "d1"))
    after_twin = list(store.iter_chunks("t", "c", "d1", after=(5, "id-000-twin")))
    after_gone = list(store.iter_chunks("t", "c", "d1", after=(5, "id-000-twin-deleted")))
    skipped = list(store.iter_chunks("t", "c", "d1", after=(5, chunks[5].chunk_id), offset=3))
    # Then each is the same order, resumed exactly where asked, never a chunk twice or of another document
    assert everything == expected
    position = expected.index(twin)
    assert after_twin == after_gone == expected[position + 1:]
    assert skipped == expected[expected.index(chunks[5]) + 1 + 3:]
    assert list(store.iter_chunks("t", "c", "d1", offset=251)) == []
    assert list(store.iter_chunks("t", "c", "nope")) == [] and list(store.iter_chunks("u", "c", "d1")) == []


def test_sqlite_iter_chunks_reads_one_batch_at_a_time(tmp_path):
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


def test_put_is_idempotent_and_replaces_by_chunk_id(store):
    # Given a stored chunk
    store.put_chunks("t", [chunk("d1", 0, text="old")])
    # When the same chunk id is written twice more, once with new text
    store.put_chunks("t", [chunk("d1", 0, text="old")])
    store.put_chunks("t", [chunk("d1", 0, text="new")])
    # Then there is one chunk, with the latest text
    assert [c.text for c in store.list_chunks("t", "c", "d1")] == ["new"]


def test_get_chunks_returns_only_existing_chunks_across_documents(store):
    # Given chunks of two documents in two collections
    a, b = chunk("d1", 0), chunk("d2", 0, collection="c2")
    store.put_chunks("t", [a, b])
    # When asking for them, a missing chunk, a ref with the wrong document, and a duplicate ref
    refs = [ref(a), ref(b), ChunkRef("c", "d1", "nope"), ChunkRef("c", "d2", a.chunk_id), ref(a)]
    # Then exactly the two existing chunks come back
    assert store.get_chunks("t", refs) == {a.chunk_id: a, b.chunk_id: b}
    assert store.get_chunks("t", []) == {}


def test_tenants_are_isolated(store):
    # Given the same chunk under two tenants with different texts
    store.put_chunks("t1", [chunk("d1", 0, text="one")])
    store.put_chunks("t2", [chunk("d1", 0, text="two")])
    # When tenant t1 reads / Then it sees only its own chunk, and deleting t2's collection leaves it
    store.delete_chunks("t2", "c")
    assert store.get_chunks("t1", [ref(chunk("d1", 0))])["d1-0"].text == "one"
    assert store.get_chunks("t2", [ref(chunk("d1", 0))]) == {}


def test_many_chunks_round_trip(store):
    # Given more chunks than one BatchWriteItem (25) and one BatchGetItem (100) take
    chunks = [chunk("d1", i) for i in range(230)]
    store.put_chunks("t", chunks)
    # When reading them all back by ref / Then all of them come back
    assert store.get_chunks("t", [ref(c) for c in chunks]) == {c.chunk_id: c for c in chunks}
    assert len(store.list_chunks("t", "c", "d1")) == 230


def test_delete_given_chunk_ids(store):
    chunks = [chunk("d1", i) for i in range(5)]
    store.put_chunks("t", chunks)
    # When deleting two chunks and one that does not exist
    store.delete_chunks("t", "c", document_id="d1", chunk_ids=["d1-1", "d1-3", "missing"])
    # Then only the other three remain
    assert [c.index for c in store.list_chunks("t", "c", "d1")] == [0, 2, 4]


def test_delete_a_document_spares_its_neighbours(store):
    # Given documents whose ids extend each other
    store.put_chunks("t", [chunk("d1", 0), chunk("d1", 1), chunk("d10", 0), chunk("d1", 0, collection="c2")])
    # When deleting d1 of collection c
    store.delete_chunks("t", "c", document_id="d1")
    # Then d1 is gone there and the others remain
    assert store.list_chunks("t", "c", "d1") == []
    assert len(store.list_chunks("t", "c", "d10")) == 1
    assert len(store.list_chunks("t", "c2", "d1")) == 1


def test_delete_a_collection_removes_every_document_and_only_those(store):
    # Given many documents in a collection, and neighbours sharing its id as a prefix or living in another tenant
    for i in range(30):
        store.put_chunks("t", [chunk(f"d{i}", 0), chunk(f"d{i}", 1)])
    store.put_chunks("t", [chunk("d0", 0, collection="c#2"), chunk("d0", 0, collection="cc")])
    store.put_chunks("u", [chunk("d0", 0)])
    # When deleting the collection's chunks, twice (the second finds nothing)
    store.delete_chunks("t", "c")
    store.delete_chunks("t", "c")
    # Then none is left, and the neighbours are intact
    assert all(store.list_chunks("t", "c", f"d{i}") == [] for i in range(30))
    assert len(store.list_chunks("t", "c#2", "d0")) == 1
    assert len(store.list_chunks("t", "cc", "d0")) == 1
    assert len(store.list_chunks("u", "c", "d0")) == 1


def test_deleting_a_document_then_rewriting_it_is_still_found_by_collection_delete(store):
    # Given a document whose chunks were deleted and then written again
    store.put_chunks("t", [chunk("d1", 0)])
    store.delete_chunks("t", "c", document_id="d1")
    store.put_chunks("t", [chunk("d1", 1)])
    # When the collection is deleted / Then the rewritten chunk goes too
    store.delete_chunks("t", "c")
    assert store.list_chunks("t", "c", "d1") == []


@pytest.mark.parametrize("awkward", AWKWARD)
def test_awkward_ids_round_trip_and_delete(store, awkward):
    # Given a chunk whose tenant, collection, document and chunk ids are all awkward (even the longest ones)
    c = chunk(awkward, 0, collection=awkward, chunk_id=awkward)
    store.put_chunks(awkward, [c])
    store.put_chunks(awkward, [chunk("other", 0, collection=awkward)])
    # When reading it back by ref and listing / Then it is found
    assert store.get_chunks(awkward, [ref(c)]) == {awkward: c}
    assert store.list_chunks(awkward, awkward, awkward) == [c]
    # And deleting its collection removes everything of it
    store.delete_chunks(awkward, awkward)
    assert store.get_chunks(awkward, [ref(c)]) == {}
    assert store.list_chunks(awkward, awkward, "other") == []


# DynamoDB specifics: the layout, one batched read per 100 refs, retries of unprocessed items
def count_calls(client, operation: str) -> list[int]:
    """Records the number of keys (BatchGetItem) or writes (BatchWriteItem) of each call of `operation`."""
    sizes: list[int] = []

    def record(params, **_):
        (entry,) = params["RequestItems"].values()
        sizes.append(len(entry["Keys"]) if isinstance(entry, dict) else len(entry))

    client.meta.events.register(f"before-parameter-build.dynamodb.{operation}", record)
    return sizes


def test_dynamodb_iter_chunks_fetches_texts_one_batch_at_a_time(dynamodb):
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


def test_dynamodb_get_chunks_is_one_batch_read_per_hundred_refs(dynamodb):
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


def test_dynamodb_writes_batches_of_at_most_25(dynamodb):
    store = DynamoDbChunkStore(TABLE, client=dynamodb)
    writes = count_calls(dynamodb, "BatchWriteItem")
    # When storing 60 chunks of one document / Then one marker write, then 25 + 25 + 10 chunk writes
    store.put_chunks("t", [chunk("d1", i) for i in range(60)])
    assert writes == [1, 25, 25, 10]


def test_dynamodb_chunk_items_live_in_the_document_partition(dynamodb):
    # Given a stored chunk
    store = DynamoDbChunkStore(TABLE, client=dynamodb)
    store.put_chunks("acme", [chunk("my doc#1", 3, collection="c%1", page_start=4, page_end=5)])
    # When reading the raw item / Then its key is the escaped document partition and the chunk id
    item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "T#acme#C#c%251#D#my doc%231"},
                                                   "sk": {"S": "my doc#1-3"}})["Item"]
    assert item["idx"] == {"N": "3"} and item["page_start"] == {"N": "4"}
    assert item["text"] == {"S": "chunk 3 of my doc#1"}


def test_dynamodb_over_long_partition_keys_are_hashed():
    # Given ids whose escaped partition key would exceed 2,048 bytes / Then a short hashed key is used
    longest = "\U0001F600" * 255
    pk = chunks_pk(longest, longest, longest)
    assert pk.startswith("H#") and len(pk) == 66
    assert chunks_pk(longest, longest, longest[:-1]) != pk
    assert chunks_pk("t", "c", "d") == "T#t#C#c#D#d"


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
        sent, held = ({**entry, "Keys": items[:half]}, {**entry, "Keys": items[half:]}) if reading \
            else (items[:half], items[half:])
        response = getattr(self.client, operation)(RequestItems={table: sent})
        return {**response, unprocessed_key: {table: held}}

    def batch_get_item(self, RequestItems):  # noqa: N803 (boto3's parameter name)
        return self._halve("batch_get_item", "UnprocessedKeys", RequestItems)

    def batch_write_item(self, RequestItems):  # noqa: N803
        return self._halve("batch_write_item", "UnprocessedItems", RequestItems)


def test_dynamodb_unprocessed_keys_and_items_are_retried(dynamodb, monkeypatch):
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


def test_dynamodb_errors_become_dependency_failed(monkeypatch):
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


def test_dynamodb_client_is_created_lazily(dynamodb):
    dynamodb_table.dynamodb_client.cache_clear()
    try:
        store = DynamoDbChunkStore(TABLE)
        store.put_chunks("t", [chunk("d1", 0)])
        assert store.client is dynamodb_table.dynamodb_client()
        assert len(DynamoDbChunkStore(TABLE, client=dynamodb).list_chunks("t", "c", "d1")) == 1
    finally:
        dynamodb_table.dynamodb_client.cache_clear()
