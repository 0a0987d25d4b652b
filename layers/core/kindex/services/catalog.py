"""Collections and documents: create-or-partial-update, read, list with paging, delete everywhere."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Protocol

from pydantic import BaseModel

from kindex.domain import keys
from kindex.domain.errors import InvalidInput, NotFound, PayloadTooLarge
from kindex.domain.models import (
    CHUNKING_DEFAULTS,
    COLLECTION_CONFIG_FIELDS,
    ChunkingMethod,
    Collection,
    CollectionInput,
    Document,
    DocumentInput,
    DocumentStatus,
    Page,
    PageRequest,
    check_id,
    utc_now,
)
from kindex.domain.ports import BlobStore, ChunkStore, CollectionStore, DocumentStore
from kindex.domain.types import StoredChunk
from kindex.services.validation import validated

CONTENT_FILENAME = "content.txt"


class Presigner(Protocol):
    """Signs a PUT of one blob key (S3 presigned URL, or the local server's own signed URL)."""

    def presign_put(self, key: str, content_type: str, content_length: int,
                    expires_in: int) -> tuple[str, dict[str, str], int]:
        """(url, headers the client must send, expiry in unix seconds). Content-Type and Content-Length are
        signed: the upload is refused unless it sends exactly that type and exactly that many bytes."""


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


def _page(fetch: Callable[..., list[str]], page: PageRequest) -> Page:
    after = keys.decode_cursor(page.cursor) if page.cursor else None
    offset = 0 if page.cursor else page.start
    limit = None if page.number < 0 else page.number
    ids = fetch(after=after, offset=offset, limit=None if limit is None else limit + 1)
    if limit is not None and len(ids) > limit:
        ids = ids[:limit]
        return Page(ids=ids, next_cursor=keys.encode_cursor(ids[-1]) if ids else None)
    return Page(ids=ids)


def merge_collection(existing: Collection | None, collection_id: str, changes: dict[str, Any],
                     default_model: str) -> Collection:
    """The collection after applying `changes`. A change of chunking method resets the sizes that were not
    given to the new method's defaults; a change to chunking or model bumps `config_version`."""
    if existing is None:
        data: dict[str, Any] = {"id": collection_id, "embedding_model": default_model}
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
    return validated(lambda: Collection.model_validate(data))


class CatalogService:
    """Owns collection and document records and their source blobs. `on_document_removed` lets the indexing
    side drop chunks and vectors of a deleted document or collection, so nothing is left behind."""

    def __init__(self, collections: CollectionStore, documents: DocumentStore, blobs: BlobStore, *,
                 default_embedding_model: str,
                 on_collection_removed: Callable[[str, Collection], None] | None = None,
                 on_document_removed: Callable[[str, Document, Collection], None] | None = None,
                 presigner: Presigner | None = None, upload_url_ttl: int = 900, chunks: ChunkStore | None = None,
                 max_file_bytes: int = 50 * 1024 * 1024):
        self.collections = collections
        self.documents = documents
        self.blobs = blobs
        self.default_embedding_model = default_embedding_model
        self.on_collection_removed = on_collection_removed
        self.on_document_removed = on_document_removed
        self.presigner = presigner
        self.chunks = chunks
        self.upload_url_ttl = upload_url_ttl
        self.max_file_bytes = max_file_bytes

    # Collections
    def get_collection(self, tenant: str, collection_id: str) -> Collection:
        """The collection with its `document_count` (one count query: only for reading the collection itself)."""
        collection = self._collection(tenant, collection_id)
        return collection.model_copy(update={"document_count": self.documents.count_documents(tenant, collection_id)})

    def _collection(self, tenant: str, collection_id: str) -> Collection:
        collection = self.collections.get_collection(tenant, collection_id)
        if collection is None:
            raise NotFound(f"collection {collection_id!r} does not exist")
        return collection

    def put_collection(self, tenant: str, collection_id: str, body: CollectionInput) -> tuple[Collection, bool]:
        """Create (True) or partially update (False) the collection."""
        _checked_id("collection", collection_id)
        if body.id is not None and body.id != collection_id:
            raise InvalidInput("id in the body must match the collection id in the path")
        existing = self.collections.get_collection(tenant, collection_id)
        if existing is not None and existing.active_embedding_model is None:
            existing = existing.model_copy(update={"active_embedding_model": existing.embedding_model})
        collection = merge_collection(existing, collection_id, body.changes(), self.default_embedding_model)
        count = 0 if existing is None else self.documents.count_documents(tenant, collection_id)
        if count == 0:
            # Nothing to rebuild: the new model is active at once.
            collection = collection.model_copy(update={"active_embedding_model": collection.embedding_model})
        self.collections.put_collection(tenant, collection, create=existing is None)
        return collection.model_copy(update={"document_count": count}), existing is None

    def delete_collection(self, tenant: str, collection_id: str) -> None:
        collection = self._collection(tenant, collection_id)
        if self.on_collection_removed:
            self.on_collection_removed(tenant, collection)
        self.blobs.delete_prefix(keys.collection_prefix(tenant, collection_id))
        self.collections.delete_collection(tenant, collection_id)

    def list_collections(self, tenant: str, page: PageRequest) -> Page:
        return _page(lambda **kw: self.collections.list_collections(tenant, **kw), page)

    # Documents
    def get_document(self, tenant: str, collection_id: str, document_id: str) -> tuple[Document, str | None]:
        """The document and its text content when it came in as text (None for uploaded files)."""
        self._collection(tenant, collection_id)
        document = self._document(tenant, collection_id, document_id)
        content = None
        if document.source and document.source.endswith("/" + CONTENT_FILENAME):
            try:
                content = self.blobs.get_blob(document.source).decode("utf-8")
            except NotFound:
                content = None
        return document, content

    def put_document(self, tenant: str, collection_id: str, document_id: str,
                     body: DocumentInput) -> tuple[Document, bool]:
        """Create (True) or partially update (False). New content is stored as a blob and makes the document
        pending with a new version; unchanged content changes nothing."""
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
            if value is None:
                raise InvalidInput(f"{name}: must not be null")
        now = utc_now()
        if existing is None:
            document = validated(lambda: Document(id=document_id, collection=collection_id, **changes))
        else:
            document = existing.model_copy(update={**changes, "updated_at": now})
        data = None
        if content is not None:
            data = content.replace("\x00", "").encode("utf-8")
            digest = hashlib.sha256(data).hexdigest()
            if existing is not None and digest == existing.content_sha256 and existing.source:
                data = None
            else:
                source = keys.blob_key(tenant, collection_id, document_id, CONTENT_FILENAME)
                document = document.model_copy(update={
                    "content_sha256": digest, "content_length": len(data), "source": source,
                    "version": document.version + 1, "status": DocumentStatus.PENDING, "failure_reason": None,
                    "mimetype": document.mimetype or TEXT_MIMETYPE,
                })
        if data is not None:
            self._replace_source_blob(tenant, document, data)
        self.documents.put_document(tenant, document, create=existing is None,
                                    expected_version=None if existing is None else existing.version)
        return document, existing is None

    def _replace_source_blob(self, tenant: str, document: Document, data: bytes) -> None:
        prefix = keys.document_prefix(tenant, document.collection, document.id)
        for key in self.blobs.list_blobs(prefix):
            if key != document.source:
                self.blobs.delete_blob(key)
        self.blobs.put_blob(document.source, data, document.mimetype or TEXT_MIMETYPE)

    def prepare_upload(self, tenant: str, collection_id: str, document_id: str, filename: str,
                       mimetype: str | None, *, size: int) -> UploadTicket:
        """Create the document if missing (titled after the file), point it at the file's blob key and sign a PUT
        of exactly `size` bytes for that key. The upload itself triggers indexing, through the blob store's event.
        A size over the file limit is refused here (PayloadTooLarge), before any document changes; the signature
        makes the blob store refuse any other size, so the limit holds without the API seeing the bytes."""
        if self.presigner is None:
            raise InvalidInput("uploads are not configured for this deployment")
        if size < 0:
            raise InvalidInput("size must be the file's length in bytes (0 or more)")
        if size > self.max_file_bytes:
            raise PayloadTooLarge(f"size {size} exceeds the file limit of {self.max_file_bytes} bytes")
        document = self._point_at_file(tenant, collection_id, document_id, filename, mimetype)
        url, headers, expires = self.presigner.presign_put(document.source, document.mimetype, size,
                                                           self.upload_url_ttl)
        return UploadTicket(url=url, method="PUT", headers=headers,
                            expires_at=datetime.fromtimestamp(expires, timezone.utc), document=document)

    def put_file(self, tenant: str, collection_id: str, document_id: str, filename: str, data: bytes,
                 mimetype: str | None = None) -> tuple[Document, bool]:
        """Store a file as the document's source (the write triggers indexing). Returns (document, written):
        an unchanged file already indexed from the same blob is not written again."""
        existing = self.documents.get_document(tenant, collection_id, document_id)
        key = keys.blob_key(tenant, collection_id, document_id, filename)
        if (existing is not None and existing.source == key and existing.status is not DocumentStatus.FAILED
                and existing.content_sha256 == hashlib.sha256(data).hexdigest()):
            return existing, False
        document = self._point_at_file(tenant, collection_id, document_id, filename, mimetype)
        self.blobs.put_blob(document.source, data, document.mimetype)
        return document, True

    def _point_at_file(self, tenant: str, collection_id: str, document_id: str, filename: str,
                       mimetype: str | None) -> Document:
        from kindex.ingest.extract import guess_mimetype

        _checked_id("document", document_id)
        try:
            check_id(filename)
        except ValueError as error:
            raise InvalidInput(f"filename {error}") from error
        if "\\" in filename or filename in (".", ".."):
            raise InvalidInput("filename must be a plain file name")
        self._collection(tenant, collection_id)
        content_type = mimetype or guess_mimetype(filename) or "application/octet-stream"
        key = keys.blob_key(tenant, collection_id, document_id, filename)
        existing = self.documents.get_document(tenant, collection_id, document_id)
        base = existing or Document(id=document_id, collection=collection_id, title=filename)
        document = base.model_copy(update={"source": key, "mimetype": content_type, "status": DocumentStatus.PENDING,
                                           "failure_reason": None, "updated_at": utc_now()})
        self.documents.put_document(tenant, document, create=existing is None,
                                    expected_version=None if existing is None else existing.version)
        for other in self.blobs.list_blobs(keys.document_prefix(tenant, collection_id, document_id)):
            if other != key:
                self.blobs.delete_blob(other)
        return document

    def list_chunks(self, tenant: str, collection_id: str, document_id: str) -> list[StoredChunk]:
        self._collection(tenant, collection_id)
        self._document(tenant, collection_id, document_id)
        return self.chunks.list_chunks(tenant, collection_id, document_id) if self.chunks else []

    def delete_document(self, tenant: str, collection_id: str, document_id: str) -> None:
        collection = self._collection(tenant, collection_id)
        document = self._document(tenant, collection_id, document_id)
        if self.on_document_removed:
            self.on_document_removed(tenant, document, collection)
        self.blobs.delete_prefix(keys.document_prefix(tenant, collection_id, document_id))
        self.documents.delete_document(tenant, collection_id, document_id)

    def list_documents(self, tenant: str, collection_id: str, page: PageRequest) -> Page:
        self._collection(tenant, collection_id)
        return _page(lambda **kw: self.documents.list_documents(tenant, collection_id, **kw), page)

    def _document(self, tenant: str, collection_id: str, document_id: str) -> Document:
        document = self.documents.get_document(tenant, collection_id, document_id)
        if document is None:
            raise NotFound(f"document {document_id!r} does not exist in collection {collection_id!r}")
        return document
