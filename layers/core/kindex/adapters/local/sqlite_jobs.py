"""Reindex jobs, in the same SQLite file as the metadata."""

from __future__ import annotations

import time

from kindex.adapters.local.sqlite_db import SqliteDatabase

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
            conn.execute(
                "INSERT OR REPLACE INTO jobs (tenant, job_id, body, expires_at) VALUES (?, ?, ?, ?)",
                (job.tenant, job.id, job.model_dump_json(), self.clock() + JOB_TTL),
            )

    def get_job(self, tenant: str, job_id: str):
        from kindex.domain.models import ReindexJob

        row = (
            self.db.connection()
            .execute(
                "SELECT body FROM jobs WHERE tenant = ? AND job_id = ? AND expires_at >= ?",
                (tenant, job_id, self.clock()),
            )
            .fetchone()
        )
        return ReindexJob.model_validate_json(row[0]) if row else None
