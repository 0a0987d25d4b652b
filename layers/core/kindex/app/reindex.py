"""Reindex: keeps every collection's index true to its configuration and its blobs.

Per collection it finds documents indexed under an older `config_version` or another model, failed documents
whose failure is retryable, documents stuck without an event, and drift (blobs without documents, indexed documents
whose vectors are missing, vectors without chunks); it repairs what it can at once and re-sends the ingest event
for the rest, in bounded batches. A model change is built beside the old vectors; when every document is done,
the collection switches its query model and the old vectors and unreferenced chunks are dropped."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kindex.domain import keys
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import (
    Collection,
    Document,
    DocumentStatus,
    ReindexJob,
    utc_now,
)
from kindex.domain.ports import (
    BlobStore,
    ChunkStore,
    CollectionStore,
    DocumentStore,
    IngestTrigger,
    JobStore,
    KeyStore,
    SearchIndex,
)

logger = logging.getLogger(__name__)

STUCK_AFTER = timedelta(hours=1)
# An API write stores its blob, then commits the record that points at it (within one request: at most a Lambda's
# 15 minutes). A blob of a write that no record points at an hour later was left by a write that lost, failed or was
# superseded (an upload ticket replaced before its upload, say): nothing will ever read it.
ABANDONED_AFTER = timedelta(hours=1)


@dataclass
class CollectionReport:
    total: int = 0
    done: int = 0
    enqueued: int = 0
    remaining: int = 0
    switched: bool = False
    repaired: dict[str, int] = field(default_factory=lambda: {
        "blobs_without_documents": 0, "documents_without_vectors": 0, "vectors_without_chunks": 0,
        "abandoned_blobs": 0})


def up_to_date(document: Document, collection: Collection) -> bool:
    """Indexed under the collection's model and configuration, or failed for good (retrying will not help)."""
    if document.status is DocumentStatus.FAILED:
        return not document.failure_retryable
    return document.is_current(collection)


