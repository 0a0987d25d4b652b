"""Collections, documents, uploads and chunks."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import path_param, require_admin, require_reader, stored_or_normalized
from kindex.api.models import (
    ChunkList,
    ChunkOut,
    CollectionList,
    CollectionOut,
    DocumentList,
    DocumentOut,
    UploadRequest,
    UploadResponse,
)
from kindex.domain.models import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MAX_PAGE_START,
    CollectionInput,
    DocumentInput,
    PageRequest,
    ReindexJob,
)
from kindex.domain.validation import validated

router = APIGatewayRouter()

# Every list route pages the same way; bounded so that no answer can outgrow Lambda's 6 MB response.
PageStart = Annotated[int, Query(ge=0, le=MAX_PAGE_START, description="items to skip (ignored with a cursor)")]
PageSize = Annotated[
    int,
    Query(
        ge=-1, le=MAX_PAGE_SIZE, description=f"page size, 1 to {MAX_PAGE_SIZE}; -1 (XWiki's 'all') is the largest page"
    ),
]
PageCursor = Annotated[str | None, Query(max_length=8192, description="`next_cursor` of the previous page")]


def _page(start: int, number: int, cursor: str | None) -> PageRequest:
    return validated(lambda: PageRequest(start=start, number=number, cursor=cursor or None))


@router.get("/v1/collections")
def list_collections(
    svc: ServicesDep, start: PageStart = 0, number: PageSize = DEFAULT_PAGE_SIZE, cursor: PageCursor = None
) -> CollectionList:
    page = svc.catalog.list_collections(require_reader(router).tenant, _page(start, number, cursor))
    return CollectionList(collections=page.ids, next_cursor=page.next_cursor)


@router.get("/v1/collections/<collection>")
def get_collection(collection: str, svc: ServicesDep) -> CollectionOut:
    tenant = require_reader(router).tenant
    return CollectionOut.of(stored_or_normalized(partial(svc.catalog.get_collection, tenant), collection))


@router.put("/v1/collections/<collection>")
def put_collection(collection: str, body: CollectionInput, svc: ServicesDep) -> Response[CollectionOut]:
    tenant = require_admin(router).tenant
    stored, created = svc.catalog.put_collection(tenant, path_param(collection), body)
    return Response(status_code=201 if created else 200, content_type="application/json", body=CollectionOut.of(stored))


@router.delete(
    "/v1/collections/<collection>",
    responses={
        202: {
            "description": (
                "Gone from every read at once; its documents, chunks, vectors and blobs are deleted by the job"
            )
        }
    },
)
def delete_collection(collection: str, svc: ServicesDep) -> Response[ReindexJob]:
    job = stored_or_normalized(partial(svc.catalog.delete_collection, require_admin(router).tenant), collection)
    return Response(status_code=202, content_type="application/json", body=job)


@router.get("/v1/collections/<collection>/documents")
def list_documents(
    collection: str,
    svc: ServicesDep,
    start: PageStart = 0,
    number: PageSize = DEFAULT_PAGE_SIZE,
    cursor: PageCursor = None,
) -> DocumentList:
    tenant, paging = require_reader(router).tenant, _page(start, number, cursor)
    page = stored_or_normalized(lambda c: svc.catalog.list_documents(tenant, c, paging), collection)
    return DocumentList.of(page)


@router.get("/v1/collections/<collection>/documents/<document>")
def get_document(collection: str, document: str, svc: ServicesDep) -> DocumentOut:
    stored, content = stored_or_normalized(
        partial(svc.catalog.get_document, require_reader(router).tenant), collection, document
    )
    return DocumentOut(**stored.model_dump(), content=content)


@router.put("/v1/collections/<collection>/documents/<document>")
def put_document(collection: str, document: str, body: DocumentInput, svc: ServicesDep) -> Response[DocumentOut]:
    tenant = require_admin(router).tenant
    stored, created = svc.catalog.put_document(tenant, path_param(collection), path_param(document), body)
    return Response(
        status_code=201 if created else 200, content_type="application/json", body=DocumentOut(**stored.model_dump())
    )


@router.delete(
    "/v1/collections/<collection>/documents/<document>", responses={204: {"description": "Deleted everywhere"}}
)
def delete_document(collection: str, document: str, svc: ServicesDep):
    stored_or_normalized(partial(svc.catalog.delete_document, require_admin(router).tenant), collection, document)
    return Response(status_code=204)


@router.post("/v1/collections/<collection>/documents/<document>/upload")
def prepare_upload(collection: str, document: str, body: UploadRequest, svc: ServicesDep) -> UploadResponse:
    ticket = svc.catalog.prepare_upload(
        require_admin(router).tenant,
        path_param(collection),
        path_param(document),
        body.filename,
        body.mimetype,
        size=body.size,
        fields=body.fields(),
    )
    return UploadResponse(
        url=ticket.url,
        method=ticket.method,
        headers=ticket.headers,
        expires_at=ticket.expires_at,
        document=DocumentOut(**ticket.document.model_dump()),
    )


@router.get("/v1/collections/<collection>/documents/<document>/chunks")
def list_chunks(
    collection: str,
    document: str,
    svc: ServicesDep,
    start: PageStart = 0,
    number: PageSize = DEFAULT_PAGE_SIZE,
    cursor: PageCursor = None,
) -> ChunkList:
    tenant, paging = require_reader(router).tenant, _page(start, number, cursor)
    page = stored_or_normalized(lambda c, d: svc.catalog.list_chunks(tenant, c, d, paging), collection, document)
    return ChunkList(
        chunks=[
            ChunkOut(
                chunk_id=c.chunk_id,
                index=c.index,
                start=c.start,
                end=c.end,
                page_start=c.page_start,
                page_end=c.page_end,
                text=c.text,
                section=c.section,
                table_header=c.table_header,
            )
            for c in page.chunks
        ],
        next_cursor=page.next_cursor,
    )
