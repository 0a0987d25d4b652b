"""Carries reindex tasks to the reindex worker on AWS: one SQS message per task, ten per SendMessageBatch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kindex.adapters.aws.sqs_trigger import BATCH, sqs_client
from kindex.domain.errors import DependencyFailed
from kindex.domain.reindex import ReindexTask


def build_task_entries(tasks: Sequence[ReindexTask]) -> list[dict[str, Any]]:
    """SendMessageBatch entries, one bounded JSON body per task (ReindexTask.encode refuses an oversized one)."""
    return [{"Id": str(i), "MessageBody": task.encode()} for i, task in enumerate(tasks)]


class SqsReindexQueue:
    """Implements ReindexQueue for AWS: the reindex work queue, read by the reindex worker function."""

    def __init__(self, queue_url: str | None, *, client: Any = None):
        self.queue_url = queue_url
        self._client = client

    @property
    def client(self) -> Any:
        return self._client or sqs_client()

    def send(self, tasks: Sequence[ReindexTask]) -> None:
        if not tasks:
            return
        if not self.queue_url:
            raise DependencyFailed("KINDEX_REINDEX_QUEUE_URL is not set")
        from botocore.exceptions import BotoCoreError, ClientError

        for start in range(0, len(tasks), BATCH):
            entries = build_task_entries(tasks[start : start + BATCH])
            try:
                response = self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (BotoCoreError, ClientError) as error:
                raise DependencyFailed(f"could not enqueue reindex work: {type(error).__name__}") from error
            if response.get("Failed"):
                raise DependencyFailed(f"could not enqueue {len(response['Failed'])} reindex task(s)")
