"""Wiring: the only module that turns settings into adapters and services. Entry points ask it for services."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from kindex.domain.ports import BlobStore, CollectionStore, DocumentStore, KeyStore
from kindex.services.catalog import CatalogService
from kindex.services.keys import KeyService
from kindex.settings import Settings, load_settings


@dataclass
class Container:
    """Lazily built adapters and services for one settings value (one per process in practice)."""

    settings: Settings

    @cached_property
    def _local_db(self):
        from kindex.adapters.sqlite_store import SqliteDatabase

        return SqliteDatabase(self.settings.data_dir / "kindex.sqlite3")

    @cached_property
    def metadata(self) -> CollectionStore | DocumentStore | KeyStore:
        if self.settings.backend == "local":
            from kindex.adapters.sqlite_store import SqliteMetadataStore

            return SqliteMetadataStore(self._local_db)
        from kindex.adapters.dynamodb_store import DynamoDbMetadataStore

        return DynamoDbMetadataStore(self.settings.table_name)

    @cached_property
    def blobs(self) -> BlobStore:
        if self.settings.backend == "local":
            from kindex.adapters.folder_blobs import FolderBlobStore

            return FolderBlobStore(self.settings.data_dir / "blobs")
        from kindex.adapters.s3_blobs import S3BlobStore

        return S3BlobStore(self.settings.bucket_name)

    @cached_property
    def keys(self) -> KeyService:
        return KeyService(self.metadata)

    @cached_property
    def catalog(self) -> CatalogService:
        return CatalogService(self.metadata, self.metadata, self.blobs,
                              default_embedding_model=self.settings.embedding_model)


@lru_cache(maxsize=1)
def container() -> Container:
    """The process-wide container, from the environment (Lambda cold start, or `kindex serve` which sets it)."""
    return Container(load_settings())
