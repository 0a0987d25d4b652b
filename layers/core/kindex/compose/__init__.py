"""Composition: the only place that turns settings into adapters (`compose.local` or `compose.aws`, one typed set
each) and adapters into services. Entry points ask `container()` for the services of their process."""

from __future__ import annotations

from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from kindex.compose.adapters import AdapterSet
from kindex.settings import Settings, load_settings

if TYPE_CHECKING:  # imports stay inside the properties: each function loads only what it uses (cold start)
    from kindex.app.catalog import CatalogService
    from kindex.app.chunk_removal import ChunkRemover
    from kindex.app.citations import CitationService
    from kindex.app.embedding import EmbeddingService
    from kindex.app.ingest import IngestService
    from kindex.app.ingest_routing import IngestRouter
    from kindex.app.keys import KeyService
    from kindex.app.query import QueryService
    from kindex.app.reindex.jobs import ReindexJobs
    from kindex.app.reindex.planner import ReindexPlanner
    from kindex.app.reindex.switch import ModelSwitch
    from kindex.app.reindex.worker import ReindexWorker
    from kindex.app.rights import RightsChecks, RightsSecretService
    from kindex.app.transfer import TransferService
    from kindex.app.usage import UsageService
    from kindex.compose.local import LocalAdapters


def adapters_for(settings: Settings) -> AdapterSet:
    """The backend's adapter set: the one place that looks at `settings.backend`."""
    if settings.backend == "local":
        from kindex.compose.local import LocalAdapters

        return LocalAdapters(settings)
    from kindex.compose.aws import AwsAdapters

    return AwsAdapters(settings)


