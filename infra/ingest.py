"""Ingest pipeline: S3 notifications under `tenants/` -> the arrivals queue -> the ingest router -> the fair ingest
queue (each message in its tenant's group) -> the ingest function; both queues dead-letter to one queue."""

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
# SQS marks a tenant noisy once it holds over 10 % of the messages in flight and at least 30 of its own (SQS
# developer guide, "How Amazon SQS fair queues work"): the ingest functions must be able to hold that many.
FAIR_QUEUE_NOISY_IN_FLIGHT = 30
# The router does one SendMessageBatch per ten messages and nothing else: a hundred per invocation and a few
# invocations at once move a 10,000-file upload to the fair queue in seconds (docs/aws.md, "Fair ingest").
ROUTER_BATCH_SIZE = 100
ROUTER_BATCHING_WINDOW = Duration.seconds(1)  # Lambda requires a window for batches over ten
ROUTER_MAX_CONCURRENCY = 5


class IngestPipeline(Construct):
    """Created and removed objects under `tenants/` become SQS messages on the arrivals queue (S3 cannot give a
    message a group); the router re-sends each to the ingest queue in its tenant's message group, which makes that
    standard queue an SQS fair queue: a tenant's bulk upload cannot hold the other tenants' documents behind it.
    The ingest function consumes it in batches and reports failed messages individually; both queues retry a
    message up to three times before the dead-letter queue."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        bucket: s3.IBucket,
        function_timeout: Duration,
        router_timeout: Duration,
    ) -> None:
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
        self.arrivals = sqs.Queue(
            self,
            "Arrivals",
            visibility_timeout=Duration.seconds(router_timeout.to_seconds() * VISIBILITY_FACTOR),
            retention_period=Duration.days(4),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )
        destination = s3n.SqsDestination(self.arrivals)
        only_tenants = s3.NotificationKeyFilter(prefix=BLOB_PREFIX)
        bucket.add_event_notification(s3.EventType.OBJECT_CREATED, destination, only_tenants)
        bucket.add_event_notification(s3.EventType.OBJECT_REMOVED, destination, only_tenants)

    def attach(self, function: lambda_.IFunction, *, router: lambda_.IFunction) -> None:
        """The event source mappings (each grants its function exactly the SQS consume actions on its queue)."""
        router.add_event_source(
            event_sources.SqsEventSource(
                self.arrivals,
                batch_size=ROUTER_BATCH_SIZE,
                max_batching_window=ROUTER_BATCHING_WINDOW,
                report_batch_item_failures=True,
                max_concurrency=ROUTER_MAX_CONCURRENCY,
            )
        )
        function.add_event_source(
            event_sources.SqsEventSource(
                self.queue,
                batch_size=BATCH_SIZE,
                max_batching_window=Duration.seconds(5),
                report_batch_item_failures=True,
                max_concurrency=MAX_CONCURRENCY,
            )
        )
