"""Reindex jobs: `POST /v1/collections/{c}/reindex` starts one, `GET /v1/jobs/{id}` reports it."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from kindex.app.chunk_removal import require_collection
from kindex.app.record_writes import write_collection
from kindex.app.reindex import ReindexLimits
from kindex.domain.errors import NotFound
from kindex.domain.models import CHUNKING_VERSION, Collection, ReindexJob, utc_now
from kindex.domain.ports import CollectionStore, JobStore
from kindex.domain.reindex import ReindexTask

if TYPE_CHECKING:
    from kindex.app.reindex.switch import ModelSwitch
    from kindex.app.reindex.worker import ReindexWorker

logger = logging.getLogger(__name__)


class ReindexJobs:
    """Starts a job (its sweep's first, small page inside the request; the worker chains the rest) and reports its
    progress, recomputed from the documents, finishing the collection's model switch when it is complete."""

    def __init__(
        self,
        collections: CollectionStore,
        jobs: JobStore,
        worker: ReindexWorker,
        switch: ModelSwitch,
        *,
        limits: ReindexLimits | None = None,
    ):
        self.collections = collections
        self.jobs = jobs
        self.worker = worker
        self.switch = switch
        self.limits = limits or ReindexLimits()

    def start(self, tenant: str, collection_id: str, clean: bool) -> ReindexJob:
        """A reindex job: the sweep's first page now (a small one: this runs inside an API request), the rest
        chained through the reindex queue."""
        collection = self._current_chunking(tenant, require_collection(self.collections, tenant, collection_id))
        job_id = uuid.uuid4().hex
        report = self.worker.sweep_page(
            ReindexTask(kind="sweep", tenant=tenant, collection=collection_id, clean=clean, job=job_id),
            collection,
            max_documents=self.limits.job_first_page_documents,
        )
        finished = report.complete and report.done == report.total
        job = ReindexJob(
            id=job_id,
            tenant=tenant,
            collection=collection_id,
            clean=clean,
            total=report.total,
            done=report.done,
            enqueued=report.enqueued,
            repaired=report.repaired,
            status="completed" if finished else "running",
        )
        self.jobs.put_job(job)
        return job

    def get_job(self, tenant: str, job_id: str) -> ReindexJob:
        job = self.jobs.get_job(tenant, job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} does not exist")
        if job.status == "completed" or job.kind == "delete":
            return job  # a delete job's worker writes its progress
        collection = self.collections.get_collection(tenant, job.collection)
        if collection is None:
            return job.model_copy(update={"status": "completed"})
        total, done = self.switch.progress(tenant, collection)
        if collection.switching and total == done:
            self.switch.switch(tenant, collection)
            collection = require_collection(self.collections, tenant, job.collection)
        status = "completed" if total == done and not collection.switching else "running"
        job = job.model_copy(update={"total": total, "done": done, "status": status, "updated_at": utc_now()})
        self.jobs.put_job(job)
        return job

    def _current_chunking(self, tenant: str, collection: Collection) -> Collection:
        """The collection at the current chunking version: written so (with a new configuration version, as any
        chunking change) when it was chunked under an older one."""
        if collection.chunking_version >= CHUNKING_VERSION:
            return collection

        def upgraded(current: Collection | None) -> Collection:
            if current is None:
                raise NotFound(f"collection {collection.id!r} does not exist")
            if current.chunking_version >= CHUNKING_VERSION:
                return current
            return current.model_copy(
                update={
                    "chunking_version": CHUNKING_VERSION,
                    "config_version": current.config_version + 1,
                    "updated_at": utc_now(),
                }
            )

        written, _ = write_collection(self.collections, tenant, collection.id, collection, upgraded)
        logger.info(
            "collection chunking upgraded",
            extra={"tenant": tenant, "collection": collection.id, "chunking_version": written.chunking_version},
        )
        return written


def record_page(jobs: JobStore, tenant: str, job_id: str, enqueued: int, repaired: dict[str, int]) -> None:
    """A later page of a job's sweep adds what it re-sent and repaired to the job (until the job completes)."""
    job = jobs.get_job(tenant, job_id)
    if job is not None and job.status != "completed":
        merged = {name: job.repaired.get(name, 0) + count for name, count in repaired.items()}
        jobs.put_job(job.model_copy(update={"enqueued": enqueued, "repaired": merged, "updated_at": utc_now()}))
