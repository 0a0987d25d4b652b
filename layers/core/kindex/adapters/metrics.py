"""Metrics: CloudWatch EMF through Powertools on AWS, a debug log line locally. Usage (`meter`) is one record per
event with the tenant as a property: an EMF line of its own on AWS, an info log line locally."""

from __future__ import annotations

import logging

from kindex.domain.metering import QUANTITY, TENANT, USAGE

logger = logging.getLogger(__name__)


class PowertoolsMetrics:
    """Adds to the Powertools metric set; the function's `@metrics.log_metrics` flushes it as EMF."""

    def __init__(self, namespace: str):
        from aws_lambda_powertools import Metrics

        self._metrics = Metrics(namespace=namespace)
        self._namespace = namespace

    def count(self, name: str, value: float = 1) -> None:
        from aws_lambda_powertools.metrics import MetricUnit

        self._metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    def meter(self, tenant: str, name: str, value: float = 1) -> None:
        """An EMF record printed now (not the invocation's metric set, which one flush writes for every tenant of
        the invocation): metric `name` without a tenant dimension, and the tenant, event and quantity as
        properties that Logs Insights reads (the metric's own value is a list in EMF)."""
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace=self._namespace) as record:
            record.add_metadata(key=TENANT, value=tenant)
            record.add_metadata(key=USAGE, value=name)
            record.add_metadata(key=QUANTITY, value=value)


class LogMetrics:
    """Local mode: metrics are log records (no CloudWatch), visible with debug logging."""

    def count(self, name: str, value: float = 1) -> None:
        logger.debug("metric", extra={"metric": name, "value": value})

    def meter(self, tenant: str, name: str, value: float = 1) -> None:
        # Info, not debug: a local operator bills from these lines as the AWS one does from the EMF records.
        logger.info("usage", extra={TENANT: tenant, USAGE: name, QUANTITY: value})
