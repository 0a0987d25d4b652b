"""SqsIngestTrigger: S3-shaped created-events, ten per SendMessageBatch, keys encoded as S3 encodes them, and
every SQS failure as DependencyFailed. The client is a real botocore SQS client behind a Stubber: requests are
validated against the SQS API model and nothing is sent."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from functions import ingest as ingest_function
from kindex.adapters.aws.sqs_trigger import SqsIngestTrigger, build_entries
from kindex.domain.errors import DependencyFailed
from kindex.domain.keys import blob_key, decode_s3_event_key

pytestmark = pytest.mark.unit

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/kindex-ingest"
BUCKET = "kindex-documents"
AWKWARD_KEYS = [
    blob_key("t", "c", "My Document", "notes.md"),
    blob_key("t", "c", "a+b=c&d", "50% off?.txt"),
    blob_key("日本", "collé", "doc#1", "ünï cödé ✓.pdf"),
    "tenants/t/collections/c/documents/raw space/with+plus%41.txt",  # not built by blob_key: written to S3 by hand
]


@pytest.fixture
def sqs() -> Iterator[tuple[object, Stubber, list[dict]]]:
    """A stubbed SQS client and the SendMessageBatch requests it received."""
    client = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    sent: list[dict] = []
    client.meta.events.register("before-parameter-build.sqs.SendMessageBatch", lambda params, **_: sent.append(params))
    with Stubber(client) as stub:
        yield client, stub, sent


def ok(entries_count: int) -> dict:
    return {
        "Successful": [
            {"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "0" * 32} for i in range(entries_count)
        ],
        "Failed": [],
    }


def keys_of(requests: list[dict]) -> list[str]:
    """The keys the ingest function will read from the sent bodies (as `functions.ingest` decodes them)."""
    return [
        decode_s3_event_key(json.loads(entry["MessageBody"])["Records"][0]["s3"]["object"]["key"])
        for request in requests
        for entry in request["Entries"]
    ]


def test_sends_ten_per_batch_in_order(sqs):
    client, stub, sent = sqs
    # Given 23 keys
    keys = [blob_key("t", "c", f"d{i:02d}", "f.txt") for i in range(23)]
    for size in (10, 10, 3):
        stub.add_response("send_message_batch", ok(size))
    # When triggered
    SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).trigger(keys)
    # Then three batches of 10, 10 and 3 went to the queue, entry ids unique within each, keys in order
    stub.assert_no_pending_responses()
    assert [len(r["Entries"]) for r in sent] == [10, 10, 3]
    assert all(r["QueueUrl"] == QUEUE_URL for r in sent)
    assert all(len({e["Id"] for e in r["Entries"]}) == len(r["Entries"]) for r in sent)
    assert keys_of(sent) == keys


def test_bodies_look_like_s3_object_created_notifications(sqs):
    client, stub, sent = sqs
    stub.add_response("send_message_batch", ok(1))
    SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).trigger([AWKWARD_KEYS[0]])
    (record,) = json.loads(sent[0]["Entries"][0]["MessageBody"])["Records"]
    assert record["eventSource"] == "aws:s3" and record["eventName"] == "ObjectCreated:Put"
    assert record["s3"]["bucket"]["name"] == BUCKET
    assert record["eventTime"].endswith("Z") and record["s3"]["object"]["sequencer"]


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_keys_are_form_encoded_as_s3_does_and_decode_back(key):
    # Given a key with spaces, '+', '%', '/', '#' or non-ASCII characters
    (entry,) = build_entries(BUCKET, [key])
    encoded = json.loads(entry["MessageBody"])["Records"][0]["s3"]["object"]["key"]
    # Then the body carries it as S3 does: form-encoded, '/' as %2F, a space as '+', a '+' as %2B
    assert "/" not in encoded and " " not in encoded and encoded.isascii()
    assert ("+" in encoded) == (" " in key) and ("%2B" in encoded) == ("+" in key)
    # And decoding it once, as the ingest function does, gives the key back
    assert decode_s3_event_key(encoded) == key


def test_ingest_function_reads_the_keys_back_from_the_messages(sqs):
    client, stub, sent = sqs
    stub.add_response("send_message_batch", ok(len(AWKWARD_KEYS)))
    SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).trigger(AWKWARD_KEYS)

    # When the ingest function parses each message / Then it asks to index exactly those keys
    records = [
        ingest_function.ingest_record({"messageId": entry["Id"], "body": entry["MessageBody"]})
        for entry in sent[0]["Entries"]
    ]
    assert [event.key for record in records for event in record.events] == AWKWARD_KEYS
    assert all(event.created for record in records for event in record.events)


def test_no_keys_sends_nothing(sqs):
    client, stub, sent = sqs
    SqsIngestTrigger(None, BUCKET, client=client).trigger([])
    assert sent == []


def test_missing_queue_url_is_a_dependency_failure(sqs):
    client, _, sent = sqs
    with pytest.raises(DependencyFailed, match="KINDEX_INGEST_QUEUE_URL"):
        SqsIngestTrigger(None, BUCKET, client=client).trigger(["tenants/t/collections/c/documents/d/f.txt"])
    assert sent == []


def test_client_error_is_a_dependency_failure(sqs):
    client, stub, _ = sqs
    # Given the second batch is refused
    stub.add_response("send_message_batch", ok(10))
    stub.add_client_error(
        "send_message_batch", service_error_code="AWS.SimpleQueueService.NonExistentQueue", http_status_code=400
    )
    keys = [blob_key("t", "c", f"d{i}", "f.txt") for i in range(15)]
    # When triggered / Then DependencyFailed, which names no queue URL or key
    with pytest.raises(DependencyFailed) as raised:
        SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).trigger(keys)
    assert "ClientError" in str(raised.value) and QUEUE_URL not in str(raised.value)


def test_unreachable_sqs_is_a_dependency_failure(sqs, monkeypatch):
    client, _, _ = sqs

    def unreachable(**_):
        raise EndpointConnectionError(endpoint_url=QUEUE_URL)

    monkeypatch.setattr(client, "send_message_batch", unreachable)
    with pytest.raises(DependencyFailed):
        SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).trigger(["tenants/t/collections/c/documents/d/f.txt"])


def test_entries_sqs_reports_failed_are_a_dependency_failure(sqs):
    client, stub, _ = sqs
    # Given SQS accepts the batch call but fails two of its entries (SendMessageBatch answers 200 then)
    stub.add_response(
        "send_message_batch",
        {
            "Successful": [{"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "0" * 32}],
            "Failed": [
                {"Id": "1", "SenderFault": False, "Code": "InternalError"},
                {"Id": "2", "SenderFault": False, "Code": "InternalError"},
            ],
        },
    )
    # When triggered / Then the loss is not silent
    with pytest.raises(DependencyFailed, match="2 ingest message"):
        SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).trigger([f"k{i}" for i in range(3)])


def test_re_sent_events_claim_no_size_so_ingest_checks_the_object_itself():
    """A reindex trigger does not know the object's size: claiming 0 would let ingest skip its size check (HEAD)."""
    from kindex.adapters.local.queue_notifier import QueueNotifier

    [entry] = build_entries("bucket", ["tenants/t/collections/c/documents/d/a.txt"])
    assert "size" not in json.loads(entry["MessageBody"])["Records"][0]["s3"]["object"]
    sent = []
    QueueNotifier(type("Queue", (), {"send": lambda self, body, **_: sent.append(body)})()).trigger(
        ["tenants/t/collections/c/documents/d/a.txt"]
    )
    assert "size" not in json.loads(sent[0])["Records"][0]["s3"]["object"]


