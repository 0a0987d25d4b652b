"""Ingest function: SQS messages carrying S3 notifications -> index or delete documents, with partial batch failures."""

from __future__ import annotations

import json
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from kindex.domain.keys import decode_s3_event_key
from kindex.wiring import container

logger = Logger(service="kindex-ingest")
tracer = Tracer(service="kindex-ingest")  # X-Ray segments; only in the asynchronous functions (decisions.md)
metrics = Metrics(namespace="kindex")  # shares its metric set with the services' recorder; flushed per invocation
# An invocation without a business event (a 404, say) has nothing to publish; that is not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")
# A batch where every record failed still reports them as item failures, rather than as a Lambda error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def record_handler(record: SQSRecord, service=None) -> None:
    """One SQS message = one S3 notification (possibly several records). Raising fails only this message."""
    service = service or container().ingest
    notification = json.loads(record.body)
    if notification.get("Event") == "s3:TestEvent":
        return
    for s3_record in notification.get("Records", []):
        key = decode_s3_event_key(s3_record["s3"]["object"]["key"])
        if s3_record["eventName"].startswith("ObjectRemoved"):
            service.object_removed(key)
        else:
            service.object_created(key, object_size(s3_record))


def object_size(s3_record: dict[str, Any]) -> int | None:
    """The object size S3 reports in the notification (checked against the file limit before any GET), or None
    when the record has none a careful reader would trust."""
    size = s3_record.get("s3", {}).get("object", {}).get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def created_objects(event: dict[str, Any]) -> dict[str, int | None]:
    """The objects this batch creates, with their notified sizes (to embed all their chunks together before the
    per-record pass)."""
    found: dict[str, int | None] = {}
    for record in event.get("Records", []):
        try:
            notification = json.loads(record["body"])
        except (KeyError, TypeError, ValueError):
            continue  # the per-record pass reports it
        for s3_record in notification.get("Records", []) if isinstance(notification, dict) else []:
            if str(s3_record.get("eventName", "")).startswith("ObjectCreated"):
                found[decode_s3_event_key(s3_record["s3"]["object"]["key"])] = object_size(s3_record)
    return found


@tracer.capture_lambda_handler
@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().ingest
    created = created_objects(event)
    service.prefetch(list(created), created)
    try:
        return process_partial_response(event=event, record_handler=record_handler, processor=processor,
                                        context=context)
    finally:
        service.end_batch()
