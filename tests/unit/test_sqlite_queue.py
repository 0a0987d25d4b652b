"""The local queue's SQS semantics: visibility, receive counts, dead letters, redrive, crash recovery."""

import pytest

from kindex.adapters.local.sqlite_db import SqliteDatabase
from kindex.adapters.local.sqlite_queue import SqliteQueue
from tests.support.local_queue import queue_depth

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def queue(tmp_path, clock):
    return SqliteQueue(SqliteDatabase(tmp_path / "q.sqlite3"), clock=clock)


def test_fifo_and_invisible_while_claimed(queue, clock):
    for body in ("a", "b", "c"):
        queue.send(body)
        clock.now += 1
    first = queue.receive(2, visibility_timeout=30)
    assert [m.body for m in first] == ["a", "b"] and all(m.receive_count == 1 for m in first)
    assert [m.body for m in queue.receive(10, 30)] == ["c"]
    assert queue.receive(10, 30) == []
    # unacknowledged messages come back after their visibility timeout, with a higher receive count
    queue.acknowledge(first[0].message_id)
    clock.now += 31
    again = queue.receive(10, 30)
    assert sorted(m.body for m in again) == ["b", "c"] and all(m.receive_count == 2 for m in again)


def test_dead_letter_after_max_receives_and_redrive(queue, clock):
    queue.send("poison")
    for attempt in range(1, 4):
        (message,) = queue.receive(1, 30)
        dead = queue.retry_later(message.message_id, delay=0, max_receives=3)
        assert dead is (attempt == 3)
    assert queue.receive(1, 30) == [] and queue_depth(queue) == (0, 1)
    assert queue.redrive() == 1
    (message,) = queue.receive(1, 30)
    assert message.body == "poison" and message.receive_count == 1


def test_two_processes_never_claim_the_same_message(tmp_path, clock):
    path = tmp_path / "shared.sqlite3"
    first, second = SqliteQueue(SqliteDatabase(path), clock=clock), SqliteQueue(SqliteDatabase(path), clock=clock)
    for i in range(20):
        first.send(str(i))
    got_first = {m.body for m in first.receive(7, 30)}
    got_second = {m.body for m in second.receive(20, 30)}
    assert not got_first & got_second and len(got_first | got_second) == 20


def test_messages_claimed_by_a_crashed_worker_are_recovered(tmp_path, clock):
    path = tmp_path / "q.sqlite3"
    SqliteQueue(SqliteDatabase(path), clock=clock).send("job")
    crashed = SqliteQueue(SqliteDatabase(path), clock=clock)
    assert len(crashed.receive(1, visibility_timeout=300)) == 1  # ... and the process dies here
    restarted = SqliteQueue(SqliteDatabase(path), clock=clock)
    assert restarted.receive(1, 300) == []
    assert restarted.recover_in_flight() == 1
    (message,) = restarted.receive(1, 300)
    assert message.body == "job" and message.receive_count == 2


def test_each_receive_serves_the_least_busy_lane_oldest_first(queue, clock):
    # Given a tenant who queued five messages, then two other tenants one each
    for i in range(5):
        queue.send(f"a{i}", lane="tenant-a")
        clock.now += 1
    queue.send("b0", lane="tenant-b")
    clock.now += 1
    queue.send("c0", lane="tenant-c")
    # When workers receive in turn / Then the oldest lane's first messages, then lanes with nothing in flight,
    # and the busy tenant's rest only after them
    assert [m.body for m in queue.receive(4, 30)] == ["a0", "a1", "a2", "a3"]
    assert [m.body for m in queue.receive(4, 30)] == ["b0"]
    assert [m.body for m in queue.receive(4, 30)] == ["c0"]
    assert [m.body for m in queue.receive(4, 30)] == ["a4"]


def test_between_lanes_the_oldest_message_goes_first_not_the_first_lane_name(queue, clock):
    queue.send("from z", lane="z")
    clock.now += 1
    queue.send("from a", lane="a")
    assert [m.body for m in queue.receive(1, 30)] == ["from z"]
    assert [m.body for m in queue.receive(1, 30)] == ["from a"]


def test_a_group_in_flight_is_not_handed_to_a_second_receive(queue, clock):
    # Given two events of one document (one group), and another document's event
    queue.send("doc-1 first", group="doc-1")
    clock.now += 1
    queue.send("doc-1 second", group="doc-1")
    clock.now += 1
    queue.send("doc-2", group="doc-2")
    # When one receive takes the first event only
    (first,) = queue.receive(1, 30)
    # Then a second receive gets the other document, not the same document's next event
    assert [m.body for m in queue.receive(10, 30)] == ["doc-2"]
    # And once the first is done (or put back for a retry), the group's next event is handed out
    queue.retry_later(first.message_id, delay=5, max_receives=3)
    assert [m.body for m in queue.receive(10, 30)] == ["doc-1 second"]


def test_one_receive_may_take_several_events_of_one_group(queue, clock):
    queue.send("v1", group="doc")
    clock.now += 1
    queue.send("v2", group="doc")
    assert [m.body for m in queue.receive(10, 30)] == ["v1", "v2"]


def test_a_claim_whose_visibility_ran_out_no_longer_blocks_its_group(queue, clock):
    queue.send("stuck", group="doc")
    clock.now += 1
    queue.send("next", group="doc")
    queue.receive(1, visibility_timeout=30)
    assert queue.receive(10, 30) == []
    clock.now += 31
    assert sorted(m.body for m in queue.receive(10, 30)) == ["next", "stuck"]


def test_lane_limit_keeps_a_lane_from_taking_every_worker(queue, clock):
    # Given a tenant with many messages and another tenant with none yet
    for i in range(4):
        queue.send(f"a{i}", lane="a", group=f"a{i}")
    # When one worker holds a receive of lane a and the limit is one receive per lane
    held = queue.receive(1, 30, lane_limit=1)
    assert [m.body for m in held] == ["a0"]
    # Then a second worker gets nothing of lane a, but does get the other tenant's message when it arrives
    assert queue.receive(1, 30, lane_limit=1) == []
    queue.send("b0", lane="b")
    assert [m.body for m in queue.receive(1, 30, lane_limit=1)] == ["b0"]
    # And when the first receive is acknowledged, lane a is served again
    queue.acknowledge(held[0].message_id)
    assert [m.body for m in queue.receive(1, 30, lane_limit=1)] == ["a1"]


def test_a_queue_from_before_lanes_is_upgraded_in_place(tmp_path, clock):
    import sqlite3

    # Given a data directory whose queue table predates lanes and groups, with a message waiting
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE queue (message_id TEXT PRIMARY KEY, body TEXT NOT NULL, receive_count INTEGER NOT"
            " NULL DEFAULT 0, visible_at REAL NOT NULL, dead INTEGER NOT NULL DEFAULT 0,"
            " sent_at REAL NOT NULL)"
        )
        conn.execute("INSERT INTO queue (message_id, body, visible_at, sent_at) VALUES ('m1', 'old', 0, 0)")
    # When the queue opens it / Then the waiting message is delivered and new messages work as usual
    queue = SqliteQueue(SqliteDatabase(path), clock=clock)
    queue.send("new", lane="t", group="d")
    assert [m.body for m in queue.receive(10, 30)] == ["old"]
    assert [m.body for m in queue.receive(10, 30)] == ["new"]
    assert queue_depth(SqliteQueue(SqliteDatabase(path), clock=clock)) == (2, 0)
