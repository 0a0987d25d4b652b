"""The page worker: examines one page of a collection's documents (or of its blobs) and repairs what it finds."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from kindex.app.chunk_removal import ChunkRemover
from kindex.app.document_writes import write_document
from kindex.app.reindex import CollectionReport, up_to_date
from kindex.domain import keys
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import Collection, Document, DocumentStatus, utc_now
from kindex.domain.ports import BlobStore, ChunkStore, DocumentStore, SearchIndex
from kindex.domain.sidecar import described_key, is_sidecar

logger = logging.getLogger(__name__)

STUCK_AFTER = timedelta(hours=1)
# An API write stores its blob, then commits the record that points at it (within one request: at most a Lambda's
# 15 minutes). A blob of a write that no record points at an hour later was left by a write that lost, failed or was
# superseded (an upload ticket replaced before its upload, say): nothing will ever read it.
ABANDONED_AFTER = timedelta(hours=1)
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


@dataclass
class CheckedPage:
    """One examined page of documents: what to re-send, where it ended, whether it reached the end."""

    to_send: list[str]
    last: str | None
    complete: bool


class PageChecker:
    """Checks one page of documents against the search index and the chunk store (re-sending, rebuilding, failing
    or deleting what is wrong), the documents needing attention, or one page of a collection's blobs. It only finds
    the blobs to re-send; the caller sends them. The caller's `now` judges every wait."""

    def __init__(self, documents: DocumentStore, chunks: ChunkStore, index: SearchIndex, blobs: BlobStore):
        self.documents = documents
        self.chunks = chunks
        self.index = index
        self.blobs = blobs
        self.remover = ChunkRemover(index, chunks)

    def check_page(
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
    ) -> CheckedPage:
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
            return CheckedPage([], last, complete)
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
        return CheckedPage(to_send, last, complete)

    @staticmethod
    def _consistent(documents: Sequence[Document], indexed: set[str], collection: Collection) -> bool:
        """Every document with content indexed and current, and the index's chunk count of their id range equal
        to the sum of their records' counts (vectors of ids without a record would make it larger)."""
        settled = all(
            d.source is None or (d.status is DocumentStatus.INDEXED and up_to_date(d, collection)) for d in documents
        )
        return settled and sum(d.chunk_count for d in documents) == len(indexed)

    def attention(
        self,
        tenant: str,
        collection: Collection,
        document_ids: Sequence[str],
        report: CollectionReport,
        now: datetime,
    ) -> list[str]:
        """The blobs to re-send of the retryable failed and stuck documents among `document_ids` (those the ledger
        says need attention); fails those whose content never came."""
        to_send = []
        for document_id in document_ids:
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

    def blob_page(
        self,
        tenant: str,
        collection: Collection,
        *,
        after: str | None,
        limit: int,
        report: CollectionReport,
        now: datetime,
    ) -> tuple[list[str], str | None]:
        """Deletes abandoned blobs of API writes and finds dropped-in files without a document, for one page (`limit`
        keys) of the collection's blobs; returns the blobs to send to the ingest and where the next page starts
        (None: from the beginning)."""
        listed = self.blobs.list_blobs(keys.collection_prefix(tenant, collection.id), start_after=after, limit=limit)
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
        return to_send, listed[-1] if len(listed) >= limit else None

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


def _hours(wait: timedelta) -> str:
    hours = round(wait.total_seconds() / 3600)
    return "1 hour" if hours == 1 else f"{hours} hours"
