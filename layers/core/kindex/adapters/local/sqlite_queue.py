"""The durable local queue that stands in for SQS: visibility timeouts, receive counts, dead letters, and
fair receives across tenants."""

from __future__ import annotations

import time
import uuid

from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.domain.types import QueueMessage

SCHEMA = """
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
_LANE_HEAD = (
    "SELECT message_id, grp, sent_at FROM queue INDEXED BY queue_lane"
    " WHERE dead = 0 AND lane = ? AND visible_at <= ? ORDER BY sent_at"
)


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
            conn.execute(
                "INSERT INTO queue (message_id, body, visible_at, sent_at, lane, grp) VALUES (?, ?, ?, ?, ?, ?)",
                (uuid.uuid4().hex, body, now, now, lane, group),
            )

    def receive(
        self, max_messages: int, visibility_timeout: float, *, lane_limit: int | None = None
    ) -> list[QueueMessage]:
        """Claim up to `max_messages` visible messages of ONE lane: the lane with the fewest receives in flight, the
        oldest waiting message breaking ties. A message whose group has a message in flight is skipped; with
        `lane_limit`, so is every lane that already has that many receives in flight (the worker pool keeps a
        thread free for the other lanes). One lane per receive, because a receive's messages are acknowledged
        together: another lane's message in the same receive would count as busy until the slowest was done."""
        now = self.clock()
        with self.db.write() as conn:
            busy = conn.execute(
                "SELECT lane, grp, receipt FROM queue INDEXED BY queue_claimed"
                " WHERE receipt IS NOT NULL AND dead = 0 AND visible_at > ?",
                (now,),
            ).fetchall()
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
                f" WHERE message_id IN ({','.join('?' * len(chosen))})"
                " RETURNING message_id, body, receive_count, sent_at",
                (now + visibility_timeout, uuid.uuid4().hex, *chosen),
            ).fetchall()
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
            conn.execute(
                "UPDATE queue SET dead = ?, visible_at = ?, receipt = NULL WHERE message_id = ?",
                (int(dead), self.clock() + delay, message_id),
            )
            return dead

    def redrive(self) -> int:
        with self.db.write() as conn:
            return conn.execute(
                "UPDATE queue SET dead = 0, receive_count = 0, visible_at = ?, receipt = NULL WHERE dead = 1",
                (self.clock(),),
            ).rowcount

    def recover_in_flight(self) -> int:
        """After a crash or restart: messages claimed by the dead worker become visible now, not after their timeout.
        Only call while holding the data directory's worker lock (no other worker can be mid-message)."""
        now = self.clock()
        with self.db.write() as conn:
            return conn.execute(
                "UPDATE queue SET visible_at = ?, receipt = NULL WHERE dead = 0 AND visible_at > ?", (now, now)
            ).rowcount
