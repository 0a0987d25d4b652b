"""Fair ingest on AWS under moto: every message on the ingest queue carries its tenant as MessageGroupId (what makes
an SQS standard queue a fair queue). moto accepts MessageGroupId on a standard queue and returns it on receive, but
it does not reorder deliveries as SQS fair queues do; the delivery policy's bound is measured in
tests/unit/test_fair_queue_model.py. Here: the groups the real adapters set, through the real router function."""

from __future__ import annotations

import json

import pytest

from kindex.adapters.aws.sqs_trigger import SqsIngestTrigger
from kindex.domain.keys import blob_key, decode_s3_event_key, ingest_group
from tests.support.aws import BUCKET
from tests.support.aws_deployment import aws_stack

pytestmark = pytest.mark.integration


def groups_on_ingest_queue(stack) -> list[tuple[str, str | None]]:
    """(object key, MessageGroupId) of every message on the ingest queue, after the router moved the arrivals."""
    stack.route()
    found = []
    while messages := stack.sqs.receive_message(
        QueueUrl=stack.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], VisibilityTimeout=30
    ).get("Messages", []):
        for message in messages:
            records = json.loads(message["Body"]).get("Records", [])
            key = decode_s3_event_key(records[0]["s3"]["object"]["key"]) if records else ""
            found.append((key, message["Attributes"].get("MessageGroupId")))
    return found


def test_uploads_of_two_tenants_with_the_same_ids_reach_the_ingest_queue_in_their_own_groups(monkeypatch):
    with aws_stack(monkeypatch) as stack:
        # Given two tenants writing documents with the same collection and document ids straight to the bucket
        for tenant in ("acme", "globex"):
            for n in range(12):
                stack.s3.put_object(Bucket=BUCKET, Key=blob_key(tenant, "c1", f"d{n}", "a.md"), Body=b"# hi\n")
        # When S3's notifications are routed
        found = groups_on_ingest_queue(stack)
        # Then every notification is on the ingest queue once, in its own tenant's group and no other's
        assert len(found) == 24
        assert sorted(group for _, group in found) == ["acme"] * 12 + ["globex"] * 12
        assert all(key.startswith(f"tenants/{group}/") for key, group in found)
        # And nothing stayed behind on the arrivals queue
        assert stack.route() == 0


def test_the_reindex_trigger_sends_in_the_tenants_group_too(monkeypatch):
    with aws_stack(monkeypatch) as stack:
        # Given re-sent documents of two tenants (the reindex's and the API's path to the ingest queue)
        keys = [blob_key("acme", "c", f"d{n}", "a.md") for n in range(11)] + [blob_key("é t/x", "c", "d", "a.md")]
        SqsIngestTrigger(stack.queue_url, BUCKET, client=stack.sqs).trigger(keys)
        # Then each is in its tenant's group; an id that needs encoding still maps to one valid group id
        found = groups_on_ingest_queue(stack)
        assert [group for _, group in found] == ["acme"] * 11 + [ingest_group(keys[-1])]
        assert ingest_group(keys[-1]) == "%C3%A9%20t%2Fx"


def test_a_body_that_is_no_notification_is_forwarded_without_a_group_and_fails_alone_in_ingest(monkeypatch):
    with aws_stack(monkeypatch) as stack:
        # Given a message on the arrivals queue that is no S3 notification, beside a real upload
        stack.sqs.send_message(QueueUrl=stack.arrivals[0], MessageBody="not json")
        stack.s3.put_object(Bucket=BUCKET, Key=blob_key("acme", "c1", "d1", "a.md"), Body=b"# hi\n")
        # When the router runs, then both reach the ingest queue: the malformed one without a group
        stack.route()
        messages = stack.receive()
        groups = {m["Body"]: m["Attributes"].get("MessageGroupId") for m in messages}
        assert groups.pop("not json") is None and list(groups.values()) == ["acme"]
        # And the ingest function fails only the malformed one (retried, then dead-lettered as before)
        [failed] = stack.handle(messages)
        assert [m["Body"] for m in messages if m["MessageId"] == failed] == ["not json"]
