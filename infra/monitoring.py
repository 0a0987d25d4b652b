"""Monitoring: alarms on dead letters and function errors, sent to one SNS topic."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct


class Monitoring(Construct):
    """An alarm whenever a dead-letter queue holds a message (a document or a scheduled run gave up), and one per
    function on any error in five minutes. Alarms notify `topic`; `alarm_email` subscribes an address to it."""

    def __init__(self, scope: Construct, construct_id: str, *, alarm_email: str = "") -> None:
        super().__init__(scope, construct_id)
        self.topic = sns.Topic(self, "Alarms", display_name="kindex alarms", enforce_ssl=True)
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
        self._action = actions.SnsAction(self.topic)

    def dead_letters(self, construct_id: str, queue: sqs.IQueue, what: str) -> cloudwatch.Alarm:
        metric = queue.metric_approximate_number_of_messages_visible(period=Duration.minutes(5),
                                                                      statistic=cloudwatch.Stats.MAXIMUM)
        return self._alarm(construct_id, metric, f"{what} landed in the dead-letter queue: inspect, fix, redrive")

    def function_errors(self, construct_id: str, function: lambda_.IFunction, name: str) -> cloudwatch.Alarm:
        metric = function.metric_errors(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM)
        return self._alarm(construct_id, metric, f"the {name} function raised errors")

    def _alarm(self, construct_id: str, metric: cloudwatch.IMetric, description: str) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self, construct_id,
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        return alarm
