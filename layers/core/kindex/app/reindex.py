"""Reindex: keeps every collection's index true to its configuration and its blobs, finding work by change.

The scheduled run only plans (`plan`): it lists tenants (from their keys) and collection ids (keys only) and sends
one bounded task per tenant and per collection to the reindex queue. The worker (`handle`) does one task:

- a collection task reads the collection record and its `ReindexState`. When the collection's configuration or
  model differs from what its last complete sweep covered (or a model switch is under way), it starts a sweep: a
  chain of page tasks, each examining at most `ReindexLimits.sweep_page_documents` documents and sending the next
  page's task. Otherwise it looks only at the documents that need attention (a keys-only query of an index holding
  just the pending, in-progress and retryable failed documents), one bounded drift page from the state's cursor (a
  full drift sweep is spread over many passes) and one bounded page of the collection's blobs from another cursor.
- a page (of a sweep, or the drift page) checks its documents against the search index for exactly their id range:
  outdated, retryable failed or stuck documents are re-sent to the ingest, documents whose vectors are missing are
  rebuilt, vectors without chunks (of those documents, or of ids in the range with no document) are deleted;
  documents whose content never came (a title-only record, an unused upload URL, a stalled import) fail past their
  bound (NO_CONTENT_AFTER and after), there and among the documents needing attention. A
  drift page whose documents are all indexed and whose chunk counts match the index reads no chunk item.
- a tenant task walks the tenant's collection prefixes in the blob store, one key per collection, and deletes the
  blobs of collections that no longer exist.
- a delete task is one step of a collection's delete job (kindex/app/collection_deletion.py); the planner sends
  every pending deletion's first step again, so a deletion whose chain was lost (a crash) resumes and ends.

A model change is built beside the old vectors; when a sweep finds every document done under the new model, the
collection switches its query model and the old vectors and unreferenced chunks are dropped.
`POST /v1/collections/{c}/reindex` (`start`) runs the first sweep page inline and chains the rest the same way; it
first brings a collection of an older chunking version (`Collection.chunking_version`) to the current one, which
bumps its configuration version, so the sweep rebuilds every document with the current chunking (its old chunks
serve queries until each document's new ones are written; unchanged chunk texts reuse their cached vectors)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kindex.app.chunk_removal import ChunkRemover, require_collection
from kindex.app.collection_deletion import CollectionDeleter
from kindex.app.document_writes import write_document
from kindex.app.record_writes import write_collection
from kindex.domain import keys
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import (
    CHUNKING_VERSION,
    Collection,
    Document,
    DocumentStatus,
    ReindexJob,
    utc_now,
)
from kindex.domain.ports import (
    BlobStore,
    ChunkStore,
    CollectionDeletions,
    CollectionStore,
    DocumentStore,
    IngestTrigger,
    JobStore,
    KeyStore,
    ReindexLedger,
    ReindexQueue,
    SearchIndex,
)
from kindex.domain.reindex import ReindexState, ReindexTask
from kindex.domain.sidecar import described_key, is_sidecar

logger = logging.getLogger(__name__)

STUCK_AFTER = timedelta(hours=1)
# An API write stores its blob, then commits the record that points at it (within one request: at most a Lambda's
# 15 minutes). A blob of a write that no record points at an hour later was left by a write that lost, failed or was
# superseded (an upload ticket replaced before its upload, say): nothing will ever read it.
ABANDONED_AFTER = timedelta(hours=1)
# A sweep whose pages have not moved for this long is taken for lost (a page task dead-lettered): the next pass
# starts it again.
SWEEP_LEASE = timedelta(minutes=30)
STATE_WRITE_ATTEMPTS = 3
# Content only the client can send, that never came: the pass fails such a document for good (retrying cannot help),
# with a reason saying what brings it back; that content, sent any time later, indexes it as usual (docs/decisions.md,
# "Documents whose content never came").
# - A record created without content (a PUT of metadata alone): a client that creates the record first asks for its
#   upload URL at once (that points the record at a key), so an hour without any write means nothing is coming.
NO_CONTENT_AFTER = timedelta(hours=1)
# - An upload URL that was never used: it lives 15 minutes (`CatalogService.upload_url_ttl`); an hour after it was
#   issued no upload through it can still arrive.
UPLOAD_MISSING_AFTER = timedelta(hours=1)
# - An import whose chunks stopped coming: every batch that brings some of them stamps `updated_at`, and the import
#   client sends a file's batches back to back, so a day without one is an import given up (rerunning it replaces
#   the documents it sends).
IMPORT_STALLED_AFTER = timedelta(hours=24)


@dataclass(frozen=True)
class ReindexLimits:
    """How much one task may read; docs/scale.md turns these into read units per pass."""

    sweep_page_documents: int = 1000  # documents one sweep page examines (and at most re-sends)
    sweep_page_chunks: int = 20_000  # chunks (by the records' counts) one sweep page reads; it ends early at this
    job_first_page_documents: int = 100  # the page POST .../reindex examines inside its request
    drift_page_documents: int = 200  # documents the per-pass drift page examines (one Query of their records)
    drift_page_chunks: int = 10_000  # chunks (by the records' counts) of the per-pass drift page: the index ids it
    # fetches, and the chunk items it reads when the page is inconsistent
    attention_documents: int = 1000  # documents needing attention examined per collection and pass
    blob_page: int = 100  # blob keys listed per collection and pass (one document read per blob)
    tenant_steps: int = 500  # collection prefixes one tenant task walks before chaining the next
    planner_batch: int = 500  # tasks the planner hands the queue at once


@dataclass
class CollectionReport:
    total: int = 0
    done: int = 0
    enqueued: int = 0
    remaining: int = 0
    switched: bool = False
    complete: bool = True
    repaired: dict[str, int] = field(
        default_factory=lambda: {
            "blobs_without_documents": 0,
            "documents_without_vectors": 0,
            "vectors_without_chunks": 0,
            "abandoned_blobs": 0,
            "documents_without_content": 0,
        }
    )


@dataclass
class Page:
    """One examined page of documents: what to re-send, where it ended, whether it reached the end."""

    to_send: list[str]
    last: str | None
    complete: bool


def up_to_date(document: Document, collection: Collection) -> bool:
    """Indexed under the collection's model and configuration, or failed for good (retrying will not help)."""
    if document.status is DocumentStatus.FAILED:
        return not document.failure_retryable
    return document.is_current(collection)


