"""The request path's time budget (kindex.domain.budget): set per request, per thread, and what it tells callers."""

from __future__ import annotations

import threading

import pytest

from kindex.domain import budget
from kindex.domain.errors import DependencyFailed

pytestmark = pytest.mark.unit


class Context:
    def __init__(self, remaining_ms: int):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_outside_a_request_there_is_no_budget_and_defaults_stand():
    assert not budget.active() and budget.remaining() is None
    assert budget.call_timeout(30.0, "x") == 30.0
    budget.require(1_000.0, "x")  # no budget, nothing refused


def test_a_request_gets_the_lambdas_remaining_time_less_the_reserve_capped_by_the_limit():
    clock = Clock()
    with budget.for_request(Context(10_000), limit_s=25.0, clock=clock) as seconds:
        assert seconds == pytest.approx(10.0 - budget.RESERVE_S)
        assert budget.active() and budget.remaining(clock) == pytest.approx(9.0)
    with budget.for_request(Context(300_000), limit_s=25.0, clock=clock) as seconds:
        assert seconds == 25.0
    with budget.for_request(object(), limit_s=7.0, clock=clock) as seconds:  # a context without the method
        assert seconds == 7.0
    assert not budget.active()  # reset when the request ends


def test_call_timeouts_shrink_with_the_budget_and_a_spent_budget_fails_as_a_dependency():
    clock = Clock()
    with budget.for_request(Context(6_000), limit_s=25.0, clock=clock):
        assert budget.call_timeout(4.0, "the search cluster", clock) == 4.0
        clock.now += 3.0
        assert budget.call_timeout(4.0, "the search cluster", clock) == pytest.approx(2.0)
        with pytest.raises(DependencyFailed, match="metadata store"):
            budget.require(5.0, "the metadata store", clock)
        clock.now += 2.0
        with pytest.raises(budget.BudgetSpent, match="search cluster did not answer"):
            budget.call_timeout(4.0, "the search cluster", clock)


def test_an_exception_still_ends_the_request_budget():
    with pytest.raises(RuntimeError), budget.for_request(Context(5_000)):
        raise RuntimeError("boom")
    assert not budget.active()


def test_concurrent_requests_never_share_a_budget():
    # Given 16 threads (the local server's request threads), each in its own request with its own budget
    barrier = threading.Barrier(16)
    seen: dict[int, float] = {}

    def request(i: int) -> None:
        with budget.for_request(Context(2_000 + 1_000 * i), limit_s=100.0):
            barrier.wait()
            seen[i] = budget.remaining()
        barrier.wait()
        seen[-i - 1] = 1.0 if budget.active() else 0.0

    threads = [threading.Thread(target=request, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then each saw its own budget, and none leaked past its request
    for i in range(16):
        assert i + 0.5 < seen[i] <= i + 1.0 + 0.001  # (2 s + i s) remaining less the 1 s reserve
        assert seen[-i - 1] == 0.0
    assert not budget.active()  # nor into this thread
