"""Embedded adapter of the `SearchIndex` port: exact numpy k-NN plus SQLite FTS5 BM25, persisted under one folder.

Layout under `root`:
- `vectors/<key>.npz` + `vectors/<key>.log`: one partition per (model, tenant, collection). The npz is a
  snapshot (the L2-normalised float32 matrix and the chunk id / document id / language / mimetype arrays
  row-aligned with it); the log is an append-only list of the writes made since that snapshot (upserts carry
  their ids, filter fields and float32 rows; deletes carry the chunk ids they removed). A write appends one
  record and fsyncs once, so its cost is the size of the write, not of the partition; loading replays the log
  over the snapshot. Each record is framed as (payload length, CRC-32, payload): a record torn by a crash
  mid-append fails the check and is dropped with everything after it (only the last, unacknowledged write can
  be torn). Once the log outgrows half the snapshot (or holds too many records) the partition is compacted: a
  new snapshot is written via temp-then-rename and the log removed. Every record is idempotent (set or remove
  by chunk id), so a crash between the rename and the removal only replays writes the snapshot already holds.
  A search loads (lazily, then keeps in memory) only the partitions of the collections it names; the memory
  copy is authoritative for reads. Exact brute-force cosine is ~7 ms for 100k x 384 and has perfect recall, so
  no ANN structure is worth its complexity here.
- `keyword.sqlite` (WAL): an FTS5 table indexing chunk text for BM25, plus a plain `chunk` table with the ids
  and filter fields joined on rowid. The text is indexed but never selected. On SQLite >= 3.43 the FTS table is
  contentless with `contentless_delete=1`, so the text is not stored at all; older SQLite (this image has 3.40)
  cannot delete from a contentless table without the original text, so there an external-content table holds
  the text on disk for deletes only. One upsert or delete call is one transaction.

One process owns the folder; a single lock serialises its server and worker threads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import struct
import threading
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from kindex.adapters.private_files import FILE_MODE, private_dir, restrict_sqlite, restrict_tree
from kindex.domain.errors import InvalidInput
from kindex.domain.types import IndexRecord, SearchFilters, SearchHit

logger = logging.getLogger(__name__)

CONTENTLESS_DELETE_MIN_SQLITE = (3, 43, 0)
# Bounds the FTS5 expression size for pathological inputs; a longer query still matches on its first terms.
MAX_QUERY_TERMS = 64
_WORD = re.compile(r"\w+")

# Log records: a frame (payload length, CRC-32 of the payload), then the payload: one op byte, the length of a
# JSON header, the header, and for upserts the float32 rows (little-endian, row-major).
_FRAME = struct.Struct("<II")
_HEADER_LENGTH = struct.Struct("<I")
_OP_OPEN, _OP_UPSERT, _OP_DELETE, _OP_CLEAR = b"O", b"U", b"D", b"C"
_FLOAT32 = np.dtype("<f4")
# Compact when the log outgrows half the snapshot, so rewrites cost O(1) per byte written, but not before it
# holds COMPACT_MIN_LOG_BYTES (small collections would otherwise rewrite all the time); and after
# COMPACT_MAX_RECORDS records whatever their size, which bounds the replay work of a load.
COMPACT_MIN_LOG_BYTES = 4 << 20
COMPACT_MAX_RECORDS = 10_000
# Below one matching row in GATHER_RATIO, copying the matching rows out beats scoring the whole partition
# (measured at 100k x 384: gathering 6% of the rows costs about half a full matrix-vector product).
GATHER_RATIO = 16

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


# Lucene's classic English stop set. They carry almost no BM25 weight, yet OR-ing them in makes FTS5 score
# nearly every chunk: leaving them out of the query keeps keyword search proportional to the rare terms.
STOPWORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then "
                      "there these they this to was will with".split())


def fts_query(query: str) -> str | None:
    """An FTS5 MATCH expression for free text: each word quoted (so AND/OR/NOT/NEAR, `*`, `^`, `:`, `-`, quotes
    and parentheses are plain text, never syntax), OR-ed like a BM25 `match` query, stopwords left out unless the
    query has nothing else. None when there is no word."""
    words = list(dict.fromkeys(_WORD.findall(query)))
    terms = ([w for w in words if w.lower() not in STOPWORDS] or words)[:MAX_QUERY_TERMS]
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero) so a dot product is the cosine similarity."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32, copy=False)


def _frame(op: bytes, header: dict, body: bytes = b"") -> bytes:
    """One log record: (length, CRC-32) then op, header length, JSON header and body."""
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    payload = b"".join((op, _HEADER_LENGTH.pack(len(encoded)), encoded, body))
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


class _Interned:
    """Strings as small ints, so filter columns are int arrays compared in bulk."""

    def __init__(self, values: Iterable[str] = ()):
        self.values: list[str] = []
        self.codes: dict[str, int] = {}
        for value in values:
            self.code(value)

    def code(self, value: str) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return np.array(self.values, dtype=str)[codes] if len(codes) else np.array([], dtype=str)


class _Partition:
    """One (model, tenant, collection) in memory: the first `size` rows of `vectors` align with `chunk_ids` and
    the interned document / language / mimetype codes (None is stored as "", as a filter value never is None).

    Storage grows by doubling and a removed row is refilled with the last one, so a write never copies the matrix
    and a search reads it in place. `log_bytes`, `log_records` and `snapshot_bytes` describe the files behind it.
    """

    def __init__(self, dims: int):
        self.dims = dims
        self.size = 0
        self.vectors = np.zeros((0, dims), dtype=np.float32)
        self.document_codes = np.zeros(0, dtype=np.int32)
        self.language_codes = np.zeros(0, dtype=np.int32)
        self.mimetype_codes = np.zeros(0, dtype=np.int32)
        self.chunk_ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.documents, self.languages, self.mimetypes = _Interned(), _Interned(), _Interned()
        self.log_bytes = 0
        self.log_records = 0
        self.snapshot_bytes = 0

    @classmethod
    def from_arrays(cls, vectors: np.ndarray, chunk_ids: np.ndarray, document_ids: np.ndarray,
                    languages: np.ndarray, mimetypes: np.ndarray) -> _Partition:
        partition = cls(vectors.shape[1])
        partition.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        partition.size = len(chunk_ids)
        partition.chunk_ids = [str(chunk_id) for chunk_id in chunk_ids]
        partition.rows = {chunk_id: row for row, chunk_id in enumerate(partition.chunk_ids)}
        for values, attribute in ((document_ids, "document"), (languages, "language"), (mimetypes, "mimetype")):
            unique, codes = np.unique(values, return_inverse=True)
            setattr(partition, f"{attribute}s", _Interned(str(value) for value in unique))
            setattr(partition, f"{attribute}_codes", codes.astype(np.int32).reshape(-1))
        return partition

    def __len__(self) -> int:
        return self.size

    def arrays(self) -> dict[str, np.ndarray]:
        """The snapshot's arrays (the same npz layout older versions wrote, so their files still load)."""
        n = self.size
        return {"vectors": self.vectors[:n], "chunk_ids": np.array(self.chunk_ids, dtype=str),
                "document_ids": self.documents.decode(self.document_codes[:n]),
                "languages": self.languages.decode(self.language_codes[:n]),
                "mimetypes": self.mimetypes.decode(self.mimetype_codes[:n])}

    def put(self, fields: Sequence[Sequence[str]], vectors: np.ndarray) -> None:
        """Insert or replace rows; `fields` holds (chunk id, document id, language, mimetype) per row, ids unique."""
        self._reserve(self.size + sum(1 for field in fields if field[0] not in self.rows))
        rows = np.empty(len(fields), dtype=np.intp)
        for i, (chunk_id, _, _, _) in enumerate(fields):
            row = self.rows.get(chunk_id)
            if row is None:
                row = self.rows[chunk_id] = self.size
                self.chunk_ids.append(chunk_id)
                self.size += 1
            rows[i] = row
        self.vectors[rows] = vectors
        self.document_codes[rows] = [self.documents.code(field[1]) for field in fields]
        self.language_codes[rows] = [self.languages.code(field[2]) for field in fields]
        self.mimetype_codes[rows] = [self.mimetypes.code(field[3]) for field in fields]

    def remove(self, chunk_ids: Iterable[str]) -> int:
        doomed = [chunk_id for chunk_id in dict.fromkeys(chunk_ids) if chunk_id in self.rows]
        if len(doomed) * GATHER_RATIO > self.size:  # many rows: one vectorised pass beats row-by-row moves
            keep = np.ones(self.size, dtype=bool)
            keep[[self.rows[chunk_id] for chunk_id in doomed]] = False
            self._keep(np.flatnonzero(keep))
            return len(doomed)
        for chunk_id in doomed:
            row, last = self.rows.pop(chunk_id), self.size - 1
            if row != last:
                moved = self.chunk_ids[last]
                self.chunk_ids[row], self.rows[moved] = moved, row
                for column in (self.vectors, self.document_codes, self.language_codes, self.mimetype_codes):
                    column[row] = column[last]
            self.chunk_ids.pop()
            self.size -= 1
        return len(doomed)

    def select(self, document_ids: Sequence[str] | None, chunk_ids: Sequence[str] | None) -> list[str]:
        """The stored chunk ids among `chunk_ids` (all when None) that belong to `document_ids` (any when None)."""
        if chunk_ids is not None:
            found = [chunk_id for chunk_id in dict.fromkeys(chunk_ids) if chunk_id in self.rows]
            if document_ids is None:
                return found
            wanted = {self.documents.codes[d] for d in document_ids if d in self.documents.codes}
            return [chunk_id for chunk_id in found if int(self.document_codes[self.rows[chunk_id]]) in wanted]
        if document_ids is None:
            return list(self.chunk_ids)
        return [self.chunk_ids[row] for row in np.flatnonzero(self._document_mask(document_ids))]

    def mask(self, filters: SearchFilters | None) -> np.ndarray | None:
        """Rows matching the filters, or None when nothing is filtered."""
        if filters is None:
            return None
        n, keep = self.size, None
        if filters.document_ids is not None:
            keep = self._document_mask(filters.document_ids)
        for value, interned, codes in ((filters.language, self.languages, self.language_codes),
                                       (filters.mimetype, self.mimetypes, self.mimetype_codes)):
            if value is None:
                continue
            code = interned.codes.get(value)
            matches = codes[:n] == code if code is not None else np.zeros(n, dtype=bool)
            keep = matches if keep is None else keep & matches
        return keep

    def top(self, query: np.ndarray, k: int, filters: SearchFilters | None) -> list[tuple[float, int]]:
        """(score, row) of the k best rows among those matching the filters, in no particular order."""
        n = self.size
        keep = self.mask(filters)
        matching = n if keep is None else int(np.count_nonzero(keep))
        if not matching:
            return []
        if keep is not None and matching * GATHER_RATIO <= n:
            rows = np.flatnonzero(keep)
            scores = self.vectors[rows] @ query
        else:
            # A view of the live rows: no copy of the matrix. Filtered-out rows score -inf so that the top
            # `matching` rows are exactly the matching ones: the filter applies before the top k.
            rows = None
            scores = self.vectors[:n] @ query
            if keep is not None:
                scores[~keep] = -np.inf
        count = min(k, matching)
        top = np.argpartition(scores, len(scores) - count)[len(scores) - count:] if count < len(scores) \
            else np.arange(len(scores))
        return [(float(scores[i]), int(rows[i] if rows is not None else i)) for i in top]

    def _document_mask(self, document_ids: Iterable[str]) -> np.ndarray:
        codes = [self.documents.codes[d] for d in document_ids if d in self.documents.codes]
        return np.isin(self.document_codes[:self.size], np.array(codes, dtype=np.int32))

    def _reserve(self, rows: int) -> None:
        capacity = len(self.vectors)
        if rows <= capacity:
            return
        capacity = max(rows, 2 * capacity, 64)
        n = self.size
        vectors = np.empty((capacity, self.dims), dtype=np.float32)
        vectors[:n] = self.vectors[:n]
        self.vectors = vectors
        for name in ("document_codes", "language_codes", "mimetype_codes"):
            codes = np.empty(capacity, dtype=np.int32)
            codes[:n] = getattr(self, name)[:n]
            setattr(self, name, codes)

    def _keep(self, rows: np.ndarray) -> None:
        m = len(rows)
        for column in (self.vectors, self.document_codes, self.language_codes, self.mimetype_codes):
            column[:m] = column[rows]
        self.chunk_ids = [self.chunk_ids[row] for row in rows]
        self.rows = {chunk_id: row for row, chunk_id in enumerate(self.chunk_ids)}
        self.size = m


