"""The local queue's SQS semantics: visibility, receive counts, dead letters, redrive, crash recovery."""

import pytest

from kindex.adapters.sqlite_chunks import SqliteQueue
from kindex.adapters.sqlite_store import SqliteDatabase

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
    assert queue.receive(1, 30) == [] and queue.depth() == (0, 1)
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
