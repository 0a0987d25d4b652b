"""Local mode's API Gateway usage plans: one token bucket per tenant, filled at the plan's rate up to its burst, and
an optional daily quota (UTC days), from the same `UsagePlans` as the stack's plans (KINDEX_USAGE_PLANS).

The gateway asks after the authorizer allowed a request and before the function runs, as API Gateway does. Each
decision is a dict lookup and a few float operations under one lock, so it is O(1) and safe from the server's
request threads; buckets exist only for tenants that authenticated, so their number is bounded by the tenants."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kindex.domain.usage_plans import PlanLimits, UsagePlans

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused (`throttled` or `quota_exceeded`) and when the tenant may try again."""

    code: str
    message: str
    retry_after_seconds: int


@dataclass
class _Bucket:
    limits: PlanLimits
    tokens: float
    updated: float
    day: int = -1
    used_today: int = 0


class TenantThrottle:
    """Admits or refuses one request of a tenant. `clock` is monotonic seconds, `wall` unix seconds (for quotas)."""

    def __init__(
        self, plans: UsagePlans, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time
    ):
        self.plans = plans
        self._clock = clock
        self._wall = wall
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def admit(self, tenant: str) -> Refusal | None:
        """None when the request may run (it takes a token and counts against the quota); else the refusal."""
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(tenant)
            if bucket is None:
                _, limits = self.plans.plan_for(tenant)
                bucket = self._buckets[tenant] = _Bucket(limits, tokens=float(limits.burst_limit), updated=now)
            limits = bucket.limits
            bucket.tokens = min(float(limits.burst_limit), bucket.tokens + (now - bucket.updated) * limits.rate_limit)
            bucket.updated = now
            if limits.quota_per_day:
                wall = self._wall()
                day = int(wall // SECONDS_PER_DAY)
                if day != bucket.day:
                    bucket.day, bucket.used_today = day, 0
                if bucket.used_today >= limits.quota_per_day:
                    until_midnight = (day + 1) * SECONDS_PER_DAY - wall
                    return Refusal(
                        "quota_exceeded",
                        f"the tenant's daily quota of {limits.quota_per_day} requests is used up",
                        max(1, math.ceil(until_midnight)),
                    )
            if bucket.tokens < 1.0:
                wait = (1.0 - bucket.tokens) / limits.rate_limit
                return Refusal("throttled", "too many requests", max(1, math.ceil(wait)))
            bucket.tokens -= 1.0
            bucket.used_today += 1
            return None
