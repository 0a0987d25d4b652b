"""Ingest function: SQS messages carrying S3 notifications -> index or delete documents, with partial batch failures.

The handler parses the event into records, runs them as one `IngestRun` and returns the records to retry."""

from __future__ import annotations

import json
from typing import Any

from kindex import observability
from kindex.app.ingest_run import IngestRecord, IngestRun, ObjectEvent
from kindex.compose import container
from kindex.domain.keys import decode_s3_event_key
from kindex.settings import IngestSettings, load_settings

SETTINGS = load_settings(model=IngestSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("ingest", SETTINGS, traced=True)


def notification_events(body: str) -> tuple[ObjectEvent, ...]:
    """The object events of a message body; none for S3's test event. Raises on a body that is not an S3
    notification."""
    notification = json.loads(body)
    if notification.get("Event") == "s3:TestEvent":
        return ()
    return tuple(
        ObjectEvent(
            s3_record["eventName"], decode_s3_event_key(s3_record["s3"]["object"]["key"]), object_size(s3_record)
        )
        for s3_record in notification.get("Records", [])
    )


def object_size(s3_record: dict[str, Any]) -> int | None:
    """The object size S3 reports in the notification (checked against the file limit before any GET), or None
    when the record has none a careful reader would trust."""
    size = s3_record.get("s3", {}).get("object", {}).get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def ingest_record(record: dict[str, Any]) -> IngestRecord:
    """One SQS record of the event; a body that is not an S3 notification is a malformed record (it fails alone)."""
    try:
        return IngestRecord(record["messageId"], notification_events(record["body"]))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return IngestRecord(str(record.get("messageId", "")), malformed=type(error).__name__)


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    records = [ingest_record(record) for record in event.get("Records", [])]
    failed = IngestRun(service or container().ingest).run(records)
    return {"batchItemFailures": [{"itemIdentifier": record_id} for record_id in failed]}
