"""The local query log's purge of expired rows reads only those rows (an index), in a new data directory and in
one written before the index existed."""

import sqlite3

import pytest

from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_query_log import PURGE_EXPIRED, SqliteQueryLog

pytestmark = pytest.mark.unit

OLD_SCHEMA = """
CREATE TABLE query_log (
    tenant TEXT NOT NULL, query_id TEXT NOT NULL, documents TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (tenant, query_id)
) WITHOUT ROWID;
"""


def purge_plan(db: SqliteDatabase) -> str:
    return " ".join(row[-1] for row in db.connection().execute(f"EXPLAIN QUERY PLAN {PURGE_EXPIRED}", (0.0,)))


def test_the_purge_searches_the_expiry_index_instead_of_scanning_the_log(tmp_path):
    # Given a new query log
    log = SqliteQueryLog(SqliteDatabase(tmp_path / "metadata.sqlite"))
    # When SQLite plans the purge every write runs
    plan = purge_plan(log.db)
    # Then it searches the expiry index: a scan would read the whole day's log on every query
    assert "USING" in plan and "query_log_expiry" in plan, plan
    assert "SCAN" not in plan, plan


def test_a_log_written_before_the_index_gets_it_when_opened_and_keeps_its_rows(tmp_path):
    # Given a data directory's query log written by a version without the index, holding one live query
    path = tmp_path / "metadata.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SCHEMA)
        conn.execute("INSERT INTO query_log VALUES ('t1', 'q1', '[]', 9e12)")
    # When it is opened
    log = SqliteQueryLog(SqliteDatabase(path), clock=lambda: 1000.0)
    # Then the purge uses the index and the live query is still there
    assert "query_log_expiry" in purge_plan(log.db)
    assert log.get_query("t1", "q1") == []
