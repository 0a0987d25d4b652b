"""The reindex worker: one task's bounded work (a collection's pass, a sweep page, a tenant's orphan blobs, a
collection delete step), keeping each collection's `ReindexState` (cursors, sweeps under way, what a sweep covered)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from kindex.app.collection_deletion import CollectionDeleter
from kindex.app.reindex import CollectionReport, ReindexLimits, send_tasks
from kindex.app.reindex.jobs import record_page
from kindex.app.reindex.orphans import OrphanBlobs
from kindex.app.reindex.pages import PageChecker
from kindex.app.reindex.switch import ModelSwitch
from kindex.app.usage import UsageService
from kindex.domain.errors import Conflict
from kindex.domain.models import Collection, utc_now
from kindex.domain.ports import CollectionStore, IngestTrigger, JobStore, ReindexLedger, ReindexQueue
from kindex.domain.reindex import ReindexState, ReindexTask

logger = logging.getLogger(__name__)

# A sweep whose pages have not moved for this long is taken for lost (a page task dead-lettered): the next pass
# starts it again.
SWEEP_LEASE = timedelta(minutes=30)
STATE_WRITE_ATTEMPTS = 3


class ReindexWorker:
    """Does one reindex task at a time; the ingest pipeline does the indexing. The pages are checked by `pages`, a
    switch made by `switch`, a tenant's orphan blobs deleted by `orphans` and a delete step done by `deleter`.
    `clock` is the time a task judges waits by (stuck, abandoned, content that never came)."""

    def __init__(
        self,
        collections: CollectionStore,
        ledger: ReindexLedger,
        queue: ReindexQueue,
        trigger: IngestTrigger,
        jobs: JobStore,
        *,
        pages: PageChecker,
        switch: ModelSwitch,
        orphans: OrphanBlobs,
        deleter: CollectionDeleter,
        limits: ReindexLimits | None = None,
        clock: Callable[[], datetime] = utc_now,
        usage: UsageService | None = None,
    ):
        self.usage = usage  # the tenant task recounts the tenant's usage counters (drift repaired and logged)
        self.collections = collections
        self.ledger = ledger
        self.queue = queue
        self.trigger = trigger
        self.jobs = jobs
        self.pages = pages
        self.switch = switch
        self.orphans = orphans
        self.deleter = deleter
        self.limits = limits or ReindexLimits()
        self.clock = clock

    def handle(self, task: ReindexTask) -> CollectionReport:
        """One task's bounded work."""
        if task.kind == "tenant":
            # The first step also recounts the tenant's usage counters from its records (UsageService.reconcile).
            repaired = (
                task.recount and task.after is None and self.usage is not None and self.usage.reconcile(task.tenant)
            )
            report = self.orphans.step(task)
            if repaired:
                report.repaired["usage_counters"] = 1
            return report
        if task.kind == "delete":
            self.deleter.run(task)
            return CollectionReport()
        collection = self.collections.get_collection(task.tenant, task.collection or "")
        if collection is None:
            return CollectionReport()
        if task.kind == "sweep":
            return self.sweep_page(task, collection)
        return self._collection_pass(task.tenant, collection)

    def reindex_collection(self, tenant: str, collection: Collection, *, clean: bool) -> CollectionReport:
        """One collection's pass now, in this process: what its collection task does (with `clean`, a clean sweep's
        first page; further pages go through the reindex queue)."""
        if clean:
            return self.sweep_page(
                ReindexTask(kind="sweep", tenant=tenant, collection=collection.id, clean=True), collection
            )
        return self._collection_pass(tenant, collection)

    def _collection_pass(self, tenant: str, collection: Collection) -> CollectionReport:
        report = CollectionReport()
        state = self._state(tenant, collection)
        now = self.clock()
        cursors: dict[str, str | None] = {}
        if not state.covers(collection):
            if state.sweeping_since is None or now - state.sweeping_since > SWEEP_LEASE:
                if self._update_state(
                    tenant, collection, lambda s: s.model_copy(update={"sweeping_since": now}), read=state
                ):
                    report = self.sweep_page(
                        ReindexTask(
                            kind="sweep", tenant=tenant, collection=collection.id, deep=not state.resent(collection)
                        ),
                        collection,
                    )
                    state = self._state(tenant, collection)
        else:
            needing_attention = self.ledger.attention_documents(
                tenant, collection.id, after=None, limit=self.limits.attention_documents
            )
            to_send = self.pages.attention(tenant, collection, needing_attention, report, now)
            page = self.pages.check_page(
                tenant,
                collection,
                after=state.drift_after,
                clean=False,
                report=report,
                now=now,
                max_documents=self.limits.drift_page_documents,
                chunk_budget=self.limits.drift_page_chunks,
                deep=False,
            )
            self._send(list(dict.fromkeys(to_send + page.to_send)), report)
            cursors["drift_after"] = None if page.complete else page.last
        blobs_to_send, cursors["blob_after"] = self.pages.blob_page(
            tenant, collection, after=state.blob_after, limit=self.limits.blob_page, report=report, now=now
        )
        self._send(blobs_to_send, report)
        self._update_state(tenant, collection, lambda s: s.model_copy(update=cursors), read=state)
        self._log("reindex collection", tenant, collection, report)
        return report

    def sweep_page(
        self, task: ReindexTask, collection: Collection, *, max_documents: int | None = None
    ) -> CollectionReport:
        report = CollectionReport()
        now = self.clock()
        page = self.pages.check_page(
            task.tenant,
            collection,
            after=task.after,
            clean=task.clean,
            report=report,
            now=now,
            max_documents=max_documents or self.limits.sweep_page_documents,
            chunk_budget=self.limits.sweep_page_chunks,
            deep=task.deep,
        )
        self._send(page.to_send, report)
        report.complete = page.complete
        total, done, enqueued = task.total + report.total, task.done + report.done, task.enqueued + report.enqueued
        if not page.complete:
            send_tasks(
                self.queue,
                [task.model_copy(update={"after": page.last, "total": total, "done": done, "enqueued": enqueued})],
            )
            self._update_state(task.tenant, collection, lambda s: s.model_copy(update={"sweeping_since": now}))
        else:
            self._finish_sweep(task.tenant, collection, all_done=done == total, report=report)
        if task.job and task.after is not None:
            record_page(self.jobs, task.tenant, task.job, enqueued, report.repaired)
        self._log("reindex sweep page", task.tenant, collection, report)
        return report

    def _finish_sweep(self, tenant: str, collection: Collection, *, all_done: bool, report: CollectionReport) -> None:
        """The last page: a sweep that found every document current marks the configuration covered (and finishes
        a model switch); one that re-sent work leaves it uncovered, so the next pass sweeps again to confirm."""
        if all_done and collection.switching:
            self.switch.switch(tenant, collection)
            report.switched = True
            collection = self.collections.get_collection(tenant, collection.id) or collection
        covered = all_done and not collection.switching
        configuration = {"config_version": collection.config_version, "model": collection.embedding_model}
        self._update_state(
            tenant,
            collection,
            lambda s: s.model_copy(
                update={
                    "sweeping_since": None,
                    **(
                        {f"swept_{k}": v for k, v in configuration.items()} | {"drift_after": None}
                        if covered
                        else {f"resent_{k}": v for k, v in configuration.items()}
                    ),
                }
            ),
        )

    def _send(self, blob_keys: Sequence[str], report: CollectionReport) -> None:
        if blob_keys:
            self.trigger.trigger(list(blob_keys))
        report.enqueued += len(blob_keys)

    def _state(self, tenant: str, collection: Collection) -> ReindexState:
        state = self.ledger.get_state(tenant, collection.id)
        if state is None:
            return ReindexState(collection=collection.id, collection_created_at=collection.created_at)
        if state.collection_created_at != collection.created_at:
            # The collection was deleted and created again: nothing of the old state applies.
            return ReindexState(
                collection=collection.id, collection_created_at=collection.created_at, revision=state.revision
            )
        return state

    def _update_state(
        self,
        tenant: str,
        collection: Collection,
        change: Callable[[ReindexState], ReindexState],
        *,
        read: ReindexState | None = None,
    ) -> bool:
        """Change and conditionally write the state (as `read` just now, else read it); a concurrent writer makes it
        read again and retry. False when it kept losing (the change is dropped: every change is a cursor or a marker
        the next pass redoes)."""
        for attempt in range(STATE_WRITE_ATTEMPTS):
            state = read if read is not None and attempt == 0 else self._state(tenant, collection)
            changed = change(state).model_copy(update={"revision": state.revision + 1})
            try:
                self.ledger.put_state(tenant, changed)
                return True
            except Conflict:
                continue
        logger.warning("reindex state kept changing", extra={"tenant": tenant, "collection": collection.id})
        return False

    @staticmethod
    def _log(message: str, tenant: str, collection: Collection, report: CollectionReport) -> None:
        logger.info(
            message,
            extra={
                "tenant": tenant,
                "collection": collection.id,
                "total": report.total,
                "done": report.done,
                "enqueued": report.enqueued,
                "complete": report.complete,
                "switched": report.switched,
                **report.repaired,
            },
        )
