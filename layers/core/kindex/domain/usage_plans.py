"""Per-tenant throttling plans: one default plan and named plans that name their tenants.

The same shape configures both backends: `cdk.json` (`api_rate_limit`, `api_burst_limit`, `api_quota_per_day`,
`api_usage_plans`) becomes API Gateway usage plans, and `KINDEX_USAGE_PLANS` (JSON) gives `kindex serve` the same
plans for its own limiter. On AWS the stack adds each plan's usage plan `id`, which the key provisioning needs.

Each plan may carry `quotas` (kindex.domain.quotas.Quotas: documents, chunks, bytes, collections; a missing one is no
limit), which the API and the ingest enforce on both backends; the functions read them from KINDEX_USAGE_PLANS too.

Each tenant's API Gateway key value (its usage identifier) is in `kindex.domain.usage_identifier`.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kindex.domain.models import ResourceId
from kindex.domain.quotas import QuotaLimits, Quotas

DEFAULT_PLAN = "default"
PLAN_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")


class PlanLimits(BaseModel):
    """Steady requests per second, the bucket size for bursts, and requests per UTC day (0: no quota)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_limit: float = Field(gt=0, le=100_000)
    burst_limit: int = Field(gt=0, le=100_000)
    quota_per_day: int = Field(default=0, ge=0)
    id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9]{1,64}$")  # the API Gateway usage plan (AWS only)
    # What each tenant of the plan may store; no key: no limit (kindex.domain.quotas).
    quotas: Quotas = Field(default_factory=Quotas)


class NamedPlan(PlanLimits):
    """A plan for the tenants it names (a tenant appears in at most one plan)."""

    tenants: tuple[ResourceId, ...] = ()


class UsagePlans(BaseModel):
    """Every plan of a deployment. `plan_for(tenant)` is the one rule for which plan a tenant is on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: PlanLimits
    plans: dict[str, NamedPlan] = Field(default_factory=dict)
    # AWS only, from the stack's output: the deployment's usage identifier scope (`kindex-<stage>`).
    scope: str | None = Field(default=None, pattern=r"^kindex-[a-z][a-z0-9-]{0,19}$")

    @model_validator(mode="after")
    def _names_and_tenants(self) -> UsagePlans:
        owner: dict[str, str] = {}
        for name, plan in self.plans.items():
            if name == DEFAULT_PLAN or not PLAN_NAME.fullmatch(name):
                raise ValueError(
                    f"plan name {name!r} must be 1-32 lowercase letters, digits or '-' and not {DEFAULT_PLAN!r}"
                )
            for tenant in plan.tenants:
                if tenant in owner:
                    raise ValueError(f"tenant {tenant!r} is in two plans: {owner[tenant]!r} and {name!r}")
                owner[tenant] = name
        return self

    def plan_for(self, tenant: str) -> tuple[str, PlanLimits]:
        """The plan name and limits that apply to `tenant`: the named plan listing it, else the default."""
        for name, plan in self.plans.items():
            if tenant in plan.tenants:
                return name, plan
        return DEFAULT_PLAN, self.default

    def quota_limits(self, tenant: str) -> QuotaLimits:
        """The quotas that apply to `tenant`, with the name of the plan they come from."""
        name, plan = self.plan_for(tenant)
        return QuotaLimits(plan=name, quotas=plan.quotas)

    def all_plans(self) -> dict[str, PlanLimits]:
        return {DEFAULT_PLAN: self.default, **self.plans}

    def plan_ids(self) -> dict[str, str] | None:
        """Plan name -> API Gateway usage plan id, when every plan has one (the stack's output); else None."""
        ids = {name: plan.id for name, plan in self.all_plans().items() if plan.id is not None}
        return ids if len(ids) == len(self.plans) + 1 else None
