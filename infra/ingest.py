"""Ingest pipeline: S3 notifications under `tenants/` -> SQS (with a dead-letter queue) -> the ingest function."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.storage import BLOB_PREFIX

MAX_RECEIVE_COUNT = 3
# AWS's guidance for SQS event sources: visibility >= 6x the function timeout, so a message is not handed
# to a second worker while the batch that holds it is still being retried by the poller.
VISIBILITY_FACTOR = 6
BATCH_SIZE = 10
# Bounds the parallel load on OpenSearch and the OpenAI embeddings API however large a backlog grows.
MAX_CONCURRENCY = 10


class IngestPipeline(Construct):
    """Created and removed objects under `tenants/` become SQS messages; the ingest function consumes them in batches
    and reports failed messages individually, which SQS retries up to three times before the dead-letter queue."""

    def __init__(self, scope: Construct, construct_id: str, *, bucket: s3.IBucket, function_timeout: Duration) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetters",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            visibility_timeout=Duration.seconds(function_timeout.to_seconds() * VISIBILITY_FACTOR),
            retention_period=Duration.days(4),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )
        destination = s3n.SqsDestination(self.queue)
        only_tenants = s3.NotificationKeyFilter(prefix=BLOB_PREFIX)
        bucket.add_event_notification(s3.EventType.OBJECT_CREATED, destination, only_tenants)
        bucket.add_event_notification(s3.EventType.OBJECT_REMOVED, destination, only_tenants)

    def attach(self, function: lambda_.IFunction) -> None:
        """The event source mapping; it also grants the function exactly the SQS consume actions on the queue."""
        function.add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=BATCH_SIZE,
                max_batching_window=Duration.seconds(5),
                report_batch_item_failures=True,
                max_concurrency=MAX_CONCURRENCY,
            )
        )
