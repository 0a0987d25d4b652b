"""API function: collections, documents, uploads, chunks, citations, reindex jobs and the OpenAPI document.
Each route parses, calls one service method and shapes the response."""

from __future__ import annotations

import warnings
from typing import Annotated, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.event_handler.openapi.params import Query

from kindex.api.models import (
    ChunkList,
    ChunkOut,
    CollectionList,
    DocumentList,
    DocumentOut,
    ReindexRequest,
    RightsSecret,
    UploadRequest,
    UploadResponse,
)
from kindex.api.query_routes import router as query_router
from kindex.api.resolver import IsolatedRestResolver
from kindex.api.http import (
    json_response,
    path_param,
    precheck,
    register_error_handlers,
    require_admin,
    require_query,
    require_reader,
)
from kindex.domain.query import CitationsRequest, CitationsResponse
from kindex.domain.models import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MAX_PAGE_START,
    Collection,
    CollectionInput,
    DocumentInput,
    PageRequest,
    ReindexJob,
)
from kindex.domain.validation import validated
from kindex.compose import container

logger = Logger(service="kindex-api")
metrics = Metrics(namespace="kindex")  # shares its metric set with the services' recorder; flushed per invocation
# An invocation without a business event (a 404, say) has nothing to publish; that is not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")
app = IsolatedRestResolver(enable_validation=True)  # request state per request (local server threads)
OPENAPI = {"title": "kindex", "version": "1", "description": "Knowledge index for retrieval-augmented generation",
           "security_schemes": {"apiKey": HTTPBearer(description="kindex API key")}, "security": [{"apiKey": []}]}
app.enable_swagger(path="/docs", **OPENAPI)
register_error_handlers(app)
app.include_router(query_router)  # served by the query function; included so the OpenAPI document is complete


# Every list route pages the same way; bounded so that no answer can outgrow Lambda's 6 MB response.
PageStart = Annotated[int, Query(ge=0, le=MAX_PAGE_START, description="items to skip (ignored with a cursor)")]
PageSize = Annotated[int, Query(ge=-1, le=MAX_PAGE_SIZE,
                                description=f"page size, 1 to {MAX_PAGE_SIZE}; -1 (XWiki's 'all') is the largest page")]
PageCursor = Annotated[str | None, Query(max_length=8192, description="`next_cursor` of the previous page")]


def _page(start: int, number: int, cursor: str | None) -> PageRequest:
    return validated(lambda: PageRequest(start=start, number=number, cursor=cursor or None))


@app.get("/v1/openapi.json", include_in_schema=False)
def openapi_document():
    return json_response(200, app.get_openapi_json_schema(**OPENAPI))


@app.get("/v1/collections")
def list_collections(start: PageStart = 0, number: PageSize = DEFAULT_PAGE_SIZE,
                     cursor: PageCursor = None) -> CollectionList:
    page = container().catalog.list_collections(require_reader(app).tenant, _page(start, number, cursor))
    return CollectionList(collections=page.ids, next_cursor=page.next_cursor)


@app.get("/v1/collections/<collection>")
def get_collection(collection: str) -> Collection:
    return container().catalog.get_collection(require_reader(app).tenant, path_param(collection))


@app.put("/v1/collections/<collection>")
def put_collection(collection: str, body: CollectionInput) -> Response[Collection]:
    tenant = require_admin(app).tenant
    stored, created = container().catalog.put_collection(tenant, path_param(collection), body)
    return Response(status_code=201 if created else 200, content_type="application/json", body=stored)


@app.delete("/v1/collections/<collection>", responses={204: {"description": "Deleted with all its documents"}})
def delete_collection(collection: str):
    container().catalog.delete_collection(require_admin(app).tenant, path_param(collection))
    return Response(status_code=204)


@app.get("/v1/collections/<collection>/documents")
def list_documents(collection: str, start: PageStart = 0, number: PageSize = DEFAULT_PAGE_SIZE,
                   cursor: PageCursor = None) -> DocumentList:
    page = container().catalog.list_documents(require_reader(app).tenant, path_param(collection),
                                              _page(start, number, cursor))
    return DocumentList(documents=page.ids, next_cursor=page.next_cursor)


@app.get("/v1/collections/<collection>/documents/<document>")
def get_document(collection: str, document: str) -> DocumentOut:
    stored, content = container().catalog.get_document(require_reader(app).tenant, path_param(collection),
                                                       path_param(document))
    return DocumentOut(**stored.model_dump(), content=content)


@app.put("/v1/collections/<collection>/documents/<document>")
def put_document(collection: str, document: str, body: DocumentInput) -> Response[DocumentOut]:
    tenant = require_admin(app).tenant
    stored, created = container().catalog.put_document(tenant, path_param(collection), path_param(document), body)
    return Response(status_code=201 if created else 200, content_type="application/json",
                    body=DocumentOut(**stored.model_dump()))


@app.delete("/v1/collections/<collection>/documents/<document>", responses={204: {"description": "Deleted everywhere"}})
def delete_document(collection: str, document: str):
    container().catalog.delete_document(require_admin(app).tenant, path_param(collection), path_param(document))
    return Response(status_code=204)


@app.post("/v1/collections/<collection>/documents/<document>/upload")
def prepare_upload(collection: str, document: str, body: UploadRequest) -> UploadResponse:
    ticket = container().catalog.prepare_upload(require_admin(app).tenant, path_param(collection),
                                                path_param(document), body.filename, body.mimetype, size=body.size)
    return UploadResponse(url=ticket.url, method=ticket.method, headers=ticket.headers, expires_at=ticket.expires_at,
                          document=DocumentOut(**ticket.document.model_dump()))


@app.get("/v1/collections/<collection>/documents/<document>/chunks")
def list_chunks(collection: str, document: str, start: PageStart = 0, number: PageSize = DEFAULT_PAGE_SIZE,
                cursor: PageCursor = None) -> ChunkList:
    page = container().catalog.list_chunks(require_reader(app).tenant, path_param(collection), path_param(document),
                                           _page(start, number, cursor))
    return ChunkList(chunks=[ChunkOut(chunk_id=c.chunk_id, index=c.index, start=c.start, end=c.end,
                                      page_start=c.page_start, page_end=c.page_end, text=c.text) for c in page.chunks],
                     next_cursor=page.next_cursor)


@app.post("/v1/rights-check-secret")
def rotate_rights_secret() -> RightsSecret:
    """Create or replace the tenant's signing secret for external rights checks; it is shown only in this answer."""
    secret = container().rights_secrets.rotate(require_admin(app).tenant)
    return RightsSecret(secret=secret, header="X-Kindex-Signature",
                        signature_format='t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">')


@app.post("/v1/citations")
def render_citations(body: CitationsRequest) -> CitationsResponse:
    return container().citations.render(require_query(app).tenant, body)


@app.post("/v1/collections/<collection>/reindex")
def start_reindex(collection: str, body: ReindexRequest) -> Response[ReindexJob]:
    job = container().reindex.start(require_admin(app).tenant, path_param(collection), body.clean)
    return Response(status_code=202, content_type="application/json", body=job)


@app.get("/v1/jobs/<job>")
def get_job(job: str) -> ReindexJob:
    return container().reindex.get_job(require_reader(app).tenant, path_param(job))


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    rejected = precheck(event, container().settings.max_body_bytes)
    return rejected if rejected is not None else app.resolve(event, context)
