"""Export and import of a collection: a paginated export (reader) and a batched import (admin)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import path_param, require_admin, require_reader
from kindex.domain.transfer import DEFAULT_EXPORT_CHUNKS, MAX_BATCH_CHUNKS, ExportPage, ImportRequest, ImportResult

router = APIGatewayRouter()

ExportCursor = Annotated[str | None, Query(max_length=8192, description="`next_cursor` of the previous page")]
ExportSize = Annotated[
    int, Query(ge=1, le=MAX_BATCH_CHUNKS, description="chunks per page (pages also end before 4 MiB)")
]


@router.get("/v1/collections/<collection>/export")
def export_collection(
    collection: str, svc: ServicesDep, cursor: ExportCursor = None, number: ExportSize = DEFAULT_EXPORT_CHUNKS
) -> ExportPage:
    return svc.transfer.export_page(require_reader(router).tenant, path_param(collection), cursor or None, number)


@router.post("/v1/collections/<collection>/import")
def import_batch(collection: str, body: ImportRequest, svc: ServicesDep) -> ImportResult:
    return svc.transfer.import_batch(require_admin(router).tenant, path_param(collection), body)
