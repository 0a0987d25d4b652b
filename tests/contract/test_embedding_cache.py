"""Contract of the EmbeddingCache port, run against SQLite and DynamoDB (moto), plus DynamoDB's batching."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import pytest
from kindex.adapters.aws.dynamodb_embedding_cache import DynamoDbEmbeddingCache
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache

from tests.support.aws import TABLE

pytestmark = pytest.mark.contract



@pytest.fixture(params=["local", "aws"])
def cache(request: pytest.FixtureRequest, tmp_path) -> Iterator:
    if request.param == "local":
        yield SqliteEmbeddingCache(SqliteDatabase(tmp_path / "x.sqlite3"))
    else:
        yield DynamoDbEmbeddingCache(TABLE, client=request.getfixturevalue("dynamodb"))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def vectors(count: int, dims: int = 384, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {digest(f"text {seed} {i}"): rng.standard_normal(dims).astype(np.float32) for i in range(count)}


def test_vectors_round_trip_bit_for_bit(cache):
    # Given float32 vectors, including extreme values, of two sizes
    stored = vectors(3) | {digest("edge"): np.array([0.0, -0.0, 1e-38, 3.4e38, -1.5], dtype=np.float32)}
    stored[digest("big")] = np.linspace(-1, 1, 3072, dtype=np.float32)
    # When stored and read back
    cache.put_vectors("m", stored)
    found = cache.get_vectors("m", list(stored))
    # Then each is float32 and identical to the bit
    assert set(found) == set(stored)
    for key, vector in stored.items():
        assert found[key].dtype == np.float32
        assert found[key].tobytes() == vector.tobytes()


def test_missing_hashes_are_simply_absent(cache):
    cache.put_vectors("m", vectors(2))
    wanted = list(vectors(2)) + [digest("never stored")]
    assert set(cache.get_vectors("m", wanted)) == set(vectors(2))
    assert cache.get_vectors("m", []) == {}
    assert cache.get_vectors("m", [digest("never stored")]) == {}


def test_models_are_separate(cache):
    # Given a vector cached under one model, including one whose name needs escaping
    one = vectors(1)
    cache.put_vectors("openai:text-embedding-3-small", one)
    cache.put_vectors("odd#model%", vectors(1, seed=1))
    # When asking another model for the same hash / Then it is not there
    assert cache.get_vectors("hash:384", list(one)) == {}
    assert set(cache.get_vectors("openai:text-embedding-3-small", list(one))) == set(one)
    assert set(cache.get_vectors("odd#model%", list(vectors(1, seed=1)))) == set(vectors(1, seed=1))


def test_storing_again_is_harmless_and_duplicates_in_a_request_are_fine(cache):
    stored = vectors(3)
    cache.put_vectors("m", stored)
    cache.put_vectors("m", stored)
    keys = list(stored)
    found = cache.get_vectors("m", keys + keys)
    assert set(found) == set(stored)
    assert all(np.array_equal(found[k], stored[k]) for k in keys)


def test_many_vectors_round_trip(cache):
    # Given more vectors than one BatchWriteItem (25) and one BatchGetItem (100)
    stored = vectors(260, dims=64)
    cache.put_vectors("m", stored)
    assert set(cache.get_vectors("m", list(stored))) == set(stored)


# DynamoDB specifics
def record_sizes(client, operation: str) -> list[int]:
    sizes: list[int] = []

    def record(params, **_):
        (entry,) = params["RequestItems"].values()
        sizes.append(len(entry["Keys"]) if isinstance(entry, dict) else len(entry))

    client.meta.events.register(f"before-parameter-build.dynamodb.{operation}", record)
    return sizes


def test_dynamodb_batches_are_25_writes_and_100_reads(dynamodb):
    cache = DynamoDbEmbeddingCache(TABLE, client=dynamodb)
    writes, reads = record_sizes(dynamodb, "BatchWriteItem"), record_sizes(dynamodb, "BatchGetItem")
    stored = vectors(130, dims=16)
    # When storing and reading 130 vectors (asking for one hash twice)
    cache.put_vectors("m", stored)
    cache.get_vectors("m", list(stored) + [next(iter(stored))])
    # Then writes go 25 at a time, and reads 100 at a time with the duplicate asked once
    assert writes == [25, 25, 25, 25, 25, 5]
    assert reads == [100, 30]


def test_dynamodb_vector_is_stored_as_float32_binary(dynamodb):
    DynamoDbEmbeddingCache(TABLE, client=dynamodb).put_vectors("hash:4", {"abc": np.array([1, 2, 3, 4], np.float32)})
    item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "EMB#hash:4"}, "sk": {"S": "abc"}})["Item"]
    assert item["vector"]["B"] == np.array([1, 2, 3, 4], dtype="<f4").tobytes()
