"""Local mode's reindex work queue: reindex tasks travel on the same durable queue as the ingest's notifications
(the local worker hands each message to the function its body is for), one lane per tenant, one task per
collection in flight at a time."""

from __future__ import annotations

from collections.abc import Sequence

from kindex.domain.ports import MessageQueue
from kindex.domain.reindex import ReindexTask


class LocalReindexQueue:
    """Implements ReindexQueue over the durable local queue."""

    def __init__(self, queue: MessageQueue):
        self.queue = queue

    def send(self, tasks: Sequence[ReindexTask]) -> None:
        for task in tasks:
            self.queue.send(task.encode(), lane=task.lane, group=task.group)
