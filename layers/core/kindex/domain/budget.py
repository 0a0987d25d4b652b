"""The request path's time budget: how long the current API request may still spend on its dependencies.

API Gateway gives up on an integration after 29 s and answers 504 with a body of its own. The api and query
functions therefore start a budget for every request (`for_request`, from the Lambda context's remaining time, less
a reserve for writing the answer, and at most `KINDEX_REQUEST_BUDGET_S`), and every adapter that calls a remote
dependency asks this module how long its next call may take (`call_timeout`) or whether one more attempt still fits
(`require`). When the budget is spent the adapter raises `DependencyFailed`, which the API answers with a JSON 503
`dependency_unavailable` - well before API Gateway's limit.

The budget lives in a ContextVar, so concurrent requests of the local server (one thread each) never share it. Work
outside a request (ingest, reindex, the CLI) has no budget: `active()` is False, adapters use their own longer
timeouts and retries, and `call_timeout` returns the default it is given.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from kindex.domain.errors import DependencyFailed

# What a request keeps back from its Lambda's remaining time to build and return the answer (and log it).
RESERVE_S = 1.0
# The largest budget whatever the Lambda's timeout: under API Gateway's 29 s integration limit with room to spare.
MAX_BUDGET_S = 25.0
# A call given less than this would only time out: fail at once instead.
MIN_CALL_S = 0.05

_deadline: ContextVar[float | None] = ContextVar("kindex_request_deadline", default=None)


class BudgetSpent(DependencyFailed):
    """The request's time budget ran out before a dependency answered (HTTP 503 like any dependency failure)."""


@contextmanager
def for_request(
    context: Any, *, limit_s: float = MAX_BUDGET_S, reserve_s: float = RESERVE_S, clock=time.monotonic
) -> Iterator[float]:
    """Run one request under a budget: the Lambda context's remaining time less `reserve_s`, at most `limit_s`.
    A context without `get_remaining_time_in_millis` (a test calling a handler directly) gets `limit_s`."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    available = remaining() / 1000.0 - reserve_s if callable(remaining) else limit_s
    seconds = max(min(limit_s, available), 0.0)
    token = _deadline.set(clock() + seconds)
    try:
        yield seconds
    finally:
        _deadline.reset(token)


def active() -> bool:
    """Whether the current code runs inside a request with a budget (the short-timeout profile applies)."""
    return _deadline.get() is not None


def remaining(clock=time.monotonic) -> float | None:
    """Seconds left in the current request's budget, or None outside a request."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - clock()


def call_timeout(default: float, what: str, clock=time.monotonic) -> float:
    """The timeout for the next call to `what`: `default`, cut to what the budget has left; BudgetSpent if that is
    too little to be worth trying."""
    left = remaining(clock)
    if left is None:
        return default
    if left < MIN_CALL_S:
        raise BudgetSpent(f"{what} did not answer within the request's time budget")
    return min(default, left)


def require(seconds: float, what: str, clock=time.monotonic) -> None:
    """Refuse to start an attempt that may take `seconds` (a call whose timeout cannot be cut, such as an AWS SDK
    call with its client's fixed timeouts) when the budget has less than that left."""
    left = remaining(clock)
    if left is not None and left < seconds:
        raise BudgetSpent(f"{what} did not answer within the request's time budget")
