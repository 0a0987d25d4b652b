"""A data directory of an older version kept one embedding cache for every tenant: at the first start each tenant
keeps the vectors of its own chunks' texts and of what it imported, and the shared table is gone."""

import hashlib
import sqlite3

import numpy as np
import pytest

from kindex.adapters.local.sqlite_chunks import SCHEMA as CHUNKS_SCHEMA
from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache

pytestmark = pytest.mark.unit


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def vector(seed: int) -> bytes:
    return np.random.default_rng(seed).standard_normal(8).astype(np.float32).tobytes()


def test_the_shared_cache_is_split_by_the_tenants_own_chunks(tmp_path):
    # Given an older version's file: a shared cache, and chunks of two tenants (one text both hold, one acme's only)
    path = tmp_path / "kindex.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        CHUNKS_SCHEMA
        + """CREATE TABLE embedding_cache (model TEXT NOT NULL, text_sha256 TEXT NOT NULL,
        vector BLOB NOT NULL, PRIMARY KEY (model, text_sha256)) WITHOUT ROWID;"""
    )
    chunks = [("acme", "shared text"), ("acme", "acme only"), ("evil", "shared text")]
    db.executemany(
        "INSERT INTO chunks (tenant, collection, document_id, chunk_id, idx, start_offset, end_offset,"
        " page_start, page_end, text) VALUES (?, 'c', 'd', ?, 0, 0, 1, NULL, NULL, ?)",
        [(tenant, f"{tenant}-{i}", text) for i, (tenant, text) in enumerate(chunks)],
    )
    db.executemany(
        "INSERT INTO embedding_cache VALUES (?, ?, ?)",
        [
            ("hash:8", sha("shared text"), vector(1)),
            ("hash:8", sha("acme only"), vector(2)),
            ("hash:8", sha("nobody's any more"), vector(3)),
            ("imported\x1fevil\x1fhash:8", sha("sent"), vector(4)),
        ],
    )
    db.commit()
    db.close()
    # When the cache adapter opens it
    cache = SqliteEmbeddingCache(SqliteDatabase(path))
    # Then each tenant has exactly the vectors of its own texts, bit for bit
    wanted = [sha("shared text"), sha("acme only"), sha("nobody's any more")]
    acme, evil = cache.get_vectors("acme", "hash:8", wanted), cache.get_vectors("evil", "hash:8", wanted)
    assert {h: v.tobytes() for h, v in acme.items()} == {sha("shared text"): vector(1), sha("acme only"): vector(2)}
    assert {h: v.tobytes() for h, v in evil.items()} == {sha("shared text"): vector(1)}
    # And evil's imported vectors stay evil's, apart from the model's own
    assert cache.get_vectors("evil", "imported\x1fhash:8", [sha("sent")])[sha("sent")].tobytes() == vector(4)
    assert cache.get_vectors("evil", "hash:8", [sha("sent")]) == {}
    # And the shared table is gone, so a second start does nothing
    tables = {name for (name,) in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert "embedding_cache" not in tables and "tenant_embedding_cache" in tables
    SqliteEmbeddingCache(SqliteDatabase(path))
