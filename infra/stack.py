"""The kindex stack: composes one construct per capability and wires the functions between them."""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput, Duration, Fn, Stack
from constructs import Construct

from infra.api import Api
from infra.capacity import search_capacity
from infra.config import StackConfig
from infra.dashboard import Dashboard
from infra.functions import KindexFunction, SharedLayers
from infra.ingest import IngestPipeline
from infra.monitoring import Monitoring
from infra.nag import acknowledge_findings
from infra.permissions import grant_least_privilege
from infra.reindex import ReindexWork
from infra.search import Search
from infra.secrets import Secrets
from infra.storage import Storage

INGEST_TIMEOUT = Duration.minutes(5)
ROUTER_TIMEOUT = Duration.seconds(30)
REINDEX_WORKER_TIMEOUT = Duration.minutes(15)
# name -> (handler, timeout, memory MB, description). API Gateway gives up on an integration after 29 s: the
# request functions stop before it (their dependencies' calls end within KINDEX_REQUEST_BUDGET_S, default 25 s, and
# answer 503; the Lambda timeout of 28 s is the backstop), so a caller never sees API Gateway's own 504.
REQUEST_FUNCTION_TIMEOUT = Duration.seconds(28)
FUNCTIONS = {
    "api": ("api.handler", REQUEST_FUNCTION_TIMEOUT, 1024, "collections, documents, uploads, citations, jobs"),
    "query": ("query.handler", REQUEST_FUNCTION_TIMEOUT, 1024, "permission-aware retrieval"),
    "ingest": ("ingest.handler", INGEST_TIMEOUT, 2048, "extract, chunk, embed and index uploaded documents"),
    "authorizer": ("authorizer.handler", Duration.seconds(10), 512, "resolve API keys to tenant and role"),
    "router": ("router.handler", ROUTER_TIMEOUT, 256, "S3 notifications to the fair ingest queue, grouped by tenant"),
    "reindex": ("reindex.handler", Duration.minutes(5), 512, "plan the reindex: one task per tenant and collection"),
    "reindexworker": (
        "reindex_worker.handler",
        REINDEX_WORKER_TIMEOUT,
        1024,
        "one reindex task: a sweep page, a collection's changes and drift page, a tenant's blobs",
    ),
}
# Only the functions that embed text get the OpenAI key's name; only the HTTP ones get the body limit.
EMBEDS = {"query", "ingest", "api"}  # api: an import into a collection of another model re-embeds its texts
SERVES_HTTP = {"api", "query"}
# Reindex work (the worker's, and the first page of a job that POST .../reindex runs in the api function) re-sends
# documents to the ingest queue, and the router forwards S3's notifications to it; the planner, the worker (next
# pages) and the api (a job's next pages) send tasks.
ENQUEUES = {"api", "reindexworker", "router"}
SENDS_REINDEX_TASKS = {"api", "reindex", "reindexworker"}
# The functions that call OpenSearch (the planner and the authorizer never do).
SEARCHES = {"api", "query", "ingest", "reindexworker"}
# The functions that enforce the plans' quotas (writes, uploads, imports; a document's chunks) read the plans.
ENFORCES_QUOTAS = {"api", "ingest"}


