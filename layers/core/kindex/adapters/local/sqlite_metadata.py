"""SQLite metadata store: one WAL-mode file shared safely by the local server, its worker and the CLI."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import ApiKey, Collection, Document, PendingDeletion
from kindex.domain.quotas import COLLECTION_USAGE, Metered, QuotaLimits, Usage, document_usage
from kindex.domain.reindex import ReindexState, needs_attention

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    tenant TEXT NOT NULL, id TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL, collection TEXT NOT NULL, id TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, collection, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at TEXT NOT NULL, body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS deleting_collections (
    tenant TEXT NOT NULL, id TEXT NOT NULL, job TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reindex_state (
    tenant TEXT NOT NULL, collection TEXT NOT NULL, revision INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, collection)
) WITHOUT ROWID;
"""
# Added with quotas (docs/decisions.md, 2026-12-01): each tenant's stored counters, changed in the transaction of the
# record write that changes them (`writes` counts those changes, so a recount can tell it raced none), and its
# metered counts per period (`D#<day>`: queries; `M#<month>`: embedding tokens).
USAGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenant_usage (
    tenant TEXT PRIMARY KEY, documents INTEGER NOT NULL DEFAULT 0, chunks INTEGER NOT NULL DEFAULT 0,
    bytes INTEGER NOT NULL DEFAULT 0, collections INTEGER NOT NULL DEFAULT 0, writes INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS tenant_metered (
    tenant TEXT NOT NULL, period TEXT NOT NULL, queries INTEGER NOT NULL DEFAULT 0,
    embedding_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, period)
) WITHOUT ROWID;
"""
COUNTED_DOCUMENTS = (
    "SELECT COUNT(*), COALESCE(SUM(json_extract(body, '$.chunk_count')), 0),"
    " COALESCE(SUM(json_extract(body, '$.content_length')), 0) FROM documents WHERE tenant = ?"
)
# Added after the first release: whether the document `needs_attention` (1) or not (0), so the reindex finds such
# documents through a partial index (a handful of rows) instead of reading every document. Rows of an older data
# directory are filled in once from their JSON bodies.
ATTENTION_COLUMN = "ALTER TABLE documents ADD COLUMN attention INTEGER"
ATTENTION_BACKFILL = """
UPDATE documents SET attention = CASE
    WHEN json_extract(body, '$.status') IN ('pending', 'in_progress') THEN 1
    WHEN json_extract(body, '$.status') = 'failed' AND json_extract(body, '$.failure_retryable') THEN 1
    ELSE 0 END
