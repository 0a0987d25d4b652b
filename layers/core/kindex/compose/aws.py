"""AWS's adapters: DynamoDB, S3, OpenSearch, Secrets Manager, SQS, CloudWatch metrics (EMF)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from kindex.compose.adapters import AdapterSet
from kindex.settings import SettingsError

if TYPE_CHECKING:
    from kindex.domain.ports import MetadataStore


class AwsAdapters(AdapterSet):
    """One DynamoDB table for metadata, chunks, the embedding cache, the query log and jobs; S3 for blobs."""

    @property
    def table_name(self) -> str:
        """The table every AWS function names (the settings refuse an AWS backend without it: `aws_requires`)."""
        if self.settings.table_name is None:
            raise SettingsError("KINDEX_TABLE_NAME is required on AWS")
        return self.settings.table_name

    @cached_property
    def metadata(self) -> MetadataStore:
        from kindex.adapters.aws.dynamodb_metadata import DynamoDbMetadataStore

        return DynamoDbMetadataStore(self.table_name)

    @cached_property
    def blobs(self):
        from kindex.adapters.aws.s3_blobs import S3BlobStore

        return S3BlobStore(self.settings.bucket_name)

    @cached_property
    def chunks(self):
        from kindex.adapters.aws.dynamodb_chunks import DynamoDbChunkStore

        return DynamoDbChunkStore(self.settings.table_name)

    @cached_property
    def embedding_cache(self):
        from kindex.adapters.aws.dynamodb_embedding_cache import DynamoDbEmbeddingCache

        return DynamoDbEmbeddingCache(self.settings.table_name)

    @cached_property
    def search_index(self):
        from kindex.adapters.aws.opensearch_index import OpenSearchIndex

        return OpenSearchIndex(
            endpoint=self.settings.opensearch_endpoint,
            design=self.opensearch_design(),
            refresh=self.settings.opensearch_refresh,
        )

    @cached_property
    def secrets(self):
        from kindex.adapters.aws.secrets_manager import SecretsManagerStore

        return SecretsManagerStore(self.settings.secrets_prefix)

    @cached_property
    def query_log(self):
        from kindex.adapters.aws.dynamodb_query_log import DynamoDbQueryLog

        return DynamoDbQueryLog(self.settings.table_name)

    @cached_property
    def jobs(self):
        from kindex.adapters.aws.dynamodb_jobs import DynamoDbJobStore

        return DynamoDbJobStore(self.settings.table_name)

    @cached_property
    def ingest_trigger(self):
        from kindex.adapters.aws.sqs_trigger import SqsIngestTrigger

        return SqsIngestTrigger(self.settings.ingest_queue_url, self.settings.bucket_name)

    @cached_property
    def ingest_forwarder(self):
        """The same adapter as the trigger: both send to the fair ingest queue, each message in its tenant's group."""
        return self.ingest_trigger

    @cached_property
    def reindex_queue(self):
        from kindex.adapters.aws.sqs_reindex_queue import SqsReindexQueue

        return SqsReindexQueue(self.settings.reindex_queue_url)

    @cached_property
    def presigner(self):
        """S3 presigned PUTs: the blob store signs them."""
        return self.blobs

    @cached_property
    def metrics(self):
        from kindex.adapters.metrics import PowertoolsMetrics

        return PowertoolsMetrics("kindex")

    @cached_property
    def page_reader(self):
        """Amazon Textract (the ingest role may call DetectDocumentText, infra/permissions.py)."""
        from kindex.adapters.aws.textract_ocr import TextractPageReader

        return TextractPageReader()

    @cached_property
    def usage_plan_keys(self):
        """API Gateway keys and usage plans, when the settings carry the stack's `UsagePlans` output (scope and
        plan ids): where `kindex keys` runs with operator credentials. The functions never have it."""
        plans = self.settings.plans
        plan_ids = plans.plan_ids() if plans else None
        if plans is None or plans.scope is None or plan_ids is None:
            return None
        from kindex.adapters.aws.apigateway_usage_plans import ApiGatewayUsagePlanKeys

        return ApiGatewayUsagePlanKeys(plans.scope, plan_ids)

    def openai_api_key(self) -> str | None:
        """From the environment in tests; on AWS from Secrets Manager, cached by Powertools for five minutes
        (never logged)."""
        if self.settings.openai_api_key or not self.settings.openai_secret_name:
            return self.settings.openai_api_key
        from aws_lambda_powertools.utilities import parameters

        return parameters.get_secret(self.settings.openai_secret_name, max_age=300)
