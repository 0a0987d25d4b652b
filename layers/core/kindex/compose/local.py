"""Local mode's adapters: SQLite, a folder, the embedded search index (or an OpenSearch cluster, with
`KINDEX_SEARCH_URL`), files for secrets, the durable queue."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from kindex.compose.adapters import AdapterSet
from kindex.settings import SettingsError

if TYPE_CHECKING:  # concrete types for what only local mode reaches (the upload route, the worker, the CLI)
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex
    from kindex.adapters.local.folder_blobs import FolderBlobStore
    from kindex.adapters.local.queue_notifier import QueueNotifier
    from kindex.adapters.local.search.index import LocalSearchIndex
    from kindex.adapters.local.sqlite_db import SqliteDatabase
    from kindex.adapters.local.sqlite_queue import SqliteQueue
    from kindex.adapters.local.upload_signer import LocalUploadSigner
    from kindex.domain.ports import MetadataStore

# Index names of a local server on a cluster: `kindex-local-<data directory id>-<model>-<dims>`.
LOCAL_INDEX_PREFIX = "kindex-local"


class LocalAdapters(AdapterSet):
    """Everything under `settings.data_dir`; one SQLite database for metadata, chunks, cache, queue, log and jobs."""

    @cached_property
    def database(self) -> SqliteDatabase:
        from kindex.adapters.local.sqlite_db import SqliteDatabase

        return SqliteDatabase(self.settings.data_dir / "kindex.sqlite3")

    @cached_property
    def queue(self) -> SqliteQueue:
        """The durable queue that stands in for S3 notifications -> SQS."""
        from kindex.adapters.local.sqlite_queue import SqliteQueue

        return SqliteQueue(self.database)

    @cached_property
    def notifier(self) -> QueueNotifier:
        from kindex.adapters.local.queue_notifier import QueueNotifier

        return QueueNotifier(self.queue)

    @cached_property
    def metadata(self) -> MetadataStore:
        from kindex.adapters.local.sqlite_metadata import SqliteMetadataStore

        return SqliteMetadataStore(self.database)

    @cached_property
    def blobs(self) -> FolderBlobStore:
        from kindex.adapters.local.folder_blobs import FolderBlobStore

        return FolderBlobStore(self.settings.data_dir / "blobs", notify=self.notifier)

    @cached_property
    def chunks(self):
        from kindex.adapters.local.sqlite_chunks import SqliteChunkStore

        return SqliteChunkStore(self.database)

    @cached_property
    def embedding_cache(self):
        from kindex.adapters.local.sqlite_embedding_cache import SqliteEmbeddingCache

        return SqliteEmbeddingCache(self.database)

    @cached_property
    def search_index(self) -> LocalSearchIndex | OpenSearchIndex:
        """The embedded index in the data directory (the chunk store rebuilds the keywords of an older layout);
        with `search_url`, an OpenSearch cluster instead."""
        if self.settings.search_url:
            return self.opensearch_index
        return self.embedded_index

    @cached_property
    def embedded_index(self) -> LocalSearchIndex:
        """The embedded index (what `search_index` is without `search_url`): the server and the CLI close it."""
        from kindex.adapters.local.search.index import LocalSearchIndex

        return LocalSearchIndex(
            self.settings.data_dir / "index", chunks=self.chunks, follower=self.settings.index_follower
        )

    @cached_property
    def search_index_prefix(self) -> str:
        """This server's index prefix on the cluster: the configured one, else one named after the data directory,
        so two servers sharing a cluster never see, overwrite or delete each other's chunks."""
        if self.settings.search_index_prefix:
            return self.settings.search_index_prefix
        from kindex.adapters.local.data_dir_id import data_dir_id

        try:
            return f"{LOCAL_INDEX_PREFIX}-{data_dir_id(self.settings.data_dir)}"
        except ValueError as error:
            raise SettingsError(str(error)) from error

    @cached_property
    def opensearch_index(self) -> OpenSearchIndex:
        """The cluster's index (what `search_index` is with `search_url`): the server prints its engine."""
        try:
            from kindex.adapters.aws.opensearch_index import OpenSearchIndex
        except ImportError as error:
            raise SettingsError(
                "KINDEX_SEARCH_URL needs the OpenSearch client: pip install 'kindex[opensearch]'"
            ) from error
        from urllib.parse import urlsplit

        from kindex.adapters.aws.opensearch_requests import region_of_domain

        url = self.settings.search_url or ""  # set: search_index asks for this only with a search_url
        parts = urlsplit(url)
        # A user in the URL means basic auth; an Amazon OpenSearch Service domain without one is SigV4-signed with
        # the process's AWS credentials; any other cluster gets no authentication.
        sigv4 = parts.username is None and region_of_domain(parts.hostname or "") is not None
        return OpenSearchIndex(
            endpoint=url,
            sigv4=sigv4,
            index_prefix=self.search_index_prefix,
            design=self.opensearch_design(),
            refresh=self.settings.opensearch_refresh,
        )

    @cached_property
    def secrets(self):
        from kindex.adapters.local.file_secrets import FileSecretStore

        return FileSecretStore(self.settings.data_dir / "secrets")

    @cached_property
    def query_log(self):
        from kindex.adapters.local.sqlite_query_log import SqliteQueryLog

        return SqliteQueryLog(self.database)

    @cached_property
    def jobs(self):
        from kindex.adapters.local.sqlite_jobs import SqliteJobStore

        return SqliteJobStore(self.database)

    @cached_property
    def ingest_trigger(self) -> QueueNotifier:
        return self.notifier

    @cached_property
    def reindex_queue(self):
        """Reindex tasks on the same durable queue (the local worker dispatches by message body)."""
        from kindex.adapters.local.reindex_queue import LocalReindexQueue

        return LocalReindexQueue(self.queue)

    @cached_property
    def presigner(self) -> LocalUploadSigner:
        """The local server's own HMAC-signed upload URLs."""
        from kindex.adapters.local.upload_signer import (
            LocalUploadSigner,
            load_or_create_secret,
        )

        secret = load_or_create_secret(self.settings.data_dir / "upload-secret")
        base_url = self.settings.public_url or f"http://{self.settings.host}:{self.settings.port}"
        return LocalUploadSigner(secret, base_url)

    @cached_property
    def metrics(self):
        from kindex.adapters.metrics import LogMetrics

        return LogMetrics()

    @cached_property
    def page_reader(self):
        """Tesseract when it is installed (Debian's tesseract-ocr; `make test` provisions it), else None: a scanned
        page is then left empty and its document's failure_reason says OCR was needed."""
        from kindex.adapters.local.tesseract_ocr import TesseractPageReader, tesseract_installed

        return TesseractPageReader() if tesseract_installed() else None

    @cached_property
    def usage_plan_keys(self):
        """None: `kindex serve` enforces the plans itself, per tenant, straight from KINDEX_USAGE_PLANS (its
        gateway's limiter); there is no key to create or attach."""
        return None

    def openai_api_key(self) -> str | None:
        return self.settings.openai_api_key
