"""Reindex schedule: EventBridge Scheduler invokes the reindex function on the configured expression."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct


class ReindexSchedule(Construct):
    """Runs the reindex function on `reindex_schedule` (default `rate(1 hour)`).

    A missed run is harmless (the next one finds the same stale work), so retries are few and short; an
    invocation that still fails lands in `dead_letter_queue`, which the monitoring construct alarms on.
    """

    def __init__(self, scope: Construct, construct_id: str, *, function: lambda_.IFunction, expression: str) -> None:
        super().__init__(scope, construct_id)
        # Its own queue: these are scheduler events, which must never be redriven into the ingest queue.
        self.dead_letter_queue = sqs.Queue(self, "DeadLetters", retention_period=Duration.days(14),
                                           encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True)
        # Our own role (instead of the one CDK would share across schedules), trusted only from this account.
        self.role = iam.Role(self, "InvokeRole", assumed_by=iam.ServicePrincipal(
            "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}))
        self.schedule = scheduler.Schedule(
            self, "Schedule",
            schedule=scheduler.ScheduleExpression.expression(expression),
            description="kindex: re-embed stale collections, retry failed documents, repair drift",
            target=targets.LambdaInvoke(
                function,
                input=scheduler.ScheduleTargetInput.from_object({"source": "kindex.schedule"}),
                retry_attempts=2,
                max_event_age=Duration.hours(1),
                dead_letter_queue=self.dead_letter_queue,
                role=self.role,
            ),
        )
