"""Local mode's S3 bucket notification: blob writes and deletes become S3-shaped notifications on the durable
SQLite queue (and the reindex job's re-sent events too: the IngestTrigger port)."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import quote_plus

from kindex.domain.keys import document_prefix, parse_blob_key
from kindex.domain.ports import MessageQueue

BUCKET = "kindex-local"


def s3_notification(event_name: str, key: str, size: int | None, sequencer: str) -> dict[str, Any]:
    """The notification S3 would send (keys form-encoded, as S3 does)."""
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": "local",
                "eventName": event_name,
                "eventTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "bucket": {"name": BUCKET, "arn": f"arn:aws:s3:::{BUCKET}"},
                    "object": {
                        "key": quote_plus(key, safe="/"),
                        "sequencer": sequencer,
                        **({} if size is None else {"size": size}),
                    },
                },
            }
        ]
    }


class QueueNotifier:
    """Plays S3's bucket notification: every write and delete of a document blob is sent to the queue."""

    def __init__(self, queue: MessageQueue):
        self.queue = queue

    def trigger(self, keys) -> None:
        """IngestTrigger: re-send the created event of each key (the reindex job's way to request work)."""
        for key in keys:
            # No size: the trigger does not know it, and ingest then asks the store (a HEAD) before reading.
            self("ObjectCreated:Put", key, None)

    def __call__(self, event_name: str, key: str, size: int | None) -> None:
        if not key.startswith("tenants/"):
            return
        sequencer = f"{time.time_ns():020X}"
        parsed = parse_blob_key(key)
        # The tenant is the lane (tenants take turns); the document is the group (one worker at a time per document).
        lane, group = ("", "") if parsed is None else (parsed[0], document_prefix(*parsed[:3]))
        self.queue.send(json.dumps(s3_notification(event_name, key, size, sequencer)), lane=lane, group=group)
