"""HTTPS API: API Gateway REST API with a cached Lambda REQUEST authorizer in front of the api and query functions,
and per-tenant usage plans (the authorizer returns the tenant's API key as the usage identifier)."""

from __future__ import annotations

import json

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import StackConfig


def routes():
    """Every route, derived from the functions' resolvers (kindex.api.routes): (path without the leading '/',
    methods, target function, public). Read at synth time, so a route added to a function is deployed with it."""
    from functions import api, query
    from kindex.api.routes import api_routes

    return [
        (route.path.lstrip("/"), route.methods, route.function, route.public)
        for route in api_routes({"query": query.resolver, "api": api.resolver}, public_function="api")
    ]


ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "method": "$context.httpMethod",
    "resource": "$context.resourcePath",
    "status": "$context.status",
    "latencyMs": "$context.responseLatency",
    "tenant": "$context.authorizer.tenant",
    "keyId": "$context.authorizer.key_id",
    "usagePlanKeyId": "$context.identity.apiKeyId",  # the id of the tenant's API Gateway key, never its value
    "error": "$context.error.message",
    "authorizerError": "$context.authorizer.error",
}
# Gateway-made errors in the API's own shape: {"error": code, "message": text}.
GATEWAY_ERRORS = [
    (apigw.ResponseType.UNAUTHORIZED, "401", "unauthorized", "missing or invalid API key"),
    (apigw.ResponseType.ACCESS_DENIED, "403", "forbidden", "this API key may not call this route"),
    (apigw.ResponseType.THROTTLED, "429", "throttled", "too many requests"),
    (apigw.ResponseType.QUOTA_EXCEEDED, "429", "quota_exceeded", "the tenant's daily request quota is used up"),
    # The tenant's API Gateway key is in no usage plan of this stage (or was disabled): `kindex keys sync-plans`.
    (apigw.ResponseType.INVALID_API_KEY, "403", "no_usage_plan", "this tenant has no usage plan"),
    (apigw.ResponseType.REQUEST_TOO_LARGE, "413", "too_large", "request body too large"),
    (apigw.ResponseType.MISSING_AUTHENTICATION_TOKEN, "404", "not_found", "no such route"),
    # The authorizer could not check the key (its store did not answer), or - which the request budget prevents -
    # an integration outlived 29 s: a dependency problem worth retrying, never a bare 500 or 504.
    (apigw.ResponseType.AUTHORIZER_FAILURE, "503", "dependency_unavailable", "the API key could not be checked now"),
    (apigw.ResponseType.INTEGRATION_TIMEOUT, "503", "dependency_unavailable", "a dependency did not answer in time"),
]


