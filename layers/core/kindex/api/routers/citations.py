"""Citations: `<CIT id />` tags into footnotes (both roles)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import require_query
from kindex.domain.query import CitationsRequest, CitationsResponse

router = APIGatewayRouter()


@router.post("/v1/citations")
def render_citations(body: CitationsRequest, svc: ServicesDep) -> CitationsResponse:
    return svc.citations.render(require_query(router).tenant, body)
