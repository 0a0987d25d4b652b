"""The ingest path on the AWS backend under moto: S3 -> notification -> SQS (with a DLQ) -> the ingest Lambda
handler -> chunk texts and embedding cache in DynamoDB, vectors in OpenSearch (the spec-validating double).

The queue is drained the way Lambda's SQS event source mapping does it: a batch of received messages becomes one
handler call; messages reported in `batchItemFailures` (or the whole batch, when the handler raises) stay on the
queue and come back (the visibility timeout is 0 here), and SQS dead-letters a message after 3 receives.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from moto import mock_aws

from functions import ingest as ingest_function
from kindex.adapters.aws.dynamodb_chunks import DynamoDbChunkStore, chunks_pk
from kindex.adapters.aws.dynamodb_embedding_cache import embedding_pk
from kindex.adapters.aws.opensearch_index import OpenSearchIndex, opensearch_client
from kindex.adapters.aws.opensearch_requests import build_client_options
from kindex.compose import Services, container
from kindex.domain.keys import blob_key
from kindex.domain.models import Collection, CollectionInput, DocumentInput
from kindex.domain.types import ChunkRef
from tests.support.aws import (
    BUCKET,
    REGION,
    TABLE,
    LambdaContext,
    create_ingest_queues,
    create_metadata_table,
    create_versioned_bucket,
    fake_aws_env,
    moto_client,
    notify_queue_of_documents,
    sqs_lambda_event,
)
from tests.support.aws_deployment import reset_process_caches
from tests.support.openai_stub import OpenAIStub, error_body
from tests.support.opensearch_double import OpenSearchDouble

pytestmark = pytest.mark.integration

OPENAI_MODEL = "openai:text-embedding-3-small"
OPENAI_KEY = "sk-test-0123456789abcdef"
TEXT = "\n\n".join(f"Paragraph {i} talks about topic {i} with several words to fill the space." for i in range(12))


@dataclass
class Delivery:
    """One handler call: the messages it got, and its response (None when it raised for the whole batch)."""

    messages: list[dict]
    response: dict | None

    @property
    def failed_ids(self) -> set[str]:
        if self.response is None:
            return {m["MessageId"] for m in self.messages}
        return {f["itemIdentifier"] for f in self.response["batchItemFailures"]}


@dataclass
class Deployment:
    services: Services
    double: OpenSearchDouble
    dynamodb: Any
    s3: Any
    sqs: Any
    queue_url: str
    queue_arn: str
    dlq_url: str
    sleeps: list[float] = field(default_factory=list)

    def receive(self, queue_url: str | None = None) -> list[dict]:
        return self.sqs.receive_message(
            QueueUrl=queue_url or self.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=0
        ).get("Messages", [])

    def handle(self, messages: list[dict]) -> Delivery:
        """Call the ingest handler with the Lambda event for these messages; delete those that succeeded."""
        try:
            response = ingest_function.handler(sqs_lambda_event(messages, self.queue_arn), LambdaContext())
        except BatchProcessingError:  # Powertools raises when every record failed: Lambda retries the batch
            response = None
        delivery = Delivery(messages, response)
        for message in messages:
            if message["MessageId"] not in delivery.failed_ids:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return delivery

    def drain(self, max_batches: int = 10) -> list[Delivery]:
        deliveries = []
        for _ in range(max_batches):
            messages = self.receive()
            if not messages:
                return deliveries
            deliveries.append(self.handle(messages))
        raise AssertionError("the queue did not drain")

    def redrive(self) -> int:
        """Move dead letters back to the source queue (moto has no StartMessageMoveTask)."""
        moved = 0
        while messages := self.receive(self.dlq_url):
            for message in messages:
                self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=message["Body"])
                self.sqs.delete_message(QueueUrl=self.dlq_url, ReceiptHandle=message["ReceiptHandle"])
                moved += 1
        return moved

    def document(self, document_id: str, collection: str = "c"):
        return self.services.adapters.metadata.get_document("t", collection, document_id)

    def chunk_items(self, collection: str, document_id: str) -> list[dict]:
        """The raw chunk items in DynamoDB (not through the adapter)."""
        return self.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": chunks_pk("t", collection, document_id)}},
        )["Items"]

    def dead_letters(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])


@pytest.fixture
def deploy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Deployment]]:
    """Creates the AWS resources under moto; calling the result wires the container like the Lambda's cold start."""
    fake_aws_env(monkeypatch)
    with mock_aws():
        dynamodb = moto_client("dynamodb")
        s3 = moto_client("s3")
        sqs = moto_client("sqs")
        create_metadata_table(dynamodb)
        create_versioned_bucket(s3)
        queue_url, queue_arn, dlq_url = create_ingest_queues(sqs)
        notify_queue_of_documents(s3, queue_arn)
        doubles: list[OpenSearchDouble] = []

        def wire(extra_env: dict[str, str] | None = None) -> Deployment:
            env = {
                "KINDEX_BACKEND": "aws",
                "KINDEX_TABLE_NAME": TABLE,
                "KINDEX_BUCKET_NAME": BUCKET,
                "KINDEX_DEFAULT_EMBEDDING_MODEL": "hash:384",
                **(extra_env or {}),
            }
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            reset_process_caches()
            services = container()
            double = OpenSearchDouble()
            doubles.append(double)
            services.adapters.__dict__["search_index"] = OpenSearchIndex(double.client())
            return Deployment(services, double, dynamodb, s3, sqs, queue_url, queue_arn, dlq_url)

        yield wire
        reset_process_caches()
        assert all(d.spec_violations == [] for d in doubles)


