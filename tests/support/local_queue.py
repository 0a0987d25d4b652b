"""What tests read off the local queue's table directly (no production code needs it)."""

from __future__ import annotations


def queue_depth(queue) -> tuple[int, int]:
    """(messages waiting or in flight, dead-lettered messages) of a SqliteQueue."""
    row = queue.db.connection().execute("SELECT SUM(dead = 0), SUM(dead = 1) FROM queue").fetchone()
    return int(row[0] or 0), int(row[1] or 0)
