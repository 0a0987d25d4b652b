"""The AWS backend wired as the Lambdas wire it, under moto: DynamoDB table, versioned bucket notifying the
arrivals queue, which the router function moves to the fair ingest queue (both with one DLQ), Secrets Manager, the
OpenSearch double, and KINDEX_INGEST_QUEUE_URL pointing at the ingest queue so re-sent documents and routed S3
notifications meet where the ingest function reads them; and the reindex work queue (with its DLQ) that the
reindex planner fills and the reindex worker function drains.

Queues are drained as Lambda's SQS event source mappings do it: received messages become one handler call, and
the messages it did not report in `batchItemFailures` are deleted. Every receive from the ingest queue first lets
the router move what has arrived.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from moto import mock_aws

from functions import ingest as ingest_function
from functions import reindex as reindex_function
from functions import reindex_worker as reindex_worker_function
from functions import router as router_function
from kindex.adapters.aws import dynamodb_table, s3_blobs, secrets_manager, sqs_trigger
from kindex.adapters.aws.opensearch_index import OpenSearchIndex
from kindex.adapters.embedders.registry import clear_embedder_cache
from kindex.compose import Services, container
from tests.support.aws import (
    BUCKET,
    TABLE,
    LambdaContext,
    create_arrivals_queue,
    create_ingest_queues,
    create_metadata_table,
    create_reindex_queues,
    create_versioned_bucket,
    fake_aws_env,
    moto_client,
    notify_queue_of_documents,
    sqs_lambda_event,
)
from tests.support.opensearch_double import OpenSearchDouble


def reset_process_caches() -> None:
    """What a fresh Lambda container starts without: the wired container, SDK clients and embedders."""
    container.cache_clear()
    dynamodb_table.dynamodb_client.cache_clear()
    s3_blobs.s3_client.cache_clear()
    secrets_manager.secretsmanager_client.cache_clear()
    sqs_trigger.sqs_client.cache_clear()
    clear_embedder_cache()


@dataclass
class AwsStack:
    services: Services
    double: OpenSearchDouble
    dynamodb: Any
    s3: Any
    sqs: Any
    queue_url: str
    queue_arn: str
    dlq_url: str
    reindex_queue: tuple[str, str, str]  # url, arn, dead-letter queue url
    arrivals: tuple[str, str]  # url, arn: the queue S3 notifies

    def route(self) -> int:
        """The router's event source: every arrived notification goes to the ingest queue in its tenant's group
        (every forward must succeed); returns how many were moved."""
        url, arn = self.arrivals
        moved = 0
        while messages := self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
        ).get("Messages", []):
            response = router_function.handler(sqs_lambda_event(messages, arn), LambdaContext())
            assert response["batchItemFailures"] == [], "a notification was not routed"
            for message in messages:
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            moved += len(messages)
        return moved

    def receive(self, max_messages: int = 10) -> list[dict]:
        self.route()
        return self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], VisibilityTimeout=0
        ).get("Messages", [])

    def handle(self, messages: list[dict]) -> set[str]:
        """One ingest invocation for these messages; deletes those that succeeded, returns the failed ids."""
        response = ingest_function.handler(sqs_lambda_event(messages, self.queue_arn), LambdaContext())
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return failed

    def drain(
        self, batch_size: int = 10, after_each: Callable[[], None] | None = None, max_batches: int = 100
    ) -> list[dict]:
        """Deliver until the queue is empty (every delivery must succeed); returns the bodies delivered."""
        bodies: list[dict] = []
        for _ in range(max_batches):
            messages = self.receive(batch_size)
            if not messages:
                return bodies
            assert self.handle(messages) == set(), "an ingest message failed"
            bodies.extend(json.loads(m["Body"]) for m in messages)
            if after_each is not None:
                after_each()
        raise AssertionError("the queue did not drain")

    def reindex_tasks(self, max_messages: int = 10) -> list[dict]:
        return self.sqs.receive_message(
            QueueUrl=self.reindex_queue[0],
            MaxNumberOfMessages=max_messages,
            AttributeNames=["All"],
            VisibilityTimeout=0,
        ).get("Messages", [])

    def work_reindex(self, max_batches: int = 100) -> list[str]:
        """Deliver the reindex queue to the worker function as its event source mapping does, until it is empty
        (failed messages stay, and are dead-lettered after their receives); returns the bodies delivered."""
        url, arn, _ = self.reindex_queue
        delivered: list[dict] = []
        for _ in range(max_batches):
            messages = self.reindex_tasks()
            if not messages:
                return delivered
            response = reindex_worker_function.handler(sqs_lambda_event(messages, arn), LambdaContext())
            failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            for message in messages:
                if message["MessageId"] not in failed:
                    self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            delivered.extend(m["Body"] for m in messages)
        raise AssertionError("the reindex queue did not drain")

    def reindex_pass(self) -> dict[str, int]:
        """What one scheduled run comes to: the planner function, then the worker over every task it sent."""
        summary = reindex_function.handler(SCHEDULED_EVENT, LambdaContext())
        self.work_reindex()
        return summary

    def dynamodb_requests(self, run: Callable[[], Any]) -> list[dict]:
        """Every DynamoDB request `run()` sends, as its operation and parameters, on every client the stores use."""
        sent: list[dict] = []
        clients = {
            id(c): c
            for c in (
                self.services.adapters.metadata.client,
                self.services.adapters.chunks.client,
                self.services.adapters.query_log.client,
            )
        }

        def record(model, params, **_):
            sent.append({"operation": model.name, **params})

        for client in clients.values():
            client.meta.events.register("before-parameter-build.dynamodb", record)
        try:
            run()
        finally:
            for client in clients.values():
                client.meta.events.unregister("before-parameter-build.dynamodb", record)
        return sent

    def lose_events(self) -> int:
        """Receive and delete every waiting message unprocessed, as if the notifications had been lost."""
        lost = 0
        while messages := self.receive():
            for message in messages:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
                lost += 1
        return lost


# What EventBridge Scheduler delivers to the reindex planner (its payload is not read).
SCHEDULED_EVENT = {
    "version": "0",
    "id": "0d9c7f4e-1e7a-4b8f-9f59-0a1f3d6d2a11",
    "detail-type": "Scheduled Event",
    "source": "aws.scheduler",
    "account": "123456789012",
    "time": "2024-05-01T12:00:00Z",
    "region": "us-east-1",
    "resources": [],
    "detail": {},
}


def created_keys(bodies: list[dict]) -> list[str]:
    """The raw (still encoded) object keys of the ObjectCreated records among delivered bodies."""
    return [
        record["s3"]["object"]["key"]
        for body in bodies
        for record in body.get("Records", [])
        if record["eventName"].startswith("ObjectCreated")
    ]


@contextmanager
def aws_stack(monkeypatch: pytest.MonkeyPatch, extra_env: dict[str, str] | None = None) -> Iterator[AwsStack]:
    """Create the resources under moto and wire the container like a Lambda cold start (search index = double)."""
    fake_aws_env(monkeypatch)
    with mock_aws():
        dynamodb, s3, sqs = moto_client("dynamodb"), moto_client("s3"), moto_client("sqs")
        create_metadata_table(dynamodb)
        create_versioned_bucket(s3)
        queue_url, queue_arn, dlq_url = create_ingest_queues(sqs)
        arrivals = create_arrivals_queue(sqs, dlq_url)
        reindex_queue = create_reindex_queues(sqs)
        notify_queue_of_documents(s3, arrivals[1])
        env = {
            "KINDEX_BACKEND": "aws",
            "KINDEX_TABLE_NAME": TABLE,
            "KINDEX_BUCKET_NAME": BUCKET,
            "KINDEX_DEFAULT_EMBEDDING_MODEL": "hash:384",
            "KINDEX_INGEST_QUEUE_URL": queue_url,
            "KINDEX_REINDEX_QUEUE_URL": reindex_queue[0],
            # What a scheduled pass reads must not depend on the hour a test runs at: recounts only on full passes
            # (tests that want one run a full pass).
            "KINDEX_USAGE_RECOUNT_HOUR": "-1",
            **(extra_env or {}),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        reset_process_caches()
        services = container()
        double = OpenSearchDouble()
        services.adapters.__dict__["search_index"] = OpenSearchIndex(double.client())
        stack = AwsStack(services, double, dynamodb, s3, sqs, queue_url, queue_arn, dlq_url, reindex_queue, arrivals)
        # S3 sends a test event when the notification is configured; it is no document's.
        stack.lose_events()
        try:
            yield stack
        finally:
            reset_process_caches()
        assert double.spec_violations == []
