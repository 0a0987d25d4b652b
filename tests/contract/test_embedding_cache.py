"""The EmbeddingCache contract (tests/contract/mixins/embedding_cache.py) run against SQLite and DynamoDB (moto),
plus DynamoDB's batching and item layout."""

from __future__ import annotations

import numpy as np
import pytest

from kindex.adapters.aws.dynamodb_embedding_cache import DynamoDbEmbeddingCache
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache
from tests.contract.mixins.embedding_cache import EmbeddingCacheContract, vectors
from tests.support.aws import TABLE

pytestmark = pytest.mark.contract


class TestSqliteEmbeddingCache(EmbeddingCacheContract):
    @pytest.fixture
    def cache(self, tmp_path) -> SqliteEmbeddingCache:
        return SqliteEmbeddingCache(SqliteDatabase(tmp_path / "x.sqlite3"))


def record_sizes(client, operation: str) -> list[int]:
    sizes: list[int] = []

    def record(params, **_):
        (entry,) = params["RequestItems"].values()
        sizes.append(len(entry["Keys"]) if isinstance(entry, dict) else len(entry))

    client.meta.events.register(f"before-parameter-build.dynamodb.{operation}", record)
    return sizes


class TestDynamoDbEmbeddingCache(EmbeddingCacheContract):
    @pytest.fixture
    def cache(self, dynamodb) -> DynamoDbEmbeddingCache:
        return DynamoDbEmbeddingCache(TABLE, client=dynamodb)

    def test_batches_are_25_writes_and_100_reads(self, dynamodb):
        cache = DynamoDbEmbeddingCache(TABLE, client=dynamodb)
        writes, reads = record_sizes(dynamodb, "BatchWriteItem"), record_sizes(dynamodb, "BatchGetItem")
        stored = vectors(130, dims=16)
        # When storing and reading 130 vectors (asking for one hash twice)
        cache.put_vectors("t", "m", stored)
        cache.get_vectors("t", "m", list(stored) + [next(iter(stored))])
        # Then writes go 25 at a time, and reads 100 at a time with the duplicate asked once
        assert writes == [25, 25, 25, 25, 25, 5]
        assert reads == [100, 30]

    def test_vector_is_stored_as_float32_binary(self, dynamodb):
        DynamoDbEmbeddingCache(TABLE, client=dynamodb).put_vectors(
            "acme", "hash:4", {"abc": np.array([1, 2, 3, 4], np.float32)}
        )
        item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "T#acme#EMB#hash:4"}, "sk": {"S": "abc"}})["Item"]
        assert item["vector"]["B"] == np.array([1, 2, 3, 4], dtype="<f4").tobytes()
