"""Collections and documents: create-or-partial-update, read, list with paging, delete everywhere."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

from kindex.app import cpu_slots
from kindex.app.chunk_removal import require_collection
from kindex.app.collection_deletion import start_deletion
from kindex.app.document_writes import Change, same_content, with_filter_fields, write_document
from kindex.app.record_writes import write_collection
from kindex.app.usage import UsageService
from kindex.domain import keys
from kindex.domain.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge, QuotaExceeded
from kindex.domain.models import (
    CHUNKING_DEFAULTS,
    CHUNKING_VERSION,
    COLLECTION_CONFIG_FIELDS,
    DOCUMENT_NULLABLE,
    SAVING,
    ChunkingMethod,
    Collection,
    CollectionInput,
    Document,
    DocumentInput,
    DocumentPage,
    DocumentStatus,
    DocumentSummary,
    Page,
    PageRequest,
    ReindexJob,
    check_id,
    normalize_id,
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
    Presigner,
    ReindexQueue,
)
from kindex.domain.quotas import COLLECTION_USAGE, QuotaLimits, Usage, document_usage
from kindex.domain.types import StoredChunk
from kindex.domain.validation import validated

CONTENT_FILENAME = "content.txt"
# A GET reads the record, then its content; a write in between may delete that content (after storing its own).
READ_ATTEMPTS = 5

logger = logging.getLogger(__name__)


class UploadTicket(BaseModel):
    url: str
    method: str
    headers: dict[str, str]
    expires_at: datetime
    document: Document


TEXT_MIMETYPE = "text/plain"


def _checked_id(kind: str, value: str) -> str:
    try:
        return check_id(value)
    except ValueError as error:
        raise InvalidInput(f"{kind} id {error}") from error


def _file_name(source: str) -> str | None:
    parsed = keys.parse_blob_key(source)
    return parsed[3] if parsed else None


def _text_source(document: Document) -> str | None:
    """The blob key of the document's content when it came in as text (`PUT` with `content`), None when it is an
    uploaded file (or there is no content yet)."""
    source = document.source
    return source if source and _file_name(source) == CONTENT_FILENAME else None


def _written_source(document: Document) -> str:
    """The blob key of a record that a content write produced (`_file_write`'s and `put_document`'s changes)."""
    assert document.source is not None  # every content change sets `source` (the new key) before it commits
    return document.source


def _page(fetch: Callable[..., list[str]], page: PageRequest) -> Page:
    """One page of ids: `page.number` at most (bounded by PageRequest), with a cursor when more follow."""
    after = keys.decode_cursor(page.cursor) if page.cursor else None
    offset = 0 if page.cursor else page.start
    ids = fetch(after=after, offset=offset, limit=page.number + 1)
    if len(ids) > page.number:
        ids = ids[: page.number]
        return Page(ids=ids, next_cursor=keys.encode_cursor(ids[-1]))
    return Page(ids=ids)


#: A page of documents ends early once their summaries would pass this many bytes of JSON (titles of up to 1,024
#: characters, each up to 12 bytes escaped, could otherwise make a 1,000-document page outgrow Lambda's 6 MB).
DOCUMENT_PAGE_MAX_BYTES = 4 * 1024 * 1024


def _summary_json_bytes(summary: DocumentSummary) -> int:
    # The summary as the response serialises it (ASCII only), plus its id again in the list of ids beside it.
    return len(json.dumps(summary.model_dump(mode="json"))) + len(json.dumps(summary.id)) + 2


@dataclass
class ChunkPage:
    chunks: list[StoredChunk]
    next_cursor: str | None = None


#: A page of chunks ends early once its texts would pass this many bytes of JSON (as the API serialises them,
#: escapes included), so that the largest page answers well under API Gateway's and Lambda's 6 MB.
CHUNK_PAGE_MAX_BYTES = 4 * 1024 * 1024
# What a chunk adds to the page besides its text: its id, the field names, offsets and pages.
_CHUNK_OVERHEAD_BYTES = 160


def _chunk_json_bytes(chunk: StoredChunk) -> int:
    # json.dumps escapes exactly as the response serializer does (ASCII only: up to 12 bytes per character).
    return len(json.dumps(chunk.text)) + len(json.dumps(chunk.chunk_id)) + _CHUNK_OVERHEAD_BYTES


def _encode_chunk_cursor(chunk: StoredChunk) -> str:
    return keys.encode_cursor(f"{chunk.index}:{chunk.chunk_id}")


def _decode_chunk_cursor(cursor: str) -> tuple[int, str]:
    index, separator, chunk_id = keys.decode_cursor(cursor).partition(":")
    if not separator or not (index.isascii() and index.isdigit()) or len(index) > 10:
        raise InvalidInput("cursor is not a cursor returned by this API")
    return int(index), chunk_id


def merge_collection(
    existing: Collection | None, collection_id: str, changes: dict[str, Any], default_model: str
) -> Collection:
    """The collection after applying `changes`. A change of chunking method resets the sizes that were not
    given to the new method's defaults; a change to chunking or model bumps `config_version`."""
    if existing is None:
        data: dict[str, Any] = {
            "id": collection_id,
            "embedding_model": default_model,
            "chunking_version": CHUNKING_VERSION,
        }
        method = changes.get("chunking_method") or ChunkingMethod.MAX_CHARS
    else:
        data = existing.model_dump()
        method = changes.get("chunking_method") or existing.chunking_method
        if method != existing.chunking_method:
            data.update(CHUNKING_DEFAULTS[ChunkingMethod(method)])
    if existing is None:
        data.update(CHUNKING_DEFAULTS[ChunkingMethod(method)])
    data.update(changes)
    if existing is not None:
        data["updated_at"] = utc_now()
        if any(data[name] != getattr(existing, name) for name in COLLECTION_CONFIG_FIELDS):
            data["config_version"] = existing.config_version + 1
    return validated(lambda: Collection.model_validate(data, context=SAVING))


