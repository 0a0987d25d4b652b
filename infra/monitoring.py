"""Monitoring: alarms that reach one SNS topic (dead letters, function errors, ingest lag, API 5XX, OpenSearch
health) and the operator's dashboard.

OpenSearch thresholds follow AWS's "Recommended CloudWatch alarms for Amazon OpenSearch Service"
(https://docs.aws.amazon.com/opensearch-service/latest/developerguide/cloudwatch-alarms.html); the k-NN metric is
`KNNCircuitBreakerTriggered` (namespace AWS/ES, dimensions ClientId and DomainName, statistic Maximum) from
"Monitoring OpenSearch cluster metrics with Amazon CloudWatch".
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_opensearchservice as opensearch
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

GE = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
GT = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
LE = cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD
MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
# The ingest queue's oldest message: a document waits this long before the alarm says ingestion is falling behind.
# Well under the queue's visibility timeout (6 x 5 min) and its 4-day retention.
INGEST_LAG_ALARM = Duration.minutes(15)
# 5XX responses (the functions' 500/503 and API Gateway's own 502/504) per five minutes that page someone.
API_5XX_ALARM = 5
# AWS recommends 25 % of each node's storage as the free-space floor (FreeStorageSpace is in MiB, per node).
FREE_STORAGE_FRACTION = 0.25
JVM_PRESSURE_PERCENT = 95
# t3 nodes run on CPU credits; at zero they are throttled to their baseline (20 % for t3.small). AWS/ES publishes
# CPUCreditBalance (dimensions ClientId, DomainName) for T2/T3 data nodes: CloudWatch's list of AWS/ES metrics,
# "Supported metrics for resource tags for telemetry".
CPU_CREDITS_FLOOR = 10
# k-NN graph memory used, as a percentage of the circuit breaker's limit (KNNGraphMemoryUsagePercentage): at 100 %
# the breaker trips and k-NN indexing and searches fail. Alarm well before: time to add or grow nodes, or compress.
KNN_MEMORY_PERCENT = 70


class Monitoring(Construct):
    """Alarms notify `topic`; `alarm_email` subscribes an address to it. The topic's policy lets CloudWatch alarms
    of this account publish (besides refusing plain-HTTP publishers), so alarm actions are actually delivered."""

    def __init__(self, scope: Construct, construct_id: str, *, alarm_email: str = "") -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.topic = sns.Topic(self, "Alarms", display_name="kindex alarms", enforce_ssl=True)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsOfThisAccount",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name="*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    },
                },
            )
        )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self._action = actions.SnsAction(self.topic)
        self.alarms: list[cloudwatch.Alarm] = []

    # -- queues and functions ---------------------------------------------------------------------------------

    def dead_letters(self, construct_id: str, queue: sqs.IQueue, what: str) -> cloudwatch.Alarm:
        metric = queue.metric_approximate_number_of_messages_visible(
            period=FIVE_MINUTES, statistic=cloudwatch.Stats.MAXIMUM
        )
        return self._alarm(construct_id, metric, f"{what} landed in the dead-letter queue: inspect, fix, redrive")

    def queue_age(self, construct_id: str, queue: sqs.IQueue) -> cloudwatch.Alarm:
        metric = queue.metric_approximate_age_of_oldest_message(period=FIVE_MINUTES, statistic=cloudwatch.Stats.MAXIMUM)
        return self._alarm(
            construct_id,
            metric,
            "ingestion is falling behind: the oldest upload has waited "
            f"{INGEST_LAG_ALARM.to_minutes()} minutes or more",
            threshold=INGEST_LAG_ALARM.to_seconds(),
            comparison=GE,
        )

    def function_errors(self, construct_id: str, function: lambda_.IFunction, name: str) -> cloudwatch.Alarm:
        metric = function.metric_errors(period=FIVE_MINUTES, statistic=cloudwatch.Stats.SUM)
        return self._alarm(construct_id, metric, f"the {name} function raised errors")

    def function_throttles(self, construct_id: str, function: lambda_.IFunction, name: str) -> cloudwatch.Alarm:
        """Invocations refused for want of concurrency: the account's quota is used up (docs/aws.md, Lambda quota)."""
        metric = function.metric_throttles(period=FIVE_MINUTES, statistic=cloudwatch.Stats.SUM)
        return self._alarm(
            construct_id,
            metric,
            f"the {name} function was throttled: the account's Lambda concurrency is exhausted (raise the quota)",
        )

    def api_server_errors(self, construct_id: str, rest_api: apigw.RestApi) -> cloudwatch.Alarm:
        metric = rest_api.metric_server_error(period=FIVE_MINUTES, statistic=cloudwatch.Stats.SUM)
        return self._alarm(
            construct_id,
            metric,
            f"the API answered {API_5XX_ALARM} or more 5XX responses in five minutes",
            threshold=API_5XX_ALARM,
            comparison=GE,
        )

    # -- OpenSearch --------------------------------------------------------------------------------------------

    def search_domain(
        self, domain: opensearch.Domain, *, instance_type: str, instance_count: int, volume_gib: int
    ) -> None:
        """Cluster red (and yellow where replicas can be placed), blocked writes, failed automated snapshots, free
        storage, JVM pressure, k-NN graph memory and the k-NN circuit breaker and, on burstable t3 nodes, CPU
        credits."""
        maximum = cloudwatch.Stats.MAXIMUM
        self._alarm(
            "SearchClusterRed",
            domain.metric_cluster_status_red(period=MINUTE, statistic=maximum),
            "OpenSearch cluster is red: a primary shard is unassigned (searches and writes fail)",
            threshold=1,
            comparison=GE,
        )
        if instance_count >= 2:
            # One node can never hold a replica, so a one-node domain with replicas is yellow all the time.
            self._alarm(
                "SearchClusterYellow",
                domain.metric_cluster_status_yellow(period=MINUTE, statistic=maximum),
                "OpenSearch cluster is yellow: a replica shard is unassigned",
                threshold=1,
                comparison=GE,
                periods=5,
            )
        self._alarm(
            "SearchWritesBlocked",
            domain.metric("ClusterIndexWritesBlocked", period=FIVE_MINUTES, statistic=maximum),
            "OpenSearch is blocking writes (ClusterBlockException: storage or memory pressure): ingestion fails",
            threshold=1,
            comparison=GE,
        )
        self._alarm(
            "SearchSnapshotFailed",
            domain.metric("AutomatedSnapshotFailure", period=MINUTE, statistic=maximum),
            "an automated OpenSearch snapshot failed (often a red cluster)",
            threshold=1,
            comparison=GE,
        )
        floor_mib = int(volume_gib * 1024 * FREE_STORAGE_FRACTION)
        self._alarm(
            "SearchFreeStorage",
            domain.metric_free_storage_space(period=MINUTE, statistic=cloudwatch.Stats.MINIMUM),
            f"an OpenSearch node has {floor_mib} MiB or less free storage (25 % of its volume)",
            threshold=floor_mib,
            comparison=LE,
        )
        self._alarm(
            "SearchJvmPressure",
            domain.metric_jvm_memory_pressure(period=MINUTE, statistic=maximum),
            f"OpenSearch JVM memory pressure at {JVM_PRESSURE_PERCENT} % or more",
            threshold=JVM_PRESSURE_PERCENT,
            comparison=GE,
            periods=3,
        )
        self._alarm(
            "SearchKnnCircuitBreaker",
            domain.metric("KNNCircuitBreakerTriggered", period=MINUTE, statistic=maximum),
            "the k-NN circuit breaker tripped: vector memory is full, k-NN indexing and searches fail",
            threshold=1,
            comparison=GE,
        )
        self._alarm(
            "SearchKnnMemory",
            domain.metric("KNNGraphMemoryUsagePercentage", period=FIVE_MINUTES, statistic=maximum),
            f"k-NN graph memory at {KNN_MEMORY_PERCENT} % of the circuit breaker's limit: at 100 % k-NN "
            "indexing and searches fail (see the SearchCapacityChunks output and docs/aws.md sizing)",
            threshold=KNN_MEMORY_PERCENT,
            comparison=GE,
        )
        if instance_type.startswith("t3."):
            self._alarm(
                "SearchCpuCredits",
                domain.metric("CPUCreditBalance", period=FIVE_MINUTES, statistic=cloudwatch.Stats.MINIMUM),
                f"OpenSearch t3 nodes are almost out of CPU credits (<= {CPU_CREDITS_FLOOR}): they will be "
                "throttled to baseline",
                threshold=CPU_CREDITS_FLOOR,
                comparison=LE,
                periods=3,
            )

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        description: str,
        *,
        threshold: float = 0,
        comparison: cloudwatch.ComparisonOperator = GT,
        periods: int = 1,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=periods,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        self.alarms.append(alarm)
        return alarm