class ReindexService:
    """Finds and schedules work; the ingest pipeline does the work."""

    def __init__(self, collections: CollectionStore, documents: DocumentStore, blobs: BlobStore, chunks: ChunkStore,
                 index: SearchIndex, trigger: IngestTrigger, jobs: JobStore, key_store: KeyStore, *,
                 max_enqueue_per_collection: int = 1000):
        self.collections = collections
        self.documents = documents
        self.blobs = blobs
        self.chunks = chunks
        self.index = index
        self.trigger = trigger
        self.jobs = jobs
        self.key_store = key_store
        self.max_enqueue = max_enqueue_per_collection

    # Entry points
    def run_scheduled(self) -> dict[str, int]:
        """One pass over every tenant and collection (the EventBridge schedule, `kindex reindex`)."""
        summary = {"collections": 0, "enqueued": 0, "switched": 0, "orphan_blobs_deleted": 0}
        for tenant in sorted({key.tenant for key in self.key_store.list_keys()}):
            summary["orphan_blobs_deleted"] += self._delete_blobs_of_missing_collections(tenant)
            for collection_id in self.collections.list_collections(tenant, after=None, offset=0, limit=None):
                collection = self.collections.get_collection(tenant, collection_id)
                if collection is None:
                    continue
                report = self.reindex_collection(tenant, collection, clean=False)
                summary["collections"] += 1
                summary["enqueued"] += report.enqueued
                summary["switched"] += int(report.switched)
        logger.info("reindex pass", extra=summary)
        return summary

    def start(self, tenant: str, collection_id: str, clean: bool) -> ReindexJob:
        collection = self._collection(tenant, collection_id)
        report = self.reindex_collection(tenant, collection, clean=clean)
        job = ReindexJob(id=uuid.uuid4().hex, tenant=tenant, collection=collection_id, clean=clean,
                         total=report.total, done=report.done, enqueued=report.enqueued, repaired=report.repaired,
                         status="completed" if report.done == report.total and not report.remaining else "running")
        self.jobs.put_job(job)
        return job

    def get_job(self, tenant: str, job_id: str) -> ReindexJob:
        job = self.jobs.get_job(tenant, job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} does not exist")
        if job.status == "completed":
            return job
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
        """Switch every collection whose new model is complete (cheap when nothing is switching)."""
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

    # The work
    def reindex_collection(self, tenant: str, collection: Collection, *, clean: bool) -> CollectionReport:
        report = CollectionReport()
        model = collection.embedding_model
        indexed_ids = self.index.chunk_ids(model, tenant, collection.id)
        stored_ids: set[str] = set()
        sources: dict[str, str | None] = {}  # document id -> the blob its record points at
        to_send: list[str] = []
        now = utc_now()
        for document in self._documents(tenant, collection.id):
            sources[document.id] = document.source
            chunk_ids = {c.chunk_id for c in self.chunks.list_chunks(tenant, collection.id, document.id)}
            stored_ids |= chunk_ids
            if document.source is None:
                continue  # a record without content has nothing to index
            report.total += 1
            if self._needs_ingest(tenant, collection, document, chunk_ids, indexed_ids, clean=clean, report=report,
                                  now=now):
                to_send.append(document.source)
        orphans = indexed_ids - stored_ids
        if orphans and not clean:
            self.index.delete(model, tenant, collection.id, chunk_ids=sorted(orphans))
            report.repaired["vectors_without_chunks"] = len(orphans)
        to_send += self._repair_blobs(tenant, collection.id, sources, report, now)
        batch, report.remaining = to_send[:self.max_enqueue], max(0, len(to_send) - self.max_enqueue)
        if batch:
            self.trigger.trigger(batch)
        report.enqueued = len(batch)
        if collection.switching and report.total == report.done and not to_send:
            self.switch(tenant, collection)
            report.switched = True
        logger.info("reindex collection", extra={"tenant": tenant, "collection": collection.id, "total": report.total,
                                                  "done": report.done, "enqueued": report.enqueued,
                                                  "remaining": report.remaining, **report.repaired})
        return report

    def switch(self, tenant: str, collection: Collection) -> None:
        """Make the new model the query model, then drop the old model's vectors and unreferenced chunks."""
        old_model = collection.query_model
        switched = collection.model_copy(update={"active_embedding_model": collection.embedding_model,
                                                 "updated_at": utc_now()})
        try:
            self.collections.put_collection(tenant, switched, create=False)
        except (Conflict, NotFound):
            return
        self.index.delete(old_model, tenant, collection.id)
        live = self.index.chunk_ids(collection.embedding_model, tenant, collection.id)
        for document in self._documents(tenant, collection.id):
            stale = [c.chunk_id for c in self.chunks.list_chunks(tenant, collection.id, document.id)
                     if c.chunk_id not in live]
            if stale:
                self.chunks.delete_chunks(tenant, collection.id, document_id=document.id, chunk_ids=stale)
        logger.info("model switched", extra={"tenant": tenant, "collection": collection.id, "from_model": old_model,
                                             "to_model": collection.embedding_model})

    # Helpers
    def _progress(self, tenant: str, collection: Collection) -> tuple[int, int]:
        total = done = 0
        for document in self._documents(tenant, collection.id):
            if document.source is None:
                continue
            total += 1
            done += int(up_to_date(document, collection))
        return total, done

    def _documents(self, tenant: str, collection_id: str):
        after = None
        while True:
            ids = self.documents.list_documents(tenant, collection_id, after=after, offset=0, limit=500)
            if not ids:
                return
            for document_id in ids:
                document = self.documents.get_document(tenant, collection_id, document_id)
                if document is not None:
                    yield document
            after = ids[-1]

    def _needs_ingest(self, tenant: str, collection: Collection, document: Document, chunk_ids: set[str],
                      indexed_ids: set[str], *, clean: bool, report: CollectionReport, now: datetime) -> bool:
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
        stuck = document.status in (DocumentStatus.PENDING, DocumentStatus.IN_PROGRESS) and \
            now - document.updated_at > STUCK_AFTER
        return document.status in (DocumentStatus.INDEXED, DocumentStatus.FAILED) or stuck

    def _repair_blobs(self, tenant: str, collection_id: str, sources: dict[str, str | None],
                      report: CollectionReport, now: datetime) -> list[str]:
        """Deletes abandoned blobs of API writes; returns the keys of dropped-in files that have no document yet."""
        to_send: list[str] = []
        for key in self.blobs.list_blobs(keys.collection_prefix(tenant, collection_id)):
            parsed = keys.parse_blob_key(key)
            if parsed is None:
                continue
            write = keys.blob_write(key)
            if write is not None:
                # A blob of an API write becomes a document only through its record, never through reindex.
                if sources.get(parsed[2]) != key and now - write.written_at > ABANDONED_AFTER:
                    self.blobs.delete_blob(key)
                    report.repaired["abandoned_blobs"] += 1
            elif parsed[2] not in sources:
                # A file dropped into the bucket whose event was lost: ingest makes it a document.
                report.repaired["blobs_without_documents"] += 1
                to_send.append(key)
        return to_send

    def _clear(self, tenant: str, collection: Collection, document: Document) -> Document:
        for model in {collection.embedding_model, collection.query_model}:
            self.index.delete(model, tenant, collection.id, document_ids=[document.id])
        self.chunks.delete_chunks(tenant, collection.id, document_id=document.id)
        cleared = document.model_copy(update={"status": DocumentStatus.PENDING, "indexed_config_version": 0,
                                              "indexed_model": None, "chunk_count": 0, "chunks_done": 0,
                                              "updated_at": utc_now()})
        self.documents.put_document(tenant, cleared, create=False)
        return cleared

    def _force_rebuild(self, tenant: str, document: Document) -> None:
        # Stays `indexed` (its chunks are still served where present); the ingest sees an outdated config and rebuilds.
        self.documents.put_document(tenant, document.model_copy(update={"indexed_config_version": 0}), create=False)

    def _collection(self, tenant: str, collection_id: str) -> Collection:
        collection = self.collections.get_collection(tenant, collection_id)
        if collection is None:
            raise NotFound(f"collection {collection_id!r} does not exist")
        return collection

    def _delete_blobs_of_missing_collections(self, tenant: str) -> int:
        deleted = 0
        prefix = keys.tenant_collections_prefix(tenant)
        missing: dict[str, bool] = {}
        for key in self.blobs.list_blobs(prefix):
            parsed = keys.parse_blob_key(key)
            if parsed is None:
                continue
            collection_id = parsed[1]
            if collection_id not in missing:
                missing[collection_id] = self.collections.get_collection(tenant, collection_id) is None
            if missing[collection_id]:
                self.blobs.delete_blob(key)
                deleted += 1
        return deleted
