"""Wiring: the only module that turns settings into adapters and services. Entry points ask it for services."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from typing import TYPE_CHECKING

from kindex.settings import Settings, load_settings

if TYPE_CHECKING:  # imports stay inside the properties: each function loads only what it uses (cold start)
    from kindex.domain.ports import (
        BlobStore,
        ChunkStore,
        CollectionStore,
        DocumentStore,
        Embedder,
        EmbeddingCache,
        KeyStore,
        SearchIndex,
    )
    from kindex.services.catalog import CatalogService
    from kindex.services.embedding import EmbeddingService
    from kindex.services.ingest import IngestService
    from kindex.services.keys import KeyService


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
    def queue(self):
        """Local mode only: the durable queue that stands in for S3 notifications -> SQS."""
        from kindex.adapters.sqlite_chunks import SqliteQueue

        return SqliteQueue(self._local_db)

    @cached_property
    def blobs(self) -> BlobStore:
        if self.settings.backend == "local":
            from kindex.adapters.folder_blobs import FolderBlobStore
            from kindex.local.events import QueueNotifier

            return FolderBlobStore(self.settings.data_dir / "blobs", notify=QueueNotifier(self.queue))
        from kindex.adapters.s3_blobs import S3BlobStore

        return S3BlobStore(self.settings.bucket_name)

    @cached_property
    def chunks(self) -> ChunkStore:
        if self.settings.backend == "local":
            from kindex.adapters.sqlite_chunks import SqliteChunkStore

            return SqliteChunkStore(self._local_db)
        from kindex.adapters.dynamodb_chunks import DynamoDbChunkStore

        return DynamoDbChunkStore(self.settings.table_name)

    @cached_property
    def embedding_cache(self) -> EmbeddingCache:
        if self.settings.backend == "local":
            from kindex.adapters.sqlite_chunks import SqliteEmbeddingCache

            return SqliteEmbeddingCache(self._local_db)
        from kindex.adapters.dynamodb_chunks import DynamoDbEmbeddingCache

        return DynamoDbEmbeddingCache(self.settings.table_name)

    @cached_property
    def search_index(self) -> SearchIndex:
        if self.settings.backend == "local":
            from kindex.adapters.search_local import LocalSearchIndex

            return LocalSearchIndex(self.settings.data_dir / "index")
        from kindex.adapters.search_opensearch import OpenSearchIndex

        return OpenSearchIndex(endpoint=self.settings.opensearch_endpoint, engine=self.settings.opensearch_engine)

    def embedder(self, model: str) -> Embedder:
        from kindex.embedding.registry import create_embedder

        key = None
        if model.startswith("openai:"):
            key = self.settings.openai_api_key or self._openai_key_from_secret()
        return create_embedder(model, openai_api_key=key, openai_base_url=self.settings.openai_base_url)

    def _openai_key_from_secret(self) -> str | None:
        """On AWS the key lives in Secrets Manager; Powertools caches it for five minutes (never logged)."""
        if not self.settings.openai_secret_name:
            return None
        from aws_lambda_powertools.utilities import parameters

        return parameters.get_secret(self.settings.openai_secret_name, max_age=300)

    @cached_property
    def metrics(self):
        if self.settings.backend == "local":
            from kindex.adapters.metrics import LogMetrics

            return LogMetrics()
        from kindex.adapters.metrics import PowertoolsMetrics

        return PowertoolsMetrics("kindex")

    @cached_property
    def embeddings(self) -> EmbeddingService:
        from kindex.services.embedding import EmbeddingService

        return EmbeddingService(self.embedding_cache, self.embedder, self.metrics)

    @cached_property
    def ingest(self) -> IngestService:
        from kindex.services.ingest import IngestLimits, IngestService

        limits = IngestLimits(max_file_bytes=self.settings.max_file_bytes,
                              max_chunks_per_document=self.settings.max_chunks_per_document)
        return IngestService(self.metadata, self.metadata, self.blobs, self.chunks, self.search_index,
                             self.embeddings, limits, metrics=self.metrics)

    @cached_property
    def uploads(self):
        """Signs upload URLs: the local server's own (HMAC) or S3 presigned PUTs."""
        if self.settings.backend == "local":
            from kindex.local.uploads import LocalUploadSigner, load_or_create_secret

            secret = load_or_create_secret(self.settings.data_dir / "upload-secret")
            base_url = self.settings.public_url or f"http://{self.settings.host}:{self.settings.port}"
            return LocalUploadSigner(secret, base_url)
        return self.blobs

    @cached_property
    def secrets(self):
        if self.settings.backend == "local":
            from kindex.adapters.local_secrets import FileSecretStore

            return FileSecretStore(self.settings.data_dir / "secrets")
        from kindex.adapters.aws_secrets import SecretsManagerStore

        return SecretsManagerStore(self.settings.secrets_prefix)

    @cached_property
    def query_log(self):
        if self.settings.backend == "local":
            from kindex.adapters.sqlite_chunks import SqliteQueryLog

            return SqliteQueryLog(self._local_db)
        from kindex.adapters.dynamodb_chunks import DynamoDbQueryLog

        return DynamoDbQueryLog(self.settings.table_name)

    @cached_property
    def query(self):
        from kindex.services.query import QueryService

        return QueryService(self.metadata, self.metadata, self.chunks, self.search_index, self.embeddings,
                            self.rights_checks, self.query_log, metrics=self.metrics)

    @cached_property
    def rights_policy(self):
        """Which rights-check URLs and addresses this deployment calls (KINDEX_RIGHTS_ALLOWED_NETWORKS)."""
        from kindex.domain.rights_policy import RightsUrlPolicy

        return RightsUrlPolicy.for_backend(self.settings.backend, self.settings.rights_networks)

    @cached_property
    def rights_endpoint(self):
        from kindex.adapters.rights_http import HttpRightsEndpoint

        return HttpRightsEndpoint(self.rights_policy)

    @cached_property
    def rights_checks(self):
        from kindex.services.rights import RightsChecks

        return RightsChecks(self.rights_policy, self.secrets, self.rights_endpoint)

    @cached_property
    def citations(self):
        from kindex.services.citations import CitationService

        return CitationService(self.query_log)

    @cached_property
    def rights_secrets(self):
        from kindex.services.rights import RightsSecretService

        return RightsSecretService(self.secrets)

    @cached_property
    def jobs(self):
        if self.settings.backend == "local":
            from kindex.adapters.sqlite_chunks import SqliteJobStore

            return SqliteJobStore(self._local_db)
        from kindex.adapters.dynamodb_jobs import DynamoDbJobStore

        return DynamoDbJobStore(self.settings.table_name)

    @cached_property
    def ingest_trigger(self):
        if self.settings.backend == "local":
            from kindex.local.events import QueueNotifier

            return QueueNotifier(self.queue)
        from kindex.adapters.sqs_trigger import SqsIngestTrigger

        return SqsIngestTrigger(self.settings.ingest_queue_url, self.settings.bucket_name)

    @cached_property
    def reindex(self):
        from kindex.services.reindex import ReindexService

        return ReindexService(self.metadata, self.metadata, self.blobs, self.chunks, self.search_index,
                              self.ingest_trigger, self.jobs, self.metadata)

    @cached_property
    def keys(self) -> KeyService:
        from kindex.services.keys import KeyService

        return KeyService(self.metadata)

    @cached_property
    def catalog(self) -> CatalogService:
        from kindex.services.catalog import CatalogService

        return CatalogService(self.metadata, self.metadata, self.blobs,
                              default_embedding_model=self.settings.embedding_model,
                              on_collection_removed=lambda tenant, c: self.ingest.remove_collection(tenant, c),
                              on_document_removed=lambda tenant, d, c: self.ingest.remove_document(tenant, d, c),
                              presigner=self.uploads, chunks=self.chunks,
                              check_rights=lambda tenant, c: self.rights_checks.check_collection(tenant, c),
                              max_file_bytes=self.settings.max_file_bytes)


@lru_cache(maxsize=1)
def container() -> Container:
    """The process-wide container, from the environment (Lambda cold start, or `kindex serve` which sets it)."""
    return Container(load_settings())