def test_forward_keeps_each_body_and_group_and_returns_the_ids_sqs_refused(sqs):
    # Given eleven messages to forward, two of them refused by SQS in the first batch
    client, stub, sent = sqs
    messages = [(f"msg-{n}", f"body {n}", "acme" if n % 2 else None) for n in range(11)]
    refused = {"Successful": [], "Failed": [{"Id": "3", "SenderFault": False, "Code": "InternalError"}]}
    stub.add_response("send_message_batch", refused)
    stub.add_response("send_message_batch", ok(1))
    # When they are forwarded
    failed = SqsIngestTrigger(QUEUE_URL, BUCKET, client=client).forward(messages)
    # Then the refused message is named by its own id (entry ids are positions), to be retried by the caller
    assert failed == ["msg-3"]
    # And each entry carries its body unchanged and its group only when it has one, ten per batch
    entries = [entry for request in sent for entry in request["Entries"]]
    assert [(e["MessageBody"], e.get("MessageGroupId")) for e in entries] == [(b, g) for _, b, g in messages]
    assert [len(request["Entries"]) for request in sent] == [10, 1]


def test_trigger_entries_carry_the_tenant_as_message_group():
    # Given keys of two tenants, then the entries' groups are their tenants (the fair queue's unit of fairness)
    entries = build_entries(BUCKET, [blob_key("acme", "c", "d", "a"), blob_key("globex", "c", "d", "a")])
    assert [e["MessageGroupId"] for e in entries] == ["acme", "globex"]
