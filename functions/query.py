"""Query function: permission-aware retrieval for one or several collections (every role may call it).
Compose, include the router, resolve."""

from __future__ import annotations

from typing import Any

from kindex import observability
from kindex.api import dependencies
from kindex.api.http import precheck, register_error_handlers
from kindex.api.resolver import IsolatedRestResolver
from kindex.api.routers import query
from kindex.compose import container
from kindex.domain import budget
from kindex.settings import QuerySettings, load_settings

SETTINGS = load_settings(model=QuerySettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("query", SETTINGS)

resolver = IsolatedRestResolver(enable_validation=True)  # request state per request (local server threads)
resolver.include_router(query.router)
register_error_handlers(resolver)
resolver.dependency_overrides[dependencies.services] = container


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rejected = precheck(event, SETTINGS.max_body_bytes)
    if rejected is not None:
        return rejected
    with budget.for_request(context, limit_s=SETTINGS.request_budget_s):  # dependencies answer in time, or 503
        return resolver.resolve(event, context)
