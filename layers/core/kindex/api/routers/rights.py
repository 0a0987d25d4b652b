"""The tenant's signing secret for external rights checks."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import require_admin
from kindex.api.models import (
    RightsSecret,
)

router = APIGatewayRouter()


@router.post("/v1/rights-check-secret")
def rotate_rights_secret(svc: ServicesDep) -> RightsSecret:
    """Create or replace the tenant's signing secret for external rights checks; it is shown only in this answer."""
    secret = svc.rights_secrets.rotate(require_admin(router).tenant)
    return RightsSecret(
        secret=secret,
        header="X-Kindex-Signature",
        signature_format='t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">',
    )
