"""The query log (what a query retrieved, for citations), in the same SQLite file as the metadata."""

from __future__ import annotations

import time

from kindex.adapters.local.sqlite_db import SqliteDatabase

QUERY_LOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS query_log (
    tenant TEXT NOT NULL, query_id TEXT NOT NULL, documents TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, query_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS query_log_expiry ON query_log (expires_at);
"""
PURGE_EXPIRED = "DELETE FROM query_log WHERE expires_at < ?"


class SqliteQueryLog:
    """Implements QueryLog; expired rows are purged on write. The purge finds them by the `expires_at` index: without
    it every query's write scanned the whole day's log (a fifth of the request threads' time at 16 clients, in SQLite's
    writer lock, once the log held some thousand queries)."""

    def __init__(self, db: SqliteDatabase, clock=time.time):
        self.db = db
        self.clock = clock
        db.add_schema(QUERY_LOG_SCHEMA)

    def put_query(self, tenant: str, query_id: str, documents: list[dict], ttl_seconds: int) -> None:
        import json

        now = self.clock()
        with self.db.write() as conn:
            conn.execute(PURGE_EXPIRED, (now,))
            conn.execute(
                "INSERT OR REPLACE INTO query_log (tenant, query_id, documents, expires_at) VALUES (?, ?, ?, ?)",
                (tenant, query_id, json.dumps(documents), now + ttl_seconds),
            )

    def get_query(self, tenant: str, query_id: str) -> list[dict] | None:
        import json

        row = (
            self.db.connection()
            .execute(
                "SELECT documents, expires_at FROM query_log WHERE tenant = ? AND query_id = ?", (tenant, query_id)
            )
            .fetchone()
        )
        if row is None or row[1] < self.clock():
            return None
        return json.loads(row[0])
