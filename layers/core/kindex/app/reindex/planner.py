"""The scheduled reindex run: plans bounded tasks, does none of them (the worker does)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from kindex.app.reindex import ReindexLimits, send_tasks
from kindex.domain.models import utc_now
from kindex.domain.ports import CollectionDeletions, CollectionStore, KeyStore, ReindexQueue
from kindex.domain.reindex import ReindexTask

logger = logging.getLogger(__name__)


class ReindexPlanner:
    """Sends one task per tenant and per collection to the reindex queue, and one per pending collection deletion.
    Reads the key listing, each tenant's collection ids (keys only) and pending deletions; no collection, document
    or chunk item. The tenant tasks of a full pass, and of the passes planned in the UTC hour `recount_hour` (once a
    day on the hourly schedule; None: never), also recount the tenants' usage counters: a recount reads every
    document item of the tenant, which an hourly pass must not (docs/scale.md)."""

    def __init__(
        self,
        key_store: KeyStore,
        collections: CollectionStore,
        deletions: CollectionDeletions,
        queue: ReindexQueue,
        *,
        limits: ReindexLimits | None = None,
        recount_hour: int | None = 0,
        clock: Callable[[], datetime] = utc_now,
    ):
        self.recount_hour = recount_hour
        self.clock = clock
        self.key_store = key_store
        self.collections = collections
        self.deletions = deletions
        self.queue = queue
        self.limits = limits or ReindexLimits()

    def plan(self, *, full: bool = False) -> dict[str, int]:
        """The scheduled run's tasks, sent. `full` sends each collection's first sweep page instead of its collection
        task (`kindex reindex --full`): every document is checked, page by page."""
        summary = {"tenants": 0, "collections": 0, "tasks": 0}
        pending: list[ReindexTask] = []
        recount = full or self.clock().hour == self.recount_hour
        for tenant in sorted({key.tenant for key in self.key_store.list_keys()}):
            summary["tenants"] += 1
            pending.append(ReindexTask(kind="tenant", tenant=tenant, recount=recount))
            pending += [
                ReindexTask(kind="delete", tenant=tenant, collection=deletion.collection.id, job=deletion.job)
                for deletion in self.deletions.pending_deletions(tenant)
            ]
            after, more = None, True
            while more:
                ids = self.collections.list_collections(tenant, after=after, offset=0, limit=self.limits.planner_batch)
                more, after = len(ids) == self.limits.planner_batch, ids[-1] if ids else after
                summary["collections"] += len(ids)
                pending += [
                    ReindexTask(kind="sweep" if full else "collection", tenant=tenant, collection=c) for c in ids
                ]
                if len(pending) >= self.limits.planner_batch:
                    summary["tasks"] += send_tasks(self.queue, pending)
                    pending = []
        summary["tasks"] += send_tasks(self.queue, pending)
        logger.info("reindex planned", extra=summary)
        return summary
