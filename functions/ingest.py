"""Ingest function: SQS messages carrying S3 notifications -> index or delete documents, with partial batch failures."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from kindex import observability
from kindex.compose import container
from kindex.domain.keys import decode_s3_event_key
from kindex.settings import IngestSettings, load_settings

SETTINGS = load_settings(model=IngestSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("ingest", SETTINGS, traced=True)


def notification_events(body: str) -> list[tuple[str, str, int | None]]:
    """(event name, object key, object size) of each S3 record of a message body; none for S3's test event.
    Raises on a body that is not an S3 notification."""
    notification = json.loads(body)
    if notification.get("Event") == "s3:TestEvent":
        return []
    return [(s3_record["eventName"], decode_s3_event_key(s3_record["s3"]["object"]["key"]), object_size(s3_record))
            for s3_record in notification.get("Records", [])]


def record_handler(record: SQSRecord, service=None) -> None:
    """One SQS message = one S3 notification (possibly several records). Raising fails only this message.
    `service` is the invocation's IngestBatch (or anything with its two calls)."""
    service = service or container().ingest
    for event_name, key, size in notification_events(record.body):
        if event_name.startswith("ObjectRemoved"):
            service.object_removed(key)
        else:
            service.object_created(key, size=size)


def object_size(s3_record: dict[str, Any]) -> int | None:
    """The object size S3 reports in the notification (checked against the file limit before any GET), or None
    when the record has none a careful reader would trust."""
    size = s3_record.get("s3", {}).get("object", {}).get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def created_objects(record: dict[str, Any]) -> dict[str, int | None]:
    """The objects one SQS record creates, with their notified sizes; none when its body is malformed (its own
    pass reports that)."""
    try:
        return {key: size for name, key, size in notification_events(record["body"])
                if name.startswith("ObjectCreated")}
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().ingest
    records = event.get("Records", [])
    created = {key: size for record in records for key, size in created_objects(record).items()}
    # The batch's keyword index writes are committed once, after its records (a commit per document cost most of a
    # local ingest); its documents are marked indexed only after that commit, in `finish`.
    batch = service.open_batch(list(created), created, defer_keyword_commits=True)
    # Cheapest records first: a batch's one-line documents are not held back by a large one in the same batch.
    ordered = {**event, "Records": sorted(records, key=lambda record: batch.cost(created_objects(record)))}

    def handle(record: SQSRecord) -> None:
        batch.record_id = record.message_id
        record_handler(record, service=batch)

    # One processor per invocation: it collects the batch's results (local mode runs invocations on several threads).
    # A batch where every record failed still reports them as item failures, rather than as a Lambda error.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    response = process_partial_response(event=ordered, record_handler=handle, processor=processor, context=context)
    return with_failures(response, batch.finish())


def with_failures(response: dict[str, Any], record_ids: set[str | None]) -> dict[str, Any]:
    """The batch response with `record_ids` (records whose work failed after their own pass) among its failures."""
    failures = list(response.get("batchItemFailures", []))
    known = {item["itemIdentifier"] for item in failures}
    failures += [{"itemIdentifier": record_id} for record_id in sorted(r for r in record_ids if r and r not in known)]
    return {**response, "batchItemFailures": failures}
