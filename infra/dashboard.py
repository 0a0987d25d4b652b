"""The operator's dashboard: the few numbers that say whether kindex is healthy, on one CloudWatch page."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk import aws_sqs as sqs
from constructs import Construct

PERIOD = Duration.minutes(5)
WIDTH = 8  # three graphs per row (the grid is 24 wide)


class Dashboard(Construct):
    """`kindex-<stage>`: ingest lag (oldest upload's age, backlog, dead letters), query latency p50/p99 (the query
    function's duration and API Gateway's end-to-end latency), errors (API 4XX/5XX, function errors) and OpenSearch
    health (cluster status, free storage, JVM pressure, k-NN breaker) when the stack owns the domain."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        ingest_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        rest_api: apigw.RestApi,
        query: lambda_.IFunction,
        functions: dict[str, lambda_.IFunction],
        domain: opensearch.Domain | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=name, default_interval=Duration.hours(3)
        )
        self.dashboard.add_widgets(
            _graph(
                "Ingest lag: oldest upload waiting (s)",
                [ingest_queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum")],
            ),
            _graph(
                "Ingest backlog and dead letters (messages)",
                [
                    ingest_queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum", label="waiting"
                    ),
                    dead_letter_queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum", label="dead letters"
                    ),
                ],
            ),
            _graph(
                "Query latency (ms)",
                [
                    query.metric_duration(period=PERIOD, statistic="p50", label="query function p50"),
                    query.metric_duration(period=PERIOD, statistic="p99", label="query function p99"),
                    rest_api.metric_latency(period=PERIOD, statistic="p50", label="API p50 (all routes)"),
                    rest_api.metric_latency(period=PERIOD, statistic="p99", label="API p99 (all routes)"),
                ],
            ),
        )
        self.dashboard.add_widgets(
            _graph(
                "API errors (responses)",
                [
                    rest_api.metric_client_error(period=PERIOD, statistic="Sum", label="4XX"),
                    rest_api.metric_server_error(period=PERIOD, statistic="Sum", label="5XX"),
                    rest_api.metric_count(period=PERIOD, statistic="Sum", label="requests"),
                ],
            ),
            _graph(
                "Function errors",
                [fn.metric_errors(period=PERIOD, statistic="Sum", label=name) for name, fn in functions.items()],
            ),
            _graph(
                "Function throttles",
                [fn.metric_throttles(period=PERIOD, statistic="Sum", label=name) for name, fn in functions.items()],
            ),
        )
        if domain is not None:
            self.dashboard.add_widgets(
                _graph(
                    "OpenSearch cluster status (1 = on)",
                    [
                        domain.metric_cluster_status_red(period=PERIOD, statistic="Maximum", label="red"),
                        domain.metric_cluster_status_yellow(period=PERIOD, statistic="Maximum", label="yellow"),
                        domain.metric(
                            "KNNCircuitBreakerTriggered", period=PERIOD, statistic="Maximum", label="k-NN breaker"
                        ),
                    ],
                ),
                _graph(
                    "OpenSearch JVM pressure and CPU (%)",
                    [
                        domain.metric_jvm_memory_pressure(period=PERIOD, statistic="Maximum", label="JVM pressure"),
                        domain.metric_cpu_utilization(period=PERIOD, statistic="Maximum", label="CPU"),
                    ],
                ),
                _graph(
                    "OpenSearch free storage (MiB, lowest node)",
                    [domain.metric_free_storage_space(period=PERIOD, statistic="Minimum")],
                ),
            )


def _graph(title: str, metrics: list[cloudwatch.IMetric]) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=metrics, width=WIDTH, height=6)
