"""HTTPS API: API Gateway REST API with a cached Lambda REQUEST authorizer in front of the api and query functions."""

from __future__ import annotations

import json

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import StackConfig

AUTHORIZER_CACHE = Duration.seconds(300)


def routes():
    """Every route, derived from the functions' resolvers (kindex.api.routes): (path without the leading '/',
    methods, target function, public). Read at synth time, so a route added to a function is deployed with it."""
    from functions import api, query
    from kindex.api.routes import api_routes

    return [(route.path.lstrip("/"), route.methods, route.function, route.public)
            for route in api_routes({"query": query.app, "api": api.app}, public_function="api")]


ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId", "ip": "$context.identity.sourceIp", "method": "$context.httpMethod",
    "resource": "$context.resourcePath", "status": "$context.status", "latencyMs": "$context.responseLatency",
    "tenant": "$context.authorizer.tenant", "keyId": "$context.authorizer.key_id",
    "error": "$context.error.message", "authorizerError": "$context.authorizer.error",
}
# Gateway-made errors in the API's own shape: {"error": code, "message": text}.
GATEWAY_ERRORS = [
    (apigw.ResponseType.UNAUTHORIZED, "401", "unauthorized", "missing or invalid API key"),
    (apigw.ResponseType.ACCESS_DENIED, "403", "forbidden", "this API key may not call this route"),
    (apigw.ResponseType.THROTTLED, "429", "throttled", "too many requests"),
    (apigw.ResponseType.REQUEST_TOO_LARGE, "413", "too_large", "request body too large"),
    (apigw.ResponseType.MISSING_AUTHENTICATION_TOKEN, "404", "not_found", "no such route"),
    # The authorizer could not check the key (its store did not answer), or - which the request budget prevents -
    # an integration outlived 29 s: a dependency problem worth retrying, never a bare 500 or 504.
    (apigw.ResponseType.AUTHORIZER_FAILURE, "503", "dependency_unavailable", "the API key could not be checked now"),
    (apigw.ResponseType.INTEGRATION_TIMEOUT, "503", "dependency_unavailable", "a dependency did not answer in time"),
]


class Api(Construct):
    """REST API `kindex-<stage>`: key check by the authorizer function (results cached per Authorization header),
    routes to the api and query functions, stage and usage-plan throttling, JSON access logs.

    Body size: API Gateway itself refuses bodies over 10 MB (a hard limit a request validator cannot lower: it
    checks parameters and JSON schemas, not sizes), and the functions refuse bodies over `max_body_bytes`
    (KINDEX_MAX_BODY_BYTES) with 413 before parsing them. Files never pass through here: they go to S3 with a
    presigned upload URL. The request validator requires the Authorization header on every keyed route.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: StackConfig,
                 targets: dict[str, lambda_.IFunction], authorizer: lambda_.IFunction) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=logs.RetentionDays.THREE_MONTHS,
                                         removal_policy=RemovalPolicy.DESTROY)
        self.rest_api = apigw.RestApi(
            self, "RestApi",
            rest_api_name=f"kindex-{config.stage}",
            description="kindex: multi-tenant knowledge index for retrieval-augmented generation",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=True,  # execution logging (logging_level below) needs the account's CloudWatch role
            deploy_options=apigw.StageOptions(
                stage_name=config.stage,
                throttling_rate_limit=config.api_rate_limit,
                throttling_burst_limit=config.api_burst_limit,
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
            self, "ExecutionLogs",
            log_group_name=f"API-Gateway-Execution-Logs_{self.rest_api.rest_api_id}/{config.stage}",
            retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY)
        self.rest_api.deployment_stage.node.add_dependency(self.execution_logs)
        self.authorizer = apigw.RequestAuthorizer(
            self, "KeyAuthorizer",
            handler=authorizer,
            identity_sources=[apigw.IdentitySource.header("Authorization")],
            results_cache_ttl=AUTHORIZER_CACHE,
        )
        # Body validation is on, but no route declares an API Gateway model: the functions validate bodies against
        # their pydantic models, the single source of the OpenAPI document, and answer in the API's error shape.
        self.validator = self.rest_api.add_request_validator("RequireKeyHeader", validate_request_parameters=True,
                                                             validate_request_body=True)
        integrations = {name: apigw.LambdaIntegration(fn, allow_test_invoke=False) for name, fn in targets.items()}
        self.public_methods = []
        for path, methods, target, public in routes():
            for method in methods:
                if public:
                    # The API description and its page carry no tenant data: served without a key.
                    self.public_methods.append(self._resource(path).add_method(
                        method, integrations[target], authorization_type=apigw.AuthorizationType.NONE))
                    continue
                self._resource(path).add_method(
                    method, integrations[target],
                    authorizer=self.authorizer,
                    authorization_type=apigw.AuthorizationType.CUSTOM,
                    request_validator=self.validator,
                    request_parameters={"method.request.header.Authorization": True},
                )
        for response_type, status, code, message in GATEWAY_ERRORS:
            construct_id = f"{code.title().replace('_', '')}{status}"
            if construct_id == "DependencyUnavailable503":  # two gateway errors share this code and status
                construct_id += response_type.response_type.title().replace("_", "")
            self.rest_api.add_gateway_response(
                construct_id, type=response_type, status_code=status,
                templates={"application/json": json.dumps({"error": code, "message": message})},
            )
        self.usage_plan = self.rest_api.add_usage_plan(
            "UsagePlan",
            name=f"kindex-{config.stage}",
            description="Default throttling for every caller; add per-tenant plans with API Gateway keys if needed",
            throttle=apigw.ThrottleSettings(rate_limit=config.api_rate_limit, burst_limit=config.api_burst_limit),
            api_stages=[apigw.UsagePlanPerApiStage(api=self.rest_api, stage=self.rest_api.deployment_stage)],
        )

    def _resource(self, path: str) -> apigw.IResource:
        resource: apigw.IResource = self.rest_api.root
        for part in path.split("/"):
            resource = resource.get_resource(part) or resource.add_resource(part)
        return resource
