"""Ingestion: a blob event in, an indexed (or honestly failed) document out.

blob -> extract -> chunk -> embed (through the cache, in bounded slices) -> write chunk texts and vectors -> delete
the chunks that are gone -> status. Events are at-least-once and may come out of order: every event re-reads the
object's current bytes, so duplicates and stale events converge to the latest write."""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from kindex.app.chunk_removal import ChunkRemover
from kindex.app.document_writes import filter_fields_change, same_content, with_filter_fields, write_document
from kindex.app.embedding import EmbeddingService, text_sha256
from kindex.app.ingest_batch import UNKNOWN_COST, IngestBatch, Memo
from kindex.app.usage import UsageService
from kindex.domain import keys
from kindex.domain.errors import (
    Conflict,
    DependencyFailed,
    IngestError,
    InvalidInput,
    InvalidSidecar,
    LimitExceeded,
    NotFound,
    QuotaExceeded,
    UnknownModel,
)
from kindex.domain.metering import CHUNKS_WRITTEN
from kindex.domain.models import Collection, Document, DocumentStatus, utc_now
from kindex.domain.ports import (
    BlobStore,
    ChunkStore,
    CollectionStore,
    DocumentStore,
    MetricsRecorder,
    PageReader,
    SearchIndex,
)
from kindex.domain.quotas import QuotaLimits
from kindex.domain.sidecar import MAX_SIDECAR_BYTES, described_key, is_sidecar, parse_sidecar, sidecar_key
from kindex.domain.types import IndexRecord, StoredChunk

logger = logging.getLogger(__name__)

MAX_REASON = 500
#: Rounds of a filter-field rewrite racing further filter PUTs of the same document; what is still stale after them
#: is left to the event each of those PUTs sends.
REWRITE_ROUNDS = 4


class DiscardedMetrics:
    """The MetricsRecorder of a service built without one (tests, tools): counts go nowhere."""

    def count(self, name: str, value: float = 1) -> None:
        pass

    def meter(self, tenant: str, name: str, value: float = 1) -> None:
        pass


class RetryableIngestFailure(Exception):
    """Raised to the queue consumer so the message is retried (and dead-lettered after the last attempt)."""


class CommitPending(RetryableIngestFailure):
    """The event of an API write came before the write committed or gave up (its bytes are stored first); it is
    retried later, when the write has decided."""


# How long an event waits, in the worker, for the API write whose bytes it announces to commit or give up: that
# takes milliseconds, so waiting here is cheaper than a queue retry (minutes on SQS).
COMMIT_WAIT_SECONDS = 2.0


def chunk_id(tenant: str, collection: str, document: str, index: int, text_hash: str) -> str:
    """Deterministic: the same chunk of the same content always gets the same id, never a random one."""
    material = "\x1f".join((tenant, collection, document, str(index), text_hash))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


def embedded_text(chunk) -> str:
    """What is embedded and keyword-indexed for a chunk (a TextChunk or StoredChunk): its heading path and the header
    of the table it continues, then its text. The embedding cache is keyed by this text's hash, so a chunk without
    either (plain text, a PDF without outline, a chunk of version 1) hits the vector cached for its text alone, and
    a chunk that gains a section path after a reindex is embedded again, once."""
    context = [part for part in (chunk.section, chunk.table_header) if part]
    return "\n\n".join([*context, chunk.text]) if context else chunk.text


def import_chunk_id(tenant: str, run: Document, index: int, text_hash: str) -> str:
    """An imported chunk's id: that of its text at its index in one run of an import (the in-progress record the
    run started: its version and creation time). Unlike content-derived ids, two runs (two imports of one document
    racing, or a run replaced meanwhile) never share an id, so a run that lost its document removes exactly what it
    wrote and nothing of the winner's, and a write that lost to a run knows which chunks are the run's."""
    return chunk_id(
        tenant, run.collection, run.id, index, f"{text_hash}\x1fimport\x1f{run.version}\x1f{run.created_at.isoformat()}"
    )


def failure_reason(error: Exception) -> str:
    kind = getattr(error, "kind", None) or ("DependencyFailed" if isinstance(error, DependencyFailed) else "Error")
    message = " ".join(str(getattr(error, "message", error)).split())
    return f"{kind}: {message}"[:MAX_REASON]


@dataclass
class IngestLimits:
    max_file_bytes: int = 50 * 1024 * 1024
    max_chunks_per_document: int = 20_000
    # Texts per embedding call. Bounds how long one document holds its worker between two progress writes, and
    # what a batch of small documents shares in one call.
    embed_slice: int = 128
    # A remote model is called once per slice over the network: a large slice costs the fewest requests (2,048 chunks
    # in two, OpenAI's minimum for them), while progress still moves every slice; a local model's time per call grows
    # with the slice, so a small slice keeps threads turning over and progress moving.
    remote_embed_slice: int = 1024
    # Objects up to this size are read and chunked before the batch's per-record pass (to order the batch and
    # share embedding calls); bigger ones only in their own record, after the small ones.
    prepare_max_bytes: int = 1024 * 1024


