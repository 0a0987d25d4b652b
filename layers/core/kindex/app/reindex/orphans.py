"""A tenant task: the blobs of collections that no longer exist."""

from __future__ import annotations

import logging

from kindex.app.reindex import CollectionReport, ReindexLimits, send_tasks
from kindex.domain import keys
from kindex.domain.ports import BlobStore, CollectionStore, ReindexQueue
from kindex.domain.reindex import ReindexTask

logger = logging.getLogger(__name__)


class OrphanBlobs:
    """Deletes the blobs of a tenant's collections that no longer exist, a bounded walk per task."""

    def __init__(
        self,
        blobs: BlobStore,
        collections: CollectionStore,
        queue: ReindexQueue,
        *,
        limits: ReindexLimits | None = None,
    ):
        self.blobs = blobs
        self.collections = collections
        self.queue = queue
        self.limits = limits or ReindexLimits()

    def step(self, task: ReindexTask) -> CollectionReport:
        """One listed key per collection prefix, walking from `task.after`; chains the next task after
        `tenant_steps` prefixes."""
        report = CollectionReport()
        prefix = keys.tenant_collections_prefix(task.tenant)
        after, exists = task.after, {}
        for _ in range(self.limits.tenant_steps):
            listed = self.blobs.list_blobs(prefix, start_after=after, limit=1)
            if not listed:
                report.complete = True
                break
            parsed = keys.parse_blob_key(listed[0])
            if parsed is None:
                after = listed[0]
                continue
            collection_id = parsed[1]
            if collection_id not in exists:
                exists[collection_id] = self.collections.get_collection(task.tenant, collection_id) is not None
            if exists[collection_id]:
                after = keys.collection_prefix(task.tenant, collection_id) + "\U0010ffff"  # past all its keys
                continue
            deleted = self.blobs.delete_prefix(keys.collection_prefix(task.tenant, collection_id))
            report.repaired["orphan_blobs"] = report.repaired.get("orphan_blobs", 0) + deleted
            after = listed[0]
        else:
            report.complete = False
            send_tasks(self.queue, [task.model_copy(update={"after": after})])
        logger.info(
            "reindex tenant",
            extra={
                "tenant": task.tenant,
                "orphan_blobs_deleted": report.repaired.get("orphan_blobs", 0),
                "complete": report.complete,
            },
        )
        return report
