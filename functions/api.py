"""API function: collections, documents, uploads, chunks, export/import, citations, reindex jobs, usage and the
OpenAPI document. Compose, include the routers, resolve."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

from kindex import observability
from kindex.api import dependencies
from kindex.api.http import json_response, precheck, register_error_handlers
from kindex.api.resolver import IsolatedRestResolver
from kindex.api.routers import catalog, citations, console, docs, jobs, query, rights, transfer, usage
from kindex.compose import container
from kindex.domain import budget
from kindex.settings import ApiSettings, load_settings

SETTINGS = load_settings(model=ApiSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("api", SETTINGS)
OPENAPI = {
    "title": "kindex",
    "version": "1",
    "description": "Knowledge index for retrieval-augmented generation",
    "security_schemes": {"apiKey": HTTPBearer(description="kindex API key")},
    "security": [{"apiKey": []}],
}

resolver = IsolatedRestResolver(enable_validation=True)  # request state per request (local server threads)
register_error_handlers(resolver)
for router in (catalog.router, rights.router, citations.router, jobs.router, transfer.router, usage.router):
    resolver.include_router(router)
resolver.include_router(query.router)  # served by the query function; included so the OpenAPI document is complete
# The web console's static files; upload URLs point at the bucket (AWS) or the public URL (local).
UPLOAD_ORIGINS = console.upload_origins(SETTINGS.bucket_name, os.environ.get("AWS_REGION"), SETTINGS.public_url)
resolver.include_router(console.router_for(console.Console(console.load_assets(), UPLOAD_ORIGINS)))
resolver.include_router(docs.router_for())  # Swagger UI at /docs, under the console's lock
resolver.dependency_overrides[dependencies.services] = container


@resolver.get("/v1/openapi.json", include_in_schema=False)
def openapi_document():
    return json_response(200, resolver.get_openapi_json_schema(**OPENAPI))


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rejected = precheck(event, SETTINGS.max_body_bytes)
    if rejected is not None:
        return rejected
    with budget.for_request(context, limit_s=SETTINGS.request_budget_s):  # dependencies answer in time, or 503
        return resolver.resolve(event, context)
