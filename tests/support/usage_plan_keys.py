"""An in-memory UsagePlanKeys for service tests (it passes the port's contract: tests/contract/)."""

from __future__ import annotations

from collections.abc import Iterable

from kindex.domain.errors import NotFound


class MemoryUsagePlanKeys:
    """tenant -> plan over a fixed set of plan names; `fail` makes every attach raise it (a dependency outage)."""

    def __init__(self, plans: Iterable[str], fail: Exception | None = None):
        self.plans = set(plans)
        self.attached: dict[str, str] = {}
        self.fail = fail

    def attach(self, tenant: str, plan: str) -> bool:
        if self.fail is not None:
            raise self.fail
        if plan not in self.plans:
            raise NotFound(f"usage plan {plan!r} is not deployed")
        changed = self.attached.get(tenant) != plan
        self.attached[tenant] = plan
        return changed

    def attached_plan(self, tenant: str) -> str | None:
        return self.attached.get(tenant)
