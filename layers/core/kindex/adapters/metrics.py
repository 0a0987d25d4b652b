"""Metrics: CloudWatch EMF through Powertools on AWS, a debug log line locally."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


class PowertoolsMetrics:
    """Adds to the Powertools metric set; the function's `@metrics.log_metrics` flushes it as EMF."""

    def __init__(self, namespace: str):
        from aws_lambda_powertools import Metrics

        self._metrics = Metrics(namespace=namespace)

    def count(self, name: str, value: float = 1) -> None:
        from aws_lambda_powertools.metrics import MetricUnit

        self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


class LogMetrics:
    """Local mode: metrics are log records (no CloudWatch), visible with debug logging."""

    def count(self, name: str, value: float = 1) -> None:
        logger.debug("metric", extra={"metric": name, "value": value})
