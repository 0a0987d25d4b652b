"""A deterministic feature-hashing embedder for tests, CI and offline demos."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from kindex.adapters.embedders.text_input import encodable
from kindex.domain.embedding_models import HASH_MAX_DIMENSIONS as MAX_DIMENSIONS
from kindex.domain.embedding_models import HASH_MIN_DIMENSIONS as MIN_DIMENSIONS
from kindex.domain.errors import InvalidInput

_WORD = re.compile(r"\w+", re.UNICODE)
# Trigrams weigh less than whole words so that shared words dominate shared spellings.
_TRIGRAM_WEIGHT = 0.5
# Gives texts without any word a fixed, non-zero vector: cosine indexes reject zero vectors.
_NO_WORDS_FEATURE = "\x00no-words"


@lru_cache(maxsize=200_000)
def _feature_hash(feature: str) -> int:
    """A stable 64-bit hash (Python's `hash()` is salted per process, so it cannot be used)."""
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


def _features(text: str) -> tuple[list[str], list[float]]:
    words = _WORD.findall(encodable(text).lower())
    if not words:
        return [_NO_WORDS_FEATURE], [1.0]
    features: list[str] = []
    weights: list[float] = []
    for word in words:
        features.append("w:" + word)
        weights.append(1.0)
        padded = f"<{word}>"
        for start in range(len(padded) - 2):
            features.append("t:" + padded[start : start + 3])
            weights.append(_TRIGRAM_WEIGHT)
    return features, weights


class HashEmbedder:
    """Feature hashing of lowercased words and their character trigrams into signed buckets.

    NOT a semantic model: two texts are close only when they share words (or spellings). It exists so
    that tests, CI and offline demos get deterministic, dependency-free vectors that behave like
    embeddings (unit length, fixed dimension, similar texts closer than unrelated ones). The hash is
    blake2b, so vectors are identical across processes and machines. Model name: `hash:<dimensions>`.
    """

    def __init__(self, dimensions: int = 384):
        if not MIN_DIMENSIONS <= dimensions <= MAX_DIMENSIONS:
            raise InvalidInput(f"hash embedder dimensions must be between {MIN_DIMENSIONS} and {MAX_DIMENSIONS}")
        self.dimensions = dimensions
        self.model = f"hash:{dimensions}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: list[int] = []
        hashes: list[int] = []
        weights: list[float] = []
        for row, text in enumerate(texts):
            features, feature_weights = _features(text)
            rows.extend([row] * len(features))
            hashes.extend(_feature_hash(feature) for feature in features)
            weights.extend(feature_weights)

        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not rows:
            return vectors
        hash_array = np.array(hashes, dtype=np.uint64)
        buckets = (hash_array % np.uint64(self.dimensions)).astype(np.intp)
        # The top bit picks the sign so that colliding features tend to cancel rather than pile up.
        signs = np.where((hash_array >> np.uint64(63)) == 1, -1.0, 1.0).astype(np.float32)
        np.add.at(vectors, (np.array(rows, dtype=np.intp), buckets), signs * np.array(weights, dtype=np.float32))

        norms = np.linalg.norm(vectors, axis=1)
        # Signed collisions can, in theory, cancel every feature of a text; such a row still gets a unit vector.
        cancelled = norms == 0
        if cancelled.any():
            vectors[cancelled, _feature_hash(_NO_WORDS_FEATURE) % self.dimensions] = 1.0
            norms[cancelled] = 1.0
        vectors /= norms[:, None]
        return vectors

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries and passages are hashed alike."""
        return self.embed(texts)
