"""Ingest router: S3's notifications (from the arrivals queue) -> the fair ingest queue, each in its tenant's message
group. S3 cannot set a group, and the EventBridge path can only copy a whole field into one (the object key, never
the tenant inside it), so this function re-sends what S3 delivers; docs/aws.md, "Fair ingest"."""

from __future__ import annotations

from typing import Any

from kindex import observability
from kindex.compose import container
from kindex.settings import RouterSettings, load_settings

SETTINGS = load_settings(model=RouterSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("router", SETTINGS)


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, router=None) -> dict[str, Any]:
    router = router or container().ingest_router
    messages = [(record["messageId"], record["body"]) for record in event.get("Records", [])]
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in router.route(messages)]}