class Api(Construct):
    """REST API `kindex-<stage>`: key check by the authorizer function (results cached per Authorization header),
    routes to the api and query functions, JSON access logs, and throttling at two levels: the stage's limits for
    every tenant together, and one usage plan per tenant (the default plan, or the named plan that lists the tenant).

    API keys come from the authorizer (`api_key_source_type` AUTHORIZER): it returns the value of the tenant's API
    Gateway key as `usageIdentifierKey`, and API Gateway counts the request against the usage plan holding that key.
    Clients never send one (an `x-api-key` header is ignored). The keys are created and attached by `kindex keys`
    (`provisioning_policy` is what that needs), not by this stack: tenants are data, not infrastructure.

    Body size: API Gateway itself refuses bodies over 10 MB (a hard limit a request validator cannot lower: it
    checks parameters and JSON schemas, not sizes), and the functions refuse bodies over `max_body_bytes`
    (KINDEX_MAX_BODY_BYTES) with 413 before parsing them. Files never pass through here: they go to S3 with a
    presigned upload URL. The request validator requires the Authorization header on every keyed route.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        targets: dict[str, lambda_.IFunction],
        authorizer: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=logs.RetentionDays.THREE_MONTHS, removal_policy=RemovalPolicy.DESTROY
        )
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=f"kindex-{config.stage}",
            description="kindex: multi-tenant knowledge index for retrieval-augmented generation",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
            cloud_watch_role=True,  # execution logging (logging_level below) needs the account's CloudWatch role
            deploy_options=apigw.StageOptions(
                stage_name=config.stage,
                throttling_rate_limit=config.api_stage_rate_limit,
                throttling_burst_limit=config.api_stage_burst_limit,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # bodies may hold tenant documents: never log them
                metrics_enabled=True,
                tracing_enabled=True,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FORMAT)),
            ),
        )
        # API Gateway writes execution logs (logging_level) to a group it names and creates on first use, with no
        # expiry. Created here first (the stage waits for it) so that it expires and goes with the stack.
        self.execution_logs = logs.LogGroup(
            self,
            "ExecutionLogs",
            log_group_name=f"API-Gateway-Execution-Logs_{self.rest_api.rest_api_id}/{config.stage}",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.rest_api.deployment_stage.node.add_dependency(self.execution_logs)
        self.authorizer = apigw.RequestAuthorizer(
            self,
            "KeyAuthorizer",
            handler=authorizer,
            identity_sources=[apigw.IdentitySource.header("Authorization")],
            # A revoked key keeps working until its cached answer expires: api_authorizer_cache_seconds (0: no cache).
            results_cache_ttl=Duration.seconds(config.api_authorizer_cache_seconds),
        )
        # Body validation is on, but no route declares an API Gateway model: the functions validate bodies against
        # their pydantic models, the single source of the OpenAPI document, and answer in the API's error shape.
        self.validator = self.rest_api.add_request_validator(
            "RequireKeyHeader", validate_request_parameters=True, validate_request_body=True
        )
        integrations = {name: apigw.LambdaIntegration(fn, allow_test_invoke=False) for name, fn in targets.items()}
        self.public_methods = []
        for path, methods, target, public in routes():
            for method in methods:
                if public:
                    # The API description and its page carry no tenant data: served without a key.
                    self.public_methods.append(
                        self._resource(path).add_method(
                            method, integrations[target], authorization_type=apigw.AuthorizationType.NONE
                        )
                    )
                    continue
                self._resource(path).add_method(
                    method,
                    integrations[target],
                    authorizer=self.authorizer,
                    authorization_type=apigw.AuthorizationType.CUSTOM,
                    request_validator=self.validator,
                    request_parameters={"method.request.header.Authorization": True},
                    # The authorizer's usageIdentifierKey puts the request under its tenant's usage plan.
                    api_key_required=config.api_enforce_usage_plans,
                )
        for response_type, status, code, message in GATEWAY_ERRORS:
            construct_id = f"{code.title().replace('_', '')}{status}"
            if construct_id == "DependencyUnavailable503":  # two gateway errors share this code and status
                construct_id += response_type.response_type.title().replace("_", "")
            self.rest_api.add_gateway_response(
                construct_id,
                type=response_type,
                status_code=status,
                templates={"application/json": json.dumps({"error": code, "message": message})},
                response_headers={"Retry-After": "'1'"} if code == "throttled" else None,
            )
        self.usage_plans = self._usage_plans(config)
        self.usage_plan = self.usage_plans["default"]

    def _usage_plans(self, config: StackConfig) -> dict[str, apigw.UsagePlan]:
        """One usage plan per configured plan: `kindex-<stage>` (default) and `kindex-<stage>-<name>`."""
        plans = {}
        for name, limits in config.usage_plans.all_plans().items():
            is_default = name == "default"
            plans[name] = self.rest_api.add_usage_plan(
                "UsagePlan" if is_default else f"UsagePlan-{name}",
                name=f"kindex-{config.stage}" if is_default else f"kindex-{config.stage}-{name}",
                description=(
                    "every tenant no named plan lists"
                    if is_default
                    else f"tenants of the '{name}' plan in the stack configuration"
                ),
                throttle=apigw.ThrottleSettings(rate_limit=limits.rate_limit, burst_limit=limits.burst_limit),
                quota=(
                    apigw.QuotaSettings(limit=limits.quota_per_day, period=apigw.Period.DAY)
                    if limits.quota_per_day
                    else None
                ),
                api_stages=[apigw.UsagePlanPerApiStage(api=self.rest_api, stage=self.rest_api.deployment_stage)],
            )
        return plans

    def usage_plans_output(self, config: StackConfig) -> str:
        """The plans with their usage plan ids, as KINDEX_USAGE_PLANS for `kindex keys` (a JSON string with tokens)."""
        document = config.usage_plans.model_dump(mode="json", exclude_none=True)
        document["scope"] = config.secrets_prefix
        document["default"]["id"] = self.usage_plans["default"].usage_plan_id
        for name in config.usage_plans.plans:
            document["plans"][name]["id"] = self.usage_plans[name].usage_plan_id
        return Stack.of(self).to_json_string(document)

    def provisioning_policy(self, table: dynamodb.ITable) -> iam.ManagedPolicy:
        """What `kindex keys create|list|revoke|sync-plans` needs, for the operator's role or user: create API keys
        and find them, attach them to this API's usage plans only, and read and write the key items of the table
        (their partitions only)."""
        region = Stack.of(self).region
        apigateway = f"arn:{Stack.of(self).partition}:apigateway:{region}::"
        plan_ids = [plan.usage_plan_id for plan in self.usage_plans.values()]
        return iam.ManagedPolicy(
            self,
            "KeyProvisioning",
            description="kindex keys: API keys, plan keys, key items",
            statements=[
                iam.PolicyStatement(
                    sid="FindKeysAndTheirPlans",
                    actions=["apigateway:GET"],
                    resources=[f"{apigateway}/apikeys", f"{apigateway}/usageplans"],
                ),
                iam.PolicyStatement(
                    sid="CreateTenantKeys", actions=["apigateway:POST"], resources=[f"{apigateway}/apikeys"]
                ),
                iam.PolicyStatement(
                    sid="AttachToThisApisPlans",
                    actions=["apigateway:POST"],
                    resources=[f"{apigateway}/usageplans/{plan_id}/keys" for plan_id in plan_ids],
                ),
                iam.PolicyStatement(
                    sid="DetachFromThisApisPlans",
                    actions=["apigateway:DELETE"],
                    resources=[f"{apigateway}/usageplans/{plan_id}/keys/*" for plan_id in plan_ids],
                ),
                iam.PolicyStatement(
                    sid="KeyItems",
                    actions=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
                    resources=[table.table_arn],
                    # TransactWriteItems (a key and its two listings) is authorized per Put inside it: PutItem.
                    conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["KEY#*", "KEYS", "T#*#KEYS"]}},
                ),
            ],
        )

    def origin(self) -> str:
        """The origin of this API's default endpoint, where the console's pages come from."""
        stack = Stack.of(self)
        return f"https://{self.rest_api.rest_api_id}.execute-api.{stack.region}.{stack.url_suffix}"

    def _resource(self, path: str) -> apigw.IResource:
        resource: apigw.IResource = self.rest_api.root
        for part in path.split("/"):
            resource = resource.get_resource(part) or resource.add_resource(part)
        return resource
