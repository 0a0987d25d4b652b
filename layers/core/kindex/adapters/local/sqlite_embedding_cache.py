"""The embedding cache (vectors by model and text hash), in the same SQLite file as the metadata."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kindex.adapters.local.sqlite_db import SqliteDatabase

_BATCH = 400  # stay well under SQLite's bound-parameter limit

SCHEMA = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL, text_sha256 TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID;
"""


class SqliteEmbeddingCache:
    """Implements EmbeddingCache; vectors are stored as raw float32 bytes."""

    def __init__(self, db: SqliteDatabase):
        self.db = db
        db.add_schema(SCHEMA)

    def get_vectors(self, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        conn = self.db.connection()
        unique = list(dict.fromkeys(text_hashes))
        for i in range(0, len(unique), _BATCH):
            batch = unique[i:i + _BATCH]
            sql = (f"SELECT text_sha256, vector FROM embedding_cache WHERE model = ? AND text_sha256 IN"
                   f" ({','.join('?' * len(batch))})")
            for digest, blob in conn.execute(sql, [model, *batch]):
                found[digest] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_vectors(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(model, digest, np.asarray(vec, dtype=np.float32).tobytes()) for digest, vec in vectors.items()]
        with self.db.write() as conn:
            conn.executemany("INSERT OR IGNORE INTO embedding_cache (model, text_sha256, vector) VALUES (?, ?, ?)",
                             rows)
