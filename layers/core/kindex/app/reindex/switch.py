"""The switch of a collection to its new embedding model, once every document is done under it."""

from __future__ import annotations

import logging

from kindex.app.chunk_removal import ChunkRemover
from kindex.app.record_writes import write_collection
from kindex.app.reindex import all_documents, up_to_date
from kindex.domain.errors import Conflict, NotFound
from kindex.domain.models import Collection, utc_now
from kindex.domain.ports import ChunkStore, CollectionStore, DocumentStore, KeyStore, SearchIndex

logger = logging.getLogger(__name__)


class ModelSwitch:
    """A model change is built beside the old vectors; when every document is done under the new model, the
    collection queries it and the old model's vectors and the chunks no vector references are dropped."""

    def __init__(
        self,
        collections: CollectionStore,
        documents: DocumentStore,
        chunks: ChunkStore,
        index: SearchIndex,
        key_store: KeyStore,
    ):
        self.collections = collections
        self.documents = documents
        self.chunks = chunks
        self.index = index
        self.remover = ChunkRemover(index, chunks)
        self.key_store = key_store

    def progress(self, tenant: str, collection: Collection) -> tuple[int, int]:
        """(documents with content, those of them up to date): equal when the collection's model is complete."""
        total = done = 0
        for document in all_documents(self.documents, tenant, collection.id):
            if document.source is None:
                continue
            total += 1
            done += int(up_to_date(document, collection))
        return total, done

    def finish_switches(self) -> int:
        """Switch every collection whose new model is complete (local mode's frequent check; cheap when nothing is
        switching: it reads collection records, and documents only of switching collections)."""
        switched = 0
        for tenant in sorted({key.tenant for key in self.key_store.list_keys()}):
            for collection_id in self.collections.list_collections(tenant, after=None, offset=0, limit=None):
                collection = self.collections.get_collection(tenant, collection_id)
                if collection and collection.switching:
                    total, done = self.progress(tenant, collection)
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
        for document in all_documents(self.documents, tenant, collection.id):
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
