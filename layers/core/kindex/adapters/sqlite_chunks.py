"""Chunk texts, the embedding cache and the durable local queue, in the same SQLite file as the metadata."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence

import numpy as np

from kindex.adapters.sqlite_store import SqliteDatabase
from kindex.domain.types import ChunkRef, QueueMessage, StoredChunk

SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    tenant TEXT NOT NULL, collection TEXT NOT NULL, document_id TEXT NOT NULL, chunk_id TEXT NOT NULL,
    idx INTEGER NOT NULL, start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL,
    page_start INTEGER, page_end INTEGER, text TEXT NOT NULL,
    PRIMARY KEY (tenant, collection, document_id, chunk_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL, text_sha256 TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS queue (
    message_id TEXT PRIMARY KEY, body TEXT NOT NULL, receive_count INTEGER NOT NULL DEFAULT 0,
    visible_at REAL NOT NULL, dead INTEGER NOT NULL DEFAULT 0, sent_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_visible ON queue (dead, visible_at);
"""
# Added after the first release: `ALTER TABLE` brings an existing queue up to date (its messages get no lane/group).
QUEUE_COLUMNS = {"lane": "TEXT NOT NULL DEFAULT ''", "grp": "TEXT NOT NULL DEFAULT ''", "receipt": "TEXT"}
# The lane walk below (covering, so messages waiting for a retry are skipped without reading their rows), and the
# claimed messages (few, whatever the queue's length).
QUEUE_INDEXES = """
CREATE INDEX IF NOT EXISTS queue_lane ON queue (dead, lane, sent_at, visible_at, grp, message_id);
CREATE INDEX IF NOT EXISTS queue_claimed ON queue (receipt) WHERE receipt IS NOT NULL;
"""
# The lanes that have live messages, one index probe per lane (SQLite has no loose index scan of its own).
_LANES = """
WITH RECURSIVE lanes(lane) AS (
    SELECT MIN(lane) FROM queue INDEXED BY queue_lane WHERE dead = 0
    UNION ALL
    SELECT (SELECT MIN(lane) FROM queue INDEXED BY queue_lane WHERE dead = 0 AND lane > lanes.lane)
    FROM lanes WHERE lane IS NOT NULL
) SELECT lane FROM lanes WHERE lane IS NOT NULL
"""
_LANE_HEAD = ("SELECT message_id, grp, sent_at FROM queue INDEXED BY queue_lane"
              " WHERE dead = 0 AND lane = ? AND visible_at <= ? ORDER BY sent_at")

_CHUNK_COLUMNS = "chunk_id, collection, document_id, idx, start_offset, end_offset, text, page_start, page_end"
_BATCH = 400  # stay well under SQLite's bound-parameter limit
_ITER_BATCH = 100  # chunks per read while iterating: one page of a listing is read in a few small queries


def _chunk(row) -> StoredChunk:
    return StoredChunk(chunk_id=row[0], collection=row[1], document_id=row[2], index=row[3], start=row[4], end=row[5],
                       text=row[6], page_start=row[7], page_end=row[8])


