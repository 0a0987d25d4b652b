"""The tenant's usage: what it stores and used, against its plan's quotas."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import require_reader
from kindex.domain.quotas import UsageReport

router = APIGatewayRouter()


@router.get("/v1/usage")
def get_usage(svc: ServicesDep) -> UsageReport:
    return svc.usage.report(require_reader(router).tenant)
