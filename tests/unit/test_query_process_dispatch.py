"""The query processes' frames (kindex_local.frames) and the server's side of them (kindex_local.query_processes):
which child a request goes to, and what a request gets when a child dies, never starts, breaks the protocol or the
server stops. Real socket pairs and real child processes (a small script speaking the protocol), no mocks."""

from __future__ import annotations

import io
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kindex.app.cpu_slots import CpuSlots
from kindex_local.frames import MAX_FRAME_BYTES, FrameTooLarge, encode_frame, read_frame, send_frame
from kindex_local.query_processes import QueryProcesses, default_count

pytestmark = pytest.mark.unit
WAIT = 10.0  # a hang fails the test instead of stalling it; no assertion depends on it

# A stand-in for `python -m kindex_local.query_process`: ready at once (unless told not to be), it answers each
# event with its pid after the event's `sleep`; `die` ends it with requests in flight, `huge` announces an answer
# over the frame limit.
FAKE_CHILD = """
import os, sys, threading, time, socket
from kindex_local.frames import read_frame, send_frame

sock = socket.socket(fileno=int(sys.argv[sys.argv.index("--fd") + 1]))
lock = threading.Lock()
if os.environ.get("FAKE_NEVER_READY"):
    sock.recv(1)  # until the server hangs up
    sys.exit(0)
send_frame(sock, {"ready": True})

def answer(request_id, event):
    time.sleep(event.get("sleep", 0))
    if event.get("die"):
        os._exit(3)
    with lock:
        if event.get("huge"):
            sock.sendall((1 << 30).to_bytes(4, "big") + bytes(4))  # the head of a 1 GiB frame
            return
        send_frame(sock, {"id": request_id, "response": {"statusCode": 200, "body": str(os.getpid())}})

stream = sock.makefile("rb")
while (message := read_frame(stream)) is not None:
    threading.Thread(target=answer, args=(message["id"], message["event"])).start()
"""


