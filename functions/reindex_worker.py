"""Reindex worker: the reindex queue's consumer. One task per message; a failed message is reported alone (the
queue retries it, then dead-letters it) without failing the others of its batch."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse

SETTINGS = load_settings(model=ReindexSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("reindexworker", SETTINGS, traced=True)


def record_handler(record: SQSRecord, service=None) -> None:
    """One message = one task. A body that is not a task raises (ValueError) like any failure of its work."""
    (service or container().reindex_worker).handle(decode_task(record.body))


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, service=None) -> PartialItemFailureResponse:
    service = service or container().reindex_worker
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return process_partial_response(
        event=event, record_handler=partial(record_handler, service=service), processor=processor, context=context
    )
