"""Embedded adapter of the `SearchIndex` port: exact numpy k-NN plus SQLite FTS5 BM25, persisted under one folder.

Layout under `root`:
- `vectors/<key>.npz`: one partition per (model, tenant, collection), holding the L2-normalised float32 matrix
  and the chunk id / document id / language / mimetype arrays row-aligned with it. A search loads (lazily, then
  keeps in memory) only the partitions of the collections it names. Exact brute-force cosine is ~7 ms for
  100k x 384 and has perfect recall, so no ANN structure is worth its complexity here. Each write rewrites the
  partition's single file via write-temp-then-rename, so a crash leaves the old or the new partition, never
  a torn one (one file rather than matrix + id files, so the two can never disagree).
- `keyword.sqlite` (WAL): an FTS5 table indexing chunk text for BM25, plus a plain `chunk` table with the ids
  and filter fields joined on rowid. The text is indexed but never selected. On SQLite >= 3.43 the FTS table is
  contentless with `contentless_delete=1`, so the text is not stored at all; older SQLite (this image has 3.40)
  cannot delete from a contentless table without the original text, so there an external-content table holds
  the text on disk for deletes only.

One process owns the folder; a single lock serialises its server and worker threads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kindex.domain.errors import InvalidInput
from kindex.domain.types import IndexRecord, SearchFilters, SearchHit

logger = logging.getLogger(__name__)

CONTENTLESS_DELETE_MIN_SQLITE = (3, 43, 0)
# Bounds the FTS5 expression size for pathological inputs; a longer query still matches on its first terms.
MAX_QUERY_TERMS = 64
_WORD = re.compile(r"\w+")

_META_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk (
    rowid INTEGER PRIMARY KEY,
    model TEXT NOT NULL, tenant TEXT NOT NULL, collection TEXT NOT NULL,
    chunk_id TEXT NOT NULL, document_id TEXT NOT NULL, language TEXT, mimetype TEXT,
    UNIQUE (model, tenant, collection, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunk_by_document ON chunk (model, tenant, collection, document_id);
"""
_CONTENTLESS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(
    text, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2');
"""
_EXTERNAL_CONTENT_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunk_text (rowid INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(
    text, content='chunk_text', content_rowid='rowid', tokenize='unicode61 remove_diacritics 2');
"""


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression for free text: each word quoted (so AND/OR/NOT/NEAR, `*`, `^`, `:`, `-`, quotes
    and parentheses are plain text, never syntax), OR-ed like a BM25 `match` query. None when there is no word."""
    terms = list(dict.fromkeys(_WORD.findall(query)))[:MAX_QUERY_TERMS]
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero) so a dot product is the cosine similarity."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


@dataclass
class _Partition:
    """One (model, tenant, collection): rows of `vectors` align with the id and filter arrays."""

    vectors: np.ndarray
    chunk_ids: np.ndarray
    document_ids: np.ndarray
    languages: np.ndarray
    mimetypes: np.ndarray

    @classmethod
    def empty(cls, dims: int) -> _Partition:
        text = np.array([], dtype=str)
        return cls(np.zeros((0, dims), dtype=np.float32), text, text, text, text)

    def __len__(self) -> int:
        return len(self.chunk_ids)

    def without(self, keep: np.ndarray) -> _Partition:
        return _Partition(self.vectors[keep], self.chunk_ids[keep], self.document_ids[keep], self.languages[keep],
                          self.mimetypes[keep])

    def mask(self, filters: SearchFilters | None) -> np.ndarray:
        keep = np.ones(len(self), dtype=bool)
        if filters is None:
            return keep
        if filters.document_ids is not None:
            keep &= np.isin(self.document_ids, np.array(list(filters.document_ids), dtype=str))
        # None is stored as "" (numpy string arrays have no null); a filter value is never None here.
        if filters.language is not None:
            keep &= self.languages == filters.language
        if filters.mimetype is not None:
            keep &= self.mimetypes == filters.mimetype
        return keep


class LocalSearchIndex:
    """`SearchIndex` for the local deployment: exact cosine k-NN (numpy) and BM25 (SQLite FTS5) under `root`."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self._vector_dir = self.root / "vectors"
        self._vector_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._partitions: dict[tuple[str, str, str], _Partition | None] = {}
        self._db = sqlite3.connect(self.root / "keyword.sqlite", isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_META_SCHEMA)
        self._contentless = self._choose_fts_design()

    def close(self) -> None:
        """Close the SQLite connection; the folder can then be reopened by a new instance."""
        with self._lock:
            self._db.close()

    # -- port -------------------------------------------------------------------------------------------------

    def upsert(self, model: str, records: Sequence[IndexRecord]) -> None:
        if not records:
            return
        latest: dict[tuple[str, str, str], IndexRecord] = {}
        for record in records:  # the last record wins for a repeated chunk id
            key = (record.tenant, record.collection, record.chunk_id)
            latest.pop(key, None)
            latest[key] = record
        dims = {len(record.vector) for record in latest.values()}
        if len(dims) != 1 or 0 in dims:
            raise InvalidInput("all vectors in one upsert must have the same non-zero length")
        matrix = np.asarray([record.vector for record in latest.values()], dtype=np.float32)
        if not np.isfinite(matrix).all():
            raise InvalidInput("vectors contain non-finite values")
        matrix = normalise_rows(matrix)
        groups: dict[tuple[str, str], list[int]] = {}
        for row, record in enumerate(latest.values()):
            groups.setdefault((record.tenant, record.collection), []).append(row)
        recs = list(latest.values())
        with self._lock:
            for (tenant, collection), rows in groups.items():
                self._upsert_vectors(model, tenant, collection, [recs[row] for row in rows], matrix[rows])
            self._upsert_keywords(model, recs)
        logger.info("search index upsert", extra={"model": model, "records": len(recs), "partitions": len(groups)})

    def delete(self, model: str, tenant: str, collection: str, *, document_ids: Sequence[str] | None = None,
               chunk_ids: Sequence[str] | None = None) -> None:
        # An empty list means "nothing", never "everything": only (None, None) deletes the whole collection.
        if (document_ids is not None and not document_ids) or (chunk_ids is not None and not chunk_ids):
            return
        with self._lock:
            removed = self._delete_vectors(model, tenant, collection, document_ids, chunk_ids)
            self._delete_keywords(model, tenant, collection, document_ids, chunk_ids)
        logger.info("search index delete", extra={"model": model, "tenant": tenant, "collection": collection,
                                                   "deleted": removed})

    def knn_search(self, model: str, tenant: str, collections: Sequence[str], vector: Sequence[float], k: int,
                   filters: SearchFilters | None = None) -> list[SearchHit]:
        if k <= 0 or not collections:
            return []
        query = normalise_rows(np.asarray([vector], dtype=np.float32))[0]
        candidates: list[tuple[float, str, str, str]] = []
        with self._lock:
            for collection in dict.fromkeys(collections):
                partition = self._partition(model, tenant, collection)
                if partition is None or not len(partition):
                    continue
                if partition.vectors.shape[1] != len(query):
                    raise InvalidInput(f"query vector has {len(query)} dimensions, the index has "
                                       f"{partition.vectors.shape[1]}")
                rows = np.flatnonzero(partition.mask(filters))  # filter first, then take the top k: exact
                if not len(rows):
                    continue
                scores = partition.vectors[rows] @ query
                top = np.argpartition(-scores, min(k, len(rows)) - 1)[:k] if len(rows) > k else np.arange(len(rows))
                candidates += [(float(scores[i]), str(partition.chunk_ids[rows[i]]),
                                str(partition.document_ids[rows[i]]), collection) for i in top]
        candidates.sort(key=lambda hit: (-hit[0], hit[3], hit[1]))
        return [SearchHit(chunk_id=chunk_id, document_id=document_id, collection=collection, score=score)
                for score, chunk_id, document_id, collection in candidates[:k]]

    def keyword_search(self, model: str, tenant: str, collections: Sequence[str], query: str, k: int,
                       filters: SearchFilters | None = None) -> list[SearchHit]:
        expression = fts_query(query)
        if expression is None or k <= 0 or not collections:
            return []
        # Every filter sits in the WHERE clause, so SQLite applies it before ORDER BY ... LIMIT k: exact top k.
        sql = ["SELECT c.chunk_id, c.document_id, c.collection, bm25(chunk_fts) AS rank",
               "FROM chunk_fts JOIN chunk c ON c.rowid = chunk_fts.rowid",
               "WHERE chunk_fts MATCH ? AND c.model = ? AND c.tenant = ?",
               "AND c.collection IN (SELECT value FROM json_each(?))"]
        args: list[object] = [expression, model, tenant, json.dumps(list(collections))]
        if filters is not None and filters.document_ids is not None:
            sql.append("AND c.document_id IN (SELECT value FROM json_each(?))")
            args.append(json.dumps(list(filters.document_ids)))
        if filters is not None and filters.language is not None:
            sql.append("AND c.language = ?")
            args.append(filters.language)
        if filters is not None and filters.mimetype is not None:
            sql.append("AND c.mimetype = ?")
            args.append(filters.mimetype)
        sql.append("ORDER BY rank, c.chunk_id LIMIT ?")
        args.append(k)
        with self._lock:
            rows = self._db.execute(" ".join(sql), args).fetchall()
        # bm25() is lower-is-better; the port wants higher-is-better.
        return [SearchHit(chunk_id=chunk_id, document_id=document_id, collection=collection, score=-rank)
                for chunk_id, document_id, collection, rank in rows]

    def chunk_ids(self, model: str, tenant: str, collection: str) -> set[str]:
        with self._lock:
            partition = self._partition(model, tenant, collection)
            found = {str(chunk_id) for chunk_id in partition.chunk_ids} if partition is not None else set()
            rows = self._db.execute("SELECT chunk_id FROM chunk WHERE model = ? AND tenant = ? AND collection = ?",
                                    (model, tenant, collection))
            # The union: drift repair must see a chunk that only one of the two stores still holds.
            found.update(chunk_id for (chunk_id,) in rows)
        return found

    # -- vectors ----------------------------------------------------------------------------------------------

    def _partition_path(self, model: str, tenant: str, collection: str) -> Path:
        key = hashlib.sha256(json.dumps([model, tenant, collection]).encode("utf-8")).hexdigest()[:40]
        return self._vector_dir / f"{key}.npz"

    def _partition(self, model: str, tenant: str, collection: str) -> _Partition | None:
        key = (model, tenant, collection)
        if key not in self._partitions:
            path = self._partition_path(*key)
            partition = None
            if path.exists():
                with np.load(path, allow_pickle=False) as data:
                    if list(data["key"]) != list(key):
                        raise RuntimeError(f"vector partition {path.name} belongs to another key")
                    partition = _Partition(data["vectors"], data["chunk_ids"], data["document_ids"],
                                           data["languages"], data["mimetypes"])
            self._partitions[key] = partition
        return self._partitions[key]

    def _save(self, model: str, tenant: str, collection: str, partition: _Partition) -> None:
        path = self._partition_path(model, tenant, collection)
        if not len(partition):
            path.unlink(missing_ok=True)
            self._partitions[(model, tenant, collection)] = None
            return
        temp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(temp, "wb") as handle:
            np.savez(handle, key=np.array([model, tenant, collection], dtype=str), vectors=partition.vectors,
                     chunk_ids=partition.chunk_ids, document_ids=partition.document_ids,
                     languages=partition.languages, mimetypes=partition.mimetypes)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
        self._partitions[(model, tenant, collection)] = partition

    def _upsert_vectors(self, model: str, tenant: str, collection: str, records: list[IndexRecord],
                        vectors: np.ndarray) -> None:
        current = self._partition(model, tenant, collection) or _Partition.empty(vectors.shape[1])
        if current.vectors.shape[1] != vectors.shape[1]:
            raise InvalidInput(f"vectors have {vectors.shape[1]} dimensions, model {model} has "
                               f"{current.vectors.shape[1]}")
        new_ids = np.array([record.chunk_id for record in records], dtype=str)
        kept = current.without(~np.isin(current.chunk_ids, new_ids))
        added = _Partition(
            vectors,
            new_ids,
            np.array([record.document_id for record in records], dtype=str),
            np.array([record.language or "" for record in records], dtype=str),
            np.array([record.mimetype or "" for record in records], dtype=str),
        )
        merged = _Partition(*(np.concatenate([getattr(kept, name), getattr(added, name)])
                              for name in ("vectors", "chunk_ids", "document_ids", "languages", "mimetypes")))
        self._save(model, tenant, collection, merged)

    def _delete_vectors(self, model: str, tenant: str, collection: str, document_ids: Sequence[str] | None,
                        chunk_ids: Sequence[str] | None) -> int:
        partition = self._partition(model, tenant, collection)
        if partition is None:
            return 0
        doomed = np.ones(len(partition), dtype=bool)
        if document_ids is not None:
            doomed &= np.isin(partition.document_ids, np.array(list(document_ids), dtype=str))
        if chunk_ids is not None:
            doomed &= np.isin(partition.chunk_ids, np.array(list(chunk_ids), dtype=str))
        if doomed.any():
            self._save(model, tenant, collection, partition.without(~doomed))
        return int(doomed.sum())

    # -- keywords ---------------------------------------------------------------------------------------------

    def _choose_fts_design(self) -> bool:
        """True for the contentless-delete design; an existing database keeps the design it was created with."""
        existing = self._db.execute("SELECT sql FROM sqlite_master WHERE name = 'chunk_fts'").fetchone()
        if existing is not None:
            return "contentless_delete" in existing[0]
        contentless = sqlite3.sqlite_version_info >= CONTENTLESS_DELETE_MIN_SQLITE
        self._db.executescript(_CONTENTLESS_SCHEMA if contentless else _EXTERNAL_CONTENT_SCHEMA)
        return contentless

    def _remove_fts_rows(self, rowids: Iterable[int]) -> None:
        ids = json.dumps(list(rowids))
        if self._contentless:
            self._db.execute("DELETE FROM chunk_fts WHERE rowid IN (SELECT value FROM json_each(?))", (ids,))
        else:
            # External content: FTS5 needs the old text to remove its tokens, then the content row goes.
            self._db.execute("INSERT INTO chunk_fts (chunk_fts, rowid, text) SELECT 'delete', rowid, text "
                             "FROM chunk_text WHERE rowid IN (SELECT value FROM json_each(?))", (ids,))
            self._db.execute("DELETE FROM chunk_text WHERE rowid IN (SELECT value FROM json_each(?))", (ids,))
        self._db.execute("DELETE FROM chunk WHERE rowid IN (SELECT value FROM json_each(?))", (ids,))

    def _upsert_keywords(self, model: str, records: list[IndexRecord]) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            existing = [row[0] for record in records for row in self._db.execute(
                "SELECT rowid FROM chunk WHERE model = ? AND tenant = ? AND collection = ? AND chunk_id = ?",
                (model, record.tenant, record.collection, record.chunk_id))]
            if existing:
                self._remove_fts_rows(existing)
            for record in records:
                rowid = self._db.execute(
                    "INSERT INTO chunk (model, tenant, collection, chunk_id, document_id, language, mimetype) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (model, record.tenant, record.collection, record.chunk_id, record.document_id, record.language,
                     record.mimetype)).lastrowid
                if not self._contentless:
                    self._db.execute("INSERT INTO chunk_text (rowid, text) VALUES (?, ?)", (rowid, record.text))
                self._db.execute("INSERT INTO chunk_fts (rowid, text) VALUES (?, ?)", (rowid, record.text))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _delete_keywords(self, model: str, tenant: str, collection: str, document_ids: Sequence[str] | None,
                         chunk_ids: Sequence[str] | None) -> None:
        sql = "SELECT rowid FROM chunk WHERE model = ? AND tenant = ? AND collection = ?"
        args: list[object] = [model, tenant, collection]
        if document_ids is not None:
            sql += " AND document_id IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(list(document_ids)))
        if chunk_ids is not None:
            sql += " AND chunk_id IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(list(chunk_ids)))
        self._db.execute("BEGIN IMMEDIATE")
        try:
            rowids = [row[0] for row in self._db.execute(sql, args)]
            if rowids:
                self._remove_fts_rows(rowids)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
