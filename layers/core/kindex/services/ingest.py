"""Ingestion: a blob event in, an indexed (or honestly failed) document out.

blob -> extract -> chunk -> embed (through the cache) -> write chunk texts and vectors -> delete the chunks
that are gone -> status. Events are at-least-once and may come out of order: every event re-reads the
object's current bytes, so duplicates and stale events converge to the latest write."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kindex.domain import keys
from kindex.domain.errors import Conflict, DependencyFailed, IngestError, LimitExceeded, NotFound
from kindex.domain.models import Collection, Document, DocumentStatus, utc_now
from kindex.adapters.metrics import LogMetrics
from kindex.domain.ports import BlobStore, ChunkStore, CollectionStore, DocumentStore, MetricsRecorder, SearchIndex
from kindex.domain.types import IndexRecord, StoredChunk
from kindex.services.embedding import EmbeddingService, text_sha256

logger = logging.getLogger(__name__)

MAX_REASON = 500
# `prefetch` keeps the bytes it read for the per-record pass (one GET per object) only up to this many bytes in
# total: a batch of ten maximum-size files would otherwise sit in memory together with everything extracted.
KEEP_FETCHED_BYTES = 64 * 1024 * 1024


class RetryableIngestFailure(Exception):
    """Raised to the queue consumer so the message is retried (and dead-lettered after the last attempt)."""


def chunk_id(tenant: str, collection: str, document: str, index: int, text_hash: str) -> str:
    """Deterministic: the same chunk of the same content always gets the same id, never a random one."""
    material = "\x1f".join((tenant, collection, document, str(index), text_hash))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


def failure_reason(error: Exception) -> str:
    kind = getattr(error, "kind", None) or ("DependencyFailed" if isinstance(error, DependencyFailed) else "Error")
    message = " ".join(str(getattr(error, "message", error)).split())
    return f"{kind}: {message}"[:MAX_REASON]


@dataclass
class IngestLimits:
    max_file_bytes: int = 50 * 1024 * 1024
    max_chunks_per_document: int = 20_000


class IngestService:
    """Processes blob created/removed events for document blobs and keeps chunks and vectors in step."""

    def __init__(self, collections: CollectionStore, documents: DocumentStore, blobs: BlobStore, chunks: ChunkStore,
                 index: SearchIndex, embeddings: EmbeddingService, limits: IngestLimits | None = None,
                 extract: Callable | None = None, chunk: Callable | None = None, metrics: MetricsRecorder | None = None):
        self.collections = collections
        self.documents = documents
        self.blobs = blobs
        self.chunks = chunks
        self.index = index
        self.embeddings = embeddings
        self.limits = limits or IngestLimits()
        self._extract = extract
        self._chunk = chunk
        self.metrics = metrics or LogMetrics()
        # Chunks prepared by `prefetch` for the current batch, by (blob key, sha256, config version, mimetype).
        self._prepared: dict[tuple[str, str, int, str | None], list] = {}
        self._failed_models: dict[str, Exception] = {}
        # The bytes `prefetch` read, so the per-record pass does not fetch the same object again.
        self._fetched: dict[str, bytes] = {}

    # Events
    def prefetch(self, created_keys: list[str], sizes: Mapping[str, int | None] | None = None) -> None:
        """Before a batch: extract and chunk every created object, then embed all their chunks in ONE call per
        model (filling the embedding cache), so a batch of small documents makes full embedder batches. The
        per-record pass then finds its vectors in the cache. Best effort: any failure here is left for the
        per-record pass to report on its own document. `sizes` are the events' object sizes, by key."""
        self.end_batch()
        texts_by_model: dict[str, list[str]] = {}
        for key in dict.fromkeys(created_keys):
            try:
                prepared = self._prepare(key, (sizes or {}).get(key))
            except Exception:  # the per-record pass reports it, with the right status and retry semantics
                continue
            if prepared is not None:
                collection, pieces = prepared
                for model in {collection.embedding_model, collection.query_model}:
                    texts_by_model.setdefault(model, []).extend(p.text for p in pieces)
        for model, texts in texts_by_model.items():
            try:
                self.embeddings.embed(model, texts)
            except (IngestError, DependencyFailed) as error:
                # The provider already had its retries: the batch's documents fail with this error rather than
                # each trying again (an outage would otherwise cost one full retry sequence per document).
                self._failed_models[model] = error
                logger.warning("batch embedding failed", extra={"model": model, "error_type": type(error).__name__})

    def end_batch(self) -> None:
        self._prepared.clear()
        self._failed_models.clear()
        self._fetched.clear()

    def _prepare(self, key: str, size: int | None):
        parsed = keys.parse_blob_key(key)
        if parsed is None:
            return None
        tenant, collection_id, document_id, filename = parsed
        collection = self.collections.get_collection(tenant, collection_id)
        if collection is None:
            return None
        document = self.documents.get_document(tenant, collection_id, document_id)
        data = self._read_blob(key, size)
        if sum(map(len, self._fetched.values())) + len(data) <= KEEP_FETCHED_BYTES:
            self._fetched[key] = data
        digest = hashlib.sha256(data).hexdigest()
        if document is not None and (document.content_sha256 == digest and document.status is DocumentStatus.INDEXED
                                     and document.indexed_model == collection.embedding_model
                                     and document.indexed_config_version == collection.config_version):
            return None  # a duplicate event: nothing to embed
        mimetype = (document.mimetype if document else None) or None
        pieces = self._pieces(collection, data, filename, mimetype)
        self._prepared[(key, digest, collection.config_version, mimetype)] = pieces
        return collection, pieces

    def object_created(self, key: str, size: int | None = None) -> Document | None:
        """Index the document whose blob was written. Returns the document's final state, None if ignored.

        `size` is the event's object size: an object over the file limit fails its document (LimitExceeded)
        without being downloaded, and never affects the other records of the batch."""
        parsed = keys.parse_blob_key(key)
        if parsed is None:
            logger.warning("ignoring blob outside the document layout", extra={"key": key})
            return None
        tenant, collection_id, document_id, filename = parsed
        collection = self.collections.get_collection(tenant, collection_id)
        if collection is None:
            logger.warning("ignoring blob of a missing collection", extra={"tenant": tenant, "collection": collection_id})
            return None
        data = self._fetched.pop(key, None)  # read moments ago by `prefetch`, in this same batch
        too_large: LimitExceeded | None = None
        if data is None:
            try:
                data = self._read_blob(key, size)
            except NotFound:
                return None  # deleted since; its removal event follows
            except LimitExceeded as error:
                too_large = error
        document = self._document_for(tenant, collection_id, document_id, filename, key)
        if document is None:
            return None
        try:
            if too_large is not None:
                return self._fail(tenant, collection, document, too_large, document.version)
            return self._index(tenant, collection, document, data, filename)
        except NotFound:
            # The document was deleted while we worked: remove what we wrote, so nothing is left behind.
            self.remove_document(tenant, document, collection)
            return None

    def object_removed(self, key: str) -> None:
        """A document's source blob was deleted (API or S3 directly): delete the document everywhere."""
        parsed = keys.parse_blob_key(key)
        if parsed is None:
            return
        tenant, collection_id, document_id, _ = parsed
        document = self.documents.get_document(tenant, collection_id, document_id)
        collection = self.collections.get_collection(tenant, collection_id)
        if document is None or collection is None or document.source != key:
            return
        if self.blobs.blob_size(key) is not None:
            return  # written again since the removal: the object exists, keep the document
        self.remove_document(tenant, document, collection)
        self.documents.delete_document(tenant, collection_id, document_id)

    # Deletion hooks used by the catalog
    def remove_document(self, tenant: str, document: Document, collection: Collection) -> None:
        for model in {collection.embedding_model, collection.query_model, document.indexed_model} - {None}:
            self.index.delete(model, tenant, collection.id, document_ids=[document.id])
        self.chunks.delete_chunks(tenant, collection.id, document_id=document.id)

    def remove_collection(self, tenant: str, collection: Collection) -> None:
        for model in {collection.embedding_model, collection.query_model}:
            self.index.delete(model, tenant, collection.id)
        self.chunks.delete_chunks(tenant, collection.id)

    # Internals
    def _document_for(self, tenant: str, collection_id: str, document_id: str, filename: str, key: str) -> Document | None:
        from kindex.ingest.extract import guess_mimetype

        document = self.documents.get_document(tenant, collection_id, document_id)
        if document is None:
            # A file dropped straight into the tenant's prefix: it becomes a document.
            document = Document(id=document_id, collection=collection_id, title=filename, source=key,
                                mimetype=guess_mimetype(filename) or "")
            try:
                self.documents.put_document(tenant, document, create=True)
            except Conflict:
                return self.documents.get_document(tenant, collection_id, document_id)
            if self.blobs.blob_size(key) is None:
                # The document was deleted (blob first) while this event was in flight: do not resurrect it.
                self.documents.delete_document(tenant, collection_id, document_id)
                return None
            return document
        if document.source == key:
            return document
        if document.source and self.blobs.blob_size(document.source) is not None:
            return None  # the document's current source is another, existing blob: this event is stale
        return document.model_copy(update={"source": key, "mimetype": guess_mimetype(filename) or document.mimetype})

    def _index(self, tenant: str, collection: Collection, document: Document, data: bytes, filename: str) -> Document:
        digest = hashlib.sha256(data).hexdigest()
        model = collection.embedding_model
        if (digest == document.content_sha256 and document.status is DocumentStatus.INDEXED
                and document.indexed_version == document.version and document.indexed_model == model
                and document.indexed_config_version == collection.config_version):
            return document  # duplicate event: nothing changed
        expected = document.version
        # Same content, new chunking or model: the document stays `indexed` (queries keep using what is there)
        # while its new chunks and vectors are built beside the old ones.
        rebuild_only = (digest == document.content_sha256 and document.status is DocumentStatus.INDEXED
                        and document.indexed_version == document.version)
        if digest != document.content_sha256:
            document = document.model_copy(update={"version": document.version + 1, "content_sha256": digest,
                                                   "content_length": len(data)})
        working = document
        if not rebuild_only:
            working = document.model_copy(update={"status": DocumentStatus.IN_PROGRESS, "failure_reason": None,
                                                  "updated_at": utc_now()})
            self._save(tenant, working, expected)
            expected = working.version
        try:
            chunk_count = self._write_chunks(tenant, collection, working, data, filename, rebuild_only)
        except (IngestError, DependencyFailed) as error:
            retryable = isinstance(error, DependencyFailed) or error.retryable
            failed = working.model_copy(update={"status": DocumentStatus.FAILED, "failure_reason": failure_reason(error),
                                                "failure_retryable": retryable, "updated_at": utc_now()})
            self._save(tenant, failed, expected)
            self.metrics.count("DocumentsFailed")
            logger.warning("document failed", extra={"tenant": tenant, "collection": collection.id,
                                                      "document": document.id, "reason": failed.failure_reason})
            if retryable:
                raise RetryableIngestFailure(failed.failure_reason) from error
            return failed
        indexed = working.model_copy(update={
            "status": DocumentStatus.INDEXED, "chunk_count": chunk_count, "indexed_at": utc_now(),
            "indexed_version": working.version, "indexed_model": model,
            "indexed_config_version": collection.config_version, "failure_reason": None, "failure_retryable": False,
            "updated_at": utc_now()})
        self._save(tenant, indexed, expected)
        self.metrics.count("DocumentsIndexed")
        logger.info("document indexed", extra={"tenant": tenant, "collection": collection.id, "document": document.id,
                                               "chunks": chunk_count})
        return indexed

    def _fail(self, tenant: str, collection: Collection, document: Document, error: IngestError | DependencyFailed,
              expected: int) -> Document:
        """Save the document as failed with `error` (what `_index` does on failure; used for a file that was never
        read because it is over the limit)."""
        retryable = isinstance(error, DependencyFailed) or error.retryable
        failed = document.model_copy(update={"status": DocumentStatus.FAILED, "failure_reason": failure_reason(error),
                                             "failure_retryable": retryable, "updated_at": utc_now()})
        self._save(tenant, failed, expected)
        self.metrics.count("DocumentsFailed")
        logger.warning("document failed", extra={"tenant": tenant, "collection": collection.id,
                                                  "document": document.id, "reason": failed.failure_reason})
        if retryable:
            raise RetryableIngestFailure(failed.failure_reason) from error
        return failed

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

    def _save(self, tenant: str, document: Document, expected_version: int) -> None:
        self.documents.put_document(tenant, document, create=False, expected_version=expected_version)

    def _pieces(self, collection: Collection, data: bytes, filename: str, mimetype: str | None) -> list:
        from kindex.ingest.chunking import chunk_text
        from kindex.ingest.extract import extract

        extracted = (self._extract or extract)(data, mimetype=mimetype, filename=filename,
                                               max_bytes=self.limits.max_file_bytes)
        pieces = (self._chunk or chunk_text)(extracted.text, method=collection.chunking_method.value,
                                             max_size=collection.chunking_max_size,
                                             overlap=collection.chunking_overlap_offset, pages=extracted.pages)
        if len(pieces) > self.limits.max_chunks_per_document:
            raise LimitExceeded(f"Document has {len(pieces)} chunks; the limit is {self.limits.max_chunks_per_document}")
        return pieces

    def _write_chunks(self, tenant: str, collection: Collection, document: Document, data: bytes, filename: str,
                      rebuild_only: bool) -> int:
        """Write chunk texts and vectors. While a model change is being built (`collection.switching`), a rebuild
        writes only the new model's vectors and keeps the previous chunks, which the active model still serves;
        new content is written under both models so queries never serve stale text."""
        mimetype = document.mimetype or None
        memo = self._prepared.get((document.source or "", hashlib.sha256(data).hexdigest(), collection.config_version,
                                   mimetype))
        pieces = memo if memo is not None else self._pieces(collection, data, filename, mimetype)
        models = [collection.embedding_model]
        if collection.switching and not rebuild_only:
            models.append(collection.query_model)
        stored = [StoredChunk(chunk_id=chunk_id(tenant, collection.id, document.id, p.index, text_sha256(p.text)),
                              collection=collection.id, document_id=document.id, index=p.index, start=p.start, end=p.end,
                              text=p.text, page_start=p.page_start, page_end=p.page_end) for p in pieces]
        previous = {c.chunk_id for c in self.chunks.list_chunks(tenant, collection.id, document.id)}
        self.chunks.put_chunks(tenant, stored)
        for model in models:
            texts = [c.text for c in stored]
            vectors = self.embeddings.cached(model, texts) if model in self._failed_models else None
            if model in self._failed_models and vectors is None:
                raise self._failed_models[model]
            if vectors is None:
                vectors = self.embeddings.embed(model, texts)
            self.index.upsert(model, [IndexRecord(tenant=tenant, collection=collection.id, document_id=document.id,
                                                  chunk_id=c.chunk_id, vector=vec, text=c.text,
                                                  language=document.language or None,
                                                  mimetype=document.mimetype or None)
                                      for c, vec in zip(stored, vectors)])
        gone = sorted(previous - {c.chunk_id for c in stored})
        if gone and not (collection.switching and rebuild_only):
            for model in models:
                self.index.delete(model, tenant, collection.id, chunk_ids=gone)
            self.chunks.delete_chunks(tenant, collection.id, document_id=document.id, chunk_ids=gone)
        return len(stored)
