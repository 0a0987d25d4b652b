"""Export and import of a collection: its documents, chunks and vectors, moved between collections, tenants and
deployments without embedding anything again when the models match.

Export reads chunk texts from the chunk store and their vectors from the embedding cache (every indexed chunk was
embedded through it, keyed by tenant, model and text hash), so the search index needs no new read. Import writes chunk
texts and vectors the way ingest does, under the importing tenant's own chunk ids, then gives each document, once all
its chunks are in, a content blob: the text its chunks cover, at their offsets. With that blob the document is an
ordinary indexed text document that reindex can rebuild later (a model or chunking change). Imported vectors never go
among the vectors ingest reuses: a vector a tenant sends is not an embedding even that tenant's ingest should trust;
they are kept apart in the tenant's own cache (`imported_vectors_key`), which only that tenant's exports read."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from kindex.app.chunk_removal import ChunkRemover, models_of, require_collection
from kindex.app.document_writes import write_document
from kindex.app.embedding import EmbeddingService, imported_vectors_key, text_sha256
from kindex.app.ingest import embedded_text, import_chunk_id
from kindex.app.record_writes import WRITE_ATTEMPTS
from kindex.app.usage import UsageService
from kindex.domain import keys
from kindex.domain.embedding_models import parse_embedding_model
from kindex.domain.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from kindex.domain.metering import CHUNKS_WRITTEN
from kindex.domain.models import Collection, Document, DocumentStatus, check_id, utc_now
from kindex.domain.ports import (
    BlobStore,
    ChunkStore,
    CollectionStore,
    DeferredKeywordCommits,
    DocumentStore,
    EmbeddingCache,
    MetricsRecorder,
    SearchIndex,
)
from kindex.domain.quotas import QuotaLimits, Usage, document_usage
from kindex.domain.transfer import (
    DEFAULT_EXPORT_CHUNKS,
    MAX_BATCH_DOCUMENTS,
    MAX_EMBED_CHARS,
    MAX_EMBED_TEXTS,
    ExportPage,
    ImportRequest,
    ImportResult,
    TransferChunk,
    TransferDocument,
    must_embed,
)
from kindex.domain.types import IndexRecord, StoredChunk

logger = logging.getLogger(__name__)

CONTENT_FILENAME = "content.txt"
TEXT_MIMETYPE = "text/plain"
#: An export page ends once its JSON would pass this many bytes (under Lambda's 6 MB response).
EXPORT_PAGE_MAX_BYTES = 4 * 1024 * 1024
# A vector value as JSON (a float32 printed as a Python float: up to ~24 characters with its comma).
_BYTES_PER_VECTOR_VALUE = 24
_CHUNK_OVERHEAD_BYTES = 200
CHUNKING_FIELDS = ("chunking_method", "chunking_max_size", "chunking_overlap_offset")
#: The largest chunk index an export cursor may name (stored indexes stay far below; -1 is "before the first").
MAX_CHUNK_INDEX = 2**31 - 1


@dataclass(frozen=True)
class _Cursor:
    """Where an export page continues: after document `after_document`, or inside `document` after a chunk."""

    after_document: str | None = None
    document: str | None = None
    after_chunk: tuple[int, str] | None = None

    def encode(self) -> str:
        if self.document is not None and self.after_chunk is not None:
            return keys.encode_cursor(json.dumps(["in", self.document, *self.after_chunk]))
        return keys.encode_cursor(json.dumps(["after", self.after_document]))

    @classmethod
    def decode(cls, cursor: str | None) -> "_Cursor":
        if not cursor:
            return cls()
        try:
            value = json.loads(keys.decode_cursor(cursor))
        except ValueError:
            value = None
        if isinstance(value, list) and len(value) == 2 and value[0] == "after" and _storable(value[1]):
            return cls(after_document=value[1])
        # The inner JSON can spell what no store takes (an index past 64 bits, a lone surrogate): not one of ours.
        if (
            isinstance(value, list)
            and len(value) == 4
            and value[0] == "in"
            and _storable(value[1])
            and type(value[2]) is int
            and -1 <= value[2] <= MAX_CHUNK_INDEX
            and _storable(value[3])
        ):
            return cls(document=value[1], after_chunk=(value[2], value[3]))
        raise InvalidInput("cursor is not a cursor returned by this API")


def _storable(value) -> bool:
    """A string every store can encode: no lone surrogate (which JSON can spell and UTF-8 cannot)."""
    return isinstance(value, str) and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)


class _PageBuilder:
    """An export page being filled: counts its chunks and estimates its JSON bytes."""

    def __init__(self, page: ExportPage, max_chunks: int):
        self.page = page
        self.max_chunks = max_chunks
        self.chunks = 0
        self.bytes = 0

    def full(self) -> bool:
        return (
            self.chunks >= self.max_chunks
            or self.bytes >= EXPORT_PAGE_MAX_BYTES
            or len(self.page.documents) + len(self.page.skipped_documents) >= MAX_BATCH_DOCUMENTS
        )

    def fits(self, chunk: StoredChunk) -> bool:
        """Counts the chunk in when it fits (the first chunk of a page always does)."""
        cost = len(json.dumps(chunk.text)) + _CHUNK_OVERHEAD_BYTES + self.page.dimensions * _BYTES_PER_VECTOR_VALUE
        if self.chunks and (self.chunks >= self.max_chunks or self.bytes + cost > EXPORT_PAGE_MAX_BYTES):
            return False
        self.chunks += 1
        self.bytes += cost
        return True

    def done(self, cursor: _Cursor | None) -> ExportPage:
        self.page.next_cursor = cursor.encode() if cursor is not None else None
        return self.page


def rebuilt_text(chunks: list[StoredChunk]) -> str:
    """The document text its chunks cover, each at its offsets; characters no chunk covers are spaces."""
    length = max((c.end for c in chunks), default=0)
    parts: list[str] = []
    position = 0
    for chunk in sorted(chunks, key=lambda c: (c.start, c.end)):
        if chunk.end <= position:
            continue  # inside what earlier chunks wrote (an overlap)
        if chunk.start > position:
            parts.append(" " * (chunk.start - position))
            position = chunk.start
        parts.append(chunk.text[position - chunk.start :])
        position = chunk.end
    parts.append(" " * (length - position))
    return "".join(parts)


class TransferService:
    """Pages of a collection's export, and batches of an import into a collection (see the module docstring)."""

    def __init__(
        self,
        collections: CollectionStore,
        documents: DocumentStore,
        blobs: BlobStore,
        chunks: ChunkStore,
        index: SearchIndex,
        embeddings: EmbeddingService,
        cache: EmbeddingCache,
        *,
        max_chunks_per_document: int = 20_000,
        max_file_bytes: int = 50 * 1024 * 1024,
        metrics: MetricsRecorder | None = None,
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
        self.cache = cache
        self.max_chunks_per_document = max_chunks_per_document
        self.max_file_bytes = max_file_bytes
        self.metrics = metrics

    # Export
    def export_page(
        self, tenant: str, collection_id: str, cursor: str | None, max_chunks: int = DEFAULT_EXPORT_CHUNKS
    ) -> ExportPage:
        """At most `max_chunks` chunks and about EXPORT_PAGE_MAX_BYTES of JSON (a single chunk always fits), with
        the documents they belong to, in document id order; `next_cursor` when more follow."""
        collection = self._collection(tenant, collection_id)
        if collection.switching:
            raise Conflict(f"collection {collection_id!r} is switching embedding models; export when it is done")
        model = collection.embedding_model
        page = _PageBuilder(
            ExportPage(
                collection=collection,
                embedding_model=model,
                dimensions=self._dimensions(model),
                documents=[],
                chunks=[],
            ),
            max_chunks,
        )
        position = _Cursor.decode(cursor)
        after = position.after_document
        if position.document is not None:
            document = self.documents.get_document(tenant, collection_id, position.document)
            if document is not None and document.searchable:
                stop = self._export_chunks(tenant, model, document, position.after_chunk, page)
                if stop is not None:
                    return page.done(stop)
            after = position.document
        while True:
            documents = self.documents.list_documents(tenant, collection_id, after=after, offset=0, limit=100)
            if not documents:
                return page.done(None)
            for document in documents:
                if page.full():
                    return page.done(_Cursor(after_document=after) if after is not None else None)
                after = document.id
                # Searchable: indexed, or only its filter fields being rewritten (its chunks are complete).
                if not document.searchable or not document.chunk_count:
                    page.page.skipped_documents.append(document.id)
                    continue
                page.page.documents.append(
                    TransferDocument(
                        id=document.id,
                        title=document.title,
                        language=document.language,
                        url=document.url,
                        mimetype=document.mimetype,
                        content_sha256=document.content_sha256,
                        chunk_count=document.chunk_count,
                        attributes=document.attributes,
                        access=document.access,
                    )
                )
                stop = self._export_chunks(tenant, model, document, None, page)
                if stop is not None:
                    return page.done(stop)

    def _export_chunks(
        self, tenant: str, model: str, document: Document, after: tuple[int, str] | None, page: "_PageBuilder"
    ) -> _Cursor | None:
        """Adds the document's chunks after `after` to the page; the cursor to continue from once it is full."""
        pending: list[StoredChunk] = []

        def flush() -> None:
            # Ingest embedded what `embedded_text` gives (a section path or table header before the text), and cached
            # it by that text's hash; imported chunks' vectors are kept apart in the tenant's cache by their text's.
            embedded = [text_sha256(embedded_text(c)) for c in pending]
            vectors = self.cache.get_vectors(tenant, model, embedded)
            # Imported vectors are keyed by the embedded text's hash too (the text's own for chunks without context,
            # as every chunk imported before chunks carried a section was).
            missing = [h for h in embedded if h not in vectors]
            imported = self.cache.get_vectors(tenant, imported_vectors_key(model), missing) if missing else {}
            for chunk, digest in zip(pending, embedded):
                vector = vectors.get(digest)
                if vector is None:
                    vector = imported.get(digest)
                page.page.chunks.append(
                    TransferChunk(
                        document_id=chunk.document_id,
                        chunk_id=chunk.chunk_id,
                        index=chunk.index,
                        start=chunk.start,
                        end=chunk.end,
                        page_start=chunk.page_start,
                        page_end=chunk.page_end,
                        text=chunk.text,
                        section=chunk.section or None,
                        table_header=chunk.table_header or None,
                        vector=None if vector is None else np.asarray(vector, dtype=np.float32).tolist(),
                    )
                )
            pending.clear()

        position = after or (-1, "")
        for chunk in self.chunks.iter_chunks(tenant, document.collection, document.id, after=after):
            if not page.fits(chunk):
                flush()
                return _Cursor(document=document.id, after_chunk=position)
            pending.append(chunk)
            position = (chunk.index, chunk.chunk_id)
            if len(pending) >= 200:  # one cache read per 200 chunks
                flush()
        flush()
        return None

    # Import
    def import_batch(self, tenant: str, collection_id: str, request: ImportRequest) -> ImportResult:
        """Write one batch: documents first (an existing document of the same id is replaced), then chunks and their
        vectors. Everything is validated, and every text that must be embedded is embedded, before anything is
        written, so a 4xx batch (and one whose embedding fails: 422 or 503) changes nothing. A write of the same
        document that commits meanwhile (a PUT, a DELETE, another import) makes this batch 409 and leaves that
        write's state: every step of an import is tied to its own run of the document (see `import_chunk_id`)."""
        collection = self._collection(tenant, collection_id)
        if collection.switching:
            raise Conflict(f"collection {collection_id!r} is switching embedding models; import when it is done")
        reuse = request.embedding_model == collection.embedding_model
        dimensions = self._dimensions(collection.embedding_model)
        if reuse and request.dimensions != dimensions:
            raise InvalidInput(
                f"dimensions: {request.embedding_model} has {dimensions} dimensions, not {request.dimensions}"
            )
        plan = self._check_batch(tenant, collection_id, request, dimensions if reuse else None)
        limits = self._quota_limits(tenant, request, plan)
        _check_embedding_load(request, reuse)
        vectors = self._vectors(tenant, collection, request.chunks, reuse)
        result = ImportResult()
        runs: dict[str, Document] = {}
        for item in request.documents:
            runs[item.id] = self._start_document(tenant, collection, item, plan.stored.get(item.id), limits)
            result.documents_started += 1
        written: dict[str, list[str]] = {}
        records: list[IndexRecord] = []
        for document_id, chunks in plan.chunks_by_document.items():
            run = runs.get(document_id) or plan.stored[document_id]
            written[document_id], index_records = self._write_chunks(tenant, collection, run, chunks, vectors, reuse)
            records += index_records
            result.chunks_written += len(chunks)
        # The batch's index records in one write (OpenSearch: bulk requests of up to 500), made searchable with one
        # commit (OpenSearch: one refresh) before any document is reported indexed: a write and a wait for the
        # refresh per document made a batch of 100 small documents outlast the request's budget on a node (503).
        if records and isinstance(self.index, DeferredKeywordCommits):
            self.index.commit_deferred([self.index.upsert_deferred(collection.embedding_model, records)])
        elif records:
            self.index.upsert(collection.embedding_model, records)
        result.texts_embedded = sum(must_embed(c, reuse) for c in request.chunks)
        # Chunks whose batch names no chunking were cut elsewhere, by rules it does not say: they are kept as they
        # are (cutting them again would embed every chunk again, which an import exists to avoid; a clean reindex
        # cuts them by the collection's rules). A named chunking other than the collection's: re-chunked after.
        chunking_matches = request.chunking is None or all(
            request.chunking.get(name) == _plain(getattr(collection, name)) for name in CHUNKING_FIELDS
        )
        for document_id in dict.fromkeys([d.id for d in request.documents] + list(plan.chunks_by_document)):
            run = runs.get(document_id) or plan.stored[document_id]
            if self._finish_document(tenant, collection, run, written.get(document_id, []), chunking_matches):
                result.documents_completed += 1
            else:
                result.incomplete_documents.append(document_id)
        if self.metrics is not None and result.chunks_written:
            self.metrics.count("ChunksImported", result.chunks_written)
            self.metrics.meter(tenant, CHUNKS_WRITTEN, result.chunks_written)
        logger.info(
            "import batch",
            extra={
                "tenant": tenant,
                "collection": collection_id,
                **result.model_dump(exclude={"incomplete_documents"}),
            },
        )
        return result

    def _check_batch(self, tenant: str, collection_id: str, request: ImportRequest, dimensions: int | None) -> "_Plan":
        """The batch's plan (see `_Plan`); InvalidInput or Conflict naming the first problem."""
        plan = _Plan()
        importing: dict[str, TransferDocument | Document] = self._check_documents(tenant, collection_id, request, plan)
        seen: set[tuple[str, int]] = set()
        for i, chunk in enumerate(request.chunks):
            owner = importing.get(chunk.document_id)
            if owner is None:
                stored = self.documents.get_document(tenant, collection_id, chunk.document_id)
                if stored is None or stored.source is not None or stored.status is not DocumentStatus.IN_PROGRESS:
                    raise Conflict(
                        f"chunks[{i}]: document {chunk.document_id!r} is not being imported into "
                        f"{collection_id!r} (send its document record first)"
                    )
                owner = importing[chunk.document_id] = plan.stored[chunk.document_id] = stored
                plan.continued[chunk.document_id] = self.chunks.list_chunks(tenant, collection_id, chunk.document_id)
            if chunk.index >= owner.chunk_count:
                raise InvalidInput(f"chunks[{i}].index: document {chunk.document_id!r} has {owner.chunk_count} chunks")
            if (chunk.document_id, chunk.index) in seen:
                raise InvalidInput(f"chunks[{i}]: chunk {chunk.index} of {chunk.document_id!r} appears twice")
            seen.add((chunk.document_id, chunk.index))
            if dimensions is not None and chunk.vector is not None and len(chunk.vector) != dimensions:
                raise InvalidInput(f"chunks[{i}].vector: {len(chunk.vector)} values, the model has {dimensions}")
            plan.chunks_by_document.setdefault(chunk.document_id, []).append((i, chunk))
        for document_id, chunks in plan.chunks_by_document.items():
            self._check_text(
                document_id, importing[document_id].chunk_count, plan.continued.get(document_id, []), chunks
            )
        return plan

    def _check_documents(
        self, tenant: str, collection_id: str, request: ImportRequest, plan: "_Plan"
    ) -> dict[str, TransferDocument | Document]:
        """The batch's document lines by id, each checked; the stored records they replace go into `plan`."""
        importing: dict[str, TransferDocument | Document] = {}
        for i, item in enumerate(request.documents):
            try:
                check_id(item.id)
            except ValueError as error:
                raise InvalidInput(f"documents[{i}].id {error}") from error
            if item.id in importing:
                raise InvalidInput(f"documents[{i}].id: document {item.id!r} appears twice in the batch")
            if item.chunk_count > self.max_chunks_per_document:
                raise InvalidInput(f"documents[{i}].chunk_count: at most {self.max_chunks_per_document}")
            importing[item.id] = item
            stored = self.documents.get_document(tenant, collection_id, item.id)
            if stored is not None:
                plan.stored[item.id] = stored  # the record this document's line replaces
        return importing

    def _check_text(
        self, document_id: str, chunk_count: int, stored: list[StoredChunk], incoming: list[tuple[int, TransferChunk]]
    ) -> None:
        """The text the document's chunks rebuild (`rebuilt_text`) must stay within the file limit and within what
        the chunks carry: the characters no chunk covers (spaces in the rebuilt text) are at most as many as the
        chunks' own, so a body of a few bytes can never become gigabytes of blob. Chunks of one document may come over
        several batches; those stored already count (the ones this batch sends again are replaced)."""
        by_index = {c.index: (c.start, c.end, c.text) for c in stored}
        by_index.update((c.index, (c.start, c.end, c.text)) for _, c in incoming)
        length = max(end for _, end, _ in by_index.values())
        carried = sum(len(text) for _, _, text in by_index.values())
        at, farthest = max(incoming, key=lambda pair: pair[1].end)
        where = f"chunks[{at}].end"
        if length > self.max_file_bytes:
            raise InvalidInput(
                f"{where}: document {document_id!r} would be {length} characters long, over the file "
                f"limit of {self.max_file_bytes} bytes"
            )
        if length > 2 * carried:
            raise InvalidInput(
                f"{where}: document {document_id!r} would be {length} characters long, but its chunks "
                f"hold {carried}: the text between chunks may be at most as long as the chunks' texts"
            )
        if len(by_index) == chunk_count:  # the batch completes the document: check its exact size in bytes
            size = len(
                rebuilt_text(
                    [
                        StoredChunk(
                            chunk_id="",
                            collection="",
                            document_id=document_id,
                            index=index,
                            start=start,
                            end=end,
                            text=text,
                        )
                        for index, (start, end, text) in by_index.items()
                    ]
                ).encode("utf-8", "surrogatepass")
            )
            if size > self.max_file_bytes:
                raise InvalidInput(
                    f"{where}: document {document_id!r} would be {size} bytes, over the file limit of "
                    f"{self.max_file_bytes} bytes"
                )

    def _vectors(
        self, tenant: str, collection: Collection, chunks: list[TransferChunk], reuse: bool
    ) -> list[np.ndarray]:
        """Every chunk's vector, in order: the one it carries when the models match, else embedded through the
        service and its cache, all at once before anything is written (a provider failure fails the batch whole)."""
        vectors: list = [np.asarray(c.vector, dtype=np.float32) if not must_embed(c, reuse) else None for c in chunks]
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            texts = [embedded_text(chunks[i]) for i in missing]  # as ingest embeds them: context, then text
            fresh = self.embeddings.embed(tenant, collection.embedding_model, texts)
            for i, vector in zip(missing, fresh):
                vectors[i] = vector
        return vectors

    def _quota_limits(self, tenant: str, request: ImportRequest, plan: _Plan) -> QuotaLimits | None:
        """The tenant's quotas, once the whole batch is seen to fit them (QuotaExceeded before anything is written or
        embedded): its new documents, the chunks its document lines announce over those they replace, and the bytes
        its chunk texts carry (the content blob, rebuilt from them, is at least that). Each document's first write
        counts its document and chunks atomically again, so concurrent batches cannot pass a limit either."""
        if self.usage is None:
            return None
        delta = Usage()
        for item in request.documents:
            delta += Usage(documents=1, chunks=item.chunk_count) - document_usage(plan.stored.get(item.id))
        delta += Usage(bytes=sum(len(c.text.encode("utf-8", "surrogatepass")) for c in request.chunks))
        return self.usage.precheck(tenant, delta)

    def _start_document(
        self,
        tenant: str,
        collection: Collection,
        item: TransferDocument,
        read: Document | None,
        limits: QuotaLimits | None = None,
    ) -> Document:
        """Begin this import's run of the document: a new in-progress record committed over the one read (a write
        that changed the document's content since, or deleted or created it, makes this Conflict), then the replaced
        content's chunks, vectors and blobs go: exactly those found before the commit, so nothing another write
        makes afterwards is touched."""

        def replace(current: Document | None) -> Document:
            if (current is None) != (read is None) or _content(current) != _content(read):
                raise Conflict(f"document {item.id!r} changed meanwhile; send the batch again")
            return Document(
                id=item.id,
                collection=collection.id,
                title=item.title,
                language=item.language,
                url=item.url,
                mimetype=TEXT_MIMETYPE,
                status=DocumentStatus.IN_PROGRESS,
                attributes=item.attributes,
                access=item.access,
                chunk_count=item.chunk_count,
                chunks_done=0,
                version=(current.version if current else 0) + 1,
                created_at=_run_started_at(),
            )

        current = read
        for _ in range(WRITE_ATTEMPTS):
            replace(current)  # the content this batch replaces is still the document's
            # Listed after reading the record and before committing over it: a chunk written after this listing is
            # followed by its writer's commit, which either makes ours lose (we list again) or loses to ours (its
            # writer removes its own chunks).
            old_chunks = [c.chunk_id for c in self.chunks.list_chunks(tenant, collection.id, item.id)]
            old_blobs = self.blobs.list_blobs(keys.document_prefix(tenant, collection.id, item.id))
            try:
                run, _ = write_document(
                    self.documents, tenant, collection.id, item.id, current, replace, attempts=1, limits=limits
                )
                break
            except Conflict:
                current = self.documents.get_document(tenant, collection.id, item.id)
        else:
            raise Conflict(f"document {item.id!r} kept changing while it was written; try again")
        self.remover.remove_chunks(tenant, collection.id, item.id, old_chunks, models_of(collection, read))
        for key in old_blobs:
            self.blobs.delete_blob(key)
        return run

    def _write_chunks(
        self,
        tenant: str,
        collection: Collection,
        run: Document,
        chunks: list[tuple[int, TransferChunk]],
        vectors: list[np.ndarray],
        reuse: bool,
    ) -> tuple[list[str], list[IndexRecord]]:
        """Chunk texts under this run's own chunk ids; returns those ids and the index records the caller writes
        (with the batch's other documents'). A chunk sent again (an export of a changed document) replaces the one at
        its index."""
        document_id = run.id
        stored = [
            StoredChunk(
                chunk_id=import_chunk_id(tenant, run, c.index, text_sha256(c.text)),
                collection=collection.id,
                document_id=document_id,
                index=c.index,
                start=c.start,
                end=c.end,
                text=c.text,
                page_start=c.page_start,
                page_end=c.page_end,
                section=c.section,
                table_header=c.table_header,
            )
            for _, c in chunks
        ]
        incoming = {c.index: c.chunk_id for c in stored}
        # Only this run's own chunks are replaced: a chunk of another write at the same index (a PUT that committed
        # after this run began, whose ingest ran meanwhile) is that write's, and this run has lost to it.
        replaced = [
            c.chunk_id
            for c in self.chunks.list_chunks(tenant, collection.id, document_id)
            if incoming.get(c.index, c.chunk_id) != c.chunk_id
            and c.chunk_id == import_chunk_id(tenant, run, c.index, text_sha256(c.text))
        ]
        self.remover.remove_chunks(tenant, collection.id, document_id, replaced, [collection.embedding_model])
        given = {text_sha256(embedded_text(c)): _unit_array(vectors[i]) for i, c in chunks if not must_embed(c, reuse)}
        if given:  # for this tenant's later exports only (see imported_vectors_key)
            self.cache.put_vectors(tenant, imported_vectors_key(collection.embedding_model), given)
        self.chunks.put_chunks(tenant, stored)
        language = run.language or None
        records = [
            IndexRecord(
                tenant=tenant,
                collection=collection.id,
                document_id=document_id,
                chunk_id=c.chunk_id,
                vector=_unit(vectors[i]),
                text=embedded_text(c),
                language=language,
                mimetype=TEXT_MIMETYPE,
                attributes=run.attributes or None,
                access=run.access,
            )
            for (i, _), c in zip(chunks, stored)
        ]
        return [c.chunk_id for c in stored], records

    def _finish_document(
        self, tenant: str, collection: Collection, run: Document, written: list[str], chunking_matches: bool
    ) -> bool:
        """Once every chunk of the run is in: store the content blob and commit the document as indexed; else record
        progress. Either commit is over the run's own record: when another write replaced or deleted the document
        meanwhile, the chunks this batch wrote for the run are removed again and the batch is 409. True when the
        document is complete."""
        document_id = run.id
        stored = [
            c
            for c in self.chunks.list_chunks(tenant, collection.id, document_id)
            if c.chunk_id == import_chunk_id(tenant, run, c.index, text_sha256(c.text))
        ]

        def still_this_run(current: Document | None) -> Document:
            # A metadata PUT meanwhile is kept (its fields are applied over); a content write, or a delete, ends this.
            if current is None or _run(current) != _run(run) or current.status is not DocumentStatus.IN_PROGRESS:
                raise Conflict(f"document {document_id!r} changed meanwhile; send the batch again")
            return current

        def commit(update: dict) -> None:
            # Over the record as stored now, not the run's copy: a new run after a DELETE (or any record created
            # again) starts at revision 1 again, and a commit over the copy's revision would land on it unchecked.
            write_document(
                self.documents,
                tenant,
                collection.id,
                document_id,
                self.documents.get_document(tenant, collection.id, document_id),
                lambda current: still_this_run(current).model_copy(update=update),
            )

        try:
            if sorted(c.index for c in stored) != list(range(run.chunk_count)):
                commit({"chunks_done": len(stored), "updated_at": utc_now()})
                return False
            data = rebuilt_text(stored).encode("utf-8", "surrogatepass")
            version = run.version + 1
            source = keys.write_blob_key(tenant, collection.id, document_id, CONTENT_FILENAME, version=version)
            indexed = {
                "status": DocumentStatus.INDEXED,
                "chunks_done": run.chunk_count,
                "source": source,
                "content_sha256": hashlib.sha256(data).hexdigest(),
                "content_length": len(data),
                "version": version,
                "indexed_version": version,
                "indexed_model": collection.embedding_model,
                "indexed_at": utc_now(),
                # Chunks cut by other rules than the collection's: the ingest of the content blob written here
                # re-chunks the document (its imported chunks serve until the new ones are in).
                "indexed_config_version": collection.config_version if chunking_matches else 0,
                # The run's chunks carry its filter fields; a PUT of others meanwhile leaves them stale, and the
                # content blob's event, finding the content current, rewrites them.
                "indexed_fields_version": run.fields_version,
                "failure_reason": None,
                "updated_at": utc_now(),
            }
            self.blobs.put_blob(source, data, TEXT_MIMETYPE)
            try:
                commit(indexed)
            except (Conflict, NotFound):
                self.blobs.delete_blob(source)  # the key is this write's own
                raise
            return True
        except (Conflict, NotFound) as error:
            # ids of this run only: no other write's chunks share them
            self.remover.remove_chunks(tenant, collection.id, document_id, written, [collection.embedding_model])
            raise Conflict(f"document {document_id!r} changed meanwhile; send the batch again") from error

    def _collection(self, tenant: str, collection_id: str) -> Collection:
        return require_collection(self.collections, tenant, collection_id)

    def _dimensions(self, model: str) -> int:
        """From the name when it says (hash, OpenAI: no embedder is built, so the API function needs no provider
        key to export or to import vectors as they are); else from the embedder (the local model)."""
        return parse_embedding_model(model).dimensions or self.embeddings.embedder_for(model).dimensions


def _plain(value):
    return getattr(value, "value", value)


def _unit_array(vector) -> np.ndarray:
    """L2-normalised, as every embedder returns its vectors (the index compares by cosine either way)."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    if abs(norm - 1.0) < 1e-5 or norm == 0:
        return array  # an embedder's vector, stored exactly as given
    return array / norm


def _unit(vector) -> list[float]:
    return _unit_array(vector).tolist()


@dataclass
class _Plan:
    """What a validated batch will write: the stored records of its documents (those its lines replace, and those
    in progress whose chunks it continues), the stored chunks of the continued ones, and its chunks by document
    (with their positions in the batch, for messages)."""

    stored: dict[str, Document] = field(default_factory=dict)
    continued: dict[str, list[StoredChunk]] = field(default_factory=dict)
    chunks_by_document: dict[str, list[tuple[int, TransferChunk]]] = field(default_factory=dict)


def _check_embedding_load(request: ImportRequest, reuse: bool) -> None:
    """PayloadTooLarge when the batch sends more to the embedding model than fits one request's time budget."""
    texts = [c.text for c in request.chunks if must_embed(c, reuse)]
    if len(texts) > MAX_EMBED_TEXTS or sum(map(len, texts)) > MAX_EMBED_CHARS:
        raise PayloadTooLarge(
            f"chunks: this batch must embed {len(texts)} texts of {sum(map(len, texts))} characters (their vectors "
            f"are {'missing' if reuse else 'of another model'}); at most {MAX_EMBED_TEXTS} texts and "
            f"{MAX_EMBED_CHARS} characters per batch: send smaller batches"
        )


def _content(document: Document | None) -> tuple[int, str | None]:
    return (document.version, document.source) if document is not None else (0, None)


def _run(document: Document) -> tuple[int, datetime]:
    """One import run of a document: the version and creation time its in-progress record got when it started."""
    return document.version, document.created_at


def _run_started_at() -> datetime:
    """A run's creation time, to the microsecond (`utc_now` drops them). It is what tells two runs of one version
    apart: a run that creates the document has version 1, so a run begun after a DELETE of an earlier run's record
    has that run's version; in whole seconds, the earlier run took the newer one's record for its own and committed
    `indexed` with the chunks the DELETE had removed (tests/integration/test_import_runs_across_a_delete.py). The
    newer run reads the record only after the DELETE, which came after the earlier run's commit, so its time is
    later."""
    return datetime.now(timezone.utc)
