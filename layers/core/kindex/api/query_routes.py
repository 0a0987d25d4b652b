"""Query routes, shared by the query function (which serves them) and the API function (whose OpenAPI
document lists every route of the API)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.http import path_param, require_query
from kindex.compose import container
from kindex.domain.query import MultiQueryRequest, QueryRequest, QueryResponse

router = APIGatewayRouter()


@router.post("/v1/collections/<collection>/query")
def query_collection(collection: str, body: QueryRequest) -> QueryResponse:
    return container().query.query(require_query(router).tenant, [path_param(collection)], body, multi=False)


@router.post("/v1/query")
def query_collections(body: MultiQueryRequest) -> QueryResponse:
    request = QueryRequest(**body.model_dump(exclude={"collections"}))
    return container().query.query(require_query(router).tenant, body.collections, request, multi=True)
