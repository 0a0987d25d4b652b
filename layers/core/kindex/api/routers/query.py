"""Query routes, served by the query function; the API function includes them too, so that its OpenAPI document
lists every route of the API."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import path_param, require_query
from kindex.domain.query import MultiQueryRequest, QueryRequest, QueryResponse

router = APIGatewayRouter()


@router.post("/v1/collections/<collection>/query")
def query_collection(collection: str, body: QueryRequest, svc: ServicesDep) -> QueryResponse:
    return svc.query.query(require_query(router).tenant, [path_param(collection)], body, multi=False)


@router.post("/v1/query")
def query_collections(body: MultiQueryRequest, svc: ServicesDep) -> QueryResponse:
    # A MultiQueryRequest is a QueryRequest: passed as it is, never dumped and validated again (its parsed attribute
    # filter does not dump back to the JSON it was parsed from).
    return svc.query.query(require_query(router).tenant, body.collections, body, multi=True)
