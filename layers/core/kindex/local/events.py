"""Local mode's S3 -> SQS: blob writes and deletes become S3-shaped notifications on the durable SQLite queue,
and a worker thread feeds them, as SQS batches, to the same ingest handler Lambda runs."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus

from kindex.domain.ports import MessageQueue

logger = logging.getLogger(__name__)

BUCKET = "kindex-local"


def s3_notification(event_name: str, key: str, size: int, sequencer: str) -> dict[str, Any]:
    """The notification S3 would send (keys form-encoded, as S3 does)."""
    return {"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "local", "eventName": event_name,
        "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": BUCKET, "arn": f"arn:aws:s3:::{BUCKET}"},
               "object": {"key": quote_plus(key, safe="/"), "size": size, "sequencer": sequencer}},
    }]}


class QueueNotifier:
    """Plays S3's bucket notification: every write and delete of a document blob is sent to the queue."""

    def __init__(self, queue: MessageQueue):
        self.queue = queue

    def trigger(self, keys) -> None:
        """IngestTrigger: re-send the created event of each key (the reindex job's way to request work)."""
        for key in keys:
            self("ObjectCreated:Put", key, 0)

    def __call__(self, event_name: str, key: str, size: int) -> None:
        if not key.startswith("tenants/"):
            return
        sequencer = f"{time.time_ns():020X}"
        self.queue.send(json.dumps(s3_notification(event_name, key, size, sequencer)))


def sqs_event(messages) -> dict[str, Any]:
    return {"Records": [{
        "messageId": m.message_id, "receiptHandle": m.message_id, "body": m.body, "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:local:000000000000:kindex-ingest", "awsRegion": "local",
        "attributes": {"ApproximateReceiveCount": str(m.receive_count)}, "messageAttributes": {},
    } for m in messages]}


class BackgroundLoop:
    """A daemon thread running `_loop` until `stop()`; the worker and the scheduler are two of them."""

    name = "kindex-background"

    def __init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        raise NotImplementedError


class Worker(BackgroundLoop):
    """Polls the queue and runs the ingest handler; failed messages are retried with backoff and dead-lettered
    after `max_receives` deliveries (the DLQ of local mode; `kindex redrive` brings them back)."""

    name = "kindex-worker"

    def __init__(self, queue: MessageQueue, handler: Callable[[dict, Any], dict], *, batch_size: int = 10,
                 visibility_timeout: float = 300.0, max_receives: int = 3, poll_interval: float = 0.2,
                 backoff: float = 1.0):
        super().__init__()
        self.queue = queue
        self.handler = handler
        self.batch_size = batch_size
        self.visibility_timeout = visibility_timeout
        self.max_receives = max_receives
        self.poll_interval = poll_interval
        self.backoff = backoff

    def run_once(self) -> int:
        """Process one batch; returns how many messages were received."""
        from kindex.local.server import LambdaContext

        messages = self.queue.receive(self.batch_size, self.visibility_timeout)
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
        """Process until no message is visible (used by `kindex ingest` and tests)."""
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
    """Local mode's EventBridge schedule: the reindex pass every `interval` seconds, and a cheap check every few
    seconds that switches collections whose new embedding model is complete."""

    name = "kindex-scheduler"

    def __init__(self, reindex, interval: float, switch_check: float = 5.0):
        super().__init__()
        self.reindex = reindex
        self.interval = interval
        self.switch_check = switch_check

    def _loop(self) -> None:
        next_pass = time.monotonic() + self.interval
        while not self._stop.wait(self.switch_check):
            try:
                if time.monotonic() >= next_pass:
                    self.reindex.run_scheduled()
                    next_pass = time.monotonic() + self.interval
                self.reindex.finish_switches()
            except Exception:
                logger.exception("scheduled reindex failed")
