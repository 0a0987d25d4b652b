"""Sends ingest work on AWS, ten messages per SendMessageBatch, each in its tenant's message group (the ingest
queue is an SQS fair queue): the reindex's re-sent S3-shaped notifications, and the ingest router's forwarded ones."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import quote_plus

from kindex.adapters.aws import boto
from kindex.domain.errors import DependencyFailed
from kindex.domain.keys import ingest_group

BATCH = 10


@lru_cache(maxsize=3)
def sqs_client(profile: str = boto.BACKGROUND) -> Any:
    import boto3

    return boto3.client("sqs", config=boto.client_config(profile))


def build_entries(bucket: str, keys: Sequence[str]) -> list[dict]:
    """SendMessageBatch entries whose bodies look exactly like S3's ObjectCreated notifications."""
    entries = []
    for i, key in enumerate(keys):
        record = {
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "eventName": "ObjectCreated:Put",
            "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            # No size: a re-sent event does not know it; ingest asks S3 (a HEAD) before any GET.
            "s3": {
                "bucket": {"name": bucket},
                "object": {"key": quote_plus(key, safe=""), "sequencer": f"{time.time_ns():020X}"},
            },
        }
        entries.append(build_entry(str(i), json.dumps({"Records": [record]}), ingest_group(key)))
    return entries


def build_entry(entry_id: str, body: str, group: str | None) -> dict:
    """One SendMessageBatch entry; with a group, SQS counts the message to that tenant (fair queues)."""
    entry = {"Id": entry_id, "MessageBody": body}
    if group is not None:
        entry["MessageGroupId"] = group
    return entry


class SqsIngestTrigger:
    """Implements IngestTrigger and NotificationForwarder for AWS."""

    def __init__(self, queue_url: str | None, bucket: str | None, *, client=None):
        self.queue_url = queue_url
        self.bucket = bucket or ""
        self._client = client

    @property
    def client(self):
        return self._client or boto.shared_client(sqs_client, "the ingest queue")

    def trigger(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        for start in range(0, len(keys), BATCH):
            response = self._send(build_entries(self.bucket, keys[start : start + BATCH]))
            if response.get("Failed"):
                raise DependencyFailed(f"could not enqueue {len(response['Failed'])} ingest message(s)")

    def forward(self, messages: Sequence[tuple[str, str, str | None]]) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(messages), BATCH):
            part = messages[start : start + BATCH]
            # Entry ids are positions: SQS allows only letters, digits, '-' and '_' there, message ids may differ.
            response = self._send([build_entry(str(i), body, group) for i, (_, body, group) in enumerate(part)])
            failed += [part[int(refused["Id"])][0] for refused in response.get("Failed", [])]
        return failed

    def _send(self, entries: list[dict]) -> dict:
        if not self.queue_url:
            raise DependencyFailed("KINDEX_INGEST_QUEUE_URL is not set")
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self.client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except (BotoCoreError, ClientError) as error:
            raise DependencyFailed(f"could not enqueue ingest work: {type(error).__name__}") from error
