"""What every backend provides: one typed set of adapters, built lazily (each function builds, and imports, only
the adapters it uses: that is its cold start)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kindex.settings import Settings

if TYPE_CHECKING:
    from kindex.domain.ports import (
        BlobStore,
        ChunkStore,
        Embedder,
        EmbeddingCache,
        IngestTrigger,
        JobStore,
        MetadataStore,
        MetricsRecorder,
        NotificationForwarder,
        PageReader,
        Presigner,
        QueryLog,
        ReindexQueue,
        SearchIndex,
        SecretStore,
        UsagePlanKeys,
    )
    from kindex.domain.rights_policy import RightsUrlPolicy


class AdapterSet(ABC):
    """The adapters of one deployment, one per port. `metadata` serves six ports (collections, documents, keys, the
    reindex ledger, collection deletions and usage counters: `MetadataStore`)."""

    def __init__(self, settings: Settings):
        self.settings = settings

    @cached_property
    @abstractmethod
    def metadata(self) -> MetadataStore: ...

    @cached_property
    @abstractmethod
    def blobs(self) -> BlobStore: ...

    @cached_property
    @abstractmethod
    def chunks(self) -> ChunkStore: ...

    @cached_property
    @abstractmethod
    def embedding_cache(self) -> EmbeddingCache: ...

    @cached_property
    @abstractmethod
    def search_index(self) -> SearchIndex: ...

    @cached_property
    @abstractmethod
    def secrets(self) -> SecretStore: ...

    @cached_property
    @abstractmethod
    def query_log(self) -> QueryLog: ...

    @cached_property
    @abstractmethod
    def jobs(self) -> JobStore: ...

    @cached_property
    @abstractmethod
    def ingest_trigger(self) -> IngestTrigger: ...

    @cached_property
    @abstractmethod
    def reindex_queue(self) -> ReindexQueue: ...

    @cached_property
    def ingest_forwarder(self) -> NotificationForwarder | None:
        """Where the ingest router re-sends blob notifications with their tenant's message group; None where the
        notifications carry the tenant already (local mode's notifier puts each on its tenant's lane)."""
        return None

    @cached_property
    @abstractmethod
    def presigner(self) -> Presigner: ...

    @cached_property
    @abstractmethod
    def metrics(self) -> MetricsRecorder: ...

    @cached_property
    @abstractmethod
    def page_reader(self) -> PageReader | None:
        """OCR of scanned PDF pages; None when this deployment has no engine (local mode without Tesseract)."""

    @cached_property
    @abstractmethod
    def usage_plan_keys(self) -> UsagePlanKeys | None:
        """Where tenants' API Gateway keys are put into usage plans; None when nothing is provisioned."""

    @abstractmethod
    def openai_api_key(self) -> str | None:
        """The OpenAI key, when the deployment has one (read when an OpenAI model is first used)."""

    def embedder(self, model: str) -> Embedder:
        from kindex.adapters.embedders.registry import create_embedder

        key = self.openai_api_key() if model.startswith("openai:") else None
        return create_embedder(model, openai_api_key=key, openai_base_url=self.settings.openai_base_url)

    def opensearch_design(self) -> Any:
        """The OpenSearch index design from the settings (docs/scale.md), for whichever backend uses OpenSearch."""
        from kindex.adapters.aws.opensearch_design import IndexDesign

        s = self.settings
        return IndexDesign(
            engine=s.search_engine,
            number_of_shards=s.opensearch_shards,
            number_of_replicas=s.opensearch_replicas,
            number_of_routing_shards=s.opensearch_routing_shards,
            routing_partition_size=s.opensearch_routing_partition_size,
            m=s.opensearch_hnsw_m,
            ef_construction=s.opensearch_ef_construction,
            ef_search=s.opensearch_ef_search,
            compression=s.opensearch_compression,
            refresh_interval=s.opensearch_refresh_interval,
        )

    @cached_property
    def rights_policy(self) -> RightsUrlPolicy:
        """Which rights-check URLs and addresses this deployment calls (KINDEX_RIGHTS_ALLOWED_NETWORKS)."""
        from kindex.domain.rights_policy import RightsUrlPolicy

        return RightsUrlPolicy.for_backend(self.settings.backend, self.settings.rights_networks)

    @cached_property
    def rights_endpoint(self) -> Any:
        from kindex.adapters.http_rights import HttpRightsEndpoint

        return HttpRightsEndpoint(self.rights_policy)