class Services:
    """The use cases of one deployment, built lazily over its adapters. Entry points that drive an adapter directly
    (the local worker's queue, the CLI, tests) name the layer: `services.adapters.metadata`; what only local mode has
    (its queue, its SQLite database) through `local_adapters(services)`."""

    def __init__(self, adapters: AdapterSet):
        self.adapters = adapters
        self.settings = adapters.settings

    @cached_property
    def embeddings(self) -> EmbeddingService:
        from kindex.app.embedding import EmbeddingService
        from kindex.app.query_batching import QueryBatcher

        return EmbeddingService(
            self.adapters.embedding_cache,
            self.adapters.embedder,
            self.adapters.metrics,
            query_batches=QueryBatcher() if self.settings.query_batching else None,
            on_embedded=self.usage.record_embedding_tokens,
        )

    @cached_property
    def usage(self) -> UsageService:
        """Quotas from the usage plans (KINDEX_USAGE_PLANS; none: no limits), counters in the metadata store."""
        from kindex.app.usage import UsageService

        return UsageService(self.adapters.metadata, self.settings.plans)

    @cached_property
    def ingest(self) -> IngestService:
        from kindex.app.ingest import IngestLimits, IngestService

        a = self.adapters
        limits = IngestLimits(
            max_file_bytes=self.settings.max_file_bytes,
            max_chunks_per_document=self.settings.max_chunks_per_document,
            remote_embed_slice=self.settings.remote_embed_slice,
        )
        return IngestService(
            a.metadata,
            a.metadata,
            a.blobs,
            a.chunks,
            a.search_index,
            self.embeddings,
            limits,
            metrics=a.metrics,
            ocr=a.page_reader,
            usage=self.usage,
        )

    @cached_property
    def ingest_router(self) -> IngestRouter:
        """AWS only: the router between S3's notifications and the fair ingest queue (docs/aws.md, "Fair ingest")."""
        from kindex.app.ingest_routing import IngestRouter

        forwarder = self.adapters.ingest_forwarder
        if forwarder is None:
            raise RuntimeError("this backend has no ingest router: its notifications carry their tenant already")
        return IngestRouter(forwarder)

    @cached_property
    def rights_checks(self) -> RightsChecks:
        from kindex.app.rights import RightsChecks

        a = self.adapters
        return RightsChecks(a.rights_policy, a.secrets, a.rights_endpoint, metrics=a.metrics)

    @cached_property
    def query(self) -> QueryService:
        from kindex.app.query import QueryService

        a = self.adapters
        return QueryService(
            a.metadata,
            a.metadata,
            a.chunks,
            a.search_index,
            self.embeddings,
            self.rights_checks,
            a.query_log,
            metrics=a.metrics,
            usage=self.usage,
        )

    @cached_property
    def citations(self) -> CitationService:
        from kindex.app.citations import CitationService

        return CitationService(self.adapters.query_log)

    @cached_property
    def rights_secrets(self) -> RightsSecretService:
        from kindex.app.rights import RightsSecretService

        return RightsSecretService(self.adapters.secrets)

    # Reindex, one service per job: the planner (the scheduled function), the worker (the reindex queue's consumer),
    # the jobs (the API) and the model switch (local mode's frequent check), each over only the ports it uses.
    @cached_property
    def reindex_planner(self) -> ReindexPlanner:
        from kindex.app.reindex.planner import ReindexPlanner

        a = self.adapters
        hour = self.settings.usage_recount_hour
        return ReindexPlanner(
            a.metadata, a.metadata, a.metadata, a.reindex_queue, recount_hour=hour if hour >= 0 else None
        )

    @cached_property
    def model_switch(self) -> ModelSwitch:
        from kindex.app.reindex.switch import ModelSwitch

        a = self.adapters
        return ModelSwitch(a.metadata, a.metadata, a.chunks, a.search_index, a.metadata)

    @cached_property
    def reindex_worker(self) -> ReindexWorker:
        from kindex.app.collection_deletion import CollectionDeleter
        from kindex.app.reindex.orphans import OrphanBlobs
        from kindex.app.reindex.pages import PageChecker
        from kindex.app.reindex.worker import ReindexWorker

        a = self.adapters
        return ReindexWorker(
            a.metadata,
            a.metadata,
            a.reindex_queue,
            a.ingest_trigger,
            a.jobs,
            pages=PageChecker(a.metadata, a.chunks, a.search_index, a.blobs),
            switch=self.model_switch,
            orphans=OrphanBlobs(a.blobs, a.metadata, a.reindex_queue),
            deleter=CollectionDeleter(a.metadata, a.metadata, a.blobs, self.remover, a.jobs, a.reindex_queue),
            usage=self.usage,
        )

    @cached_property
    def reindex_jobs(self) -> ReindexJobs:
        from kindex.app.reindex.jobs import ReindexJobs

        return ReindexJobs(self.adapters.metadata, self.adapters.jobs, self.reindex_worker, self.model_switch)

    @cached_property
    def keys(self) -> KeyService:
        from kindex.app.keys import KeyService

        usage_plans = None
        if self.adapters.usage_plan_keys is not None and self.settings.plans is not None:
            from kindex.app.usage_plans import UsagePlanService

            usage_plans = UsagePlanService(self.settings.plans, self.adapters.usage_plan_keys)
        return KeyService(self.adapters.metadata, usage_plans)

    @cached_property
    def catalog(self) -> CatalogService:
        from kindex.app.catalog import CatalogService

        a = self.adapters
        return CatalogService(
            a.metadata,
            a.metadata,
            a.blobs,
            default_embedding_model=self.settings.embedding_model,
            deletions=a.metadata,
            jobs=a.jobs,
            reindex_queue=a.reindex_queue,
            on_document_removed=self._remove_document_index,
            presigner=a.presigner,
            chunks=a.chunks,
            check_rights=self._check_rights,
            max_file_bytes=self.settings.max_file_bytes,
            ingest_trigger=a.ingest_trigger,
            usage=self.usage,
        )

    @cached_property
    def transfer(self) -> TransferService:
        from kindex.app.transfer import TransferService

        a = self.adapters
        return TransferService(
            a.metadata,
            a.metadata,
            a.blobs,
            a.chunks,
            a.search_index,
            self.embeddings,
            a.embedding_cache,
            max_chunks_per_document=self.settings.max_chunks_per_document,
            max_file_bytes=self.settings.max_file_bytes,
            metrics=a.metrics,
            usage=self.usage,
        )

    @cached_property
    def remover(self) -> ChunkRemover:
        from kindex.app.chunk_removal import ChunkRemover

        return ChunkRemover(self.adapters.search_index, self.adapters.chunks)

    # The catalog's hooks, resolved when called: the API function builds the search index and the rights service only
    # when a delete or a rights setting needs them.
    def _remove_document_index(self, tenant, document, collection) -> None:
        self.remover.remove_document(tenant, collection, document)

    def _check_rights(self, tenant, collection) -> None:
        self.rights_checks.check_collection(tenant, collection)


def local_adapters(services: Services) -> LocalAdapters:
    """The local deployment's adapters, with what only it has (the durable queue, the SQLite database, the notifier);
    TypeError on any other deployment, so a local-only call can never reach AWS by mistake."""
    from kindex.compose.local import LocalAdapters

    if not isinstance(services.adapters, LocalAdapters):
        raise TypeError("this needs the local deployment's adapters (KINDEX_BACKEND=local)")
    return services.adapters


@lru_cache(maxsize=1)
def container() -> Services:
    """The process's services, from the environment (a Lambda cold start, or `kindex serve`, which sets it)."""
    return Services(adapters_for(load_settings()))