class KindexStack(Stack):
    """Storage, secrets, search, the ingest pipeline, seven functions, the API, the reindex planner and worker,
    monitoring."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StackConfig, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.storage = Storage(self, "Storage")
        self.secrets = Secrets(self, "Secrets", prefix=config.secrets_prefix)
        self.search = Search(self, "Search", config=config)
        self.ingest_pipeline = IngestPipeline(
            self, "Ingest", bucket=self.storage.bucket, function_timeout=INGEST_TIMEOUT, router_timeout=ROUTER_TIMEOUT
        )
        self.reindex = ReindexWork(self, "Reindex", worker_timeout=REINDEX_WORKER_TIMEOUT)
        layers = SharedLayers(self, "Layers", build_dir=config.layer_build_dir)

        common = {
            "KINDEX_BACKEND": "aws",
            "KINDEX_TABLE_NAME": self.storage.table.table_name,
            "KINDEX_BUCKET_NAME": self.storage.bucket.bucket_name,
            "KINDEX_OPENSEARCH_ENDPOINT": self.search.endpoint,
            "KINDEX_SECRETS_PREFIX": config.secrets_prefix,
            **config.search_environment(),
        }
        self.functions: dict[str, KindexFunction] = {}
        for name, (handler, timeout, memory_mb, description) in FUNCTIONS.items():
            environment = dict(common)
            if name in EMBEDS:
                environment["KINDEX_OPENAI_SECRET_NAME"] = self.secrets.openai_key.secret_name
            if name in SERVES_HTTP:
                environment["KINDEX_MAX_BODY_BYTES"] = str(config.max_body_bytes)
            if name in ENQUEUES:
                environment["KINDEX_INGEST_QUEUE_URL"] = self.ingest_pipeline.queue.queue_url
            if name in SENDS_REINDEX_TASKS:
                environment["KINDEX_REINDEX_QUEUE_URL"] = self.reindex.queue.queue_url
            if name in ENFORCES_QUOTAS:
                environment["KINDEX_USAGE_PLANS"] = config.usage_plans.model_dump_json(exclude_none=True)
            self.functions[name] = KindexFunction(
                self,
                f"{name.title()}Function",
                handler=handler,
                service=f"kindex-{name}",
                layers=layers,
                environment=environment,
                timeout=timeout,
                memory_mb=memory_mb,
                description=f"kindex {name}: {description}",
            )

        grant_least_privilege(
            self.functions,
            storage=self.storage,
            search=self.search,
            secrets=self.secrets,
            ingest_queue=self.ingest_pipeline.queue,
            reindex_queue=self.reindex.queue,
        )
        self.search.defer_to_iam()
        self.ingest_pipeline.attach(self.functions["ingest"].function, router=self.functions["router"].function)

        self.api = Api(
            self,
            "Api",
            config=config,
            targets={"api": self.functions["api"].function, "query": self.functions["query"].function},
            authorizer=self.functions["authorizer"].function,
        )
        self.storage.allow_browser_uploads(self.api.origin())
        # The authorizer returns each tenant's usage identifier in this scope; `kindex keys` creates the same keys.
        self.functions["authorizer"].function.add_environment("KINDEX_GATEWAY_KEY_SCOPE", config.secrets_prefix)
        self.key_provisioning = self.api.provisioning_policy(self.storage.table)
        self.reindex.attach(
            planner=self.functions["reindex"].function,
            worker=self.functions["reindexworker"].function,
            expression=config.reindex_schedule,
            planner_reserved_concurrency=config.reindex_planner_reserved_concurrency,
        )

        self.monitoring = Monitoring(self, "Monitoring", alarm_email=config.alarm_email)
        self.monitoring.dead_letters("IngestDeadLetters", self.ingest_pipeline.dead_letter_queue, "a document")
        self.monitoring.dead_letters(
            "ReindexDeadLetters", self.reindex.schedule_dead_letter_queue, "a scheduled reindex"
        )
        self.monitoring.dead_letters("ReindexTaskDeadLetters", self.reindex.dead_letter_queue, "a reindex task")
        self.monitoring.dead_letters(
            "ReindexPlanFailures", self.reindex.plan_failures, "a reindex plan that failed or waited too long"
        )
        for name, fn in self.functions.items():
            self.monitoring.function_errors(f"{name.title()}Errors", fn.function, name)
            self.monitoring.function_throttles(f"{name.title()}Throttles", fn.function, name)
        self._observe()

        acknowledge_findings(self)
        self._outputs()

    def _observe(self) -> None:
        """Ingest lag, API 5XX and OpenSearch health alarms, and the operator's dashboard."""
        config = self.config
        self.monitoring.queue_age("IngestLag", self.ingest_pipeline.queue)
        self.monitoring.queue_age("IngestArrivalsLag", self.ingest_pipeline.arrivals)  # a router that stopped
        self.monitoring.api_server_errors("Api5xx", self.api.rest_api)
        # What the stack's own domain holds before its k-NN memory is full (app.py prints it at synth).
        self.capacity = (
            None
            if self.search.domain is None
            else search_capacity(
                config.opensearch_instance_type,
                config.opensearch_instance_count,
                config.opensearch_index,
                config.opensearch_capacity_dimensions,
            )
        )
        if self.search.domain is not None:
            self.monitoring.search_domain(
                self.search.domain,
                instance_type=config.opensearch_instance_type,
                instance_count=config.opensearch_instance_count,
                volume_gib=config.opensearch_volume_gib,
            )
        # Dashboard names are global to the account (not per region): the region keeps two stacks of one stage apart.
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            name=f"kindex-{config.stage}-{Aws.REGION}",
            ingest_queue=self.ingest_pipeline.queue,
            dead_letter_queue=self.ingest_pipeline.dead_letter_queue,
            rest_api=self.api.rest_api,
            query=self.functions["query"].function,
            functions={name: fn.function for name, fn in self.functions.items()},
            domain=self.search.domain,
        )

    def _outputs(self) -> None:
        CfnOutput(self, "ApiUrl", value=self.api.rest_api.url)
        CfnOutput(self, "TableName", value=self.storage.table.table_name)
        CfnOutput(self, "BucketName", value=self.storage.bucket.bucket_name)
        CfnOutput(self, "OpenAiSecretName", value=self.secrets.openai_key.secret_name)
        CfnOutput(self, "OpenSearchEndpoint", value=self.search.endpoint)
        CfnOutput(self, "IngestDeadLetterQueueUrl", value=self.ingest_pipeline.dead_letter_queue.queue_url)
        CfnOutput(self, "AlarmTopicArn", value=self.monitoring.topic.topic_arn)
        CfnOutput(
            self,
            "UsagePlans",
            value=self.api.usage_plans_output(self.config),
            description="KINDEX_USAGE_PLANS for `kindex keys` (plans, their ids, the usage identifier scope)",
        )
        CfnOutput(
            self,
            "KeyProvisioningPolicyArn",
            value=self.key_provisioning.managed_policy_arn,
            description="attach to whoever runs `kindex keys` against this stack",
        )
        if self.capacity is not None:
            CfnOutput(
                self,
                "SearchCapacityChunks",
                value=str(self.capacity.chunks) if self.capacity.chunks is not None else "unknown",
                description=self.capacity.describe()[:1000],
            )
        if self.search.domain is None:
            # An existing domain's access policy must admit these roles (its owner adds them).
            search_roles = [self.functions[name].role.role_arn for name in sorted(SEARCHES)]
            CfnOutput(self, "SearchRoleArns", value=Fn.join(",", search_roles))
