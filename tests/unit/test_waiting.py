"""The tests' one wait helper (tests/support/waiting.py), on an injected clock: it returns what it waited for, checks
once more when the time is up, and a timeout says what was awaited and what was seen last."""

import pytest

from tests.support.waiting import WaitTimedOut, wait_until

pytestmark = pytest.mark.unit


class FakeTime:
    """A clock that moves only when the helper sleeps."""

    def __init__(self):
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_wait_returns_the_first_value_that_satisfies_it():
    # Given a value that becomes ready on the third look
    time = FakeTime()
    values = iter([None, {"status": "pending"}, {"status": "indexed"}, {"status": "never read"}])
    # When waiting until its status is indexed
    found = wait_until(
        lambda: next(values),
        until=lambda v: v is not None and v["status"] == "indexed",
        interval=0.5,
        clock=time.clock,
        sleep=time.sleep,
    )
    # Then that value comes back after two pauses of the interval
    assert found == {"status": "indexed"}
    assert time.sleeps == [0.5, 0.5]


def test_a_truthy_value_ends_the_wait_by_default_and_nothing_is_waited_when_it_holds_at_once():
    time = FakeTime()
    assert wait_until(lambda: ["d1"], clock=time.clock, sleep=time.sleep) == ["d1"]
    assert time.sleeps == []


def test_a_timeout_names_what_was_awaited_and_the_last_value_seen_after_one_last_look():
    # Given a condition that never holds, and counts how often it is asked
    time = FakeTime()
    looks = []

    def condition():
        looks.append(time.now)
        return {"status": "pending", "look": len(looks)}

    # When the wait runs out
    with pytest.raises(WaitTimedOut) as failed:
        wait_until(
            condition,
            until=lambda v: v["status"] == "indexed",
            timeout=1.0,
            interval=0.3,
            message="document d1 was not indexed",
            clock=time.clock,
            sleep=time.sleep,
        )
    # Then it looked until the deadline had passed, the last look at or after it
    assert looks[0] == 100.0 and looks[-1] >= 101.0 and len(looks) == 5
    # And the failure is an assertion that says what was awaited, for how long, and what was seen last
    assert isinstance(failed.value, AssertionError)
    assert failed.value.last == {"status": "pending", "look": 5}
    assert str(failed.value) == (
        "document d1 was not indexed (not within 1 s; last seen: {'status': 'pending', 'look': 5})"
    )


def test_a_long_last_value_is_cut_in_the_message_but_kept_whole():
    time = FakeTime()
    with pytest.raises(WaitTimedOut) as failed:
        wait_until(lambda: "x" * 5000, until=lambda v: False, timeout=0.1, clock=time.clock, sleep=time.sleep)
    assert len(str(failed.value)) < 2200 and str(failed.value).endswith("...)")
    assert failed.value.last == "x" * 5000


def test_an_error_of_the_condition_is_not_swallowed():
    time = FakeTime()

    def broken():
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        wait_until(broken, clock=time.clock, sleep=time.sleep)
