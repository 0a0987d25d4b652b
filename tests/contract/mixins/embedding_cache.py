"""Contract of the EmbeddingCache port: what every adapter (SQLite, DynamoDB...) must do."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from kindex.domain.ports import EmbeddingCache


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def vectors(count: int, dims: int = 384, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {digest(f"text {seed} {i}"): rng.standard_normal(dims).astype(np.float32) for i in range(count)}


class EmbeddingCacheContract:
    """Subclass in a `Test*` class that provides `cache`: a fresh, empty EmbeddingCache."""

    @pytest.fixture
    def cache(self) -> EmbeddingCache:
        raise NotImplementedError(f"{type(self).__name__} must provide the `cache` fixture")

    def test_vectors_round_trip_bit_for_bit(self, cache):
        # Given float32 vectors, including extreme values, of two sizes
        stored = vectors(3) | {digest("edge"): np.array([0.0, -0.0, 1e-38, 3.4e38, -1.5], dtype=np.float32)}
        stored[digest("big")] = np.linspace(-1, 1, 3072, dtype=np.float32)
        # When stored and read back
        cache.put_vectors("t", "m", stored)
        found = cache.get_vectors("t", "m", list(stored))
        # Then each is float32 and identical to the bit
        assert set(found) == set(stored)
        for key, vector in stored.items():
            assert found[key].dtype == np.float32
            assert found[key].tobytes() == vector.tobytes()

    @pytest.mark.slow
    def test_missing_hashes_are_simply_absent(self, cache):
        cache.put_vectors("t", "m", vectors(2))
        wanted = list(vectors(2)) + [digest("never stored")]
        assert set(cache.get_vectors("t", "m", wanted)) == set(vectors(2))
        assert cache.get_vectors("t", "m", []) == {}
        assert cache.get_vectors("t", "m", [digest("never stored")]) == {}

    def test_models_are_separate(self, cache):
        # Given a vector cached under one model, including one whose name needs escaping
        one = vectors(1)
        cache.put_vectors("t", "openai:text-embedding-3-small", one)
        cache.put_vectors("t", "odd#model%", vectors(1, seed=1))
        # When asking another model for the same hash / Then it is not there
        assert cache.get_vectors("t", "hash:384", list(one)) == {}
        assert set(cache.get_vectors("t", "openai:text-embedding-3-small", list(one))) == set(one)
        assert set(cache.get_vectors("t", "odd#model%", list(vectors(1, seed=1)))) == set(vectors(1, seed=1))

    def test_storing_again_is_harmless_and_duplicates_in_a_request_are_fine(self, cache):
        stored = vectors(3)
        cache.put_vectors("t", "m", stored)
        cache.put_vectors("t", "m", stored)
        keys = list(stored)
        found = cache.get_vectors("t", "m", keys + keys)
        assert set(found) == set(stored)
        assert all(np.array_equal(found[k], stored[k]) for k in keys)

    def test_tenants_are_separate(self, cache):
        # Given two tenants, one of which cached vectors, under tenant ids that need escaping as key parts
        one = vectors(2)
        cache.put_vectors("acme", "m", one)
        cache.put_vectors("a#b%", "m", vectors(1, seed=1))
        # When the other asks for the same model and hashes / Then nothing is there for it
        assert cache.get_vectors("evil", "m", list(one)) == {}
        assert cache.get_vectors("acme#", "m", list(one)) == {}
        assert cache.get_vectors("a", "m", list(vectors(1, seed=1))) == {}
        assert set(cache.get_vectors("acme", "m", list(one))) == set(one)
        assert set(cache.get_vectors("a#b%", "m", list(vectors(1, seed=1)))) == set(vectors(1, seed=1))

    @pytest.mark.slow
    def test_many_vectors_round_trip(self, cache):
        # Given more vectors than one BatchWriteItem (25) and one BatchGetItem (100)
        stored = vectors(260, dims=64)
        cache.put_vectors("t", "m", stored)
        assert set(cache.get_vectors("t", "m", list(stored))) == set(stored)
