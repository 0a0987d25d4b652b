"""A clock the test sets, for adapters that take `clock=` (expiry, TTLs, caches)."""

from __future__ import annotations

T0 = 1_700_000_000.0


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now
