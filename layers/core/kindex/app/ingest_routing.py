"""The ingest router (AWS): S3 delivers its notifications to an arrivals queue, since it cannot give a message a
group; the router re-sends each, body unchanged, to the ingest queue in its tenant's message group. With a group on
every message that queue is an SQS fair queue: when one tenant holds a disproportionate share of the messages in
flight, SQS hands the ingest functions the other tenants' messages first (docs/aws.md, "Fair ingest")."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from kindex.domain.keys import decode_s3_event_key, ingest_group
from kindex.domain.ports import NotificationForwarder

logger = logging.getLogger(__name__)


def notification_group(body: str) -> str | None:
    """The message group of one notification body: the tenant of its first record's key (S3 puts one record in a
    notification, and the ingest router's own trigger does too). None for S3's test event and for a body that is no
    notification: it is forwarded without a group, and the ingest function fails it alone, as before."""
    try:
        records = json.loads(body).get("Records") or []
        return ingest_group(decode_s3_event_key(records[0]["s3"]["object"]["key"]))
    except (ValueError, AttributeError, LookupError, TypeError):
        return None


class IngestRouter:
    """Stateless: one call per invocation, with that invocation's messages."""

    def __init__(self, forwarder: NotificationForwarder):
        self.forwarder = forwarder

    def route(self, messages: Sequence[tuple[str, str]]) -> list[str]:
        """Forward each (message id, body) in its tenant's group; the ids to retry (the queue refused them)."""
        routed = [(message_id, body, notification_group(body)) for message_id, body in messages]
        failed = self.forwarder.forward(routed) if routed else []
        logger.info(
            "routed",
            extra={
                "messages": len(routed),
                "groups": len({group for _, _, group in routed}),
                "ungrouped": sum(group is None for _, _, group in routed),
                "failed": len(failed),
            },
        )
        return failed