@pytest.fixture
def deployment(deploy) -> Deployment:
    deployment = deploy()
    deployment.services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=200))
    return deployment


@pytest.fixture
def openai_stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(dimensions=1536) as stub:
        yield stub


@pytest.fixture
def openai_deployment(deploy, openai_stub, monkeypatch) -> Deployment:
    """A deployment whose collection embeds with OpenAI (the stub); retry sleeps are recorded, not slept."""
    deployment = deploy({"OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": openai_stub.base_url})
    services = deployment.services
    services.catalog.put_collection("t", "c", CollectionInput(chunking_max_size=400, embedding_model=OPENAI_MODEL))
    # The registry builds one embedder per (model, key, URL) and the container asks it for the same one.
    embedder = services.adapters.embedder(OPENAI_MODEL)
    monkeypatch.setattr(embedder, "_sleep", deployment.sleeps.append)
    return deployment


def test_file_dropped_into_s3_is_indexed_through_sqs(deployment):
    d = deployment
    # Given a file written straight into the bucket under a document id with a space
    key = blob_key("t", "c", "My Document", "notes.md")
    d.s3.put_object(Bucket=BUCKET, Key=key, Body=("# Notes\n\n" + TEXT).encode())
    # When the queue's messages (S3's test event first) are received and handed to the ingest handler
    messages = d.receive()
    bodies = [json.loads(m["Body"]) for m in messages]
    assert bodies[0]["Event"] == "s3:TestEvent"
    record = bodies[1]["Records"][0]
    assert record["eventName"].startswith("ObjectCreated:")
    assert record["s3"]["object"]["key"] == key.replace("/", "%2F").replace("%20", "%2520")  # encoded once more
    response = d.handle(messages).response
    # Then nothing failed, and the document is indexed
    assert response == {"batchItemFailures": []}
    document = d.document("My Document")
    assert document.status.value == "indexed" and document.title == "notes.md" and document.chunk_count > 1
    # And the chunk texts are in DynamoDB, in order, and one vector per chunk is in OpenSearch
    assert isinstance(d.services.adapters.chunks, DynamoDbChunkStore)
    chunks = d.services.adapters.chunks.list_chunks("t", "c", "My Document")
    assert [c.index for c in chunks] == list(range(document.chunk_count))
    assert {i["sk"]["S"]: i["text"]["S"] for i in d.chunk_items("c", "My Document")} == {
        c.chunk_id: c.text for c in chunks
    }
    assert d.services.adapters.search_index.chunk_ids("hash:384", "t", "c") == {c.chunk_id for c in chunks}
    assert d.receive() == []


