"""Search: the OpenSearch Service domain holding the k-NN indexes, or an existing domain named in the context."""

from __future__ import annotations

from typing import cast

from aws_cdk import ArnFormat, Aws, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_opensearchservice as opensearch
from constructs import Construct

from infra.config import StackConfig


class Search(Construct):
    """An OpenSearch domain (k-NN is built into OpenSearch Service) or a reference to an existing one.

    Encryption at rest and node to node, HTTPS only with TLS 1.2, slow and application logs to CloudWatch.
    Access is IAM only: the domain's resource policy admits this account as principal and so defers to IAM, where
    each function role's own policy grants the HTTP methods and paths it sends (the query role can only read).
    A policy naming the roles with `es:ESHttp*` would grant each of them everything: within one account, an allow
    in either the resource or the identity policy suffices. The domain keeps derived data only (every vector can be
    rebuilt from S3 by a reindex), so it is destroyed with the stack.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: StackConfig) -> None:
        super().__init__(scope, construct_id)
        self.domain: opensearch.Domain | None = None
        if config.uses_existing_domain:
            self.endpoint = config.opensearch_existing_endpoint
            self.domain_arn = config.opensearch_existing_domain_arn
            return
        # An explicit name lets the resource policy name the domain's ARN without a circular reference. Domain
        # names are unique per account and region, so the same stage in another region does not collide.
        domain_name = f"kindex-{config.stage}"
        self.domain_arn = Stack.of(self).format_arn(
            service="es", resource="domain", resource_name=domain_name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        )
        log_groups = {
            name: logs.LogGroup(
                self, name, retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
            )
            for name in ("SlowSearchLogs", "SlowIndexLogs", "AppLogs")
        }
        count = config.opensearch_instance_count
        spread = count >= 2 and count % 2 == 0  # two zones need an even number of data nodes
        self.domain = opensearch.Domain(
            self,
            "Domain",
            domain_name=domain_name,
            version=opensearch.EngineVersion.open_search(config.opensearch_engine_version),
            capacity=opensearch.CapacityConfig(
                data_nodes=count,
                data_node_instance_type=config.opensearch_instance_type,
                multi_az_with_standby_enabled=False,
            ),
            ebs=opensearch.EbsOptions(
                volume_size=config.opensearch_volume_gib, volume_type=ec2.EbsDeviceVolumeType.GP3
            ),
            zone_awareness=opensearch.ZoneAwarenessConfig(
                enabled=spread, availability_zone_count=2 if spread else None
            ),
            encryption_at_rest=opensearch.EncryptionAtRestOptions(enabled=True),
            # Bulk and multi-search bodies may not name an index: a request reaches only the index in its path,
            # which is what the path-level grants (infra/permissions.py) allow.
            advanced_options={"rest.action.multi.allow_explicit_index": "false"},
            node_to_node_encryption=True,
            enforce_https=True,
            tls_security_policy=opensearch.TLSSecurityPolicy.TLS_1_2,
            logging=opensearch.LoggingOptions(
                slow_search_log_enabled=True,
                slow_search_log_group=log_groups["SlowSearchLogs"],
                slow_index_log_enabled=True,
                slow_index_log_group=log_groups["SlowIndexLogs"],
                app_log_enabled=True,
                app_log_group=log_groups["AppLogs"],
            ),
            # Our own resource policy below instead of the construct's custom resource (a Lambda function).
            suppress_logs_resource_policy=True,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.domain.node.add_dependency(self._log_delivery_policy(domain_name, list(log_groups.values())))
        self.endpoint = "https://" + self.domain.domain_endpoint

    def _log_delivery_policy(self, domain_name: str, log_groups: list[logs.ILogGroup]) -> logs.ResourcePolicy:
        """Lets OpenSearch Service write this domain's logs (the domain refuses log options it cannot deliver)."""
        # Named after the stack and region: two stacks (or stages) never share a policy name.
        name = f"{Stack.of(self).stack_name}-{Aws.REGION}-opensearch-logs"
        return logs.ResourcePolicy(
            self,
            "LogDelivery",
            resource_policy_name=name,
            policy_statements=[
                iam.PolicyStatement(
                    principals=[iam.ServicePrincipal("es.amazonaws.com")],
                    actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                    resources=[group.log_group_arn for group in log_groups],
                    conditions={
                        "StringEquals": {"aws:SourceAccount": Stack.of(self).account},
                        "ArnLike": {"aws:SourceArn": self.domain_arn},
                    },
                )
            ],
        )

    def http_resources(self) -> list[str]:
        return [self.domain_arn, f"{self.domain_arn}/*"]

    def defer_to_iam(self) -> None:
        """Resource policy: principals of this account, as far as their IAM policies allow (no anonymous access).
        With the account as principal the resource policy grants no one anything by itself: each request needs an
        identity policy allowing its method and path, which only the function roles have (infra/permissions.py)."""
        if self.domain is None:
            return  # an existing domain's policy is its owner's: docs/aws.md says what it should say
        policy = iam.PolicyDocument(
            statements=[
                iam.PolicyStatement(
                    effect=iam.Effect.ALLOW,
                    principals=[iam.AccountRootPrincipal()],
                    actions=["es:ESHttp*"],
                    resources=[f"{self.domain_arn}/*"],
                )
            ]
        )
        # Set on the L1 resource (not the construct's `access_policies`, which adds a custom resource) so that
        # the template and cdk-nag both see it.
        cast(opensearch.CfnDomain, self.domain.node.default_child).access_policies = policy.to_json()
