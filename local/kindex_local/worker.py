"""Local mode's SQS -> Lambda: a pool of worker threads feeds the durable queue's messages (S3-shaped notifications,
sent by `kindex.adapters.local.queue_notifier`), as SQS batches, to the same ingest handler Lambda runs; and the
scheduler that plays EventBridge Scheduler for the reindex pass."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kindex.domain.ports import MessageQueue
from kindex.domain.reindex import is_task_body

logger = logging.getLogger(__name__)

# No local handler is killed by a timeout as on Lambda, so a claim normally lasts until its worker reports back (and a
# crashed process's claims are recovered at the next start). The timeout is only a backstop for a claim whose
# report was lost; it is long enough for the largest document (20,000 chunks at a few chunks per second), since a
# shorter one would hand a document still being indexed to a second thread.
LOCAL_VISIBILITY_TIMEOUT = 3600.0


def sqs_event(messages) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m.message_id,
                "receiptHandle": m.message_id,
                "body": m.body,
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:local:000000000000:kindex-ingest",
                "awsRegion": "local",
                "attributes": {"ApproximateReceiveCount": str(m.receive_count)},
                "messageAttributes": {},
            }
            for m in messages
        ]
    }


def by_message_kind(
    ingest: Callable[[dict, Any], dict], reindex: Callable[[dict, Any], dict]
) -> Callable[[dict, Any], dict]:
    """One handler for the local queue, which carries both S3 notifications and reindex tasks: each record goes to
    the function its body is for (as on AWS, where they arrive on two queues), and the failures are merged."""

    def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
        records = event.get("Records", [])
        tasks = [r for r in records if is_task_body(r.get("body", ""))]
        notifications = [r for r in records if not is_task_body(r.get("body", ""))]
        failures: list[dict[str, str]] = []
        for handler, part in ((reindex, tasks), (ingest, notifications)):
            if part:
                failures += handler({**event, "Records": part}, context).get("batchItemFailures", [])
        return {"batchItemFailures": failures}

    return handle


class BackgroundLoop:
    """`threads` daemon threads running `_loop` until `stop()`; the worker pool and the scheduler are such loops."""

    name = "kindex-background"

    def __init__(self, threads: int = 1):
        self.threads = threads
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._loop, name=f"{self.name}-{i}", daemon=True) for i in range(self.threads)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + 30
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        raise NotImplementedError


class Worker(BackgroundLoop):
    """A pool of `threads` threads, each polling the queue and running the ingest handler on what it receives, as
    Lambda runs concurrent instances of one function. Failed messages are retried with backoff and dead-lettered
    after `max_receives` deliveries (the DLQ of local mode; `kindex redrive` brings them back).

    Fairness: each receive serves the tenant with the fewest batches in flight, and never gives one document to two
    threads; no tenant may hold more than `threads - 1` threads, so one is always free for the other tenants (a
    tenant's thousand-chunk document cannot hold another tenant's one-line document back)."""

    name = "kindex-worker"

    def __init__(
        self,
        queue: MessageQueue,
        handler: Callable[[dict, Any], dict],
        *,
        threads: int = 1,
        batch_size: int = 10,
        visibility_timeout: float = LOCAL_VISIBILITY_TIMEOUT,
        max_receives: int = 3,
        poll_interval: float = 0.2,
        backoff: float = 1.0,
    ):
        super().__init__(threads)
        self.queue = queue
        self.handler = handler
        self.batch_size = batch_size
        self.visibility_timeout = visibility_timeout
        self.max_receives = max_receives
        self.poll_interval = poll_interval
        self.backoff = backoff

    @property
    def lane_limit(self) -> int | None:
        return self.threads - 1 if self.threads > 1 else None

    def run_once(self) -> int:
        """Process one batch; returns how many messages were received."""
        from kindex_local.server import LambdaContext

        messages = self.queue.receive(self.batch_size, self.visibility_timeout, lane_limit=self.lane_limit)
        if not messages:
            return 0
        try:
            response = self.handler(sqs_event(messages), LambdaContext("kindex-ingest"))
            failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        except Exception:
            logger.exception("ingest handler failed for a whole batch")
            failed = {m.message_id for m in messages}
        for message in messages:
            if message.message_id in failed:
                delay = self.backoff * (4 ** (message.receive_count - 1))
                if self.queue.retry_later(message.message_id, delay, self.max_receives):
                    logger.warning("message dead-lettered", extra={"message_id": message.message_id})
            else:
                self.queue.acknowledge(message.message_id)
        return len(messages)

    def drain(self, timeout: float = 60.0) -> None:
        """Process until no message is visible, in the calling thread (used by `kindex ingest` and tests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.run_once():
            pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.run_once():
                    self._stop.wait(self.poll_interval)
            except Exception:
                logger.exception("worker loop error")
                self._stop.wait(1.0)


class Scheduler(BackgroundLoop):
    """Local mode's EventBridge schedule: the reindex planner every `interval` seconds (its tasks go to the queue the
    worker serves), and a cheap check every few seconds that switches collections whose new embedding model is
    complete."""

    name = "kindex-scheduler"

    def __init__(self, planner, switch, interval: float, switch_check: float = 5.0):
        super().__init__()
        self.planner = planner
        self.switch = switch
        self.interval = interval
        self.switch_check = switch_check

    def _loop(self) -> None:
        next_pass = time.monotonic() + self.interval
        while not self._stop.wait(self.switch_check):
            try:
                if time.monotonic() >= next_pass:
                    self.planner.plan()
                    next_pass = time.monotonic() + self.interval
                self.switch.finish_switches()
            except Exception:
                logger.exception("scheduled reindex failed")
