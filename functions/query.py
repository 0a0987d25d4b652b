"""Query function: permission-aware retrieval for one or several collections (both roles may call it)."""

from __future__ import annotations

import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from kindex.api.resolver import IsolatedRestResolver
from kindex.api.http import precheck, register_error_handlers
from kindex.api.query_routes import router
from kindex.compose import container

logger = Logger(service="kindex-query")
metrics = Metrics(namespace="kindex")  # shares its metric set with the services' recorder; flushed per invocation
# An invocation without a business event (a 404, say) has nothing to publish; that is not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")
app = IsolatedRestResolver(enable_validation=True)  # request state per request (local server threads)
app.include_router(router)
register_error_handlers(app)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rejected = precheck(event, container().settings.max_body_bytes)
    return rejected if rejected is not None else app.resolve(event, context)