def test_content_written_through_the_catalog_lands_in_s3_and_is_indexed(deployment):
    d = deployment
    # Given a document PUT with text content through the catalog
    document, created = d.services.catalog.put_document("t", "c", "d1", DocumentInput(content=TEXT, language="en"))
    assert created and document.status.value == "pending"
    # Then the content is an object in the bucket
    assert d.s3.get_object(Bucket=BUCKET, Key=document.source)["Body"].read() == TEXT.encode()
    # When the notifications are delivered
    deliveries = d.drain()
    # Then nothing failed and the document is indexed and searchable
    assert all(not delivery.failed_ids for delivery in deliveries)
    assert d.document("d1").status.value == "indexed"
    chunks = d.services.adapters.chunks.list_chunks("t", "c", "d1")
    query = d.services.embeddings.embed_query("hash:384", chunks[2].text)
    hits = d.services.adapters.search_index.knn_search("hash:384", "t", ["c"], query, 1)
    assert hits[0].chunk_id == chunks[2].chunk_id
    found = d.services.adapters.chunks.get_chunks("t", [ChunkRef("c", "d1", hits[0].chunk_id)])
    assert found[hits[0].chunk_id].text == chunks[2].text


def test_presigned_upload_to_s3_is_indexed(deployment):
    d = deployment
    # Given an upload ticket from the catalog (an S3 presigned PUT)
    content = ("# Uploaded\n\n" + TEXT).encode()
    ticket = d.services.catalog.prepare_upload("t", "c", "up load", "notes.md", None, size=len(content))
    assert ticket.method == "PUT" and ticket.headers["Content-Type"] == "text/markdown"
    assert ticket.headers["Content-Length"] == str(len(content))
    assert 890 <= (ticket.expires_at - datetime.now(timezone.utc)).total_seconds() <= 900
    # When the file is PUT to the URL with the ticket's headers (moto answers for S3) and the queue is drained
    response = requests.put(ticket.url, data=content, headers=ticket.headers, timeout=5)
    assert response.status_code == 200
    deliveries = d.drain()
    # Then the upload's notification indexed the document the ticket created
    assert all(not delivery.failed_ids for delivery in deliveries)
    document = d.document("up load")
    assert document.status.value == "indexed" and document.source == ticket.document.source
    assert d.s3.head_object(Bucket=BUCKET, Key=document.source)["ServerSideEncryption"] == "AES256"


def test_a_presigned_upload_replayed_with_other_bytes_gets_412_and_is_not_ingested(deployment):
    d = deployment
    # Given an upload ticket whose upload S3 stored and the ingest indexed
    content = ("# Uploaded\n\n" + TEXT).encode()
    ticket = d.services.catalog.prepare_upload("t", "c", "once", "notes.md", None, size=len(content))
    assert ticket.headers["If-None-Match"] == "*"
    assert requests.put(ticket.url, data=content, headers=ticket.headers, timeout=5).status_code == 200
    assert len(d.drain()) == 1
    indexed = d.document("once")
    assert indexed.status.value == "indexed" and indexed.version == ticket.document.version + 1
    # When the URL is PUT 19 more times, each with other bytes of the signed length
    replays = [
        requests.put(
            ticket.url, data=content.replace(b"Uploaded", f"Forged{i:02d}".encode()), headers=ticket.headers, timeout=5
        )
        for i in range(19)
    ]
    # Then S3 refuses every one (412), notifies nothing, and the document, its chunks and its object are unchanged
    assert [r.status_code for r in replays] == [412] * 19
    assert d.drain() == []
    assert d.document("once") == indexed
    assert d.services.catalog.blobs.get_blob(indexed.source) == content
    assert len(d.s3.list_object_versions(Bucket=BUCKET, Prefix=indexed.source)["Versions"]) == 1


