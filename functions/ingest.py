"""Ingest function: SQS messages carrying S3 notifications -> index or delete documents, with partial batch failures."""

from __future__ import annotations

import json
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from kindex.domain.keys import decode_s3_event_key
from kindex.wiring import container

logger = Logger(service="kindex-ingest")
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
            service.object_created(key)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
