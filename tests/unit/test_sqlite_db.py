"""The shared SQLite file: writers of one process queue on a thread lock instead of SQLite's sleeping busy handler."""

from __future__ import annotations

import threading

import pytest

from kindex.adapters.local.sqlite_db import SqliteDatabase

pytestmark = pytest.mark.unit


def test_sixteen_threads_write_without_ever_meeting_a_locked_database(tmp_path):
    # Given two adapters on the same file (as the stores of one process are) and connections that would fail at
    # once, instead of sleeping, if SQLite found the database locked
    first, second = SqliteDatabase(tmp_path / "k.sqlite3"), SqliteDatabase(tmp_path / "k.sqlite3")
    first.add_schema("CREATE TABLE IF NOT EXISTS log (thread INTEGER, n INTEGER)")
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def writer(number: int) -> None:
        database = first if number % 2 else second
        database.connection().execute("PRAGMA busy_timeout=0")
        start.wait()
        try:
            for n in range(40):
                with database.write() as conn:
                    conn.execute("INSERT INTO log VALUES (?, ?)", (number, n))
                    conn.execute("SELECT count(*) FROM log").fetchone()
        except BaseException as error:  # noqa: B036 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    # When sixteen threads write at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then none met "database is locked", and every write is there
    assert errors == []
    assert first.connection().execute("SELECT count(*) FROM log").fetchone()[0] == 16 * 40


def test_a_failed_write_rolls_back_and_releases_the_writer_lock(tmp_path):
    database = SqliteDatabase(tmp_path / "k.sqlite3")
    database.add_schema("CREATE TABLE IF NOT EXISTS t (v INTEGER)")
    with pytest.raises(RuntimeError):
        with database.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            raise RuntimeError("boom")
    # Another thread can write at once, and the failed row is gone
    done = threading.Event()

    def other() -> None:
        with SqliteDatabase(tmp_path / "k.sqlite3").write() as conn:
            conn.execute("INSERT INTO t VALUES (2)")
        done.set()

    threading.Thread(target=other).start()
    assert done.wait(5)
    assert [row[0] for row in database.connection().execute("SELECT v FROM t")] == [2]