#: Rounds of a document delete racing writers of that document before it gives up with 409.
DELETE_ATTEMPTS = 8
#: The pause before a delete's next round, doubled each round up to DELETE_PAUSE_MAX_SECONDS (~0.5 s in all): a
#: round removes the chunks of whatever committed meanwhile, so rounds in a row without a pause kept removing the
#: chunks of writers still racing, and the delete that then gave up left a record whose chunks were gone.
DELETE_PAUSE_SECONDS = 0.005
DELETE_PAUSE_MAX_SECONDS = 0.16


class CatalogService:
    """Owns collection and document records and their source blobs. `on_document_removed` lets the indexing
    side drop chunks and vectors of a deleted document, so nothing is left behind; a collection's delete is a job
    (`deletions`, `jobs` and `reindex_queue`: the reindex worker runs it)."""

    def __init__(
        self,
        collections: CollectionStore,
        documents: DocumentStore,
        blobs: BlobStore,
        *,
        default_embedding_model: str,
        deletions: CollectionDeletions | None = None,
        jobs: JobStore | None = None,
        reindex_queue: ReindexQueue | None = None,
        on_document_removed: Callable[[str, Document, Collection], None] | None = None,
        presigner: Presigner | None = None,
        upload_url_ttl: int = 900,
        chunks: ChunkStore | None = None,
        check_rights: Callable[[str, Collection], None] | None = None,
        max_file_bytes: int = 50 * 1024 * 1024,
        ingest_trigger: IngestTrigger | None = None,
        usage: UsageService | None = None,
        pause: Callable[[float], None] = time.sleep,
    ):
        """`pause(seconds)`: how a document delete waits between its rounds (tests pass their own)."""
        self.pause = pause
        self.collections = collections
        self.documents = documents
        self.blobs = blobs
        self.default_embedding_model = default_embedding_model
        self.deletions = deletions
        self.jobs = jobs
        self.reindex_queue = reindex_queue
        self.on_document_removed = on_document_removed
        self.presigner = presigner
        self.chunks = chunks
        self.upload_url_ttl = upload_url_ttl
        self.check_rights = check_rights
        self.max_file_bytes = max_file_bytes
        self.ingest_trigger = ingest_trigger
        self.usage = usage

    # Collections
    def get_collection(self, tenant: str, collection_id: str) -> Collection:
        """The collection with its `document_count` (one count query: only for reading the collection itself)."""
        collection = self._collection(tenant, collection_id)
        return collection.model_copy(update={"document_count": self.documents.count_documents(tenant, collection_id)})

    def _collection(self, tenant: str, collection_id: str) -> Collection:
        return require_collection(self.collections, tenant, collection_id)

    def put_collection(self, tenant: str, collection_id: str, body: CollectionInput) -> tuple[Collection, bool]:
        """Create (True) or partially update (False) the collection. Only the fields in the body change: a write
        of other fields (or a model switch) that commits meanwhile is kept, this one applying its own on top of it.
        A create that finds the collection created meanwhile is a Conflict."""
        _checked_id("collection", collection_id)
        if body.id is not None and body.id != collection_id:
            raise InvalidInput("id in the body must match the collection id in the path")
        existing = self.collections.get_collection(tenant, collection_id)
        changes = body.changes()
        count = 0

        def merged(current: Collection | None) -> Collection:
            nonlocal count
            if existing is None and current is not None:
                raise Conflict(f"collection {collection_id!r} already exists")
            if (
                current is None
                and self.deletions is not None
                and (pending := self.deletions.pending_deletion(tenant, collection_id))
            ):
                # Its documents are still being deleted: creating it now would show them again (the store refuses
                # the create too; this says why, and is not retried).
                raise Conflict(
                    f"collection {collection_id!r} is being deleted (job {pending.job}); create it "
                    "again once that job is completed"
                )
            if current is not None and current.active_embedding_model is None:
                current = current.model_copy(update={"active_embedding_model": current.embedding_model})
            collection = merge_collection(current, collection_id, changes, self.default_embedding_model)
            if self.check_rights is not None:  # the URL policy, and the signing secret an external check needs
                self.check_rights(tenant, collection)
            count = 0 if current is None else self.documents.count_documents(tenant, collection_id)
            if count == 0:
                # Nothing to rebuild: the new model is active at once.
                collection = collection.model_copy(update={"active_embedding_model": collection.embedding_model})
            return collection

        limits = self._limits(tenant, COLLECTION_USAGE if existing is None else Usage())
        collection, created = write_collection(self.collections, tenant, collection_id, existing, merged, limits=limits)
        return collection.model_copy(update={"document_count": count}), created

    def delete_collection(self, tenant: str, collection_id: str) -> ReindexJob:
        """The collection disappears from every read and refuses writes at once; its blobs, records, chunks and
        vectors go in the background (the returned delete job; kindex/app/collection_deletion.py)."""
        if self.deletions is None or self.jobs is None or self.reindex_queue is None:
            raise InvalidInput("collection deletes are not configured for this deployment")
        return start_deletion(self.collections, self.deletions, self.jobs, self.reindex_queue, tenant, collection_id)

    def list_collections(self, tenant: str, page: PageRequest) -> Page:
        return _page(lambda **kw: self.collections.list_collections(tenant, **kw), page)

    # Documents
    def get_document(self, tenant: str, collection_id: str, document_id: str) -> tuple[Document, str | None]:
        """The document and its text content when it came in as text (None for uploaded files). The record and
        the content shown are always those of one and the same write."""
        self._collection(tenant, collection_id)
        document = self._document(tenant, collection_id, document_id)
        for _ in range(READ_ATTEMPTS):
            source = _text_source(document)
            if source is None:
                return document, None
            try:
                return document, self.blobs.get_blob(source).decode("utf-8")
            except UnicodeDecodeError:
                return document, None  # a file uploaded under the text content's name: not text to show
            except NotFound:
                # A later write replaced the content (and deleted these bytes) between our two reads: its own
                # bytes were stored before it committed, so reading the record again finds them.
                latest = self._document(tenant, collection_id, document_id)
                if latest.source == document.source:
                    return latest, None  # really missing (deleted from the bucket by hand)
                document = latest
        return document, None

    def put_document(
        self, tenant: str, collection_id: str, document_id: str, body: DocumentInput
    ) -> tuple[Document, bool]:
        """Create (True) or partially update (False). New content is stored as a blob and makes the document
        pending with a new version; unchanged content changes nothing. Only the fields in the body change: a write
        of other fields that commits meanwhile is kept (this one applies its own on top of it), while new content
        that commits meanwhile makes this write's own new content lose (Conflict)."""
        _checked_id("document", document_id)
        if body.id is not None and body.id != document_id:
            raise InvalidInput("id in the body must match the document id in the path")
        if body.collection is not None and body.collection != collection_id:
            raise InvalidInput("collection in the body must match the collection id in the path")
        self._collection(tenant, collection_id)
        existing = self.documents.get_document(tenant, collection_id, document_id)
        changes = body.changes()
        content = changes.pop("content", None)
        for name, value in changes.items():
            if value is None and name not in DOCUMENT_NULLABLE:
                raise InvalidInput(f"{name}: must not be null")

        def merged(current: Document | None) -> Document:
            if current is None:
                return validated(lambda: Document(id=document_id, collection=collection_id, **changes))
            return with_filter_fields(current, changes)

        if content is not None:
            data = content.replace("\x00", "").encode("utf-8")
            digest = hashlib.sha256(data).hexdigest()
            if existing is None or digest != existing.content_sha256 or not existing.source:
                version = (existing.version if existing else 0) + 1
                source = keys.write_blob_key(tenant, collection_id, document_id, CONTENT_FILENAME, version=version)

                def with_content(current: Document | None) -> Document:
                    same_content(existing, current, document_id)
                    document = merged(current)
                    return document.model_copy(
                        update={
                            "content_sha256": digest,
                            "content_length": len(data),
                            "version": version,
                            "source": source,
                            "status": DocumentStatus.PENDING,
                            "failure_reason": None,
                            "mimetype": document.mimetype or TEXT_MIMETYPE,
                        }
                    )

                return self._store_and_commit(tenant, existing, with_content, data)
        # Unchanged or no content: whatever content the document has when this commits stays.
        limits = self._limits(tenant, Usage(documents=1) if existing is None else Usage())
        document, created = write_document(
            self.documents, tenant, collection_id, document_id, existing, merged, limits=limits
        )
        self._refresh_index_fields(tenant, document)
        return document, created

    def _refresh_index_fields(self, tenant: str, document: Document) -> None:
        """After a write that changed only filter fields of a document whose index entries exist: ask the ingest to
        rewrite them (an event for its current source, as an upload makes; the ingest finds the content current and
        rewrites the entries with the vectors it has, without embedding). Best effort: the record already holds the
        truth the query checks, and a reindex pass redoes what an event that never came left undone."""
        if not (document.fields_stale and document.status is DocumentStatus.IN_PROGRESS and document.source):
            return
        if self.ingest_trigger is None:
            return
        try:
            self.ingest_trigger.trigger([document.source])
        except Exception:
            logger.warning(
                "could not ask the ingest to rewrite a document's index fields",
                extra={"tenant": tenant, "collection": document.collection, "document": document.id},
            )

    def _store_and_commit(
        self, tenant: str, existing: Document | None, change: Change, data: bytes
    ) -> tuple[Document, bool]:
        """Store the bytes under the write's own key (the `source` that `change` sets), then commit the record that
        points at them. The bytes go first so that a committed record always finds its content (readers and ingest
        never see a record whose blob is still to come); the key is unique to this write, so a write that loses the
        commit only ever deletes its own bytes. After the commit, the blobs of earlier writes go."""
        planned = change(existing)  # the record as it would commit now: its key, and InvalidInput before any bytes
        # QuotaExceeded before any bytes too (the commit checks again, atomically, as it counts them).
        limits = self._limits(tenant, document_usage(planned) - document_usage(existing))
        key = _written_source(planned)
        self.blobs.put_blob(key, data, planned.mimetype or TEXT_MIMETYPE)
        try:
            document, created = write_document(
                self.documents, tenant, planned.collection, planned.id, existing, change, limits=limits
            )
        except (Conflict, NotFound, InvalidInput, QuotaExceeded):
            self._discard_blob(key)  # a write that answers 4xx leaves nothing behind
            raise
        except Exception:
            # An error that may hide a write that happened (a timeout): keep the bytes if the record points at them,
            # or if that cannot be known now (reindex deletes them later if they turn out to be an orphan).
            if self._surely_not_committed(tenant, planned):
                self._discard_blob(key)
            raise
        self._delete_superseded_blobs(tenant, document)
        return document, created

    def _delete_superseded_blobs(self, tenant: str, document: Document) -> None:
        """Delete the blobs an earlier write of the document left (older versions, files dropped in by hand). Blobs
        of the same or a later version belong to writes still deciding: a loser deletes its own, and a later winner
        deletes this write's blob in turn. Best effort: the write is committed whatever happens here (reindex deletes
        the blobs of API writes that no record points at)."""
        try:
            for key in self.blobs.list_blobs(keys.document_prefix(tenant, document.collection, document.id)):
                write = keys.blob_write(key)
                if key != document.source and (write is None or write.version < document.version):
                    self.blobs.delete_blob(key)
        except Exception:
            logger.warning(
                "could not delete superseded blobs",
                extra={"tenant": tenant, "collection": document.collection, "document": document.id},
            )

    def _surely_not_committed(self, tenant: str, document: Document) -> bool:
        try:
            current = self.documents.get_document(tenant, document.collection, document.id)
        except Exception:
            return False
        return current is None or current.source != document.source

    def _discard_blob(self, key: str) -> None:
        try:
            self.blobs.delete_blob(key)
        except Exception:  # the caller's own error is the one to report; reindex deletes the orphan later
            logger.warning("could not delete the blob of a failed write", extra={"key": key})

    def prepare_upload(
        self,
        tenant: str,
        collection_id: str,
        document_id: str,
        filename: str,
        mimetype: str | None,
        *,
        size: int,
        fields: dict[str, Any] | None = None,
    ) -> UploadTicket:
        """Create the document if missing (titled after the file), point it at a new blob key for the file and sign
        a PUT of exactly `size` bytes for that key. The upload itself triggers indexing, through the blob store's
        event; an upload to the key of a ticket that a later one superseded is ignored by ingest. A size over the
        file limit is refused here (PayloadTooLarge), before any document changes; the signature makes the blob
        store refuse any other size, so the limit holds without the API seeing the bytes."""
        if self.presigner is None:
            raise InvalidInput("uploads are not configured for this deployment")
        if size < 0:
            raise InvalidInput("size must be the file's length in bytes (0 or more)")
        if size > self.max_file_bytes:
            raise PayloadTooLarge(f"size {size} exceeds the file limit of {self.max_file_bytes} bytes")
        # The ticket counts the file's bytes from now on (its signature admits exactly `size` of them), so a ticket
        # past the bytes quota is refused before anything changes.
        existing, change = self._file_write(
            tenant, collection_id, document_id, filename, mimetype, content={"content_length": size}, fields=fields
        )
        limits = self._limits(tenant, document_usage(change(existing)) - document_usage(existing))
        document, _ = write_document(
            self.documents, tenant, collection_id, document_id, existing, change, limits=limits
        )
        self._delete_superseded_blobs(tenant, document)
        url, headers, expires = self.presigner.presign_put(
            _written_source(document), document.mimetype, size, self.upload_url_ttl
        )
        return UploadTicket(
            url=url,
            method="PUT",
            headers=headers,
            expires_at=datetime.fromtimestamp(expires, timezone.utc),
            document=document,
        )

    def put_file(
        self,
        tenant: str,
        collection_id: str,
        document_id: str,
        filename: str,
        data: bytes,
        mimetype: str | None = None,
        *,
        fields: dict[str, Any] | None = None,
    ) -> tuple[Document, bool]:
        """Store a file as the document's source (the write triggers indexing). Returns (document, written):
        the same file (name and bytes) already indexed, or pending, is not written again (`fields`, the
        document's attributes and access, are then written alone, as a PUT of them would)."""
        digest = hashlib.sha256(data).hexdigest()
        existing, change = self._file_write(
            tenant,
            collection_id,
            document_id,
            filename,
            mimetype,
            content={"content_sha256": digest, "content_length": len(data)},
            fields=fields,
        )
        if (
            existing is not None
            and existing.source
            and _file_name(existing.source) == filename
            and existing.status is not DocumentStatus.FAILED
            and existing.content_sha256 == digest
        ):
            if fields:
                return self.put_document(tenant, collection_id, document_id, DocumentInput(**fields))[0], False
            return existing, False
        document, _ = self._store_and_commit(tenant, existing, change, data)
        return document, True

    def _file_write(
        self,
        tenant: str,
        collection_id: str,
        document_id: str,
        filename: str,
        mimetype: str | None,
        content: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> tuple[Document | None, Change]:
        """(the stored document or None; the change that points it at a new key for the file, created if missing and
        titled after the file, with `fields` (attributes, access) applied). The change loses (Conflict) to a write
        of other content committed meanwhile."""
        from kindex.text.extract import guess_mimetype

        _checked_id("document", document_id)
        filename = normalize_id(filename)  # a file name is informative, not an id to match: take it in NFC form
        try:
            check_id(filename)
        except ValueError as error:
            raise InvalidInput(f"filename {error}") from error
        if "\\" in filename or filename in (".", ".."):
            raise InvalidInput("filename must be a plain file name")
        self._collection(tenant, collection_id)
        content_type = mimetype or guess_mimetype(filename) or "application/octet-stream"
        existing = self.documents.get_document(tenant, collection_id, document_id)
        version = (existing.version if existing else 0) + 1
        source = keys.write_blob_key(tenant, collection_id, document_id, filename, version=version)

        def change(current: Document | None) -> Document:
            same_content(existing, current, document_id)
            base = current or Document(id=document_id, collection=collection_id, title=filename)
            if fields:
                base = with_filter_fields(base, fields)
            return base.model_copy(
                update={
                    "source": source,
                    "version": version,
                    "mimetype": content_type,
                    "status": DocumentStatus.PENDING,
                    "failure_reason": None,
                    "updated_at": utc_now(),
                    **(content or {}),
                }
            )

        return existing, change

    def list_chunks(self, tenant: str, collection_id: str, document_id: str, page: PageRequest) -> ChunkPage:
        """One page of the document's chunks in index order: at most `page.number`, and no more than fit
        CHUNK_PAGE_MAX_BYTES (a single chunk always fits), with a cursor when more follow."""
        self._collection(tenant, collection_id)
        self._document(tenant, collection_id, document_id)
        if self.chunks is None:
            return ChunkPage(chunks=[])
        after = _decode_chunk_cursor(page.cursor) if page.cursor else None
        chunks: list[StoredChunk] = []
        size = 0
        for chunk in self.chunks.iter_chunks(
            tenant, collection_id, document_id, after=after, offset=0 if page.cursor else page.start
        ):
            cost = _chunk_json_bytes(chunk)
            if len(chunks) == page.number or (chunks and size + cost > CHUNK_PAGE_MAX_BYTES):
                return ChunkPage(chunks=chunks, next_cursor=_encode_chunk_cursor(chunks[-1]))
            chunks.append(chunk)
            size += cost
        return ChunkPage(chunks=chunks)

    def delete_document(self, tenant: str, collection_id: str, document_id: str) -> None:
        collection = self._collection(tenant, collection_id)
        document = self._document(tenant, collection_id, document_id)
        # The record goes last, and only at the revision whose chunks and blobs were just removed: a writer that
        # committed meanwhile (an ingest or import that wrote chunks, a new upload) makes the delete look again, so
        # nothing it wrote outlives the record. A writer that commits after the record is gone finds it NotFound and
        # removes its own writes.
        for attempt in range(DELETE_ATTEMPTS):
            if attempt:
                # Let the racing writers finish first; the wait is not this machine's work (kindex.app.cpu_slots).
                with cpu_slots.away():
                    self.pause(min(DELETE_PAUSE_SECONDS * 2 ** (attempt - 1), DELETE_PAUSE_MAX_SECONDS))
            if self.on_document_removed:
                self.on_document_removed(tenant, document, collection)
            self.blobs.delete_prefix(keys.document_prefix(tenant, collection_id, document_id))
            try:
                self.documents.delete_document(tenant, collection_id, document_id, revision=document.revision)
                return
            except Conflict:
                current = self.documents.get_document(tenant, collection_id, document_id)
                if current is None:
                    return
                document = current
        logger.warning(
            "document delete kept losing to writers",
            extra={"tenant": tenant, "collection": collection_id, "document": document_id},
        )
        raise Conflict(f"document {document_id!r} kept changing while it was deleted; try again")

    def list_documents(self, tenant: str, collection_id: str, page: PageRequest) -> DocumentPage:
        """One page of document summaries in id order, read in one query: at most `page.number`, and no more than
        fit DOCUMENT_PAGE_MAX_BYTES (a single document always fits), with a cursor when more follow."""
        self._collection(tenant, collection_id)
        after = keys.decode_cursor(page.cursor) if page.cursor else None
        records = self.documents.list_documents(
            tenant, collection_id, after=after, offset=0 if page.cursor else page.start, limit=page.number + 1
        )
        summaries: list[DocumentSummary] = []
        size = 0
        for record in records:
            summary = DocumentSummary.of(record)
            cost = _summary_json_bytes(summary)
            if len(summaries) == page.number or (summaries and size + cost > DOCUMENT_PAGE_MAX_BYTES):
                return DocumentPage(documents=summaries, next_cursor=keys.encode_cursor(summaries[-1].id))
            summaries.append(summary)
            size += cost
        return DocumentPage(documents=summaries)

    def _limits(self, tenant: str, delta: Usage) -> QuotaLimits | None:
        """The tenant's quotas for a write adding `delta`, checked against its usage now (QuotaExceeded first, so a
        refused write stores nothing); None without usage accounting."""
        return None if self.usage is None else self.usage.precheck(tenant, delta)

    def _document(self, tenant: str, collection_id: str, document_id: str) -> Document:
        document = self.documents.get_document(tenant, collection_id, document_id)
        if document is None:
            raise NotFound(f"document {document_id!r} does not exist in collection {collection_id!r}")
        return document
