"""Reindex function: invoked by the EventBridge schedule; one pass over every tenant's collections."""

from __future__ import annotations

import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer

from kindex.compose import container

logger = Logger(service="kindex-reindex")
tracer = Tracer(service="kindex-reindex")  # X-Ray segments; only in the asynchronous functions (decisions.md)
metrics = Metrics(namespace="kindex")  # shares its metric set with the services' recorder; flushed per invocation
# An invocation without a business event (a 404, say) has nothing to publish; that is not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")


@tracer.capture_lambda_handler
@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any, service=None) -> dict[str, Any]:
    service = service or container().reindex
    summary = service.run_scheduled()
    summary["switched_late"] = service.finish_switches()
    return summary
