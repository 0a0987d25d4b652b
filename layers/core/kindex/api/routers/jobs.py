"""Reindex jobs: start one for a collection, follow it."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from kindex.api.dependencies import ServicesDep
from kindex.api.http import path_param, require_admin, require_reader
from kindex.api.models import (
    ReindexRequest,
)
from kindex.domain.models import (
    ReindexJob,
)

router = APIGatewayRouter()


@router.post("/v1/collections/<collection>/reindex")
def start_reindex(collection: str, body: ReindexRequest, svc: ServicesDep) -> Response[ReindexJob]:
    job = svc.reindex_jobs.start(require_admin(router).tenant, path_param(collection), body.clean)
    return Response(status_code=202, content_type="application/json", body=job)


@router.get("/v1/jobs/<job>")
def get_job(job: str, svc: ServicesDep) -> ReindexJob:
    return svc.reindex_jobs.get_job(require_reader(router).tenant, path_param(job))
