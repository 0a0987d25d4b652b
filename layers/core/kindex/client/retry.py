"""The retry policy of both clients: 429 and 503 are retried a bounded number of times, honouring Retry-After."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

RETRIED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `max_retries` more attempts after a 429 or 503. The wait is the answer's Retry-After when it gives one,
    else exponential backoff with jitter (`backoff` * 2^attempt, at most `max_backoff`). A Retry-After longer than
    `max_wait` is not waited for: the typed exception is raised at once, carrying it."""

    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_wait: float = 60.0

    def delay(self, attempt: int, status: int, headers: Mapping[str, str]) -> float | None:
        """Seconds to wait before retry number `attempt` (0-based), or None when not to retry."""
        if status not in RETRIED_STATUSES or attempt >= self.max_retries:
            return None
        hinted = retry_after_seconds(headers)
        if hinted is not None:
            return hinted if hinted <= self.max_wait else None
        return min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Retry-After as seconds (a number of seconds or an HTTP date); None when absent or unreadable."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return max(0.0, seconds)