WHERE attention IS NULL
"""
ATTENTION_INDEX = (
    "CREATE INDEX IF NOT EXISTS documents_attention ON documents (tenant, collection, id) WHERE attention = 1"
)
# Added after attention: the record's write revision, which every update checks. Rows of an older data directory get
# 0, as their JSON bodies (without `revision`) read.
REVISION_COLUMN = "ALTER TABLE documents ADD COLUMN revision INTEGER NOT NULL DEFAULT 0"
# The same for collections, added after: rows of an older data directory get 0, as their bodies read.
COLLECTION_REVISION_COLUMN = "ALTER TABLE collections ADD COLUMN revision INTEGER NOT NULL DEFAULT 0"
# Rows per batched document read: two bound values each, far below SQLite's limit of 32,766 per statement.
DOCUMENTS_PER_READ = 500


def _pending(row: tuple[str, str]) -> PendingDeletion:
    return PendingDeletion(job=row[0], collection=Collection.model_validate_json(row[1]))


def _page_query(base: str, params: list, *, after: str | None, offset: int, limit: int | None) -> tuple[str, list]:
    sql = base
    if after is not None:
        sql += " AND id > ?"
        params.append(after)
    sql += " ORDER BY id LIMIT ? OFFSET ?"
    params.extend([-1 if limit is None else limit, offset])
    return sql, params


class SqliteMetadataStore:
    """Collections, documents and API keys in SQLite (implements CollectionStore, DocumentStore, KeyStore,
    ReindexLedger, CollectionDeletions). A collection being deleted is a row of `deleting_collections` instead of
    `collections`, moved there in one transaction."""

    def __init__(self, db: SqliteDatabase):
        self.db = db
        db.add_schema(SCHEMA)
        counted_before = (
            db.connection()
            .execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tenant_usage'")
            .fetchone()
        )
        db.add_schema(USAGE_SCHEMA)
        with db.write() as conn:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(documents)")}
            if "attention" not in columns:
                conn.execute(ATTENTION_COLUMN)
            if "revision" not in columns:
                conn.execute(REVISION_COLUMN)
            if "revision" not in {row[1] for row in conn.execute("PRAGMA table_info(collections)")}:
                conn.execute(COLLECTION_REVISION_COLUMN)
            conn.execute(ATTENTION_BACKFILL)
            conn.execute(ATTENTION_INDEX)
            if not counted_before:  # a data directory from before quotas: count its tenants' records once
                tenants = {row[0] for row in conn.execute("SELECT DISTINCT tenant FROM documents")}
                tenants.update(row[0] for row in conn.execute("SELECT DISTINCT tenant FROM collections"))
                for tenant in tenants:
                    self._set_usage(conn, tenant, self._count(conn, tenant))

    # Usage counters (the transaction of each record write calls `_add_usage`)
    @staticmethod
    def _stored_usage(conn: sqlite3.Connection, tenant: str) -> Usage:
        row = conn.execute(
            "SELECT documents, chunks, bytes, collections FROM tenant_usage WHERE tenant = ?", (tenant,)
        ).fetchone()
        return Usage(*row) if row else Usage()

    def _add_usage(self, conn: sqlite3.Connection, tenant: str, delta: Usage, limits: QuotaLimits | None) -> None:
        """Inside the record write's transaction: refuse (QuotaExceeded, which rolls the record back) or count."""
        if not delta:
            return
        if limits is not None:
            limits.check(self._stored_usage(conn, tenant), delta)
        conn.execute(
            "INSERT INTO tenant_usage (tenant, documents, chunks, bytes, collections, writes) VALUES (?, ?, ?, ?, ?, 1)"
            " ON CONFLICT (tenant) DO UPDATE SET documents = documents + excluded.documents,"
            " chunks = chunks + excluded.chunks, bytes = bytes + excluded.bytes,"
            " collections = collections + excluded.collections, writes = writes + 1",
            (tenant, delta.documents, delta.chunks, delta.bytes, delta.collections),
        )

    @staticmethod
    def _count(conn: sqlite3.Connection, tenant: str) -> Usage:
        documents, chunks, size = conn.execute(COUNTED_DOCUMENTS, (tenant,)).fetchone()
        (collections,) = conn.execute("SELECT COUNT(*) FROM collections WHERE tenant = ?", (tenant,)).fetchone()
        return Usage(documents=documents, chunks=chunks, bytes=size, collections=collections)

    @staticmethod
    def _set_usage(conn: sqlite3.Connection, tenant: str, usage: Usage) -> None:
        conn.execute(
            "INSERT INTO tenant_usage (tenant, documents, chunks, bytes, collections) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (tenant) DO UPDATE SET documents = excluded.documents, chunks = excluded.chunks,"
            " bytes = excluded.bytes, collections = excluded.collections, writes = writes + 1",
            (tenant, usage.documents, usage.chunks, usage.bytes, usage.collections),
        )

    @staticmethod
    def _document_usage(conn: sqlite3.Connection, key: tuple[str, str, str]) -> Usage:
        """What the stored record of `key` counts, read in the write's transaction (nothing when it is missing)."""
        row = conn.execute(
            "SELECT json_extract(body, '$.chunk_count'), json_extract(body, '$.content_length') FROM documents"
            " WHERE tenant = ? AND collection = ? AND id = ?",
            key,
        ).fetchone()
        return Usage(documents=1, chunks=row[0] or 0, bytes=row[1] or 0) if row else Usage()

    def usage(self, tenant: str) -> Usage:
        return self._stored_usage(self.db.connection(), tenant)

    def reconcile(self, tenant: str) -> tuple[Usage, Usage] | None:
        # One write transaction: no record write can commit between the count and the set.
        with self.db.write() as conn:
            before, counted = self._stored_usage(conn, tenant), self._count(conn, tenant)
            if counted != before:
                self._set_usage(conn, tenant, counted)
        return before, counted

    def add_metered(self, tenant: str, *, day: str, month: str, queries: int = 0, embedding_tokens: int = 0) -> None:
        upsert = (
            "INSERT INTO tenant_metered (tenant, period, queries, embedding_tokens) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (tenant, period) DO UPDATE SET queries = queries + excluded.queries,"
            " embedding_tokens = embedding_tokens + excluded.embedding_tokens"
        )
        with self.db.write() as conn:
            if queries:
                conn.execute(upsert, (tenant, f"D#{day}", queries, 0))
            if embedding_tokens:
                conn.execute(upsert, (tenant, f"M#{month}", 0, embedding_tokens))

    def metered(self, tenant: str, *, day: str, month: str) -> Metered:
        conn = self.db.connection()
        queries = conn.execute(
            "SELECT queries FROM tenant_metered WHERE tenant = ? AND period = ?", (tenant, f"D#{day}")
        ).fetchone()
        tokens = conn.execute(
            "SELECT embedding_tokens FROM tenant_metered WHERE tenant = ? AND period = ?", (tenant, f"M#{month}")
        ).fetchone()
        return Metered(queries_today=queries[0] if queries else 0, embedding_tokens_month=tokens[0] if tokens else 0)

    # Collections
    def get_collection(self, tenant: str, collection_id: str) -> Collection | None:
        row = (
            self.db.connection()
            .execute("SELECT body FROM collections WHERE tenant = ? AND id = ?", (tenant, collection_id))
            .fetchone()
        )
        return Collection.model_validate_json(row[0]) if row else None

    def put_collection(
        self, tenant: str, collection: Collection, *, create: bool, limits: QuotaLimits | None = None
    ) -> None:
        body = collection.model_dump_json()
        key = (tenant, collection.id)
        with self.db.write() as conn:
            if create:
                if conn.execute("SELECT 1 FROM deleting_collections WHERE tenant = ? AND id = ?", key).fetchone():
                    raise Conflict(f"collection {collection.id!r} is being deleted")
                try:
                    conn.execute(
                        "INSERT INTO collections (tenant, id, revision, body) VALUES (?, ?, ?, ?)",
                        (*key, collection.revision, body),
                    )
                except sqlite3.IntegrityError as error:
                    raise Conflict(f"collection {collection.id!r} already exists") from error
                self._add_usage(conn, tenant, COLLECTION_USAGE, limits)
                return
            updated = conn.execute(
                "UPDATE collections SET revision = ?, body = ? WHERE tenant = ? AND id = ? AND revision = ?",
                (collection.revision, body, *key, collection.revision - 1),
            )
            if updated.rowcount == 0:
                if conn.execute("SELECT 1 FROM collections WHERE tenant = ? AND id = ?", key).fetchone():
                    raise Conflict(f"collection {collection.id!r} changed meanwhile")
                raise NotFound(f"collection {collection.id!r} does not exist")

    def delete_collection(self, tenant: str, collection_id: str) -> bool:
        with self.db.write() as conn:
            documents, chunks, size = conn.execute(
                COUNTED_DOCUMENTS + " AND collection = ?", (tenant, collection_id)
            ).fetchone()
            conn.execute("DELETE FROM documents WHERE tenant = ? AND collection = ?", (tenant, collection_id))
            conn.execute("DELETE FROM reindex_state WHERE tenant = ? AND collection = ?", (tenant, collection_id))
            existed = (
                conn.execute("DELETE FROM collections WHERE tenant = ? AND id = ?", (tenant, collection_id)).rowcount
                > 0
            )
            self._add_usage(conn, tenant, Usage(-documents, -chunks, -size, -int(existed)), None)
            return existed

    # Collections being deleted
    def mark_deleting(self, tenant: str, collection: Collection, job: str) -> None:
        key = (tenant, collection.id)
        with self.db.write() as conn:
            if (
                conn.execute(
                    "DELETE FROM collections WHERE tenant = ? AND id = ? AND revision = ?", (*key, collection.revision)
                ).rowcount
                == 0
            ):
                if conn.execute("SELECT 1 FROM collections WHERE tenant = ? AND id = ?", key).fetchone():
                    raise Conflict(f"collection {collection.id!r} changed meanwhile")
                raise NotFound(f"collection {collection.id!r} does not exist")
            conn.execute(
                "INSERT OR REPLACE INTO deleting_collections (tenant, id, job, body) VALUES (?, ?, ?, ?)",
                (*key, job, collection.model_dump_json()),
            )
            self._add_usage(conn, tenant, Usage() - COLLECTION_USAGE, None)

    def pending_deletion(self, tenant: str, collection_id: str) -> PendingDeletion | None:
        row = (
            self.db.connection()
            .execute("SELECT job, body FROM deleting_collections WHERE tenant = ? AND id = ?", (tenant, collection_id))
            .fetchone()
        )
        return _pending(row) if row else None

    def pending_deletions(self, tenant: str) -> list[PendingDeletion]:
        rows = self.db.connection().execute(
            "SELECT job, body FROM deleting_collections WHERE tenant = ? ORDER BY id", (tenant,)
        )
        return [_pending(row) for row in rows]

    def end_deletion(self, tenant: str, collection_id: str, job: str) -> bool:
        with self.db.write() as conn:
            return (
                conn.execute(
                    "DELETE FROM deleting_collections WHERE tenant = ? AND id = ? AND job = ?",
                    (tenant, collection_id, job),
                ).rowcount
                > 0
            )

    def list_collections(self, tenant: str, *, after: str | None, offset: int, limit: int | None) -> list[str]:
        sql, params = _page_query(
            "SELECT id FROM collections WHERE tenant = ?", [tenant], after=after, offset=offset, limit=limit
        )
        return [row[0] for row in self.db.connection().execute(sql, params)]

    # Documents
    def get_document(self, tenant: str, collection_id: str, document_id: str) -> Document | None:
        row = (
            self.db.connection()
            .execute(
                "SELECT body FROM documents WHERE tenant = ? AND collection = ? AND id = ?",
                (tenant, collection_id, document_id),
            )
            .fetchone()
        )
        return Document.model_validate_json(row[0]) if row else None

    def get_documents(self, tenant: str, refs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        unique = list(dict.fromkeys(refs))
        found: dict[tuple[str, str], Document] = {}
        conn = self.db.connection()
        for start in range(0, len(unique), DOCUMENTS_PER_READ):
            batch = unique[start : start + DOCUMENTS_PER_READ]
            # Joined on a VALUES list, so SQLite probes the primary key once per pair (as the chunk store's read).
            sql = (
                "SELECT d.collection, d.id, d.body FROM (VALUES " + ",".join("(?, ?)" for _ in batch) + ") AS v"
                " JOIN documents AS d ON d.tenant = ? AND d.collection = v.column1 AND d.id = v.column2"
            )
            for collection_id, document_id, body in conn.execute(sql, [*(v for ref in batch for v in ref), tenant]):
                found[(collection_id, document_id)] = Document.model_validate_json(body)
        return found

    def put_document(
        self,
        tenant: str,
        document: Document,
        *,
        create: bool,
        previous: Document | None = None,
        limits: QuotaLimits | None = None,
    ) -> None:
        # `previous` is not needed: the record replaced is read in the write's own transaction.
        body = document.model_dump_json()
        key = (tenant, document.collection, document.id)
        attention = int(needs_attention(document))
        counted = document_usage(document)
        with self.db.write() as conn:
            replaced = Usage() if create else self._document_usage(conn, key)
            if create:
                try:
                    conn.execute(
                        "INSERT INTO documents (tenant, collection, id, version, revision, body, attention)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (*key, document.version, document.revision, body, attention),
                    )
                except sqlite3.IntegrityError as error:
                    raise Conflict(f"document {document.id!r} already exists") from error
                self._add_usage(conn, tenant, counted, limits)
                return
            if (
                conn.execute(
                    "UPDATE documents SET version = ?, revision = ?, body = ?, attention = ?"
                    " WHERE tenant = ? AND collection = ? AND id = ? AND revision = ?",
                    (document.version, document.revision, body, attention, *key, document.revision - 1),
                ).rowcount
                == 0
            ):
                exists = conn.execute(
                    "SELECT 1 FROM documents WHERE tenant = ? AND collection = ? AND id = ?", key
                ).fetchone()
                if exists:
                    raise Conflict(f"document {document.id!r} changed meanwhile")
                raise NotFound(f"document {document.id!r} does not exist")
            self._add_usage(conn, tenant, counted - replaced, limits)

    def delete_document(
        self, tenant: str, collection_id: str, document_id: str, *, revision: int | None = None
    ) -> bool:
        key = (tenant, collection_id, document_id)
        with self.db.write() as conn:
            counted = self._document_usage(conn, key)
            if revision is None:
                deleted = conn.execute(
                    "DELETE FROM documents WHERE tenant = ? AND collection = ? AND id = ?", key
                ).rowcount
            else:
                deleted = conn.execute(
                    "DELETE FROM documents WHERE tenant = ? AND collection = ? AND id = ? AND revision = ?",
                    (*key, revision),
                ).rowcount
            if deleted:
                self._add_usage(conn, tenant, Usage() - counted, None)
                return True
            if revision is None:
                return False
            if (
                conn.execute("SELECT 1 FROM documents WHERE tenant = ? AND collection = ? AND id = ?", key).fetchone()
                is None
            ):
                return False
        raise Conflict(f"document {document_id!r} changed since revision {revision}")

    def list_documents(
        self, tenant: str, collection_id: str, *, after: str | None, offset: int, limit: int | None
    ) -> list[Document]:
        sql, params = _page_query(
            "SELECT body FROM documents WHERE tenant = ? AND collection = ?",
            [tenant, collection_id],
            after=after,
            offset=offset,
            limit=limit,
        )
        return [Document.model_validate_json(row[0]) for row in self.db.connection().execute(sql, params)]

    def count_documents(self, tenant: str, collection_id: str) -> int:
        return (
            self.db.connection()
            .execute("SELECT COUNT(*) FROM documents WHERE tenant = ? AND collection = ?", (tenant, collection_id))
            .fetchone()[0]
        )

    # Reindex ledger
    def get_state(self, tenant: str, collection_id: str) -> ReindexState | None:
        row = (
            self.db.connection()
            .execute("SELECT body FROM reindex_state WHERE tenant = ? AND collection = ?", (tenant, collection_id))
            .fetchone()
        )
        return ReindexState.model_validate_json(row[0]) if row else None

    def put_state(self, tenant: str, state: ReindexState) -> None:
        body, expected = state.model_dump_json(), state.revision - 1
        with self.db.write() as conn:
            if expected == 0:
                written = conn.execute(
                    "INSERT OR IGNORE INTO reindex_state (tenant, collection, revision, body) VALUES (?, ?, ?, ?)",
                    (tenant, state.collection, state.revision, body),
                )
            else:
                written = conn.execute(
                    "UPDATE reindex_state SET revision = ?, body = ? WHERE tenant = ? AND"
                    " collection = ? AND revision = ?",
                    (state.revision, body, tenant, state.collection, expected),
                )
            if written.rowcount == 0:
                raise Conflict(f"reindex state of {state.collection!r} changed meanwhile")

    def attention_documents(self, tenant: str, collection_id: str, *, after: str | None, limit: int) -> list[str]:
        sql, params = _page_query(
            "SELECT id FROM documents INDEXED BY documents_attention WHERE tenant = ? AND"
            " collection = ? AND attention = 1",
            [tenant, collection_id],
            after=after,
            offset=0,
            limit=max(0, limit),
        )
        return [row[0] for row in self.db.connection().execute(sql, params)]

    # API keys
    def put_key(self, key: ApiKey) -> None:
        with self.db.write() as conn:
            try:
                conn.execute(
                    "INSERT INTO api_keys (key_id, tenant, created_at, body) VALUES (?, ?, ?, ?)",
                    (key.key_id, key.tenant, key.created_at.isoformat(), key.model_dump_json()),
                )
            except sqlite3.IntegrityError as error:
                raise Conflict("key id already exists") from error

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self.db.connection().execute("SELECT body FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
        return ApiKey.model_validate_json(row[0]) if row else None

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        if tenant is None:
            rows = self.db.connection().execute("SELECT body FROM api_keys ORDER BY created_at, key_id")
        else:
            rows = self.db.connection().execute(
                "SELECT body FROM api_keys WHERE tenant = ? ORDER BY created_at, key_id", (tenant,)
            )
        return [ApiKey.model_validate_json(row[0]) for row in rows]

    def revoke_key(self, key_id: str) -> bool:
        with self.db.write() as conn:
            row = conn.execute("SELECT body FROM api_keys WHERE key_id = ?", (key_id,)).fetchone()
            if row is None:
                return False
            key = ApiKey.model_validate_json(row[0]).model_copy(update={"revoked": True})
            conn.execute("UPDATE api_keys SET body = ? WHERE key_id = ?", (key.model_dump_json(), key_id))
            return True