class LocalSearchIndex:
    """`SearchIndex` for the local deployment: exact cosine k-NN (numpy) and BM25 (SQLite FTS5) under `root`."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self._vector_dir = private_dir(self.root / "vectors")
        restrict_tree(self.root)  # files written by a version that did not set modes (a few per collection)
        # Two locks, so a hybrid query's vector and keyword halves can run at the same time (numpy and SQLite both
        # release the GIL); writers take both, always vectors first.
        self._lock = threading.RLock()
        self._keyword_lock = threading.RLock()
        self._partitions: dict[tuple[str, str, str], _Partition | None] = {}
        self._db = sqlite3.connect(self.root / "keyword.sqlite", isolation_level=None, check_same_thread=False)
        restrict_sqlite(self.root / "keyword.sqlite")  # before -wal/-shm exist: they take the database's mode
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_META_SCHEMA)
        self._contentless = self._choose_fts_design()

    def close(self) -> None:
        """Close the SQLite connection; the folder can then be reopened by a new instance."""
        with self._lock, self._keyword_lock:
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
            # Every partition is checked before any is written, so a dimension mismatch writes nothing.
            for tenant, collection in groups:
                partition = self._partition(model, tenant, collection)
                if partition is not None and partition.dims != matrix.shape[1]:
                    raise InvalidInput(f"vectors have {matrix.shape[1]} dimensions, model {model} has "
                                       f"{partition.dims}")
            for (tenant, collection), rows in groups.items():
                self._upsert_vectors((model, tenant, collection), [recs[row] for row in rows], matrix[rows])
            with self._keyword_lock:
                self._upsert_keywords(model, recs)
        logger.info("search index upsert", extra={"model": model, "records": len(recs), "partitions": len(groups)})

    def delete(self, model: str, tenant: str, collection: str, *, document_ids: Sequence[str] | None = None,
               chunk_ids: Sequence[str] | None = None) -> None:
        # An empty list means "nothing", never "everything": only (None, None) deletes the whole collection.
        if (document_ids is not None and not document_ids) or (chunk_ids is not None and not chunk_ids):
            return
        with self._lock, self._keyword_lock:
            removed = self._delete_vectors((model, tenant, collection), document_ids, chunk_ids)
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
            # Per partition top k, then one merge: exact, as every partition contributes its own best k.
            for collection in dict.fromkeys(collections):
                partition = self._partition(model, tenant, collection)
                if partition is None or not len(partition):
                    continue
                if partition.dims != len(query):
                    raise InvalidInput(f"query vector has {len(query)} dimensions, the index has "
                                       f"{partition.dims}")
                documents = partition.documents.values
                candidates += [(score, partition.chunk_ids[row], documents[partition.document_codes[row]], collection)
                               for score, row in partition.top(query, k, filters)]
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
        with self._keyword_lock:
            rows = self._db.execute(" ".join(sql), args).fetchall()
        # bm25() is lower-is-better; the port wants higher-is-better.
        return [SearchHit(chunk_id=chunk_id, document_id=document_id, collection=collection, score=-rank)
                for chunk_id, document_id, collection, rank in rows]

    def chunk_ids(self, model: str, tenant: str, collection: str) -> set[str]:
        with self._lock, self._keyword_lock:
            partition = self._partition(model, tenant, collection)
            found = set(partition.chunk_ids) if partition is not None else set()
            rows = self._db.execute("SELECT chunk_id FROM chunk WHERE model = ? AND tenant = ? AND collection = ?",
                                    (model, tenant, collection))
            # The union: drift repair must see a chunk that only one of the two stores still holds.
            found.update(chunk_id for (chunk_id,) in rows)
        return found

    # -- vectors ----------------------------------------------------------------------------------------------

    def _paths(self, key: tuple[str, str, str]) -> tuple[Path, Path]:
        """The partition's snapshot and log files."""
        name = hashlib.sha256(json.dumps(list(key)).encode("utf-8")).hexdigest()[:40]
        return self._vector_dir / f"{name}.npz", self._vector_dir / f"{name}.log"

    def _partition(self, model: str, tenant: str, collection: str) -> _Partition | None:
        key = (model, tenant, collection)
        if key not in self._partitions:
            self._partitions[key] = self._load(key)
        return self._partitions[key]

    def _load(self, key: tuple[str, str, str]) -> _Partition | None:
        snapshot, log = self._paths(key)
        partition = None
        if snapshot.exists():
            with np.load(snapshot, allow_pickle=False) as data:
                if list(data["key"]) != list(key):
                    raise RuntimeError(f"vector partition {snapshot.name} belongs to another key")
                partition = _Partition.from_arrays(data["vectors"], data["chunk_ids"], data["document_ids"],
                                                   data["languages"], data["mimetypes"])
            partition.snapshot_bytes = snapshot.stat().st_size
        if log.exists():
            partition = self._replay(key, log, partition)
        if partition is not None and not len(partition):
            # Only after a crash between the last delete and the removal of the files: finish the removal.
            self._remove_files(key)
            return None
        return partition

    def _replay(self, key: tuple[str, str, str], log: Path, partition: _Partition | None) -> _Partition | None:
        data = log.read_bytes()
        offset = records = 0
        while offset + _FRAME.size <= len(data):
            length, checksum = _FRAME.unpack_from(data, offset)
            end = offset + _FRAME.size + length
            payload = memoryview(data)[offset + _FRAME.size:end]
            if length < 1 + _HEADER_LENGTH.size or end > len(data) or zlib.crc32(payload) != checksum:
                break
            op = bytes(payload[:1])
            (header_length,) = _HEADER_LENGTH.unpack_from(payload, 1)
            body = 1 + _HEADER_LENGTH.size + header_length
            header = json.loads(bytes(payload[1 + _HEADER_LENGTH.size:body]))
            if op == _OP_OPEN:
                if header["key"] != list(key):
                    raise RuntimeError(f"vector log {log.name} belongs to another key")
                if partition is None:
                    partition = _Partition(header["dims"])
            elif op == _OP_UPSERT:
                rows = np.frombuffer(payload[body:], dtype=_FLOAT32).reshape(len(header["rows"]), -1)
                if partition is None:
                    partition = _Partition(rows.shape[1])
                partition.put(header["rows"], rows)
            elif op == _OP_DELETE and partition is not None:
                partition.remove(header["ids"])
            elif op == _OP_CLEAR and partition is not None:
                partition = _Partition(partition.dims)
            offset, records = end, records + 1
        if offset < len(data):
            # A crash mid-append leaves a torn last record; that write never returned, so dropping it loses
            # nothing acknowledged. Cut it off so that the next append does not land behind unreadable bytes.
            logger.warning("search index log has a torn tail, ignored",
                           extra={"log": log.name, "kept_bytes": offset, "dropped_bytes": len(data) - offset})
            with open(log, "r+b") as handle:
                handle.truncate(offset)
                os.fsync(handle.fileno())
        if offset == 0:
            log.unlink()
        if partition is not None:
            partition.log_bytes, partition.log_records = offset, records
        return partition

    def _append(self, key: tuple[str, str, str], partition: _Partition, op: bytes, header: dict,
                body: bytes = b"") -> None:
        """Append one record to the partition's log and fsync: the write is durable once this returns."""
        frames = []
        if partition.log_bytes == 0:  # a new log names its partition, as the snapshot does
            frames.append(_frame(_OP_OPEN, {"key": list(key), "dims": partition.dims}))
        frames.append(_frame(op, header, body))
        data = b"".join(frames)
        log = self._paths(key)[1]
        # A new log is started truncated: whatever an earlier failed attempt left there is not part of it.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if partition.log_bytes == 0 else 0)
        fd = os.open(log, flags, FILE_MODE)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except BaseException:
            # A failed append must not leave half a record for the next one to land behind.
            try:
                os.ftruncate(fd, partition.log_bytes)
            except OSError:
                pass
            raise
        finally:
            os.close(fd)
        if partition.log_bytes == 0:
            self._sync_dir()
        partition.log_bytes += len(data)
        partition.log_records += len(frames)

    def _upsert_vectors(self, key: tuple[str, str, str], records: list[IndexRecord], vectors: np.ndarray) -> None:
        partition = self._partition(*key)
        if partition is None:
            partition = _Partition(vectors.shape[1])
        fields = [(record.chunk_id, record.document_id, record.language or "", record.mimetype or "")
                  for record in records]
        self._append(key, partition, _OP_UPSERT, {"rows": fields},
                     np.ascontiguousarray(vectors, dtype=_FLOAT32).tobytes())
        partition.put(fields, vectors)
        self._partitions[key] = partition
        self._maybe_compact(key, partition)

    def _delete_vectors(self, key: tuple[str, str, str], document_ids: Sequence[str] | None,
                        chunk_ids: Sequence[str] | None) -> int:
        partition = self._partition(*key)
        if partition is None:
            return 0
        if document_ids is None and chunk_ids is None:
            removed = len(partition)
            self._append(key, partition, _OP_CLEAR, {})
            partition = _Partition(partition.dims)
        else:
            doomed = partition.select(document_ids, chunk_ids)
            if not doomed:
                return 0
            self._append(key, partition, _OP_DELETE, {"ids": doomed})
            removed = partition.remove(doomed)
        if not len(partition):
            # The delete record is durable first, so a crash between the two removals replays to empty too.
            self._remove_files(key)
            self._partitions[key] = None
        else:
            self._maybe_compact(key, partition)
        return removed

    def _maybe_compact(self, key: tuple[str, str, str], partition: _Partition) -> None:
        if (partition.log_records < COMPACT_MAX_RECORDS
                and partition.log_bytes <= max(COMPACT_MIN_LOG_BYTES, partition.snapshot_bytes // 2)):
            return
        snapshot, log = self._paths(key)
        temp = snapshot.with_name(f"{snapshot.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(temp, "wb", opener=lambda path, flags: os.open(path, flags, FILE_MODE)) as handle:
            np.savez(handle, key=np.array(list(key), dtype=str), **partition.arrays())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, snapshot)
        self._sync_dir()
        log.unlink(missing_ok=True)
        self._sync_dir()
        logger.info("search index partition compacted", extra={
            "rows": len(partition), "log_bytes": partition.log_bytes, "log_records": partition.log_records})
        partition.snapshot_bytes = snapshot.stat().st_size
        partition.log_bytes = partition.log_records = 0

    def _remove_files(self, key: tuple[str, str, str]) -> None:
        snapshot, log = self._paths(key)
        snapshot.unlink(missing_ok=True)  # the snapshot first: the log alone replays to the same state
        self._sync_dir()
        log.unlink(missing_ok=True)
        self._sync_dir()

    def _sync_dir(self) -> None:
        """Make file creations, renames and removals in the vector folder durable."""
        fd = os.open(self._vector_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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
