"""Usage plans: which plan each tenant is on, and putting its API Gateway key there."""

from __future__ import annotations

from collections.abc import Iterable

from kindex.domain.errors import InvalidInput
from kindex.domain.models import check_id
from kindex.domain.ports import UsagePlanKeys
from kindex.domain.usage_plans import UsagePlans


class UsagePlanService:
    """Assigns tenants to the plans configured for them (`UsagePlans.plan_for`) through the `UsagePlanKeys` port."""

    def __init__(self, plans: UsagePlans, keys: UsagePlanKeys):
        self.plans = plans
        self.keys = keys

    def assign(self, tenant: str) -> tuple[str, bool]:
        """Attach the tenant's key to its configured plan (creating the key the first time): (plan, changed)."""
        try:
            check_id(tenant)
        except ValueError as error:
            raise InvalidInput(f"tenant {error}") from error
        plan, _ = self.plans.plan_for(tenant)
        return plan, self.keys.attach(tenant, plan)

    def assign_all(self, tenants: Iterable[str]) -> list[tuple[str, str, bool]]:
        """`assign` for each distinct tenant, in order: (tenant, plan, changed). The step that makes a changed plan
        configuration take effect for existing tenants."""
        return [(tenant, *self.assign(tenant)) for tenant in dict.fromkeys(tenants)]
