"""Who may do what: every data permission of every function role, in one table-like module.

CDK grant helpers are used only where they are exact (DynamoDB action sets, SQS send); S3, OpenSearch and
Secrets Manager statements are spelled out so that each role gets only the actions its code calls.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs

from infra.functions import KindexFunction
from infra.search import Search
from infra.secrets import Secrets
from infra.storage import BLOB_PREFIX, Storage

ES_READ = ["es:ESHttpGet", "es:ESHttpHead", "es:ESHttpPost"]  # searches are POSTs
ES_WRITE = ES_READ + ["es:ESHttpPut", "es:ESHttpDelete"]
S3_READ_OBJECTS = ["s3:GetObject", "s3:GetObjectVersion"]
S3_LIST = ["s3:ListBucket", "s3:ListBucketVersions"]
# Removing a blob removes every version of it (DeleteObjects with version ids), not just a delete marker.
S3_DELETE = ["s3:DeleteObject", "s3:DeleteObjectVersion"]


def grant_least_privilege(functions: dict[str, KindexFunction], *, storage: Storage, search: Search,
                          secrets: Secrets, ingest_queue: sqs.IQueue) -> None:
    """api: documents CRUD, uploads, and POST .../reindex (which runs one collection's pass inline, so it enqueues
    too); query: read-only except its query log, no S3 at all; ingest: turn blobs into vectors and remove deleted
    ones; authorizer: read a key item; reindex: read everything, enqueue work, delete blobs of deleted collections."""
    table = storage.table
    api, query, ingest = functions["api"], functions["query"], functions["ingest"]
    authorizer, reindex = functions["authorizer"], functions["reindex"]

    table.grant_read_write_data(api.role)
    ingest_queue.grant_send_messages(api.role)
    api.add_to_role(
        _s3_objects(storage, S3_READ_OBJECTS + ["s3:PutObject"] + S3_DELETE),
        _s3_list(storage),
        _es(search, ES_WRITE),
        _secrets(secrets.tenant_secrets_arn(), ["secretsmanager:GetSecretValue", "secretsmanager:CreateSecret",
                                                 "secretsmanager:PutSecretValue"]),
    )

    table.grant_read_data(query.role)
    table.grant(query.role, "dynamodb:PutItem")  # the query log that POST /v1/citations reads back
    query.add_to_role(
        _es(search, ES_READ),
        _secrets(secrets.tenant_secrets_arn(), ["secretsmanager:GetSecretValue"]),
        _secrets(secrets.openai_key.secret_arn, ["secretsmanager:GetSecretValue"]),  # to embed the question
    )

    table.grant_read_write_data(ingest.role)
    ingest.add_to_role(
        _s3_objects(storage, S3_READ_OBJECTS + S3_DELETE),
        _s3_list(storage),
        _es(search, ES_WRITE),
        _secrets(secrets.openai_key.secret_arn, ["secretsmanager:GetSecretValue"]),
    )

    table.grant(authorizer.role, "dynamodb:GetItem")

    table.grant_read_write_data(reindex.role)
    ingest_queue.grant_send_messages(reindex.role)
    reindex.add_to_role(
        _s3_objects(storage, S3_READ_OBJECTS + S3_DELETE),
        _s3_list(storage),
        _es(search, ES_WRITE),
        _secrets(secrets.openai_key.secret_arn, ["secretsmanager:GetSecretValue"]),
    )


def _s3_objects(storage: Storage, actions: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=actions, resources=[storage.objects_arn()])


def _s3_list(storage: Storage) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=S3_LIST, resources=[storage.bucket.bucket_arn],
                               conditions={"StringLike": {"s3:prefix": [BLOB_PREFIX + "*"]}})


def _es(search: Search, actions: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=actions, resources=search.http_resources())


def _secrets(arn: str, actions: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=actions, resources=[arn])
