"""Per-tenant usage: the quotas each write is checked against, the report `GET /v1/usage` shows, the metered counts
(queries, embedding tokens) and the recount the reindex pass runs. The counters themselves are kept by the metadata
store with the record writes (`UsageCounters`); this service only reads, meters and reconciles them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from kindex.domain.models import utc_now
from kindex.domain.ports import UsageCounters
from kindex.domain.quotas import QuotaLimits, Quotas, Usage, UsageReport, meter_periods
from kindex.domain.usage_plans import DEFAULT_PLAN, UsagePlans

logger = logging.getLogger(__name__)


class UsageService:
    """Reads a tenant's usage and limits, meters its queries and embedding tokens (best effort: a metering write that
    fails is logged, never fails the query or the ingest it counts), and repairs counters that drifted."""

    def __init__(self, counters: UsageCounters, plans: UsagePlans | None, *, clock: Callable[[], datetime] = utc_now):
        self.counters = counters
        self.plans = plans
        self.clock = clock

    def limits_for(self, tenant: str) -> QuotaLimits:
        """The quotas of the tenant's plan (no limits at all without usage plans)."""
        if self.plans is None:
            return QuotaLimits(plan=DEFAULT_PLAN, quotas=Quotas())
        return self.plans.quota_limits(tenant)

    def precheck(self, tenant: str, delta: Usage) -> QuotaLimits:
        """The tenant's limits, once a write adding `delta` is seen to fit the usage as it is now (QuotaExceeded if
        not), so that a refused write stores nothing, not even bytes it would discard. The store's check in the
        record's own atomic write is what holds the limit under concurrency; this only comes first."""
        limits = self.limits_for(tenant)
        if limits.ceilings(delta):
            limits.check(self.counters.usage(tenant), delta)
        return limits

    def report(self, tenant: str) -> UsageReport:
        day, month = meter_periods(self.clock())
        stored = self.counters.usage(tenant)
        metered = self.counters.metered(tenant, day=day, month=month)
        limits = self.limits_for(tenant)
        return UsageReport(
            plan=limits.plan,
            **stored.as_dict(),
            queries_today=metered.queries_today,
            embedding_tokens_month=metered.embedding_tokens_month,
            day=day,
            month=month,
            limits=limits.quotas,
        )

    def record_query(self, tenant: str, *, embedding_tokens: int = 0) -> None:
        """One query, with the tokens its text was embedded as (0 for a keyword query)."""
        self._meter(tenant, queries=1, embedding_tokens=embedding_tokens)

    def record_embedding_tokens(self, tenant: str, tokens: int) -> None:
        if tokens > 0:
            self._meter(tenant, embedding_tokens=tokens)

    def _meter(self, tenant: str, **counts: int) -> None:
        day, month = meter_periods(self.clock())
        try:
            self.counters.add_metered(tenant, day=day, month=month, **counts)
        except Exception as error:  # the event it counts already happened; losing one count beats failing it
            logger.warning("could not meter usage", extra={"tenant": tenant, "error_type": type(error).__name__})

    def reconcile(self, tenant: str) -> bool:
        """Recount the tenant's stored usage from its records; True when the counters had drifted (logged, repaired).
        A recount that raced a write changes nothing (the next pass tries again)."""
        outcome = self.counters.reconcile(tenant)
        if outcome is None:
            logger.info("usage recount raced a write; left for the next pass", extra={"tenant": tenant})
            return False
        before, counted = outcome
        if before == counted:
            return False
        logger.warning(
            "usage counters drifted; repaired from the records",
            extra={"tenant": tenant, "counted_before": before.as_dict(), "counted": counted.as_dict()},
        )
        return True
