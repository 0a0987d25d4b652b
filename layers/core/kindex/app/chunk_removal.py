"""Removing chunks: the one place that takes a document's (or a collection's) chunk texts and vectors out of the
chunk store and the search index, for every model that may hold them. Ingest, reindex, import and the catalog's
deletes all go through it, so "nothing is left behind" is decided once.

Vectors go first, chunk texts last: a query maps hits to texts, so a vector without its text is simply not served,
while a text without its vector could never be found to be deleted by the index side again. `require_collection` is
the one "the collection or NotFound" read the use cases share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kindex.domain.errors import NotFound
from kindex.domain.models import Collection, Document
from kindex.domain.ports import ChunkStore, CollectionStore, SearchIndex


def models_of(collection: Collection, document: Document | None = None) -> list[str]:
    """Every model whose index may hold the collection's (or the document's) vectors: the configured one, the one
    queries use while a switch is built, and the one the document was last indexed with."""
    models = {collection.embedding_model, collection.query_model}
    if document is not None and document.indexed_model:
        models.add(document.indexed_model)
    return sorted(models - {None, ""})


class ChunkRemover:
    """Deletes chunk texts and vectors; stateless, safe to share. Deleting what is already gone is harmless."""

    def __init__(self, index: SearchIndex, chunks: ChunkStore):
        self.index = index
        self.chunks = chunks

    def remove_document(self, tenant: str, collection: Collection, document: Document) -> None:
        """All of the document's vectors, under every model that may hold them, then all its chunk texts."""
        for model in models_of(collection, document):
            self.index.delete(model, tenant, collection.id, document_ids=[document.id])
        self.chunks.delete_chunks(tenant, collection.id, document_id=document.id)

    def remove_chunks(
        self, tenant: str, collection_id: str, document_id: str, chunk_ids: Sequence[str], models: Iterable[str]
    ) -> None:
        """Some of a document's chunks: their vectors under `models` (none: the chunk texts only, when the index
        no longer holds them), then their texts."""
        if not chunk_ids:
            return
        for model in models:
            self.index.delete(model, tenant, collection_id, chunk_ids=list(chunk_ids))
        self.chunks.delete_chunks(tenant, collection_id, document_id=document_id, chunk_ids=list(chunk_ids))

    def remove_collection(self, tenant: str, collection: Collection) -> None:
        """Every vector of the collection under each of its models, then every chunk text."""
        for model in models_of(collection):
            self.index.delete(model, tenant, collection.id)
        self.chunks.delete_chunks(tenant, collection.id)


def require_collection(collections: CollectionStore, tenant: str, collection_id: str) -> Collection:
    collection = collections.get_collection(tenant, collection_id)
    if collection is None:
        raise NotFound(f"collection {collection_id!r} does not exist")
    return collection