@pytest.fixture
def fake_child(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    return [sys.executable, str(script)]


@pytest.fixture
def processes(fake_child):
    started: list[QueryProcesses] = []

    def make(count: int = 2, budget_s: float = WAIT, local=None) -> QueryProcesses:
        running = QueryProcesses(count, budget_s, command=fake_child, local=local)
        running.start()
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop()


def ask(processes: QueryProcesses, **event) -> dict:
    return processes.handler(event, None)


def wait_ready(processes: QueryProcesses, count: int) -> set[str]:
    """The pids that answer, once `count` distinct children have answered: `count` slow requests at once go one to
    each ready child (the fewest in flight)."""
    seen: set[str] = set()
    deadline = time.monotonic() + WAIT
    with ThreadPoolExecutor(count) as pool:
        while len(seen) < count and time.monotonic() < deadline:
            seen.update(answer["body"] for answer in pool.map(lambda _: ask(processes, sleep=0.2), range(count)))
    return seen


def test_a_frame_round_trips_over_a_socket_pair_and_the_end_of_the_stream_is_none():
    left, right = socket.socketpair()
    message = {"id": 7, "event": {"body": "caf\u00e9 \ud800 lone surrogate", "headers": {"a": "b"}}}
    send_frame(left, message)
    left.close()
    with right.makefile("rb") as stream:
        assert read_frame(stream) == message
        assert read_frame(stream) is None
    right.close()


def test_a_frame_cut_short_reads_as_the_end_of_the_stream():
    assert read_frame(io.BufferedReader(io.BytesIO(encode_frame({"id": 1})[:-2]))) is None  # type: ignore[arg-type]


def test_an_answers_body_travels_as_raw_text_and_comes_back_the_same():
    response = {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": '{"q": "caf\u00e9 \ud800"}'}
    frame = encode_frame({"id": 3, "response": response})
    assert '{"q": "caf'.encode() in frame  # not escaped into the JSON
    assert read_frame(io.BytesIO(frame)) == {"id": 3, "response": response}
    assert read_frame(io.BytesIO(encode_frame({"id": 4, "response": {"statusCode": 204}}))) == {
        "id": 4,
        "response": {"statusCode": 204},
    }


def test_a_frame_over_the_limit_is_refused_before_its_payload_is_read():
    head = struct.pack(">II", MAX_FRAME_BYTES, 1)
    with pytest.raises(FrameTooLarge):
        read_frame(io.BytesIO(head))  # no payload follows: it is never waited for
    with pytest.raises(FrameTooLarge):
        read_frame(io.BytesIO(struct.pack(">II", 11, 0) + b'{"id": 100}'), limit=10)


def test_a_frame_that_is_not_a_json_object_or_misplaces_its_text_is_an_error():
    with pytest.raises(ValueError):
        read_frame(io.BytesIO(struct.pack(">II", 2, 0) + b"[]"))
    with pytest.raises(ValueError):
        read_frame(io.BytesIO(struct.pack(">II", 8, 1) + b'{"id":1}x'))
    with pytest.raises(ValueError):
        read_frame(io.BytesIO(struct.pack(">II", 22, 1) + b'{"id":1,"raw":"other"}x'))


def test_one_query_process_per_core_from_two_cores():
    assert [default_count(cores) for cores in (1, 2, 4)] == [0, 2, 4]


@pytest.mark.slow
def test_requests_go_to_the_child_with_the_fewest_in_flight(processes):
    running = processes(2)
    # Given two ready children
    assert len(wait_ready(running, 2)) == 2
    # When two slow requests run at once, then idle requests one after another
    with ThreadPoolExecutor(2) as pool:
        slow = [pool.submit(ask, running, sleep=0.5) for _ in range(2)]
        answered_by = {future.result(timeout=WAIT)["body"] for future in slow}
    one_by_one = [ask(running)["body"] for _ in range(4)]
    # Then the slow ones went one to each child, and the ones alone to the first child every time (its caches warm:
    # one client is not slowed by alternating between two processes' copies of the model and the index)
    assert len(answered_by) == 2
    assert len(set(one_by_one)) == 1 and one_by_one[0] in answered_by


class AnswerHere:
    """The server's own query handler in these tests: it answers "here" after the event's `sleep`, as the children
    do; an event with `hold` waits, once `entered` is set, until the test sets `release`; one with `fail` raises."""

    def __init__(self):
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, event: dict, context) -> dict:
        if event.get("fail"):
            raise RuntimeError("the handler failed")
        if event.get("hold"):
            self.entered.set()
            assert self.release.wait(WAIT)
        time.sleep(event.get("sleep", 0))
        return {"statusCode": 200, "body": "here"}


@pytest.mark.slow
def test_a_query_alone_is_answered_here_and_one_beside_another_by_a_child(processes):
    here = AnswerHere()
    running = processes(2, local=here)
    # Given two ready children (three slow queries at once: the first is answered here, the others one per child)
    children = wait_ready(running, 3) - {"here"}
    assert len(children) == 2
    # When queries come one after another; then one that is held here while two more come beside it; then one alone
    one_by_one = [ask(running)["body"] for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(ask, running, hold=True)
        assert here.entered.wait(WAIT)
        beside = [pool.submit(ask, running, sleep=0.3) for _ in range(2)]
        answered_beside = {future.result(timeout=WAIT)["body"] for future in beside}
        here.release.set()
        held = first.result(timeout=WAIT)["body"]
    after = ask(running)["body"]
    # Then each query alone was answered here (no hop to a child), the held one too, and the two that came while it
    # was in flight went to the children, one each
    assert one_by_one == ["here"] * 3 and after == "here" and held == "here"
    assert answered_beside == children


@pytest.mark.slow
def test_a_query_answered_here_that_fails_raises_as_the_handler_would_and_is_no_longer_in_flight(processes):
    running = processes(1, local=AnswerHere())
    wait_ready(running, 2)  # its child is ready: a query counted as still in flight would go to it, not fail slowly
    # Given the server's own handler raising for a query alone (the gateway turns that into its 502)
    with pytest.raises(RuntimeError):
        ask(running, fail=True)
    # Then the next query alone is answered here again: the failed one is not counted as in flight any more
    assert ask(running)["body"] == "here"


@pytest.mark.slow
def test_a_child_that_dies_fails_its_requests_with_502_and_is_started_again(processes):
    running = processes(2)
    before = wait_ready(running, 2)
    # Given a slow request on one child, whose sibling is then told to die with it in flight
    with ThreadPoolExecutor(2) as pool:
        doomed = pool.submit(ask, running, sleep=0.3, die=True)
        time.sleep(0.05)
        survivor = pool.submit(ask, running, sleep=0.5)
        # Then the dead child's request gets the 502 of a failed function, the other child's its answer
        assert doomed.result(timeout=WAIT)["statusCode"] == 502
        assert survivor.result(timeout=WAIT)["statusCode"] == 200
    # and a new child takes the dead one's place
    after = wait_ready(running, 2)
    assert len(after) == 2 and len(after & before) == 1


@pytest.mark.slow
def test_with_no_child_ready_a_request_waits_its_budget_then_gets_503(processes, monkeypatch):
    monkeypatch.setenv("FAKE_NEVER_READY", "1")
    running = processes(1, budget_s=0.3)
    started = time.monotonic()
    response = ask(running)
    assert response["statusCode"] == 503 and response["headers"]["Retry-After"]
    assert '"dependency_unavailable"' in response["body"]
    assert time.monotonic() - started >= 0.3


@pytest.mark.slow
def test_an_answer_over_the_frame_limit_kills_the_child_and_fails_its_request(processes):
    running = processes(1)
    (first,) = wait_ready(running, 1)
    assert ask(running, huge=True)["statusCode"] == 502
    assert wait_ready(running, 1) != {first}  # a new child answers


@pytest.mark.slow
def test_stop_ends_the_children_and_later_requests_get_503(processes):
    running = processes(2)
    wait_ready(running, 2)
    children = list(running.pids)
    running.stop()
    assert all(not Path(f"/proc/{pid}").exists() for pid in children)  # reaped, none left behind
    assert not any(thread.is_alive() for thread in running._threads)
    assert ask(running)["statusCode"] == 503


@pytest.mark.slow
def test_a_request_waiting_for_its_child_gives_its_cpu_slot_back(processes):
    running = processes(1)
    wait_ready(running, 1)
    slots = CpuSlots(1)
    got_slot = threading.Event()

    def take_a_slot() -> None:
        with slots.held():
            got_slot.set()

    def request() -> dict:
        with slots.held():
            return ask(running, sleep=0.5)

    # Given a request that holds the only CPU slot while its child works
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(request)
        time.sleep(0.1)
        # When another thread wants a slot meanwhile
        other = threading.Thread(target=take_a_slot)
        other.start()
        # Then it gets one before the request's answer came
        assert got_slot.wait(0.35)
        assert not waiting.done()
        other.join(WAIT)
        assert waiting.result(timeout=WAIT)["statusCode"] == 200  # and it had its slot again to finish
