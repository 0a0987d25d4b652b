"""The cdk-nag AwsSolutions findings this design accepts, each with its reason, in one place.

Suppressions are as narrow as cdk-nag allows: on the resource that has the finding and, for wildcard
findings (IAM5), on the exact resource pattern, so a new wildcard anywhere still fails the infra tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from aws_cdk import Stack
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import IConstruct

if TYPE_CHECKING:
    from infra.stack import KindexStack

XRAY = (
    "X-Ray's PutTraceSegments and PutTelemetryRecords have no resource-level permissions: Resource * is the only form."
)
RUNTIME = (
    "Python 3.12 is the runtime the design fixes; the dependency layer is built for cp312 wheels. Upgrade "
    "RUNTIME in infra/functions.py and --python-version in scripts/build_layers.py together."
)


def acknowledge_findings(stack: KindexStack) -> None:
    config = stack.config
    _on_stack(
        stack,
        "AwsSolutions-COG4",
        "Callers are tenant backends with API keys resolved by the Lambda "
        "authorizer (DESIGN.md section 2); there are no end-user sign-ins for a Cognito user pool to hold.",
    )
    _on_stack(
        stack,
        "AwsSolutions-APIG3",
        "No WAF web ACL by default (about $5/month + per request): keys, the "
        "authorizer cache and stage/usage-plan throttling bound abuse. Associate an ACL with the stage if "
        "needed.",
    )
    _on(
        stack.api.rest_api,
        "AwsSolutions-IAM4",
        "API Gateway's account-wide CloudWatch role uses the AWS managed "
        "AmazonAPIGatewayPushToCloudWatchLogs policy, the documented way to enable execution logging.",
        applies_to=[
            _regex(r"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs")
        ],
    )
    _on(
        stack.key_provisioning,
        "AwsSolutions-IAM5",
        "Detaching a tenant's API key from a usage plan is a DELETE on "
        "`/usageplans/<plan>/keys/<key id>`; key ids are created at run time, and the plans are this API's own.",
        applies_to=[
            _regex(
                r"Resource::arn:<AWS::Partition>:apigateway:<AWS::Region>::/usageplans/"
                r"<ApiRestApiUsagePlan[A-Za-z0-9]+>/keys/\*"
            )
        ],
    )
    for method in stack.api.public_methods:
        _on(
            method,
            "AwsSolutions-APIG4",
            "The OpenAPI document and its browsable page describe the API and hold no "
            "tenant data; clients fetch them before they have a key.",
        )
    _on(
        stack.secrets.openai_key,
        "AwsSolutions-SMG4",
        "A third-party (OpenAI) key: it is rotated in OpenAI's "
        "console and then stored with put-secret-value; Secrets Manager cannot rotate it by itself.",
    )
    _on(
        stack.reindex.schedule_dead_letter_queue,
        "AwsSolutions-SQS3",
        "This queue is the scheduler target's "
        "dead-letter queue (EventBridge Scheduler DeadLetterConfig), which cdk-nag does not recognise as one.",
    )
    _on(
        stack.reindex.plan_failures,
        "AwsSolutions-SQS3",
        "This queue is the reindex planner's on-failure "
        "destination (Lambda EventInvokeConfig), a dead-letter queue that cdk-nag does not recognise as one.",
    )
    _on(
        stack.reindex.role,
        "AwsSolutions-IAM5",
        "The scheduler's invoke role is CDK's: it covers the reindex "
        "function and its versions (`<arn>:*`), nothing else.",
        applies_to=[_regex(r"Resource::<ReindexFunction[A-Za-z0-9]+\.Arn>:\*")],
    )

    for name, fn in stack.functions.items():
        _on(fn.function, "AwsSolutions-L1", RUNTIME)
        wildcards = [_regex(r"Resource::\*")]
        reasons = [XRAY]
        if name not in ("authorizer", "reindex"):
            wildcards.append(
                _regex(
                    r"Resource::arn:(?:<AWS::Partition>|aws[a-z-]*):es:.*:domain/[^/]+/"
                    r"(?:_alias/)?kindex-\*(?:/_[a-z_]+)?"
                )
            )
            reasons.append(
                "OpenSearch paths are granted per method on the `kindex-*` indexes only (query: _search, "
                "_msearch and the alias lookup); the index names carry the model and dimension, known "
                "at run time. The domain's policy defers to these grants (its principal is the account)."
            )
        if name in ("api", "ingest", "reindexworker"):
            wildcards.append(_regex(r"Resource::<StorageDocuments[A-Za-z0-9]+\.Arn>/tenants/\*"))
            reasons.append("Object actions are limited to the `tenants/` prefix, where every document blob lives.")
        if name == "ingest":
            reasons.append(
                "Textract's DetectDocumentText (OCR of scanned pages) has no resource types in IAM, so it is "
                "granted on * to this role alone."
            )
        if name in ("api", "query"):
            wildcards.append(
                _regex(
                    r"Resource::arn:<AWS::Partition>:secretsmanager:.*:secret:" + config.secrets_prefix + r"/tenants/\*"
                )
            )
            reasons.append("Rights-check signing secrets are created per tenant at run time under the tenants/ prefix.")
        _on(fn.role, "AwsSolutions-IAM5", " ".join(reasons), applies_to=wildcards)

    if stack.search.domain is not None:
        domain = stack.search.domain
        _on(
            domain,
            "AwsSolutions-OS1",
            "The functions run outside a VPC (they call OpenAI over the internet; a VPC "
            "would need NAT). Access is IAM-only and SigV4-signed: the resource policy admits this account's "
            "principals, and each function role's own policy grants its methods and paths (no other role has any).",
        )
        _on(
            domain,
            "AwsSolutions-OS3",
            "No IP allowlist: Lambda has no fixed addresses. The resource policy admits "
            "only principals of this account that an IAM policy allows (the function roles' paths).",
        )
        _on(
            domain,
            "AwsSolutions-OS4",
            "Dedicated master nodes triple the cost of a small deployment; add them with "
            "larger instance counts (they matter from about 10 data nodes).",
        )
        if not cast(Any, domain.node.default_child).cluster_config.zone_awareness_enabled:  # the L1 CfnDomain
            _on(
                domain,
                "AwsSolutions-OS7",
                "Zone awareness needs an even number of data nodes; the 1-node dev default "
                "cannot spread. Set opensearch_instance_count to 2 or more (even) to enable it.",
            )
    notifications = stack.node.try_find_child("BucketNotificationsHandler050a0587b7544547bf325f094a3db834")
    if notifications is not None:
        _on(
            notifications,
            "AwsSolutions-IAM4",
            "CDK's own handler that configures S3 bucket notifications at deploy "
            "time uses AWSLambdaBasicExecutionRole; it runs only during deployments.",
            applies_to=[
                _regex(r"Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole")
            ],
        )


def _regex(pattern: str) -> RegexAppliesTo:
    return RegexAppliesTo(regex=f"/^(?:{pattern})$/")


def _on(construct: IConstruct, rule: str, reason: str, applies_to=None) -> None:
    NagSuppressions.add_resource_suppressions(
        construct, [NagPackSuppression(id=rule, reason=reason, applies_to=applies_to)], apply_to_children=True
    )


def _on_stack(stack: Stack, rule: str, reason: str) -> None:
    NagSuppressions.add_stack_suppressions(stack, [NagPackSuppression(id=rule, reason=reason)])
