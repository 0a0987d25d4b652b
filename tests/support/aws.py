"""Shared moto helpers: fake credentials, and the table, bucket and queues as the infrastructure declares them."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import boto3
import pytest

REGION = "us-east-1"
TABLE = "kindex-metadata-test"
BUCKET = "kindex-documents-test"
QUEUE = "kindex-ingest-test"
ARRIVALS_QUEUE = "kindex-ingest-arrivals-test"
DEAD_LETTER_QUEUE = "kindex-ingest-dlq-test"
REINDEX_QUEUE = "kindex-reindex-test"
REINDEX_DEAD_LETTER_QUEUE = "kindex-reindex-dlq-test"
MAX_RECEIVES = 3
TTL_ATTRIBUTE = "expires_at"


def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials and region moto accepts, so nothing can reach a real AWS account."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@lru_cache(maxsize=1)
def _session() -> boto3.Session:
    # One session for the whole run: it loads the service models once (a fresh one per test costs ~0.2 s a client).
    return boto3.Session()


def moto_client(service: str, **kwargs: Any) -> Any:
    """A boto3 client for use inside `mock_aws()`, with fake credentials given explicitly (never the host's)."""
    return _session().client(
        service,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
        **kwargs,
    )


def create_metadata_table(client, name: str = TABLE) -> None:
    """The table as infra/storage.py declares it: string pk/sk, on demand, TTL on `expires_at`, and the sparse
    keys-only `attention` GSI the reindex queries."""
    client.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "attention", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "attention",
                "KeySchema": [
                    {"AttributeName": "attention", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )


def create_versioned_bucket(client, name: str = BUCKET) -> None:
    """The documents bucket: versioned, as infra/stack.py declares it."""
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


def create_ingest_queues(sqs) -> tuple[str, str, str]:
    """The ingest queue and its dead-letter queue (a message is dead-lettered after MAX_RECEIVES receives).

    Returns (queue url, queue arn, dead-letter queue url).
    """
    dlq_url = sqs.create_queue(QueueName=DEAD_LETTER_QUEUE)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVES)})
    queue_url = sqs.create_queue(QueueName=QUEUE, Attributes={"RedrivePolicy": redrive})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return queue_url, queue_arn, dlq_url


def create_arrivals_queue(sqs, dlq_url: str) -> tuple[str, str]:
    """The queue S3 notifies (infra/ingest.py): the router moves its messages to the fair ingest queue. It shares
    the ingest queue's dead-letter queue. Returns (queue url, queue arn)."""
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVES)})
    url = sqs.create_queue(QueueName=ARRIVALS_QUEUE, Attributes={"RedrivePolicy": redrive})["QueueUrl"]
    return url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def create_reindex_queues(sqs) -> tuple[str, str, str]:
    """The reindex work queue and its dead-letter queue, as infra/reindex.py declares them (a task is
    dead-lettered after MAX_RECEIVES receives). Returns (queue url, queue arn, dead-letter queue url)."""
    dlq_url = sqs.create_queue(QueueName=REINDEX_DEAD_LETTER_QUEUE)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVES)})
    queue_url = sqs.create_queue(QueueName=REINDEX_QUEUE, Attributes={"RedrivePolicy": redrive})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return queue_url, queue_arn, dlq_url


def notify_queue_of_documents(s3, queue_arn: str, bucket: str = BUCKET) -> None:
    """S3 -> SQS for every object created or removed under `tenants/` (S3 then sends an `s3:TestEvent`)."""
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "Id": "documents-to-ingest",
                    "QueueArn": queue_arn,
                    "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "tenants/"}]}},
                }
            ]
        },
    )


def sqs_lambda_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda's SQS event source mapping builds from received messages (ReceiveMessage with
    AttributeNames=["All"])."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": dict(m.get("Attributes", {})),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


class LambdaContext:
    """Enough of the Lambda context object for Powertools' `inject_lambda_context`."""

    function_name = "kindex-ingest"
    memory_limit_in_mb = 1024
    invoked_function_arn = f"arn:aws:lambda:{REGION}:123456789012:function:kindex-ingest"
    aws_request_id = "req-test"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000
