"""Reindex: EventBridge Scheduler runs the planner; the planner's tasks go through a work queue to the worker."""

from __future__ import annotations

from typing import cast

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

MAX_RECEIVE_COUNT = 3
# AWS's guidance for SQS event sources: visibility >= 6x the function timeout.
VISIBILITY_FACTOR = 6
# A task can take minutes (a sweep page re-reads up to 1,000 documents): few per batch, so one slow task holds
# back few others, and a failed one is reported alone.
BATCH_SIZE = 2
# Bounds the reindex's parallel load on DynamoDB, S3 and OpenSearch however many collections there are.
WORKER_CONCURRENCY = 4
# A scheduled plan still waiting after this long (throttled, or behind the previous one where reserved concurrency 1
# is configured) is dropped to the failure queue: an hourly schedule never stacks plans up.
PLAN_MAX_AGE = Duration.minutes(50)


class ReindexWork(Construct):
    """The reindex work queue (with its dead-letter queue) and, once `attach`ed, the schedule, the planner's
    invocation settings and the worker's event source.

    Queues come first so the functions can be given their URL; `attach` wires the functions built after them."""

    def __init__(self, scope: Construct, construct_id: str, *, worker_timeout: Duration) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetters",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            visibility_timeout=Duration.seconds(worker_timeout.to_seconds() * VISIBILITY_FACTOR),
            retention_period=Duration.days(4),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )
        # Where a plan that failed, or expired waiting, is recorded (Lambda's on-failure destination).
        self.plan_failures = sqs.Queue(
            self,
            "PlanFailures",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        # Its own queue: these are scheduler events, which must never be redriven into a work queue.
        self.schedule_dead_letter_queue = sqs.Queue(
            self,
            "ScheduleDeadLetters",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )

    def attach(
        self,
        *,
        planner: lambda_.Function,
        worker: lambda_.IFunction,
        expression: str,
        planner_reserved_concurrency: int = 0,
    ) -> None:
        """Planner: no async retries, so a failed plan is not repeated (the next hour's plan finds the same work);
        failures go to `plan_failures`. Reserved concurrency 1 only when configured: Lambda refuses any reservation
        that leaves fewer than 100 of the account's concurrency unreserved, so on a new account (quota 10) it fails
        the deploy. Without it two plans can overlap only when a plan outlives the schedule's period (it takes
        seconds: it reads key and collection ids), and an overlap only sends the same tasks twice, which the worker
        handles as it handles a redelivery. Worker: the work queue's consumer at bounded concurrency, reporting
        failed tasks one by one."""
        if planner_reserved_concurrency:
            cast(
                lambda_.CfnFunction, planner.node.default_child
            ).reserved_concurrent_executions = planner_reserved_concurrency
        planner.configure_async_invoke(
            retry_attempts=0, max_event_age=PLAN_MAX_AGE, on_failure=destinations.SqsDestination(self.plan_failures)
        )
        worker.add_event_source(
            event_sources.SqsEventSource(
                self.queue, batch_size=BATCH_SIZE, report_batch_item_failures=True, max_concurrency=WORKER_CONCURRENCY
            )
        )
        # Our own role (instead of the one CDK would share across schedules), trusted only from this account.
        self.role = iam.Role(
            self,
            "InvokeRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
        )
        self.schedule = scheduler.Schedule(
            self,
            "Schedule",
            schedule=scheduler.ScheduleExpression.expression(expression),
            description="kindex: plan the reindex (re-embed stale collections, retry failed documents, repair drift)",
            target=targets.LambdaInvoke(
                planner,
                input=scheduler.ScheduleTargetInput.from_object({"source": "kindex.schedule"}),
                # Only the Invoke call itself is retried (an async invoke is accepted or not); the run is not.
                retry_attempts=2,
                max_event_age=Duration.hours(1),
                dead_letter_queue=self.schedule_dead_letter_queue,
                role=self.role,
            ),
        )
