"""The embedding cache (vectors by tenant, model and text hash), in the same SQLite file as the metadata."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import numpy as np

from kindex.adapters.local.sqlite_db import SqliteDatabase

logger = logging.getLogger(__name__)

_BATCH = 400  # stay well under SQLite's bound-parameter limit

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenant_embedding_cache (
    tenant TEXT NOT NULL, model TEXT NOT NULL, text_sha256 TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (tenant, model, text_sha256)
) WITHOUT ROWID;
"""
#: Older versions kept one cache for every tenant, keyed by (model, text hash) only.
LEGACY_TABLE = "embedding_cache"
#: How an older version named a tenant's imported vectors in the shared table: "imported\x1f<tenant>\x1f<model>".
_LEGACY_IMPORTED = "imported\x1f"


class SqliteEmbeddingCache:
    """Implements EmbeddingCache; vectors are stored as raw float32 bytes."""

    def __init__(self, db: SqliteDatabase):
        self.db = db
        db.add_schema(SCHEMA)
        self._migrate_shared_cache()

    def get_vectors(self, tenant: str, model: str, text_hashes: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        conn = self.db.connection()
        unique = list(dict.fromkeys(text_hashes))
        for i in range(0, len(unique), _BATCH):
            batch = unique[i : i + _BATCH]
            sql = (
                f"SELECT text_sha256, vector FROM tenant_embedding_cache WHERE tenant = ? AND model = ?"
                f" AND text_sha256 IN ({','.join('?' * len(batch))})"
            )
            for digest, blob in conn.execute(sql, [tenant, model, *batch]):
                found[digest] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_vectors(self, tenant: str, model: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(tenant, model, digest, np.asarray(vec, dtype=np.float32).tobytes()) for digest, vec in vectors.items()]
        with self.db.write() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO tenant_embedding_cache (tenant, model, text_sha256, vector) VALUES (?, ?, ?, ?)",
                rows,
            )

    def _migrate_shared_cache(self) -> None:
        """Once, for a data directory of an older version: each tenant keeps the shared cache's vectors of the texts
        its own chunks hold (so nothing it indexed is embedded again), and of what it imported; the shared table,
        which answered for every tenant, is dropped. Runs in one transaction: a crash leaves the old table whole and
        the next start does it again."""
        conn = self.db.connection()
        if not _has_table(conn, LEGACY_TABLE):
            return
        conn.create_function("kindex_sha256", 1, _sha256_hex, deterministic=True)
        with self.db.write() as conn:
            if not _has_table(conn, LEGACY_TABLE):
                return  # another process of this data directory migrated it meanwhile
            has_chunks = _has_table(conn, "chunks")
            models = [m for (m,) in conn.execute(f"SELECT DISTINCT model FROM {LEGACY_TABLE}")]
            for model in models:
                if model.startswith(_LEGACY_IMPORTED):
                    tenant, _, imported_model = model[len(_LEGACY_IMPORTED) :].partition("\x1f")
                    conn.execute(
                        "INSERT OR IGNORE INTO tenant_embedding_cache (tenant, model, text_sha256, vector)"
                        f" SELECT ?, ?, text_sha256, vector FROM {LEGACY_TABLE} WHERE model = ?",
                        (tenant, _LEGACY_IMPORTED + imported_model, model),
                    )
                elif has_chunks:
                    conn.execute(
                        "INSERT OR IGNORE INTO tenant_embedding_cache (tenant, model, text_sha256, vector)"
                        " SELECT DISTINCT c.tenant, e.model, e.text_sha256, e.vector FROM chunks c"
                        f" JOIN {LEGACY_TABLE} e ON e.model = ? AND e.text_sha256 = kindex_sha256(c.text)",
                        (model,),
                    )
            moved = conn.execute("SELECT count(*) FROM tenant_embedding_cache").fetchone()[0]
            conn.execute(f"DROP TABLE {LEGACY_TABLE}")
        logger.info("embedding cache split by tenant", extra={"models": len(models), "vectors_kept": moved})


def _has_table(conn, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _sha256_hex(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:  # never matches: such a text was never cached (its hash could not be computed)
        return None
