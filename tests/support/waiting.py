"""Waiting in tests for something another thread or process does: one helper instead of a poll loop per file.

A wait ends on the condition itself, never after a fixed sleep: a sleep is too short on a loaded machine (and the
test then checks nothing) and too long everywhere else. Its timeout only rules out a hang, so it is generous; when it
runs out, the failure says what was awaited and what was seen last."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Long enough for a loaded machine (2 cores, 8 test runs) to index a few documents; a hang still fails in a minute.
DEFAULT_TIMEOUT_S = 60.0


class WaitTimedOut(AssertionError):
    """The awaited condition did not hold within the timeout; `last` is the value seen at the final check."""

    def __init__(self, message: str, timeout: float, last: object):
        shown = repr(last)
        super().__init__(
            f"{message} (not within {timeout:g} s; last seen: {shown if len(shown) <= 2000 else shown[:2000] + '...'})"
        )
        self.last = last


def wait_until(
    condition: Callable[[], T],
    *,
    until: Callable[[T], object] = bool,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.05,
    message: str = "the condition did not hold",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `condition()` every `interval` seconds until `until(value)` holds for what it returned (by default: until
    the value is truthy), and return that value. Checks once more when the timeout has run out, then raises
    WaitTimedOut naming `message` and the last value. Exceptions of `condition` are not caught: a wait for a server
    that may not answer yet catches them itself."""
    deadline = clock() + timeout
    while True:
        value = condition()
        if until(value):
            return value
        if clock() >= deadline:
            raise WaitTimedOut(message, timeout, value)
        sleep(interval)


def wait_settled(
    session, collection_url: str, ids, *, timeout: float = DEFAULT_TIMEOUT_S, interval: float = 0.1
) -> dict[str, str]:
    """Each document's status (`GET {collection_url}/documents/{id}` through the `requests` session) once every
    one of them is indexed or failed: the e2e tests' wait for the worker."""
    from urllib.parse import quote

    return wait_until(
        lambda: {d: session.get(f"{collection_url}/documents/{quote(d, safe='')}").json()["status"] for d in ids},
        until=lambda statuses: all(s in ("indexed", "failed") for s in statuses.values()),
        timeout=timeout,
        interval=interval,
        message="the documents were neither all indexed nor failed",
    )
