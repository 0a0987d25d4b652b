"""Reindex function: invoked by the EventBridge schedule; one pass over every tenant's collections."""

from __future__ import annotations

from typing import Any

from kindex import observability
from kindex.compose import container
from kindex.settings import ReindexSettings, load_settings

SETTINGS = load_settings(model=ReindexSettings)  # at cold start: a misconfigured function fails here, saying why
OBSERVABILITY = observability.for_function("reindex", SETTINGS, traced=True)


@OBSERVABILITY.instrument
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().reindex
    summary = service.run_scheduled()
    summary["switched_late"] = service.finish_switches()
    return summary