class ReindexService:
    """Plans bounded reindex tasks and does one task at a time; the ingest pipeline does the indexing. `clock` is
    the time a task judges waits by (stuck, abandoned, content that never came)."""

    def __init__(
        self,
        collections: CollectionStore,
        documents: DocumentStore,
        blobs: BlobStore,
        chunks: ChunkStore,
        index: SearchIndex,
        trigger: IngestTrigger,
        jobs: JobStore,
        key_store: KeyStore,
        ledger: ReindexLedger,
        queue: ReindexQueue,
        deletions: CollectionDeletions,
        *,
        limits: ReindexLimits | None = None,
        clock: Callable[[], datetime] = utc_now,
    ):
        self.collections = collections
        self.documents = documents
        self.blobs = blobs
        self.chunks = chunks
        self.index = index
        self.remover = ChunkRemover(index, chunks)
        self.trigger = trigger
        self.jobs = jobs
        self.key_store = key_store
        self.ledger = ledger
        self.queue = queue
        self.deletions = deletions
        self.deleter = CollectionDeleter(collections, deletions, blobs, self.remover, jobs, queue)
        self.limits = limits or ReindexLimits()
        self.clock = clock

    # Entry points
    def plan(self, *, full: bool = False) -> dict[str, int]:
        """The scheduled run: one task per tenant and per collection on the reindex queue, and one per pending
        collection deletion. Reads the key listing, each tenant's collection ids (keys only) and pending deletions;
        no collection, document or chunk item. `full` sends each
        collection's first sweep page instead (`kindex reindex --full`): every document is checked, page by page."""
        summary = {"tenants": 0, "collections": 0, "tasks": 0}
        pending: list[ReindexTask] = []
        for tenant in sorted({key.tenant for key in self.key_store.list_keys()}):
            summary["tenants"] += 1
            pending.append(ReindexTask(kind="tenant", tenant=tenant))
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
                    summary["tasks"] += self._send_tasks(pending)
                    pending = []
        summary["tasks"] += self._send_tasks(pending)
        logger.info("reindex planned", extra=summary)
        return summary

    def handle(self, task: ReindexTask) -> CollectionReport:
        """The worker: one task's bounded work."""
        if task.kind == "tenant":
            return self._tenant_step(task)
        if task.kind == "delete":
            self.deleter.run(task)
            return CollectionReport()
        collection = self.collections.get_collection(task.tenant, task.collection or "")
        if collection is None:
            return CollectionReport()
        if task.kind == "sweep":
            return self._sweep_page(task, collection)
        return self._collection_pass(task.tenant, collection)

    def reindex_collection(self, tenant: str, collection: Collection, *, clean: bool) -> CollectionReport:
        """One collection's pass now, in this process: what its collection task does (with `clean`, a clean sweep's
        first page; further pages go through the reindex queue)."""
        if clean:
            return self._sweep_page(
                ReindexTask(kind="sweep", tenant=tenant, collection=collection.id, clean=True), collection
            )
        return self._collection_pass(tenant, collection)

    def start(self, tenant: str, collection_id: str, clean: bool) -> ReindexJob:
        """A reindex job: the sweep's first page now (a small one: this runs inside an API request), the rest
        chained through the reindex queue."""
        collection = self._current_chunking(tenant, self._collection(tenant, collection_id))
        job_id = uuid.uuid4().hex
        report = self._sweep_page(
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

    def get_job(self, tenant: str, job_id: str) -> ReindexJob:
        job = self.jobs.get_job(tenant, job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} does not exist")
        if job.status == "completed" or job.kind == "delete":
            return job  # a delete job's worker writes its progress
        collection = self.collections.get_collection(tenant, job.collection)
        if collection is None:
            return job.model_copy(update={"status": "completed"})
        total, done = self._progress(tenant, collection)
        if collection.switching and total == done:
            self.switch(tenant, collection)
            collection = self._collection(tenant, job.collection)
        status = "completed" if total == done and not collection.switching else "running"
        job = job.model_copy(update={"total": total, "done": done, "status": status, "updated_at": utc_now()})
        self.jobs.put_job(job)
        return job

    def finish_switches(self) -> int:
        """Switch every collection whose new model is complete (local mode's frequent check; cheap when nothing is
        switching: it reads collection records, and documents only of switching collections)."""
        switched = 0
        for tenant in sorted({key.tenant for key in self.key_store.list_keys()}):
            for collection_id in self.collections.list_collections(tenant, after=None, offset=0, limit=None):
                collection = self.collections.get_collection(tenant, collection_id)
                if collection and collection.switching:
                    total, done = self._progress(tenant, collection)
                    if total == done:
                        self.switch(tenant, collection)
                        switched += 1
        return switched

    def switch(self, tenant: str, collection: Collection) -> None:
        """Make the new model the query model, then drop the old model's vectors and unreferenced chunks. `collection`
        is the record the caller found complete under its model and configuration: the switch commits over the
        latest record (keeping whatever else was written since), and not at all when that record is no longer
        switching to the same model with the same configuration (the next pass judges the new one)."""
        old_model = collection.query_model

        def switched(current: Collection | None) -> Collection:
            nonlocal old_model
            if current is None:
                raise NotFound(f"collection {collection.id!r} does not exist")
            if (
                not current.switching
                or current.embedding_model != collection.embedding_model
                or current.config_version != collection.config_version
            ):
                raise Conflict(f"collection {collection.id!r} changed since its new model was found complete")
            old_model = current.query_model
            return current.model_copy(
                update={"active_embedding_model": current.embedding_model, "updated_at": utc_now()}
            )

        try:
            write_collection(self.collections, tenant, collection.id, collection, switched)
        except (Conflict, NotFound):
            return
        self.index.delete(old_model, tenant, collection.id)
        live = self.index.chunk_ids(collection.embedding_model, tenant, collection.id)
        for document in self._documents(tenant, collection.id):
            stale = [
                c.chunk_id
                for c in self.chunks.list_chunks(tenant, collection.id, document.id)
                if c.chunk_id not in live
            ]
            self.remover.remove_chunks(tenant, collection.id, document.id, stale, models=())  # no vector left
        logger.info(
            "model switched",
            extra={
                "tenant": tenant,
                "collection": collection.id,
                "from_model": old_model,
                "to_model": collection.embedding_model,
            },
        )

    # Tasks
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
                    report = self._sweep_page(
                        ReindexTask(
                            kind="sweep", tenant=tenant, collection=collection.id, deep=not state.resent(collection)
                        ),
                        collection,
                    )
                    state = self._state(tenant, collection)
        else:
            to_send = self._attention(tenant, collection, report, now)
            page = self._check_page(
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
        cursors["blob_after"] = self._blob_page(tenant, collection, state.blob_after, report, now)
        self._update_state(tenant, collection, lambda s: s.model_copy(update=cursors), read=state)
        self._log("reindex collection", tenant, collection, report)
        return report

    def _sweep_page(
        self, task: ReindexTask, collection: Collection, *, max_documents: int | None = None
    ) -> CollectionReport:
        report = CollectionReport()
        now = self.clock()
        page = self._check_page(
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
            self._send_tasks(
                [task.model_copy(update={"after": page.last, "total": total, "done": done, "enqueued": enqueued})]
            )
            self._update_state(task.tenant, collection, lambda s: s.model_copy(update={"sweeping_since": now}))
        else:
            self._finish_sweep(task.tenant, collection, all_done=done == total, report=report)
        if task.job and task.after is not None:
            self._report_to_job(task.tenant, task.job, enqueued, report.repaired)
        self._log("reindex sweep page", task.tenant, collection, report)
        return report

    def _finish_sweep(self, tenant: str, collection: Collection, *, all_done: bool, report: CollectionReport) -> None:
        """The last page: a sweep that found every document current marks the configuration covered (and finishes
        a model switch); one that re-sent work leaves it uncovered, so the next pass sweeps again to confirm."""
        if all_done and collection.switching:
            self.switch(tenant, collection)
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

    def _tenant_step(self, task: ReindexTask) -> CollectionReport:
        """Deletes blobs of collections that no longer exist: one listed key per collection prefix, walking from
        `task.after`; chains the next task after `tenant_steps` prefixes."""
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
            self._send_tasks([task.model_copy(update={"after": after})])
        logger.info(
            "reindex tenant",
            extra={
                "tenant": task.tenant,
                "orphan_blobs_deleted": report.repaired.get("orphan_blobs", 0),
                "complete": report.complete,
            },
        )
        return report

    # Pages
    def _check_page(
        self,
        tenant: str,
        collection: Collection,
        *,
        after: str | None,
        clean: bool,
        report: CollectionReport,
        now: datetime,
        max_documents: int,
        chunk_budget: int,
        deep: bool,
    ) -> Page:
        """Examines the documents after `after` (at most `max_documents`, ending once their records' chunk counts
        reach `chunk_budget`) against the search index's chunks of exactly that id range.

        Shallow (`deep=False`, the per-pass drift page): when every document is indexed and current and the index
        holds exactly as many chunks in the range as the records count, the page is consistent and no chunk item is
        read. Otherwise, and always for a sweep (`deep=True`), the chunk store's ids of each document are compared
        with the index: that also finds a chunk text lost from the store while its vector remains."""
        page = self.documents.list_documents(tenant, collection.id, after=after, offset=0, limit=max_documents)
        documents: list[Document] = []
        counted, last, complete = 0, after, len(page) < max_documents
        for position, document in enumerate(page):
            documents.append(document)
            counted, last = counted + document.chunk_count, document.id
            if counted >= chunk_budget and position < len(page) - 1:
                complete = False
                break
        model = collection.embedding_model
        indexed = self.index.chunk_ids(
            model, tenant, collection.id, after_document=after, through_document=None if complete else last
        )
        if not deep and not clean and self._consistent(documents, indexed, collection):
            sourced = [d for d in documents if d.source is not None]
            report.total += len(sourced)
            report.done += len(sourced)
            return Page([], last, complete)
        stored: set[str] = set()
        to_send: list[str] = []
        for document in documents:
            chunk_ids = {c.chunk_id for c in self.chunks.list_chunks(tenant, collection.id, document.id)}
            stored |= chunk_ids
            if document.source is None:
                self._fail_if_content_never_came(tenant, document, now, report)
                continue  # a record without content has nothing to index
            report.total += 1
            if self._needs_ingest(
                tenant, collection, document, chunk_ids, indexed, clean=clean, report=report, now=now
            ):
                to_send.append(document.source)
        orphans = indexed - stored
        if orphans and not clean:
            self.index.delete(model, tenant, collection.id, chunk_ids=sorted(orphans))
            report.repaired["vectors_without_chunks"] += len(orphans)
        return Page(to_send, last, complete)

    @staticmethod
    def _consistent(documents: Sequence[Document], indexed: set[str], collection: Collection) -> bool:
        """Every document with content indexed and current, and the index's chunk count of their id range equal
        to the sum of their records' counts (vectors of ids without a record would make it larger)."""
        settled = all(
            d.source is None or (d.status is DocumentStatus.INDEXED and up_to_date(d, collection)) for d in documents
        )
        return settled and sum(d.chunk_count for d in documents) == len(indexed)

    def _attention(self, tenant: str, collection: Collection, report: CollectionReport, now: datetime) -> list[str]:
        """Re-sends the retryable failed and stuck documents among those the ledger says need attention."""
        to_send = []
        for document_id in self.ledger.attention_documents(
            tenant, collection.id, after=None, limit=self.limits.attention_documents
        ):
            document = self.documents.get_document(tenant, collection.id, document_id)
            if document is None:
                continue
            if document.source is None:
                self._fail_if_content_never_came(tenant, document, now, report)
                continue
            if up_to_date(document, collection):
                continue
            if self._needs_ingest(tenant, collection, document, set(), set(), clean=False, report=report, now=now):
                to_send.append(document.source)
        return to_send

    def _blob_page(
        self, tenant: str, collection: Collection, after: str | None, report: CollectionReport, now: datetime
    ) -> str | None:
        """Deletes abandoned blobs of API writes and sends dropped-in files without a document to the ingest, for one
        page of the collection's blobs; returns where the next page starts (None: from the beginning)."""
        listed = self.blobs.list_blobs(
            keys.collection_prefix(tenant, collection.id), start_after=after, limit=self.limits.blob_page
        )
        sources: dict[str, str | None] = {}  # document id -> the blob its record points at (existing documents)
        looked_up: set[str] = set()
        to_send: list[str] = []
        for key in listed:
            parsed = keys.parse_blob_key(key)
            if parsed is None:
                continue
            document_id = parsed[2]
            if document_id not in looked_up:
                looked_up.add(document_id)
                document = self.documents.get_document(tenant, collection.id, document_id)
                if document is not None:
                    sources[document_id] = document.source
            write = keys.blob_write(key)
            if write is not None:
                # A blob of an API write becomes a document only through its record, never through reindex.
                if sources.get(document_id) != key and now - write.written_at > ABANDONED_AFTER:
                    self.blobs.delete_blob(key)
                    report.repaired["abandoned_blobs"] += 1
            elif is_sidecar(parsed[3]):
                if sources.get(document_id) == described_key(key):
                    # A dropped file's metadata sidecar, whose event may be lost (or, in local mode, never made):
                    # the ingest applies it when it changed (one small read, never an embedding).
                    to_send.append(key)
            elif document_id not in sources:
                # A file dropped into the bucket whose event was lost: ingest makes it a document.
                report.repaired["blobs_without_documents"] += 1
                to_send.append(key)
        self._send(to_send, report)
        return listed[-1] if len(listed) >= self.limits.blob_page else None

    # Helpers
    def _needs_ingest(
        self,
        tenant: str,
        collection: Collection,
        document: Document,
        chunk_ids: set[str],
        indexed_ids: set[str],
        *,
        clean: bool,
        report: CollectionReport,
        now: datetime,
    ) -> bool:
        """Whether the document's blob goes through the ingest again (clearing or repairing it first if needed)."""
        if clean:
            self._clear(tenant, collection, document)
            return True
        if up_to_date(document, collection):
            # During a model switch the store also holds the old chunks, so count rather than compare sets.
            if document.status is DocumentStatus.INDEXED and len(chunk_ids & indexed_ids) < document.chunk_count:
                report.repaired["documents_without_vectors"] += 1
                self._force_rebuild(tenant, document)
                return True
            report.done += 1
            return False
        stuck = (
            document.status in (DocumentStatus.PENDING, DocumentStatus.IN_PROGRESS)
            and now - document.updated_at > STUCK_AFTER
        )
        if stuck and self._fail_if_content_never_came(tenant, document, now, report):
            report.done += 1  # failed for good: nothing left to do for it
            return False
        return document.status in (DocumentStatus.INDEXED, DocumentStatus.FAILED) or stuck

    def _fail_if_content_never_came(
        self, tenant: str, document: Document, now: datetime, report: CollectionReport
    ) -> bool:
        """Fails the document (for good) when it waited past its bound for content only its client can send; True
        when it did. The write commits only over the very record judged (one attempt, over its revision): any write
        since (content, progress, a metadata PUT, a delete) means it is no longer that record, and the next pass
        judges it again."""
        reason = self._content_never_came(document, now)
        if reason is None:
            return False
        failed = {
            "status": DocumentStatus.FAILED,
            "failure_reason": reason,
            "failure_retryable": False,
            "updated_at": now,
        }
        try:
            write_document(
                self.documents,
                tenant,
                document.collection,
                document.id,
                document,
                lambda _: document.model_copy(update=failed),  # one attempt: the change of the very record judged
                attempts=1,
            )
        except (Conflict, NotFound):
            return False
        report.repaired["documents_without_content"] += 1
        logger.info(
            "document failed: content never came",
            extra={"tenant": tenant, "collection": document.collection, "document": document.id, "reason": reason},
        )
        return True

    def _content_never_came(self, document: Document, now: datetime) -> str | None:
        """Why the document has waited too long for its content (see NO_CONTENT_AFTER and the bounds after it), or
        None. Reads the blob store only for an upload URL past its bound (one HEAD: did the file arrive?)."""
        if document.source is None:
            idle = now - document.updated_at
            if document.status is DocumentStatus.PENDING and idle > NO_CONTENT_AFTER:
                return (
                    f"NoContent: created without content, and none came within {_hours(NO_CONTENT_AFTER)}; "
                    "PUT its content or upload a file to index it"
                )
            if document.status is DocumentStatus.IN_PROGRESS and idle > IMPORT_STALLED_AFTER:
                return (
                    f"ImportIncomplete: {document.chunks_done} of {document.chunk_count} chunks arrived, and none "
                    f"for {_hours(IMPORT_STALLED_AFTER)}; import the document again (its record, then all its "
                    "chunks)"
                )
            return None
        write = keys.blob_write(document.source)
        if (
            document.status is DocumentStatus.PENDING
            and write is not None
            and now - write.written_at > UPLOAD_MISSING_AFTER
            and self.blobs.blob_size(document.source) is None
        ):
            return (
                f"UploadMissing: no file came through the upload URL issued at "
                f"{write.written_at:%Y-%m-%dT%H:%M:%SZ}, which has expired; ask for a new upload URL or PUT its "
                "content"
            )
        return None

    def _send(self, blob_keys: Sequence[str], report: CollectionReport) -> None:
        if blob_keys:
            self.trigger.trigger(list(blob_keys))
        report.enqueued += len(blob_keys)

    def _send_tasks(self, tasks: Sequence[ReindexTask]) -> int:
        if tasks:
            self.queue.send(list(tasks))
        return len(tasks)

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

    def _report_to_job(self, tenant: str, job_id: str, enqueued: int, repaired: dict[str, int]) -> None:
        job = self.jobs.get_job(tenant, job_id)
        if job is not None and job.status != "completed":
            merged = {name: job.repaired.get(name, 0) + count for name, count in repaired.items()}
            self.jobs.put_job(
                job.model_copy(update={"enqueued": enqueued, "repaired": merged, "updated_at": utc_now()})
            )

    def _progress(self, tenant: str, collection: Collection) -> tuple[int, int]:
        total = done = 0
        for document in self._documents(tenant, collection.id):
            if document.source is None:
                continue
            total += 1
            done += int(up_to_date(document, collection))
        return total, done

    def _documents(self, tenant: str, collection_id: str):
        """Every document record, a page (one Query) at a time."""
        after = None
        while page := self.documents.list_documents(tenant, collection_id, after=after, offset=0, limit=500):
            yield from page
            after = page[-1].id

    def _clear(self, tenant: str, collection: Collection, document: Document) -> Document:
        self.remover.remove_document(tenant, collection, document)
        return self._update(
            tenant,
            document,
            {
                "status": DocumentStatus.PENDING,
                "indexed_config_version": 0,
                "indexed_model": None,
                "chunk_count": 0,
                "chunks_done": 0,
                "updated_at": utc_now(),
            },
        )

    def _force_rebuild(self, tenant: str, document: Document) -> None:
        # Stays `indexed` (its chunks are still served where present); the ingest sees an outdated config and rebuilds.
        self._update(tenant, document, {"indexed_config_version": 0})

    def _update(self, tenant: str, document: Document, fields: dict) -> Document:
        """Write `fields` over the document as read (or, when another write committed since, over the record as it is
        then: what that write changed stays); NotFound when it was deleted meanwhile."""

        def change(current: Document | None) -> Document:
            if current is None:
                raise NotFound(f"document {document.id!r} does not exist")
            return current.model_copy(update=fields)

        written, _ = write_document(self.documents, tenant, document.collection, document.id, document, change)
        return written

    def _collection(self, tenant: str, collection_id: str) -> Collection:
        return require_collection(self.collections, tenant, collection_id)

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


def _hours(wait: timedelta) -> str:
    hours = round(wait.total_seconds() / 3600)
    return "1 hour" if hours == 1 else f"{hours} hours"
