"""CPU slots of the local server (kindex.app.cpu_slots): at most n requests compute at once, and one that waits on
something else gives its slot back."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kindex.app import cpu_slots
from kindex.app.cpu_slots import CpuSlots
from kindex.app.query_batching import QueryBatcher

pytestmark = pytest.mark.unit
WAIT = 10.0  # a deadlock fails the test instead of hanging it; no assertion depends on it


def test_at_most_n_threads_hold_a_slot_at_once():
    # Given 2 slots and 6 threads that each hold one until told to go on
    slots = CpuSlots(2)
    inside, most = [0], [0]
    lock, go = threading.Lock(), threading.Event()
    entered = threading.Semaphore(0)

    def work():
        with slots.held():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            entered.release()
            go.wait(WAIT)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    # When two have entered, the others wait for a slot
    assert entered.acquire(timeout=WAIT) and entered.acquire(timeout=WAIT)
    assert not entered.acquire(timeout=0.2)
    go.set()
    for thread in threads:
        thread.join(WAIT)
    # Then never more than two were inside, and all six ran
    assert most[0] == 2
    assert inside[0] == 0 and not any(t.is_alive() for t in threads)


def test_a_thread_away_frees_its_slot_and_takes_one_again_before_going_on():
    # Given one slot, held by a thread that then waits on the network (away)
    slots = CpuSlots(1)
    away, other_done, resumed_while = threading.Event(), threading.Event(), []

    def waiting():
        with slots.held():
            with cpu_slots.away():
                away.set()
                other_done.wait(WAIT)
            resumed_while.append(other_done.is_set())

    first = threading.Thread(target=waiting)
    first.start()
    assert away.wait(WAIT)

    # When another request comes meanwhile, it gets the slot at once
    def other():
        with slots.held():
            other_done.set()

    second = threading.Thread(target=other)
    second.start()
    second.join(WAIT)
    first.join(WAIT)
    # Then it ran while the first was away, and the first went on after it
    assert other_done.is_set() and resumed_while == [True]


def test_away_without_a_slot_and_held_twice_change_nothing():
    slots = CpuSlots(1)
    with cpu_slots.away():  # a worker thread or a Lambda: no slot, nothing to give back
        pass
    with slots.held():
        with slots.held():  # the same thread again: it keeps its one slot (a second acquire would deadlock)
            with cpu_slots.away():
                with slots.held():
                    pass
    # And the slot is free again afterwards
    done = threading.Event()
    thread = threading.Thread(target=lambda: slots.held().__enter__() or done.set())
    thread.start()
    assert done.wait(WAIT)
    with pytest.raises(ValueError):
        CpuSlots(0)


@pytest.mark.parametrize("remote", [True, False])
def test_a_query_waiting_for_a_remote_batch_gives_its_slot_back_and_a_local_one_keeps_it(remote):
    # Given two slots, one query of a tenant running a batch that waits until released, a second query queued
    # behind it, and a third request that needs a slot
    slots = CpuSlots(2)
    batcher = QueryBatcher(on_queued=lambda key, queued: queued_event.set())
    queued_event, release_batch, third_in = threading.Event(), threading.Event(), threading.Event()
    running = threading.Event()

    def run(texts):
        running.set()
        if remote:
            with cpu_slots.away():  # what the OpenAI embedder does around its call
                release_batch.wait(WAIT)
        else:
            release_batch.wait(WAIT)
        return np.ones((len(texts), 3), dtype=np.float32)

    def query(text):
        with slots.held():
            batcher.embed(("acme", "m"), text, run, remote=remote)

    first = threading.Thread(target=query, args=("a",))
    first.start()
    assert running.wait(WAIT)
    second = threading.Thread(target=query, args=("b",))
    second.start()
    assert queued_event.wait(WAIT)

    def third():
        with slots.held():
            third_in.set()

    other = threading.Thread(target=third)
    other.start()
    # When the batch is still running: with a remote model both waiting queries gave their slots back, so the third
    # request computes now; with a local one they keep them (the batch computes here) and it waits
    assert third_in.wait(WAIT if remote else 0.3) is remote
    release_batch.set()
    for thread in (first, second, other):
        thread.join(WAIT)
    assert third_in.is_set()


def test_the_server_has_cores_plus_one_slots_by_default_and_none_with_zero(tmp_path):
    from kindex.adapters.embedders.windows import available_cores
    from kindex.settings import Settings
    from kindex_local.deployment import server_cpu_slots

    assert server_cpu_slots(Settings(data_dir=tmp_path)).slots == available_cores() + 1
    assert server_cpu_slots(Settings(data_dir=tmp_path, cpu_slots=2)).slots == 2
    assert server_cpu_slots(Settings(data_dir=tmp_path, cpu_slots=0)) is None


def test_a_query_process_has_its_share_of_the_cores_by_default(tmp_path, monkeypatch):
    from kindex.settings import Settings
    from kindex_local import deployment

    monkeypatch.setattr(deployment, "available_cores", lambda: 4)
    settings = Settings(data_dir=tmp_path)
    assert [deployment.server_cpu_slots(settings, query_processes=n).slots for n in (1, 2, 4, 8)] == [4, 2, 1, 1]
    assert deployment.server_cpu_slots(Settings(data_dir=tmp_path, cpu_slots=3), query_processes=2).slots == 3
    assert deployment.server_cpu_slots(Settings(data_dir=tmp_path, cpu_slots=0), query_processes=2) is None


def test_a_function_run_by_the_server_holds_a_slot_and_gives_it_back():
    from kindex_local.server import AsgiGateway

    # Given the server's ASGI app with one slot, over a gateway that records whether its function held one
    seen = []

    class Recording:
        def dispatch(self, event):
            seen.append(cpu_slots.holding())
            return {"statusCode": 200}

    slots = CpuSlots(1)
    app = AsgiGateway(Recording(), concurrency=2, cpu_slots=slots)
    unlimited = AsgiGateway(Recording(), concurrency=2, cpu_slots=None)
    try:
        # When a request's function runs, with slots and without
        app._dispatch({})
        unlimited._dispatch({})
    finally:
        app.instances.shutdown()
        unlimited.instances.shutdown()
    # Then it held one with slots, none without; and the slot is free afterwards
    assert seen == [True, False]
    assert not cpu_slots.holding()
    with slots.held():
        assert cpu_slots.holding()


def test_threads_waiting_for_a_slot_get_it_in_the_order_they_came():
    # Given one slot, held here, and two threads that queued for it one after the other
    slots = CpuSlots(1)
    order: list[str] = []

    def work(name):
        with slots.held():
            order.append(name)

    first, second = threading.Thread(target=work, args=("first",)), threading.Thread(target=work, args=("second",))
    with slots.held():
        first.start()
        _until(lambda: slots.waiting == 1)
        second.start()
        _until(lambda: slots.waiting == 2)
    # When this thread gives its slot back and at once asks for one again
    with slots.held():
        order.append("late")
    first.join(WAIT)
    second.join(WAIT)
    # Then the threads already waiting went first, in their order: the late arrival took no freed slot before them
    assert order == ["first", "second", "late"]


def _until(condition) -> None:
    done = threading.Event()
    for _ in range(1000):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")
