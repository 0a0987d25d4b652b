"""Secrets: the OpenAI API key placeholder and the name space of the tenants' rights-check signing secrets."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

OPENAI_SECRET_SUFFIX = "openai-api-key"
TENANT_SECRETS_PATH = "tenants"


class Secrets(Construct):
    """Creates `{prefix}/openai-api-key` with a generated placeholder value (no key ever appears in the template);
    the operator replaces it with `aws secretsmanager put-secret-value`. Rights-check signing secrets are created
    at run time by the api function as `{prefix}/tenants/<tenant>/...`: only their ARN pattern is defined here."""

    def __init__(self, scope: Construct, construct_id: str, *, prefix: str) -> None:
        super().__init__(scope, construct_id)
        self.prefix = prefix
        self.openai_key = secretsmanager.Secret(
            self,
            "OpenAiApiKey",
            secret_name=f"{prefix}/{OPENAI_SECRET_SUFFIX}",
            description="OpenAI API key for embeddings: replace the generated placeholder with the real key",
            removal_policy=RemovalPolicy.DESTROY,
        )

    def tenant_secrets_arn(self) -> str:
        """Every tenant secret; the trailing `*` also covers the random suffix Secrets Manager appends to names."""
        stack = Stack.of(self)
        return stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{self.prefix}/{TENANT_SECRETS_PATH}/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