class SqliteChunkStore:
    """Implements ChunkStore."""

    def __init__(self, db: SqliteDatabase):
        self.db = db
        db.add_schema(SCHEMA)

    def put_chunks(self, tenant: str, chunks: Sequence[StoredChunk]) -> None:
        rows = [(tenant, c.collection, c.document_id, c.chunk_id, c.index, c.start, c.end, c.page_start, c.page_end,
                 c.text) for c in chunks]
        with self.db.write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO chunks (tenant, collection, document_id, chunk_id, idx, start_offset, end_offset,"
                " page_start, page_end, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def get_chunks(self, tenant: str, refs: Sequence[ChunkRef]) -> dict[str, StoredChunk]:
        found: dict[str, StoredChunk] = {}
        conn = self.db.connection()
        for i in range(0, len(refs), _BATCH):
            batch = refs[i:i + _BATCH]
            placeholders = ",".join("(?, ?, ?)" for _ in batch)
            params = [v for r in batch for v in (r.collection, r.document_id, r.chunk_id)] + [tenant]
            # Join on the VALUES list so SQLite probes the primary key per ref (an IN over a row value scanned
            # every chunk of the tenant: 60 ms at 100k chunks against 0.1 ms).
            columns = ", ".join(f"c.{name}" for name in _CHUNK_COLUMNS.split(", "))
            sql = (f"SELECT {columns} FROM (VALUES {placeholders}) AS v JOIN chunks AS c ON c.tenant = ?"
                   f" AND c.collection = v.column1 AND c.document_id = v.column2 AND c.chunk_id = v.column3")
            for row in conn.execute(sql, params):
                found[row[0]] = _chunk(row)
        return found

    def list_chunks(self, tenant: str, collection: str, document_id: str) -> list[StoredChunk]:
        rows = self.db.connection().execute(
            f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE tenant = ? AND collection = ? AND document_id = ? ORDER BY idx",
            (tenant, collection, document_id))
        return [_chunk(row) for row in rows]

    def iter_chunks(self, tenant: str, collection: str, document_id: str, *, after: tuple[int, str] | None = None,
                    offset: int = 0) -> Iterator[StoredChunk]:
        # Keyset batches rather than one open cursor: no read statement stays open while the caller works.
        position, skip = after, offset
        while True:
            sql = f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE tenant = ? AND collection = ? AND document_id = ?"
            params: list = [tenant, collection, document_id]
            if position is not None:
                sql += " AND (idx, chunk_id) > (?, ?)"
                params += [position[0], position[1]]
            rows = self.db.connection().execute(sql + " ORDER BY idx, chunk_id LIMIT ? OFFSET ?",
                                                [*params, _ITER_BATCH, skip]).fetchall()
            for row in rows:
                yield _chunk(row)
            if len(rows) < _ITER_BATCH:
                return
            position, skip = (rows[-1][3], rows[-1][0]), 0

    def delete_chunks(self, tenant: str, collection: str, *, document_id: str | None = None,
                      chunk_ids: Sequence[str] | None = None) -> None:
        with self.db.write() as conn:
            if document_id is None:
                conn.execute("DELETE FROM chunks WHERE tenant = ? AND collection = ?", (tenant, collection))
            elif chunk_ids is None:
                conn.execute("DELETE FROM chunks WHERE tenant = ? AND collection = ? AND document_id = ?",
                             (tenant, collection, document_id))
            else:
                conn.executemany("DELETE FROM chunks WHERE tenant = ? AND collection = ? AND document_id = ? AND chunk_id = ?",
                                 [(tenant, collection, document_id, cid) for cid in chunk_ids])


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
            conn.executemany("INSERT OR IGNORE INTO embedding_cache (model, text_sha256, vector) VALUES (?, ?, ?)", rows)


class SqliteQueue:
    """Implements MessageQueue with SQS semantics: visibility timeout, receive count, dead-lettering, redrive.
    Safe across processes: choosing and claiming happen in one immediate transaction.

    Fair rather than FIFO: each receive serves the lane (tenant) with the fewest receives in flight, oldest first
    within the lane, so a tenant who queued a thousand documents cannot hold another tenant's one document back;
    and like an SQS FIFO message group, a message is not handed out while another of its group is in flight."""

    def __init__(self, db: SqliteDatabase, clock=time.time):
        self.db = db
        self.clock = clock
        db.add_schema(SCHEMA)
        with db.write() as conn:
            present = {row[1] for row in conn.execute("PRAGMA table_info(queue)")}
            for column, definition in QUEUE_COLUMNS.items():
                if column not in present:
                    conn.execute(f"ALTER TABLE queue ADD COLUMN {column} {definition}")
            for statement in filter(str.strip, QUEUE_INDEXES.split(";")):
                conn.execute(statement)

    def send(self, body: str, *, lane: str = "", group: str = "") -> None:
        now = self.clock()
        with self.db.write() as conn:
            conn.execute("INSERT INTO queue (message_id, body, visible_at, sent_at, lane, grp) VALUES (?, ?, ?, ?, ?, ?)",
                         (uuid.uuid4().hex, body, now, now, lane, group))

    def receive(self, max_messages: int, visibility_timeout: float, *,
                lane_limit: int | None = None) -> list[QueueMessage]:
        """Claim up to `max_messages` visible messages of ONE lane: the lane with the fewest receives in flight, the
        oldest waiting message breaking ties. A message whose group has a message in flight is skipped; with
        `lane_limit`, so is every lane that already has that many receives in flight (the worker pool keeps a
        thread free for the other lanes). One lane per receive, because a receive's messages are acknowledged
        together: another lane's message in the same receive would count as busy until the slowest was done."""
        now = self.clock()
        with self.db.write() as conn:
            busy = conn.execute("SELECT lane, grp, receipt FROM queue INDEXED BY queue_claimed"
                                " WHERE receipt IS NOT NULL AND dead = 0 AND visible_at > ?", (now,)).fetchall()
            busy_groups = {grp for _, grp, _ in busy if grp}
            receipts: dict[str, set[str]] = {}
            for lane, _, receipt in busy:
                receipts.setdefault(lane, set()).add(receipt)
            # Each lane's oldest visible messages: the cost grows with the lanes and the batch, not the queue's length.
            best: tuple[int, float] | None = None
            chosen: list[str] = []
            for (lane,) in conn.execute(_LANES).fetchall():
                in_flight = len(receipts.get(lane, ()))
                if lane_limit is not None and in_flight >= lane_limit:
                    continue
                head = conn.execute(_LANE_HEAD, (lane, now))
                try:
                    ready = []
                    for message_id, group, sent_at in head:
                        if group and group in busy_groups:
                            continue
                        ready.append((sent_at, message_id))
                        if len(ready) == max_messages:
                            break
                finally:
                    head.close()
                if ready and (best is None or (in_flight, ready[0][0]) < best):
                    best, chosen = (in_flight, ready[0][0]), [message_id for _, message_id in ready]
            if not chosen:
                return []
            rows = conn.execute(
                "UPDATE queue SET receive_count = receive_count + 1, visible_at = ?, receipt = ?"
                f" WHERE message_id IN ({','.join('?' * len(chosen))}) RETURNING message_id, body, receive_count, sent_at",
                (now + visibility_timeout, uuid.uuid4().hex, *chosen)).fetchall()
        rows.sort(key=lambda row: row[3])
        return [QueueMessage(message_id=r[0], body=r[1], receive_count=r[2]) for r in rows]

    def acknowledge(self, message_id: str) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM queue WHERE message_id = ?", (message_id,))

    def retry_later(self, message_id: str, delay: float, max_receives: int) -> bool:
        with self.db.write() as conn:
            row = conn.execute("SELECT receive_count FROM queue WHERE message_id = ?", (message_id,)).fetchone()
            if row is None:
                return False
            dead = row[0] >= max_receives
            conn.execute("UPDATE queue SET dead = ?, visible_at = ?, receipt = NULL WHERE message_id = ?",
                         (int(dead), self.clock() + delay, message_id))
            return dead

    def redrive(self) -> int:
        with self.db.write() as conn:
            return conn.execute("UPDATE queue SET dead = 0, receive_count = 0, visible_at = ?, receipt = NULL"
                                " WHERE dead = 1",
                                (self.clock(),)).rowcount

    def recover_in_flight(self) -> int:
        """After a crash or restart: messages claimed by the dead worker become visible now, not after their timeout.
        Only call while holding the data directory's worker lock (no other worker can be mid-message)."""
        now = self.clock()
        with self.db.write() as conn:
            return conn.execute("UPDATE queue SET visible_at = ?, receipt = NULL WHERE dead = 0 AND visible_at > ?",
                                (now, now)).rowcount

    def depth(self) -> tuple[int, int]:
        """(messages waiting or in flight, dead-lettered messages)."""
        row = self.db.connection().execute("SELECT SUM(dead = 0), SUM(dead = 1) FROM queue").fetchone()
        return int(row[0] or 0), int(row[1] or 0)


QUERY_LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS query_log (
    tenant TEXT NOT NULL, query_id TEXT NOT NULL, documents TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, query_id)
) WITHOUT ROWID;
"""


class SqliteQueryLog:
    """Implements QueryLog; expired rows are purged on write."""

    def __init__(self, db: SqliteDatabase, clock=time.time):
        self.db = db
        self.clock = clock
        db.add_schema(QUERY_LOG_SCHEMA)

    def put_query(self, tenant: str, query_id: str, documents: list[dict], ttl_seconds: int) -> None:
        import json

        now = self.clock()
        with self.db.write() as conn:
            conn.execute("DELETE FROM query_log WHERE expires_at < ?", (now,))
            conn.execute("INSERT OR REPLACE INTO query_log (tenant, query_id, documents, expires_at) VALUES (?, ?, ?, ?)",
                         (tenant, query_id, json.dumps(documents), now + ttl_seconds))

    def get_query(self, tenant: str, query_id: str) -> list[dict] | None:
        import json

        row = self.db.connection().execute(
            "SELECT documents, expires_at FROM query_log WHERE tenant = ? AND query_id = ?", (tenant, query_id)).fetchone()
        if row is None or row[1] < self.clock():
            return None
        return json.loads(row[0])


JOBS_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    tenant TEXT NOT NULL, job_id TEXT NOT NULL, body TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, job_id)
) WITHOUT ROWID;
"""
JOB_TTL = 30 * 24 * 3600


class SqliteJobStore:
    """Implements JobStore."""

    def __init__(self, db: SqliteDatabase, clock=time.time):
        self.db = db
        self.clock = clock
        db.add_schema(JOBS_SCHEMA)

    def put_job(self, job) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM jobs WHERE expires_at < ?", (self.clock(),))
            conn.execute("INSERT OR REPLACE INTO jobs (tenant, job_id, body, expires_at) VALUES (?, ?, ?, ?)",
                         (job.tenant, job.id, job.model_dump_json(), self.clock() + JOB_TTL))

    def get_job(self, tenant: str, job_id: str):
        from kindex.domain.models import ReindexJob

        row = self.db.connection().execute("SELECT body FROM jobs WHERE tenant = ? AND job_id = ? AND expires_at >= ?",
                                           (tenant, job_id, self.clock())).fetchone()
        return ReindexJob.model_validate_json(row[0]) if row else None