def _fields_written(written: Document, current: Document | None) -> Document:
    """The record once the index entries carry `written`'s filter fields: `indexed` when those are still its fields,
    else still `in_progress` (a later PUT's fields are to be written next). Its content must be `written`'s."""
    current = same_content(written, current, written.id)
    done = current.fields_version == written.fields_version
    return current.model_copy(
        update={
            "indexed_fields_version": written.fields_version,
            "updated_at": utc_now(),
            "status": DocumentStatus.INDEXED if done else DocumentStatus.IN_PROGRESS,
            **({"indexed_at": utc_now()} if done else {}),
        }
    )


class IngestService:
    """Processes blob created/removed events for document blobs and keeps chunks and vectors in step."""

    def __init__(
        self,
        collections: CollectionStore,
        documents: DocumentStore,
        blobs: BlobStore,
        chunks: ChunkStore,
        index: SearchIndex,
        embeddings: EmbeddingService,
        limits: IngestLimits | None = None,
        extract: Callable | None = None,
        chunk: Callable | None = None,
        metrics: MetricsRecorder | None = None,
        ocr: PageReader | None = None,
        usage: UsageService | None = None,
    ):
        self.usage = usage
        self.collections = collections
        self.documents = documents
        self.blobs = blobs
        self.chunks = chunks
        self.index = index
        self.remover = ChunkRemover(index, chunks)
        self.embeddings = embeddings
        self.limits = limits or IngestLimits()
        self._extract = extract
        self._chunk = chunk
        self.metrics = metrics or DiscardedMetrics()
        self.ocr = ocr  # None: this deployment has no OCR engine (local mode without Tesseract)

    # Events
    def prepare(self, batch: IngestBatch, created: Mapping[str, int | None]) -> None:
        """Before a batch's per-record pass: read and chunk every small created object (by key, with the event's
        object size: an object over the file limit is never downloaded), measure what each record will cost, and
        queue the small documents' texts to share embedding calls. Never raises: a key whose preparation fails is
        simply not prepared, and its own record reports the failure, alone."""
        for key, size in created.items():
            try:
                self._prepare(batch, key, size)
            except Exception as error:  # its record reports it, with the right status and retry semantics
                logger.warning(
                    "could not prepare an object ahead of its record",
                    extra={"key": key, "error_type": type(error).__name__},
                )
        batch.order_waiting()

    def _prepare(self, batch: IngestBatch, key: str, size: int | None = None) -> None:
        batch.costs[key] = 0  # nothing to do unless shown otherwise below
        parsed = keys.parse_blob_key(key)
        if parsed is None:
            return
        tenant, collection_id, document_id, filename = parsed
        if keys.blob_write(key) is None and is_sidecar(filename):
            return  # a metadata sidecar: never text to embed
        collection = self.collections.get_collection(tenant, collection_id)
        if collection is None:
            return
        batch.costs[key] = UNKNOWN_COST
        document = self.documents.get_document(tenant, collection_id, document_id)
        if keys.blob_write(key) is not None and (document is None or document.source != key):
            return None  # not (or not yet) the document's content: the per-record pass decides
        data = self._read_blob(key, size)
        if len(data) > self.limits.prepare_max_bytes:
            return  # extracted in its own record, after the batch's small documents
        batch.fetched[key] = data
        digest = hashlib.sha256(data).hexdigest()
        if document is not None and document.content_current(collection, digest):
            batch.costs[key] = 0
            return  # a duplicate event, or one that only rewrites filter fields: nothing to embed
        mimetype = (document.mimetype if document else None) or None
        memo = (key, digest, collection.config_version, mimetype)
        try:
            pieces, warning = self._extracted_pieces(collection, data, filename, mimetype)
        except IngestError as error:
            batch.prepared[memo] = error  # its record fails at once, without extracting again
            batch.costs[key] = 0
            return
        batch.prepared[memo] = pieces
        if warning is not None:
            batch.warnings[memo] = warning
        batch.costs[key] = len(pieces)
        if len(pieces) <= self.limits.embed_slice:
            batch.wait_for_embedding(
                memo, tenant, {collection.embedding_model, collection.query_model}, [embedded_text(p) for p in pieces]
            )

    def object_created(self, key: str, size: int | None = None, batch: IngestBatch | None = None) -> Document | None:
        """Index the document whose blob was written, with what `batch` (the invocation's, see IngestRun) learnt
        ahead. Returns the document's final state, None if ignored; in a batch that defers keyword commits, the
        state before its `indexed` write, which the run makes once the batch's writes are committed.

        `size` is the event's object size: an object over the file limit fails its document (LimitExceeded)
        without being downloaded, and never affects the other records of the batch."""
        parsed = keys.parse_blob_key(key)
        if parsed is None:
            logger.warning("ignoring blob outside the document layout", extra={"key": key})
            return None
        tenant, collection_id, document_id, filename = parsed
        collection = self.collections.get_collection(tenant, collection_id)
        if collection is None:
            logger.warning(
                "ignoring blob of a missing collection", extra={"tenant": tenant, "collection": collection_id}
            )
            return None
        dropped = keys.blob_write(key) is None  # put straight into the prefix, not written by the API
        if dropped and is_sidecar(filename):
            return self._sidecar_changed(tenant, collection, key, batch)
        data = batch.fetched.pop(key, None) if batch else None  # read moments ago by `open_batch`
        too_large: LimitExceeded | None = None
        if data is None:
            try:
                data = self._read_blob(key, size)
            except NotFound:
                return None  # deleted since; its removal event follows
            except LimitExceeded as error:
                too_large = error
        found = self._document_for(tenant, collection_id, document_id, filename, key)
        if found is None:
            return None
        document, adopted = found
        ours: list[str] = []  # the chunk ids this event wrote (or rewrote the index entries of)
        try:
            refused: IngestError | None = too_large
            if refused is None and dropped:
                document, refused = self._with_sidecar(tenant, document, key)
            if refused is not None:
                return self._fail(
                    tenant, collection, document, adopted, failure_reason(refused), refused.retryable, refused
                )
            assert data is not None  # read above: only a blob over the limit is not, and it failed (too_large)
            return self._index(
                tenant, collection, document, adopted, data, filename, batch or IngestBatch(self.index), ours
            )
        except NotFound:
            # The document was deleted while we worked: remove what we wrote, so nothing is left behind.
            self.remover.remove_document(tenant, collection, document)
            return None
        except Conflict:
            # A newer write committed while this content was being indexed (on AWS, two events of one document can
            # run at once): our chunks may have landed after the newer content's ingest cleaned up. Remove ours that
            # the current content does not share, then let the message be retried (it is stale now, and ignored).
            self._remove_stale_chunks(tenant, collection_id, document_id, ours)
            raise

    def object_removed(self, key: str) -> None:
        """A document's source blob was deleted (API or S3 directly): delete the document everywhere. A file's
        metadata sidecar was deleted: its document has no attributes and no access list any more."""
        parsed = keys.parse_blob_key(key)
        if parsed is None:
            return
        tenant, collection_id, document_id, filename = parsed
        if keys.blob_write(key) is None and is_sidecar(filename):
            collection = self.collections.get_collection(tenant, collection_id)
            if collection is not None:
                self._sidecar_changed(tenant, collection, key)
            return
        document = self.documents.get_document(tenant, collection_id, document_id)
        collection = self.collections.get_collection(tenant, collection_id)
        if document is None or collection is None or document.source != key:
            return
        if self.blobs.blob_size(key) is not None:
            return  # written again since the removal: the object exists, keep the document
        self.remover.remove_document(tenant, collection, document)
        self.documents.delete_document(tenant, collection_id, document_id)

    # Sidecars
    def _sidecar_fields(self, key: str) -> dict | None:
        """The fields the sidecar of the dropped file `key` sets, None when it has none; InvalidSidecar naming the
        sidecar and the field when it is refused."""
        name = sidecar_key(key)
        try:
            data = self.blobs.get_blob(name, max_bytes=MAX_SIDECAR_BYTES)
        except NotFound:
            return None
        except LimitExceeded:
            raise InvalidSidecar(f"{name.rsplit('/', 1)[-1]}: larger than {MAX_SIDECAR_BYTES:,} bytes") from None
        try:
            return parse_sidecar(data)
        except InvalidInput as error:
            raise InvalidSidecar(f"{name.rsplit('/', 1)[-1]}: {error.message}") from None

    def _with_sidecar(self, tenant: str, document: Document, key: str) -> tuple[Document, InvalidSidecar | None]:
        """(`document` (the dropped file `key`'s) with the attributes and access its sidecar sets, written when they
        differ; the refusal of its sidecar, if refused). Without a sidecar the document keeps the fields it has (a
        PUT may have set them)."""
        try:
            fields = self._sidecar_fields(key)
        except InvalidSidecar as refused:
            return document, refused
        if fields is None or not filter_fields_change(document, fields):
            return document, None

        def change(current: Document | None) -> Document:
            current = same_content(document, current, document.id)
            return with_filter_fields(current, fields)

        written, _ = write_document(self.documents, tenant, document.collection, document.id, document, change)
        return written, None

    def _sidecar_changed(
        self, tenant: str, collection: Collection, key: str, batch: IngestBatch | None = None
    ) -> Document | None:
        """A sidecar was written or deleted: apply it to the document of the file it describes, if that document is
        made from that file (one whose file has not come yet reads the sidecar when it does). An indexed document
        gets its index entries rewritten here, without embedding; one being indexed takes the fields when its ingest
        ends; a failed one (its sidecar was refused, say) is indexed again. Deleting the sidecar removes the
        document's attributes and access list."""
        described = described_key(key)
        parsed = keys.parse_blob_key(described)
        if parsed is None:
            return None
        document = self.documents.get_document(tenant, collection.id, parsed[2])
        if document is None or document.source != described:
            return None
        if document.status is DocumentStatus.FAILED:
            return self.object_created(described)
        try:
            fields = self._sidecar_fields(described)
        except InvalidSidecar as refused:
            return self._fail(tenant, collection, document, {}, failure_reason(refused), False, refused)
        fields = fields or {"attributes": None, "access": None}
        if not filter_fields_change(document, fields):
            return document

        def change(current: Document | None) -> Document:
            current = same_content(document, current, document.id)
            return with_filter_fields(current, fields)

        try:
            written, _ = write_document(self.documents, tenant, collection.id, document.id, document, change)
        except (Conflict, NotFound):
            return None  # new content or a delete meanwhile: its own event reads the sidecar
        if written.content_current(collection):
            return self._rewrite_fields(tenant, collection, written, batch)
        return written  # being indexed: the ingest that indexes it writes the new fields when it ends

    # Internals
    def _document_for(
        self, tenant: str, collection_id: str, document_id: str, filename: str, key: str
    ) -> tuple[Document, dict] | None:
        """(the stored document this blob is the content of, what the ingest must change for that: a dropped-in file
        that replaces a gone one becomes the document's source), or None when the event is stale."""
        from kindex.text.extract import guess_mimetype

        document = self.documents.get_document(tenant, collection_id, document_id)
        write = keys.blob_write(key)
        if write is not None:
            written = self._written_document(tenant, collection_id, document_id, key, write, document)
            return None if written is None else (written, {})
        if document is None:
            # A file dropped straight into the tenant's prefix: it becomes a document.
            document = Document(
                id=document_id,
                collection=collection_id,
                title=filename,
                source=key,
                mimetype=guess_mimetype(filename) or "",
                revision=1,
            )
            try:
                self.documents.put_document(tenant, document, create=True)
            except Conflict:
                document = self.documents.get_document(tenant, collection_id, document_id)
                return None if document is None else (document, {})
            if self.blobs.blob_size(key) is None:
                # The document was deleted (blob first) while this event was in flight: do not resurrect it.
                self.documents.delete_document(tenant, collection_id, document_id)
                return None
            return document, {}
        if document.source == key:
            return document, {}
        if document.source and self.blobs.blob_size(document.source) is not None:
            return None  # the document's current source is another, existing blob: this event is stale
        return document, {"source": key, "mimetype": guess_mimetype(filename) or document.mimetype}

    def _remove_stale_chunks(self, tenant: str, collection_id: str, document_id: str, ours: list[str]) -> None:
        """A write that lost to newer content: delete the chunks and vectors it wrote (`ours`) that the document's
        current content does not share. Only its own: another writer's chunks are that writer's to keep or remove
        (an import's chunks have ids no content write shares, see `import_chunk_id`, and removing "everything not
        derived from the current blob" took a finished import's chunks with it)."""
        if not ours:
            return
        collection = self.collections.get_collection(tenant, collection_id)
        document = self.documents.get_document(tenant, collection_id, document_id)
        if collection is None or document is None or collection.switching:
            return  # gone (its removal cleans up), or a model switch keeps the old model's chunks until it ends
        current = self._current_chunk_ids(tenant, collection, document)
        if current is None:
            return  # replaced again, or content that cannot be indexed: its own event decides
        self.remover.remove_chunks(
            tenant,
            collection_id,
            document_id,
            sorted(set(ours) - current),
            {collection.embedding_model, collection.query_model},
        )

    def _current_chunk_ids(self, tenant: str, collection: Collection, document: Document) -> set[str] | None:
        """The chunk ids of the document's current content: an import run's own (in progress, or the run that
        committed the record: one version before it), else those derived from its content blob; None when that
        blob cannot be read or indexed."""
        stored = self.chunks.list_chunks(tenant, collection.id, document.id)
        runs = [document] if document.status is DocumentStatus.IN_PROGRESS else []
        if document.version > 1:
            runs.append(document.model_copy(update={"version": document.version - 1}))
        imported = {
            c.chunk_id
            for c in stored
            for run in runs
            if c.chunk_id == import_chunk_id(tenant, run, c.index, text_sha256(c.text))
        }
        if imported or not document.source:
            return imported
        parsed = keys.parse_blob_key(document.source)
        try:
            pieces = self._pieces(
                collection, self.blobs.get_blob(document.source), parsed[3] if parsed else "", document.mimetype or None
            )
        except (NotFound, IngestError):
            return None
        return {chunk_id(tenant, collection.id, document.id, p.index, text_sha256(p.text)) for p in pieces}

    def _written_document(
        self,
        tenant: str,
        collection_id: str,
        document_id: str,
        key: str,
        write: keys.BlobWrite,
        document: Document | None,
    ) -> Document | None:
        """The document when `key`, the blob of one API write, holds its current content; None when that write lost
        its commit (409) or a later write superseded it. The API stores the bytes before it commits the record, so
        the event may come first: then wait a little for the decision. Only the record decides, never the bytes."""
        deadline = time.monotonic() + COMMIT_WAIT_SECONDS
        pause = 0.02
        while True:
            if document is not None and document.source == key:
                return document
            if document is not None and document.version >= write.version:
                return None  # another write of this version won, or a later one committed: stale
            if document is None and write.version > 1:
                return None  # the document this write updates is gone: the write fails, or was deleted after it
            if key not in self.blobs.list_blobs(key):
                return None  # the write lost and deleted its blob (or the document was deleted)
            if time.monotonic() >= deadline:
                raise CommitPending(f"the write of {key!r} has not committed yet")
            time.sleep(pause)
            pause = min(pause * 2, 0.25)
            document = self.documents.get_document(tenant, collection_id, document_id)

    def _index(
        self,
        tenant: str,
        collection: Collection,
        stored: Document,
        adopted: dict,
        data: bytes,
        filename: str,
        batch: IngestBatch,
        ours: list[str],
    ) -> Document:
        """Index `stored` (the record as read) from `data`; `adopted` are changes the ingest makes besides its own
        status fields (see `_document_for`). Every status write applies only the ingest's own fields (see `_save`).
        `ours` collects the chunk ids it writes, for the cleanup when newer content wins meanwhile."""
        digest = hashlib.sha256(data).hexdigest()
        model = collection.embedding_model
        document = stored.model_copy(update=adopted)
        if document.content_current(collection, digest) and not (adopted and document.fields_stale):
            # A duplicate event (nothing changed), or one that only rewrites the filter fields of the index entries
            # (attributes, access, language or mimetype changed): nothing to embed either way.
            return self._rewrite_fields(tenant, collection, stored, batch, ours) if document.fields_stale else document
        # Same content, new chunking or model: the document stays `indexed` (queries keep using what is there)
        # while its new chunks and vectors are built beside the old ones.
        rebuild_only = (
            digest == document.content_sha256
            and document.status is DocumentStatus.INDEXED
            and document.indexed_version == document.version
        )
        own = dict(adopted)  # what is still to write besides the next write's own fields
        if digest != document.content_sha256:
            own.update(version=document.version + 1, content_sha256=digest, content_length=len(data))
        if not rebuild_only:
            stored = self._save(
                tenant,
                stored,
                {
                    **own,
                    "status": DocumentStatus.IN_PROGRESS,
                    "failure_reason": None,
                    "chunks_done": 0,
                    "updated_at": utc_now(),
                },
            )
            own = {}
        working = stored.model_copy(update=own)

        def record_progress(done: int, total: int) -> None:
            # Checked against the content it works on: progress never overwrites newer content (that makes it a
            # Conflict, which stops this stale work), and it costs one small metadata write per embedded slice.
            nonlocal stored
            stored = self._save(tenant, stored, {"chunk_count": total, "chunks_done": done})

        def still_current() -> None:
            # Before this content's write removes the chunks it replaces: the record must still hold this content.
            # Chunks of a newer write (a PUT's, an import's) are only written after its record commits, so none of
            # them is among those listed before ours were put unless this check sees that newer record.
            same_content(stored, self.documents.get_document(tenant, stored.collection, stored.id), stored.id)

        try:
            models = [model]
            if collection.switching and not rebuild_only:
                models.append(collection.query_model)
            for name in models:
                self._check_model(name)
            memo = (working.source or "", digest, collection.config_version, working.mimetype or None)
            pieces, warning = self._prepared_pieces(batch, memo, collection, data, filename, working.mimetype or None)
            stored = self._reserve_chunks(tenant, stored, len(pieces))
            chunk_count, writes = self._write_chunks(
                tenant,
                collection,
                working,
                pieces,
                models,
                rebuild_only,
                batch,
                memo,
                None if rebuild_only else record_progress,
                still_current,
                ours,
            )
        except (IngestError, DependencyFailed, QuotaExceeded) as error:
            # A quota is not retried by the reindex: the document is indexed again when its content is written again
            # (or a reindex job is asked for) once the tenant freed chunks or moved to a larger plan.
            retryable = isinstance(error, DependencyFailed) or getattr(error, "retryable", False)
            return self._fail(tenant, collection, stored, own, failure_reason(error), retryable, error)
        except (Conflict, NotFound):
            raise  # the document changed or went away meanwhile: the caller decides
        except Exception as error:
            # A defect or an unexpected dependency error: say so on the document (without internals) instead of
            # leaving it `in_progress`, and let the queue retry it.
            logger.exception(
                "unexpected error while indexing",
                extra={"tenant": tenant, "collection": collection.id, "document": document.id},
            )
            return self._fail(
                tenant,
                collection,
                stored,
                own,
                f"InternalError: indexing failed unexpectedly ({type(error).__name__})",
                True,
                error,
            )
        indexed = {
            **own,
            "status": DocumentStatus.INDEXED,
            "chunk_count": chunk_count,
            "chunks_done": chunk_count,
            "indexed_version": working.version,
            "indexed_model": model,
            "indexed_config_version": collection.config_version,
            # Indexed, but honest about what is missing: the scanned pages left unread, and why.
            "failure_reason": None if warning is None else f"ScannedPagesUnread: {warning}"[:MAX_REASON],
            "failure_retryable": False,
            "indexed_fields_version": working.fields_version,
        }
        if writes:
            # Their keyword commit is the batch's, at its end: only then may the document say `indexed`.
            batch.defer(writes, partial(self._indexed_after_commit, tenant, collection, stored, indexed, ours))
            return stored
        return self._indexed(tenant, collection, stored, indexed)

    def _indexed(self, tenant: str, collection: Collection, stored: Document, fields: dict) -> Document:
        now = utc_now()
        indexed = self._save(tenant, stored, {**fields, "indexed_at": now, "updated_at": now})
        self.metrics.count("DocumentsIndexed")
        self.metrics.meter(tenant, CHUNKS_WRITTEN, fields["chunk_count"])
        logger.info(
            "document indexed",
            extra={
                "tenant": tenant,
                "collection": collection.id,
                "document": stored.id,
                "chunks": fields["chunk_count"],
            },
        )
        if indexed.fields_stale:
            # A PUT of filter fields committed while the chunks were written with the older ones.
            return self._rewrite_fields(tenant, collection, indexed)
        return indexed

    def _rewrite_fields(
        self,
        tenant: str,
        collection: Collection,
        stored: Document,
        batch: IngestBatch | None = None,
        ours: list[str] | None = None,
    ) -> Document:
        """Write the document's index entries again with its current filter fields, keeping its chunks and their
        vectors: the chunk texts come from the chunk store and the vectors from the tenant's embedding cache (then
        from its imported vectors), so nothing is embedded unless the cache lost a vector. The document says
        `indexed` again once the entries carry the fields it holds; a filter PUT that commits meanwhile makes this
        write those too (each round reads the record again), so the last fields written always win.

        In a `batch` that defers keyword commits (the ingest function's and the local worker's), the first round's
        writes wait for the batch's one commit, like an ingest's, and the record is written after it: a commit per
        document was most of a fields-only PUT's cost (about 140 of 170 ms on the embedded index)."""
        ours = [] if ours is None else ours
        for _ in range(REWRITE_ROUNDS):
            chunks = self.chunks.list_chunks(tenant, collection.id, stored.id)
            ours += [c.chunk_id for c in chunks]  # their entries are written again: ours to clean up if we lose
            models = [collection.embedding_model] + ([collection.query_model] if collection.switching else [])
            writes: list[int] = []
            for model in models:
                records = self._records_with_fields(tenant, collection, stored, chunks, model)
                if not records:
                    continue
                if batch is None:
                    self.index.upsert(model, records)
                elif (written := batch.upsert(model, records)) is not None:
                    writes.append(written)
            if writes:
                assert batch is not None
                batch.defer(writes, partial(self._fields_after_commit, tenant, collection, stored, len(chunks), ours))
                return stored
            stored = self._fields_rewritten(tenant, collection, stored, len(chunks))
            if not stored.fields_stale:
                break
        return stored

    def _fields_rewritten(self, tenant: str, collection: Collection, written: Document, chunks: int) -> Document:
        """The record once the index entries carry `written`'s filter fields (see `_fields_written`)."""
        stored, _ = write_document(
            self.documents, tenant, collection.id, written.id, written, partial(_fields_written, written)
        )
        self.metrics.count("DocumentFieldsRewritten")
        logger.info(
            "document filter fields rewritten",
            extra={"tenant": tenant, "collection": collection.id, "document": stored.id, "chunks": chunks},
        )
        return stored

    def _fields_after_commit(
        self, tenant: str, collection: Collection, written: Document, chunks: int, ours: list[str]
    ) -> None:
        """A deferred fields rewrite, once the batch's commit made its entries searchable: the record says so, and a
        PUT that committed newer fields meanwhile is rewritten at once. Its NotFound and Conflict end as
        `object_created` ends them (a deleted document leaves nothing behind; newer content retries the record)."""
        try:
            stored = self._fields_rewritten(tenant, collection, written, chunks)
            if stored.fields_stale:
                self._rewrite_fields(tenant, collection, stored)
        except NotFound:
            self.remover.remove_document(tenant, collection, written)
        except Conflict:
            # Newer content committed meanwhile: its ingest may have removed these chunks before this commit put
            # their entries back. Remove those the current content does not share, then let the record be retried.
            self._remove_stale_chunks(tenant, collection.id, written.id, ours)
            raise

    def _records_with_fields(
        self, tenant: str, collection: Collection, document: Document, chunks: list[StoredChunk], model: str
    ) -> list[IndexRecord]:
        """The chunks' index records under `model`, with the document's filter fields and the vectors the chunks
        already have. The configured model's vectors are looked up in the cache, then among the tenant's imported
        vectors, and only then embedded; the model a switch still serves holds only the chunks it embedded before,
        so those whose vector it never had are left out (they are not in its index)."""
        hashes = [text_sha256(embedded_text(c)) for c in chunks]
        found = self.embeddings.known(tenant, model, [embedded_text(c) for c in chunks])
        lost = [c for c, h in zip(chunks, hashes) if h not in found]
        if lost and model == collection.embedding_model:
            self._check_model(model)
            found.update(
                zip(
                    (text_sha256(embedded_text(c)) for c in lost),
                    self.embeddings.embed(tenant, model, [embedded_text(c) for c in lost]),
                )
            )
        return [self._record(tenant, collection, document, c, found[h]) for c, h in zip(chunks, hashes) if h in found]

    @staticmethod
    def _record(tenant: str, collection: Collection, document: Document, chunk: StoredChunk, vector) -> IndexRecord:
        """A chunk's index record, with its document's filter fields (the one place that lists them)."""
        return IndexRecord(
            tenant=tenant,
            collection=collection.id,
            document_id=document.id,
            chunk_id=chunk.chunk_id,
            vector=vector,
            text=embedded_text(chunk),
            language=document.language or None,
            mimetype=document.mimetype or None,
            attributes=document.attributes or None,
            access=document.access,
        )

    def _indexed_after_commit(
        self, tenant: str, collection: Collection, stored: Document, fields: dict, ours: list[str]
    ) -> None:
        """The `indexed` status write of a document whose chunks the batch's keyword commit made searchable; its
        NotFound and Conflict end as `object_created` ends them."""
        try:
            self._indexed(tenant, collection, stored, fields)
        except NotFound:
            self.remover.remove_document(tenant, collection, stored)  # deleted while we worked: nothing is left behind
        except Conflict:
            self._remove_stale_chunks(tenant, collection.id, stored.id, ours)
            raise

    def _fail(
        self,
        tenant: str,
        collection: Collection,
        stored: Document,
        own: dict,
        reason: str,
        retryable: bool,
        error: Exception,
    ) -> Document:
        failed = self._save(
            tenant,
            stored,
            {
                **own,
                "status": DocumentStatus.FAILED,
                "failure_reason": reason,
                "failure_retryable": retryable,
                "updated_at": utc_now(),
            },
        )
        self.metrics.count("DocumentsFailed")
        logger.warning(
            "document failed",
            extra={"tenant": tenant, "collection": collection.id, "document": stored.id, "reason": reason},
        )
        if retryable:
            raise RetryableIngestFailure(reason) from error
        return failed

    def _check_model(self, model: str) -> None:
        """A model the embedder registry does not know (stored before the API checked it, or from a newer
        deployment) fails its own documents, before any extraction, and nothing else."""
        try:
            self.embeddings.embedder_for(model)
        except InvalidInput as error:
            raise UnknownModel(error.message) from error

    def _read_blob(self, key: str, size: int | None) -> bytes:
        """The object's bytes, never more than the file limit: an event's size over the limit (or no size) is
        confirmed by a HEAD first, since the object may have been replaced since the event (events come out of
        order, and the current object decides); the GET itself is bounded too, for a replacement in between."""
        limit = self.limits.max_file_bytes
        if size is None or size > limit:
            size = self.blobs.blob_size(key)
            if size is None:
                raise NotFound(f"blob {key!r} does not exist")
            if size > limit:
                raise LimitExceeded(f"File is {size} bytes; the limit is {limit} bytes")
        return self.blobs.get_blob(key, max_bytes=limit)

    def _reserve_chunks(self, tenant: str, stored: Document, count: int) -> Document:
        """Under a chunk quota, count the document's `count` chunks (checking the quota) before any of them is
        written: a document that would pass the quota fails with QuotaExceeded here, with nothing of it indexed.
        Without one, the chunks are counted by the progress and `indexed` writes, as ever (no extra write)."""
        if self.usage is None or count <= stored.chunk_count:
            return stored
        limits = self.usage.limits_for(tenant)
        if limits.quotas.chunks is None:
            return stored
        return self._save(tenant, stored, {"chunk_count": count}, limits=limits)

    def _save(self, tenant: str, stored: Document, fields: dict, limits: QuotaLimits | None = None) -> Document:
        """Write the ingest's own `fields` over `stored` (the record as it last read or wrote it) and return the
        record written. A write of other fields meanwhile (a metadata PUT) is kept: the ingest reads the record again
        and applies its fields on top. New content meanwhile (another version or source) is a Conflict, so that
        superseded content is never marked indexed (or failed); a deleted document is NotFound."""

        def change(current: Document | None) -> Document:
            current = same_content(stored, current, stored.id)
            return current.model_copy(update=fields)

        written, _ = write_document(self.documents, tenant, stored.collection, stored.id, stored, change, limits=limits)
        return written

    def _prepared_pieces(
        self, batch: IngestBatch, memo: Memo, collection: Collection, data: bytes, filename: str, mimetype: str | None
    ) -> tuple[list, str | None]:
        """What the batch prepared for this content (its pieces and warning, or its failure), else extract now."""
        prepared = batch.prepared.get(memo)
        if isinstance(prepared, IngestError):
            raise prepared
        if prepared is not None:
            return prepared, batch.warnings.get(memo)
        return self._extracted_pieces(collection, data, filename, mimetype)

    def _pieces(self, collection: Collection, data: bytes, filename: str, mimetype: str | None) -> list:
        return self._extracted_pieces(collection, data, filename, mimetype)[0]

    def _ocr(self, collection: Collection) -> tuple[PageReader | None, str]:
        """The OCR engine for the collection's scanned pages, or None and why there is none."""
        if collection.ocr == "off":
            return None, "OCR is off for this collection"
        if self.ocr is None:
            return None, "this server has no OCR engine: install Tesseract (Debian's tesseract-ocr)"
        return self.ocr, ""

    def _extracted_pieces(
        self, collection: Collection, data: bytes, filename: str, mimetype: str | None
    ) -> tuple[list, str | None]:
        """The document's chunks, and what its text lacks (scanned pages left unread), for its failure_reason."""
        from kindex.text.chunking import chunk_text
        from kindex.text.extract import extract

        ocr, no_ocr = self._ocr(collection)
        extracted = (self._extract or extract)(
            data, mimetype=mimetype, filename=filename, max_bytes=self.limits.max_file_bytes, ocr=ocr, no_ocr=no_ocr
        )
        # Version 1 collections keep version 1's chunks (no sections, no table rule) until a reindex upgrades them.
        structured = collection.chunking_version >= 2
        pieces = (self._chunk or chunk_text)(
            extracted.text,
            method=collection.chunking_method.value,
            max_size=collection.chunking_max_size,
            overlap=collection.chunking_overlap_offset,
            pages=extracted.pages,
            headings=extracted.headings if structured else (),
            tables=extracted.tables if structured else (),
        )
        if len(pieces) > self.limits.max_chunks_per_document:
            raise LimitExceeded(
                f"Document has {len(pieces)} chunks; the limit is {self.limits.max_chunks_per_document}"
            )
        return pieces, extracted.warning

    def _write_chunks(
        self,
        tenant: str,
        collection: Collection,
        document: Document,
        pieces: list,
        models: list[str],
        rebuild_only: bool,
        batch: IngestBatch,
        memo: Memo,
        record_progress: Callable[[int, int], None] | None,
        still_current: Callable[[], None],
        ours: list[str],
    ) -> tuple[int, list[int]]:
        """Write chunk texts, then embed and index them one slice at a time, recording progress after each slice
        but the last. While a model change is being built (`collection.switching`), a rebuild writes only the new
        model's vectors and keeps the previous chunks, which the active model still serves; new content is written
        under both models so queries never serve stale text. Returns the chunk count and the numbers of the index
        writes whose keyword commit the batch deferred (see IngestBatch)."""
        stored = [
            StoredChunk(
                chunk_id=chunk_id(tenant, collection.id, document.id, p.index, text_sha256(p.text)),
                collection=collection.id,
                document_id=document.id,
                index=p.index,
                start=p.start,
                end=p.end,
                text=p.text,
                page_start=p.page_start,
                page_end=p.page_end,
                section=p.section,
                table_header=p.table_header,
            )
            for p in pieces
        ]
        previous = {c.chunk_id for c in self.chunks.list_chunks(tenant, collection.id, document.id)}
        ours += [c.chunk_id for c in stored]
        self.chunks.put_chunks(tenant, stored)
        step = self._slice(models)
        writes: list[int] = []
        for start in range(0, len(stored), step):
            part = stored[start : start + step]
            for model in models:
                vectors = self._embed(batch, tenant, model, [embedded_text(c) for c in part], memo)
                written = batch.upsert(
                    model, [self._record(tenant, collection, document, c, vec) for c, vec in zip(part, vectors)]
                )
                if written is not None:
                    writes.append(written)
            done = start + len(part)
            if record_progress is not None and done < len(stored):
                record_progress(done, len(stored))
        gone = sorted(previous - {c.chunk_id for c in stored})
        if gone and not (collection.switching and rebuild_only):
            still_current()  # else Conflict: `gone` may hold the chunks of the content that replaced this one
            self.remover.remove_chunks(tenant, collection.id, document.id, gone, models)
        return len(stored), writes

    def _slice(self, models: list[str]) -> int:
        """Texts per embedding call: the remote slice only when every model of the write is remote."""
        from kindex.domain.embedding_models import parse_embedding_model

        remote = all(parse_embedding_model(model).family == "openai" for model in models)
        return self.limits.remote_embed_slice if remote else self.limits.embed_slice

    def _embed(self, batch: IngestBatch, tenant: str, model: str, texts: list[str], memo: Memo):
        """One slice's vectors, in one embedding call that also carries waiting small documents' texts."""
        failed = batch.failed_models.get(model)
        if failed is not None:
            vectors = self.embeddings.cached(tenant, model, texts)
            if vectors is None:
                raise failed
            return vectors
        riders = batch.riders(model, memo, max(0, self._slice([model]) - len(texts)))
        try:
            return self.embeddings.embed(tenant, model, texts, riders=riders)
        except (IngestError, DependencyFailed) as error:
            batch.failed_models[model] = error
            logger.warning("embedding failed for the batch", extra={"model": model, "error_type": type(error).__name__})
            raise
