"""Deleting a collection as a job: `DELETE /v1/collections/{c}` only takes the collection out of every read
(`start`: one atomic write, then the job record and its first task), and the reindex worker does the rest in
the background, one step per task (`CollectionDeleter.run`), so no request budget bounds a collection's size.

Steps, in this order, each idempotent (a redelivered task, or the planner resuming a lost chain, redoes its step):

1. `blobs`: every blob under the collection's prefix (all versions). Their removal events find no collection.
2. `records`: every document record and the reindex state. An ingest that read the collection before it went and
   commits its document afterwards finds no record (NotFound) and removes what it wrote itself.
3. `index`: every vector under the collection's models, then every chunk text (`ChunkRemover`). Chunks an ingest
   wrote before its record committed are gone with them, since the records went first.

Then the pending deletion ends and the job completes; only from then may the collection's id be created again, so
a new collection of that id never meets anything of the old one, and no step ever runs against a new one (each
step first checks that its job's deletion is still pending)."""

from __future__ import annotations

import logging
import uuid

from kindex.app.chunk_removal import ChunkRemover
from kindex.domain import keys
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import ReindexJob, utc_now
from kindex.domain.ports import BlobStore, CollectionDeletions, CollectionStore, JobStore, ReindexQueue
from kindex.domain.reindex import ReindexTask

logger = logging.getLogger(__name__)

STEPS = ("blobs", "records", "index")


def start_deletion(
    collections: CollectionStore,
    deletions: CollectionDeletions,
    jobs: JobStore,
    queue: ReindexQueue,
    tenant: str,
    collection_id: str,
) -> ReindexJob:
    """Take the collection out of every read and write at once and queue its deletion; returns the running job. A
    collection already being deleted returns that deletion's job (a DELETE retried after a lost answer); none at all
    is NotFound. The collection record goes only over the revision read: a write committed meanwhile means reading
    it again (its models are the ones whose vectors go)."""
    job_id = uuid.uuid4().hex
    for _ in range(3):
        collection = collections.get_collection(tenant, collection_id)
        if collection is None:
            pending = deletions.pending_deletion(tenant, collection_id)
            if pending is None:
                raise NotFound(f"collection {collection_id!r} does not exist")
            # Its job record is missing only if the request that began the deletion died right after: record it.
            return jobs.get_job(tenant, pending.job) or _record_job(jobs, tenant, collection_id, pending.job)
        try:
            deletions.mark_deleting(tenant, collection, job_id)
        except (Conflict, NotFound):
            continue  # written or deleted meanwhile: judge the collection as it is now
        job = _record_job(jobs, tenant, collection_id, job_id)
        # Should this send be lost (a crash right here), the reindex planner's next pass sends the task again.
        queue.send([ReindexTask(kind="delete", tenant=tenant, collection=collection_id, job=job_id)])
        logger.info("collection deletion started", extra={"tenant": tenant, "collection": collection_id, "job": job_id})
        return job
    raise Conflict(f"collection {collection_id!r} kept changing while it was being deleted; try again")


def _record_job(jobs: JobStore, tenant: str, collection_id: str, job_id: str) -> ReindexJob:
    job = ReindexJob(id=job_id, tenant=tenant, collection=collection_id, kind="delete", total=len(STEPS))
    jobs.put_job(job)
    return job


class CollectionDeleter:
    """Runs one step of a collection's delete job per task; stateless, safe to share."""

    def __init__(
        self,
        collections: CollectionStore,
        deletions: CollectionDeletions,
        blobs: BlobStore,
        remover: ChunkRemover,
        jobs: JobStore,
        queue: ReindexQueue,
    ):
        self.collections = collections
        self.deletions = deletions
        self.blobs = blobs
        self.remover = remover
        self.jobs = jobs
        self.queue = queue

    def run(self, task: ReindexTask) -> None:
        """The step after `task.after`, then the next step's task (or, after the last, the end of the deletion)."""
        tenant, collection_id = task.tenant, task.collection or ""
        pending = self.deletions.pending_deletion(tenant, collection_id)
        if pending is None or pending.job != task.job:
            # Ended already (a duplicate task, or the planner's resend of a chain that finished): nothing to redo,
            # and the id may name a new collection by now, which no step may touch.
            self._report(tenant, task.job or "", len(STEPS), completed=True)
            return
        step = STEPS[0] if task.after is None else STEPS[STEPS.index(task.after) + 1]
        if step == "blobs":
            deleted = self.blobs.delete_prefix(keys.collection_prefix(tenant, collection_id))
            logger.info(
                "collection deletion: blobs",
                extra={"tenant": tenant, "collection": collection_id, "blobs_deleted": deleted},
            )
        elif step == "records":
            self.collections.delete_collection(tenant, collection_id)
        else:
            self.remover.remove_collection(tenant, pending.collection)
        if step != STEPS[-1]:
            self.queue.send([task.model_copy(update={"after": step})])
            self._report(tenant, pending.job, STEPS.index(step) + 1, completed=False)
            return
        self.deletions.end_deletion(tenant, collection_id, pending.job)
        self._report(tenant, pending.job, len(STEPS), completed=True)
        logger.info("collection deleted", extra={"tenant": tenant, "collection": collection_id, "job": pending.job})

    def _report(self, tenant: str, job_id: str, done: int, *, completed: bool) -> None:
        job = self.jobs.get_job(tenant, job_id)
        if job is None or job.status == "completed":
            return
        self.jobs.put_job(
            job.model_copy(
                update={
                    "done": max(job.done, done),
                    "updated_at": utc_now(),
                    "status": "completed" if completed else "running",
                }
            )
        )
