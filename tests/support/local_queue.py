"""What tests read off the local queue's table directly (no production code needs it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

_DEPTH = "SELECT SUM(dead = 0), SUM(dead = 1) FROM queue"


def queue_depth(queue) -> tuple[int, int]:
    """(messages waiting or in flight, dead-lettered messages) of a SqliteQueue."""
    row = queue.db.connection().execute(_DEPTH).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def server_queue_depth(data_dir: Path) -> tuple[int, int]:
    """The same for the queue of a `kindex serve` running on `data_dir`, read through a read-only connection of
    its own (the server's process holds the queue)."""
    db = sqlite3.connect(f"file:{data_dir / 'kindex.sqlite3'}?mode=ro", uri=True)
    try:
        row = db.execute(_DEPTH).fetchone()
    finally:
        db.close()
    return int(row[0] or 0), int(row[1] or 0)