def test_object_deleted_in_s3_removes_document_chunks_and_vectors(deployment):
    d = deployment
    # Given an indexed file
    key = blob_key("t", "c", "My Document", "notes.md")
    d.s3.put_object(Bucket=BUCKET, Key=key, Body=TEXT.encode())
    d.drain()
    assert d.document("My Document").status.value == "indexed"
    # When every version of the object is deleted in S3 (moto notifies only when the last version goes; a
    # delete marker in a versioned bucket sends ObjectRemoved:DeleteMarkerCreated on AWS)
    versions = d.s3.list_object_versions(Bucket=BUCKET, Prefix=key)["Versions"]
    for version in versions:
        d.s3.delete_object(Bucket=BUCKET, Key=key, VersionId=version["VersionId"])
    # And the ObjectRemoved notification is delivered
    messages = d.receive()
    assert [json.loads(m["Body"])["Records"][0]["eventName"] for m in messages] == ["ObjectRemoved:Delete"]
    assert not d.handle(messages).failed_ids
    # Then the document, its chunk texts and its vectors are gone
    assert d.document("My Document") is None
    assert d.chunk_items("c", "My Document") == []
    assert d.services.adapters.search_index.chunk_ids("hash:384", "t", "c") == set()


def test_openai_outage_retries_dead_letters_then_redrive_indexes(openai_deployment, openai_stub):
    d = openai_deployment
    attempts_per_call = 6  # the embedder's first try and its 5 retries
    server_error = (500, {}, error_body("The server had an error", None, "server_error"))
    openai_stub.script(*[server_error] * (3 * attempts_per_call))
    # Given a document written while OpenAI answers 500 to everything
    d.services.catalog.put_document("t", "c", "d1", DocumentInput(content=TEXT))
    # When the queue is drained
    deliveries = d.drain()
    # Then the first batch (S3's test event and the document's event) reports only the document's message failed
    created = next(m for m in deliveries[0].messages if "Records" in json.loads(m["Body"]))
    assert deliveries[0].response == {"batchItemFailures": [{"itemIdentifier": created["MessageId"]}]}
    # And it was received three times, each time with the embedder's full retries, then dead-lettered
    assert [delivery.failed_ids for delivery in deliveries] == [{created["MessageId"]}] * 3
    assert len(openai_stub.requests) == 3 * attempts_per_call
    assert len(d.sleeps) == 3 * (attempts_per_call - 1)
    assert d.dead_letters() == 1 and d.receive() == []
    # And the document says why, in one line, without the key
    document = d.document("d1")
    assert document.status.value == "failed" and document.failure_retryable
    assert document.failure_reason.startswith("EmbeddingFailed: OpenAI embeddings unavailable after 6 attempts")
    assert "HTTP 500" in document.failure_reason and OPENAI_KEY not in document.failure_reason
    # When OpenAI is back and the dead letter is redriven
    assert d.redrive() == 1
    deliveries = d.drain()
    # Then the document is indexed with one more embedding request, vectors in the OpenAI model's index
    assert [delivery.failed_ids for delivery in deliveries] == [set()]
    assert len(openai_stub.requests) == 3 * attempts_per_call + 1
    document = d.document("d1")
    assert document.status.value == "indexed" and document.indexed_model == OPENAI_MODEL
    chunk_ids = {c.chunk_id for c in d.services.adapters.chunks.list_chunks("t", "c", "d1")}
    assert d.services.adapters.search_index.chunk_ids(OPENAI_MODEL, "t", "c") == chunk_ids
    assert d.dead_letters() == 0


def test_an_unknown_model_fails_only_its_own_record_of_the_batch(deployment):
    d = deployment
    # Given a tenant whose collection names a model the registry does not know (stored before the API checked)
    d.services.adapters.metadata.put_collection("x", Collection(id="old", embedding_model="local:foo"), create=True)
    d.services.catalog.put_document("x", "old", "bad", DocumentInput(content="Text for an unknown model."))
    # And another tenant's valid document, its event in the same SQS batch
    d.services.catalog.put_document("t", "c", "good", DocumentInput(content=TEXT))
    # When the batch is delivered
    deliveries = d.drain()
    first = deliveries[0]
    bad = next(m for m in first.messages if "%2Fx%2F" in m["Body"])
    assert any("%2Ft%2F" in m["Body"] for m in first.messages)
    # Then only the bad record is reported failed (three receives, then the DLQ); the valid one is indexed
    assert first.response == {"batchItemFailures": [{"itemIdentifier": bad["MessageId"]}]}
    assert [delivery.failed_ids for delivery in deliveries] == [{bad["MessageId"]}] * 3
    assert d.dead_letters() == 1
    assert d.document("good").status.value == "indexed"
    failed = d.services.adapters.metadata.get_document("x", "old", "bad")
    assert failed.status.value == "failed" and failed.failure_retryable
    assert failed.failure_reason.startswith("UnknownModel: unknown embedding model 'local:foo'")


