"""Reindex functions. `handler`: the planner, invoked by the EventBridge schedule; it sends one bounded task per
tenant and per collection to the reindex queue. `worker`: the reindex queue's consumer; one task per message, a
failed message reported alone (the queue retries it, then dead-letters it) without failing the others."""

from __future__ import annotations

from functools import partial
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from kindex import observability
from kindex.compose import container
from kindex.domain.reindex import decode_task
from kindex.settings import ReindexSettings, load_settings

SETTINGS = load_settings(model=ReindexSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("reindex", SETTINGS, traced=True)


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().reindex
    return service.plan()


def record_handler(record: SQSRecord, service=None) -> None:
    """One message = one task. A body that is not a task raises (ValueError) like any failure of its work."""
    (service or container().reindex).handle(decode_task(record.body))


@OBSERVABILITY.instrument
def worker(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().reindex
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return process_partial_response(event=event, record_handler=partial(record_handler, service=service),
                                    processor=processor, context=context)
