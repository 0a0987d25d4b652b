"""The functions' one observability set-up: a Powertools Logger, Metrics (EMF) and, where it pays, a Tracer; stdlib
logs of kindex's own modules go through the function's JSON logger on AWS; one decorator instruments a handler."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics

from kindex.settings import Settings

# An invocation without a business event (a 404, say) has nothing to publish; that is not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")

# A Lambda handler answers a JSON object: a dict, or a TypedDict such as Powertools' partial batch response.
Handler = TypeVar("Handler", bound=Callable[..., Mapping[str, Any]])


@dataclass
class Observability:
    logger: Logger
    metrics: Metrics
    tracer: Any = None  # a Powertools Tracer, in the asynchronous functions only (decisions.md)

    def instrument(self, handler: Handler) -> Handler:
        """The handler with its Lambda context in every log line (state cleared per invocation), its metrics
        flushed per invocation, and an X-Ray segment when traced."""
        wrapped: Any = self.logger.inject_lambda_context(clear_state=True)(handler)  # the handler's own signature
        wrapped = self.metrics.log_metrics(wrapped)
        if self.tracer is not None:
            wrapped = self.tracer.capture_lambda_handler(wrapped)
        return wrapped


def for_function(name: str, settings: Settings, *, traced: bool = False) -> Observability:
    """The observability of function `kindex-<name>`. On AWS the modules' stdlib loggers (`kindex.*`, which log
    with `extra=` key/values) are given the function's JSON handler, so every line is structured and carries the
    request id; locally `kindex serve` keeps its own logging set-up."""
    logger = Logger(service=f"kindex-{name}")
    # One metric set per process: the services' recorder (PowertoolsMetrics) adds to it, the decorator flushes it.
    metrics = Metrics(namespace="kindex")
    tracer = None
    if traced:
        from aws_lambda_powertools import Tracer

        tracer = Tracer(service=f"kindex-{name}")
    if settings.backend == "aws":
        from aws_lambda_powertools.logging.utils import (
            copy_config_to_registered_loggers,
        )

        logging.getLogger("kindex")  # registered now, so that its children (created later, lazily) inherit
        copy_config_to_registered_loggers(source_logger=logger, include={"kindex"})
    return Observability(logger, metrics, tracer)