def test_duplicate_delivery_and_repeated_text_make_no_embedding_calls(openai_deployment, openai_stub):
    d = openai_deployment
    # Given a document indexed with one embedding request
    d.services.catalog.put_document("t", "c", "d1", DocumentInput(content=TEXT))
    created = [m for m in d.receive() if "Records" in json.loads(m["Body"])]
    d.handle(created)
    d.drain()
    assert d.document("d1").status.value == "indexed" and len(openai_stub.requests) == 1
    version = d.document("d1").version
    # When S3's notification is delivered again
    d.sqs.send_message(QueueUrl=d.queue_url, MessageBody=created[0]["Body"])
    deliveries = d.drain()
    # Then it succeeds without any embedding request and without changing the document
    assert [delivery.failed_ids for delivery in deliveries] == [set()]
    assert len(openai_stub.requests) == 1
    assert d.document("d1").status.value == "indexed" and d.document("d1").version == version
    # And the same text in another document is served from the DynamoDB embedding cache
    d.services.catalog.put_document("t", "c", "d2", DocumentInput(content=TEXT))
    d.drain()
    assert d.document("d2").status.value == "indexed" and len(openai_stub.requests) == 1
    cached = d.dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": embedding_pk("t", OPENAI_MODEL)}},
    )["Items"]
    assert len(cached) == d.document("d1").chunk_count
    assert len(cached[0]["vector"]["B"]) == 1536 * 4


def test_throttled_then_successful_embedding_indexes_with_two_requests(openai_deployment, openai_stub):
    d = openai_deployment
    # Given OpenAI answering 429 with Retry-After: 1, then normally
    openai_stub.script((429, {"Retry-After": "1"}, error_body("Rate limit reached", "rate_limit_exceeded")))
    d.services.catalog.put_document("t", "c", "d1", DocumentInput(content=TEXT))
    # When the queue is drained
    deliveries = d.drain()
    # Then the document is indexed after exactly two requests, having waited what the server asked
    assert all(not delivery.failed_ids for delivery in deliveries)
    assert d.document("d1").status.value == "indexed"
    assert len(openai_stub.requests) == 2
    assert d.sleeps == [1.0]


class _RecordingOpenSearch(BaseHTTPRequestHandler):
    """Answers every request with an empty JSON object and remembers its headers."""

    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def test_aws_wiring_signs_search_requests_with_sigv4(monkeypatch):
    # Given the AWS settings with an OpenSearch endpoint (a recording server on 127.0.0.1)
    fake_aws_env(monkeypatch)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RecordingOpenSearch)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    _RecordingOpenSearch.seen = []
    try:
        for name, value in {
            "KINDEX_BACKEND": "aws",
            "KINDEX_TABLE_NAME": TABLE,
            "KINDEX_BUCKET_NAME": BUCKET,
            "KINDEX_OPENSEARCH_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
        }.items():
            monkeypatch.setenv(name, value)
        reset_process_caches()
        opensearch_client.cache_clear()
        # When the wired search index makes a request
        assert container().adapters.search_index.chunk_ids("hash:384", "t", "c") == set()
        # Then it was signed with SigV4 for the `es` service in the process's region, with the session token
        (headers,) = _RecordingOpenSearch.seen
        assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
        assert f"/{REGION}/es/aws4_request" in headers["authorization"]
        assert headers["x-amz-security-token"] == "testing" and "x-amz-content-sha256" in headers
    finally:
        server.shutdown()
        server.server_close()
        reset_process_caches()
        opensearch_client.cache_clear()
    # And a bare domain host means HTTPS on 443
    options = build_client_options("search-kindex-abc.eu-west-1.es.amazonaws.com")
    assert options["hosts"] == [{"host": "search-kindex-abc.eu-west-1.es.amazonaws.com", "port": 443}]
    assert options["use_ssl"] and options["verify_certs"]
