"""DynamoDB adapter of EmbeddingCache: one partition per tenant and model (`T#{tenant}#EMB#{model}`), sha256 sort
keys (they spread evenly, which lets DynamoDB split a hot partition); vectors as float32 little-endian bytes.

Older versions kept one partition per model for every tenant (`EMB#{model}`); nothing reads those items any more
(a cache shared by tenants tells one tenant what another indexed, see app/embedding.py), so a tenant embeds its
texts once more when it next writes them. They can be deleted with a Query per model partition."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kindex.adapters.aws.dynamodb_chunks import fit_partition_key
from kindex.adapters.aws.dynamodb_table import (
    DynamoDbTable,
    addressable,
    escape_part,
    item_key,
)

VECTOR_DTYPE = "<f4"  # float32, little-endian whatever the host: the bytes are portable between Lambda and laptops


def embedding_pk(tenant: str, model: str) -> str:
    return fit_partition_key(f"T#{escape_part(tenant)}#EMB#{escape_part(model)}")


def build_vector_item(tenant: str, model: str, text_hash: str, vector: np.ndarray) -> dict[str, dict[str, Any]]:
    return {
        **item_key(embedding_pk(tenant, model), text_hash),
        "vector": {"B": np.asarray(vector, dtype=VECTOR_DTYPE).tobytes()},
    }


def parse_vector(item: dict[str, dict[str, Any]]) -> np.ndarray:
    return np.frombuffer(item["vector"]["B"], dtype=VECTOR_DTYPE).astype(np.float32)


class DynamoDbEmbeddingCache(DynamoDbTable):
    """Implements EmbeddingCache: vectors as float32 bytes by (tenant, model, sha256 of the text)."""

    def get_vectors(self, tenant: str, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        pk = embedding_pk(tenant, model)
        keys = [item_key(pk, digest) for digest in dict.fromkeys(text_hashes) if addressable(pk, digest)]
        return {item["sk"]["S"]: parse_vector(item) for item in self._batch_get(keys, projection="sk, vector")}

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, np.ndarray]) -> None:
        self._batch_write(puts=[build_vector_item(tenant, model, digest, vector) for digest, vector in vectors.items()])
