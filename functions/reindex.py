"""Reindex planner: invoked by the EventBridge schedule; sends one bounded task per tenant and per collection to
the reindex queue (the reindex worker function does them)."""

from __future__ import annotations

from typing import Any

from kindex import observability
from kindex.compose import container
from kindex.settings import ReindexPlannerSettings, load_settings

SETTINGS = load_settings(model=ReindexPlannerSettings)  # at cold start: a misconfigured function fails here
OBSERVABILITY = observability.for_function("reindex", SETTINGS, traced=True)


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().reindex_planner
    return service.plan()
