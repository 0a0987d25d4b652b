"""Who may do what: every data permission of every function role, in one table-like module.

CDK grant helpers are used only where they are exact (SQS send); DynamoDB, S3, OpenSearch and Secrets Manager
statements are spelled out so that each role gets only the actions its code calls (CDK's table grants would add
Scan, UpdateItem, ConditionCheckItem, DescribeTable, stream reads on a table without a stream, and `index/*`).
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs

from infra.functions import KindexFunction
from infra.search import Search
from infra.secrets import Secrets
from infra.storage import ATTENTION_INDEX, BLOB_PREFIX, Storage

# OpenSearch permissions are per HTTP method and request path (`<domain ARN>/<path>`), from what
# kindex/adapters/aws/opensearch_index.py sends: every index it uses is `kindex-<model>-<dims>` (an alias) or
# `kindex-<model>-<dims>-v1` (the index behind it), so both match INDEX_PATTERN. No role may call `_cluster`,
# `_nodes`, `_snapshot`, `_plugins` or delete an index: the adapter never does, and index creation is a PUT on the
# index path itself.
INDEX_PATTERN = "kindex-*"
# Searches (opensearch-py sends them as POST; GET is the same request) and the alias lookup by model.
ES_QUERY_PATHS = {
    "es:ESHttpPost": [f"{INDEX_PATTERN}/_search", f"{INDEX_PATTERN}/_msearch"],
    "es:ESHttpGet": [f"{INDEX_PATTERN}/_search", f"{INDEX_PATTERN}/_msearch", f"_alias/{INDEX_PATTERN}"],
}
# Writers also check and create their index (HEAD/PUT on the index path), bulk-write to it, delete by query and
# refresh it (an ingest batch's deferred commit, an upsert over one bulk request, a backfill's end). The adapter's
# bulk requests go to `<index>/_bulk` with no index in the actions, and the domain refuses explicit indices in
# bodies (`rest.action.multi.allow_explicit_index: false`), so a writer can reach no other index.
ES_WRITE_PATHS = {
    "es:ESHttpHead": [INDEX_PATTERN],
    "es:ESHttpPut": [INDEX_PATTERN],
    "es:ESHttpPost": [
        *ES_QUERY_PATHS["es:ESHttpPost"],
        f"{INDEX_PATTERN}/_bulk",
        f"{INDEX_PATTERN}/_delete_by_query",
        f"{INDEX_PATTERN}/_refresh",
    ],
    "es:ESHttpGet": ES_QUERY_PATHS["es:ESHttpGet"],
}
# DynamoDB: what the adapters (kindex/adapters/aws/dynamodb_*.py) call. TransactWriteItems has no action of its
# own: each Put and Delete inside it is authorized as PutItem and DeleteItem, and a ConditionCheck as
# ConditionCheckItem (AWS, "Using IAM with DynamoDB transactions"): only a collection create has one (no deletion of
# that id may be pending, dynamodb_metadata build_create_collection), and only the API creates collections. An Update
# inside a transaction is authorized as UpdateItem, like a plain UpdateItem: both touch only the tenant's usage
# partition (USAGE_KEYS). No adapter calls Scan or a stream.
DYNAMODB_READ = ["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"]
DYNAMODB_WRITE = ["dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"]
# The query log's partitions (kindex/adapters/aws/dynamodb_query_log.py query_pk: `T#<tenant>#Q#<query id>`, tenant
# and id escaped so neither holds a `#`): the only items the query function writes.
QUERY_LOG_KEYS = ["T#*#Q#*"]
# The usage partition (dynamodb_metadata usage_pk: `T#<tenant>#USAGE`, the tenant escaped): the only items any role
# updates. A counted write (a document or collection created, grown, shrunk or deleted) adds to the tenant's
# counters in the record's own transaction, a collection delete gives its documents' usage back, and queries and
# embedding tokens are metered into the day's item. The pattern also matches the documents partition of a collection
# named `USAGE` (`T#<tenant>#C#USAGE`), which a compromised function could then update; never a key item.
USAGE_KEYS = ["T#*#USAGE"]
S3_READ_OBJECTS = ["s3:GetObject", "s3:GetObjectVersion"]
S3_LIST = ["s3:ListBucket", "s3:ListBucketVersions"]
# Removing a blob removes every version of it (DeleteObjects with version ids), not just a delete marker.
S3_DELETE = ["s3:DeleteObject", "s3:DeleteObjectVersion"]
# OCR of scanned PDF pages (kindex/adapters/aws/textract_ocr.py): one synchronous call per page. Textract's
# DetectDocumentText has no resource types in IAM (nothing to scope it to), so it is granted on "*" to the ingest role
# alone; the document bytes go in the request, so no S3 access for Textract is needed.
TEXTRACT_OCR = ["textract:DetectDocumentText"]


def grant_least_privilege(
    functions: dict[str, KindexFunction],
    *,
    storage: Storage,
    search: Search,
    secrets: Secrets,
    ingest_queue: sqs.IQueue,
    reindex_queue: sqs.IQueue,
) -> None:
    """api: documents CRUD, uploads, and POST .../reindex (which runs a job's first page inline, so it enqueues
    documents and the job's next page too); query: read-only except its query log, no S3 at all; ingest: turn blobs
    into vectors (OCRing scanned pages with Textract) and remove deleted ones; authorizer: read a key item; reindex
    (the planner): query key and collection listings and send tasks, nothing else; reindexworker: read and repair
    documents, vectors and blobs, enqueue documents and next pages (it consumes its queue through the event source);
    router: send to the ingest queue, nothing else (it consumes the arrivals queue through its event source)."""
    table = storage.table
    api, query, ingest = functions["api"], functions["query"], functions["ingest"]
    authorizer, planner, worker = functions["authorizer"], functions["reindex"], functions["reindexworker"]
    router = functions["router"]

    api.add_to_role(
        _dynamodb(table.table_arn, DYNAMODB_READ + DYNAMODB_WRITE + ["dynamodb:ConditionCheckItem"]),
        _usage_updates(table.table_arn),
    )
    ingest_queue.grant_send_messages(api.role)
    reindex_queue.grant_send_messages(api.role)
    api.add_to_role(
        _s3_objects(storage, S3_READ_OBJECTS + ["s3:PutObject"] + S3_DELETE),
        _s3_list(storage),
        *_es(search, ES_WRITE_PATHS),
        # RestoreSecret: a tenant secret someone scheduled for deletion is restored when the tenant sets it again.
        _secrets(
            secrets.tenant_secrets_arn(),
            [
                "secretsmanager:GetSecretValue",
                "secretsmanager:CreateSecret",
                "secretsmanager:PutSecretValue",
                "secretsmanager:RestoreSecret",
            ],
        ),
        # POST .../import into a collection of another model re-embeds the batch's texts.
        _secrets(secrets.openai_key.secret_arn, ["secretsmanager:GetSecretValue"]),
    )

    query.add_to_role(
        _dynamodb(table.table_arn, DYNAMODB_READ),
        # The query log that POST /v1/citations reads back, and nothing else: never a key item (`KEY#...`).
        iam.PolicyStatement(
            actions=["dynamodb:PutItem"],
            resources=[table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": QUERY_LOG_KEYS}},
        ),
        _usage_updates(table.table_arn),  # each query is metered (the day's count and embedding tokens)
        *_es(search, ES_QUERY_PATHS),
        _secrets(secrets.tenant_secrets_arn(), ["secretsmanager:GetSecretValue"]),
        _secrets(secrets.openai_key.secret_arn, ["secretsmanager:GetSecretValue"]),  # to embed the question
    )

    ingest.add_to_role(
        _dynamodb(table.table_arn, DYNAMODB_READ + DYNAMODB_WRITE),
        _usage_updates(table.table_arn),
        _s3_objects(storage, S3_READ_OBJECTS + S3_DELETE),
        _s3_list(storage),
        *_es(search, ES_WRITE_PATHS),
        _secrets(secrets.openai_key.secret_arn, ["secretsmanager:GetSecretValue"]),
        iam.PolicyStatement(actions=TEXTRACT_OCR, resources=["*"]),
    )

    authorizer.add_to_role(_dynamodb(table.table_arn, ["dynamodb:GetItem"]))

    # The planner: Query (the key listing, each tenant's collection ids) and SendMessage(Batch) to its queue.
    planner.add_to_role(
        _dynamodb(table.table_arn, ["dynamodb:Query"]),
        iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[reindex_queue.queue_arn]),
    )

    # SendMessageBatch is authorized as SendMessage (one action for both); the router calls nothing else.
    router.add_to_role(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[ingest_queue.queue_arn]))

    ingest_queue.grant_send_messages(worker.role)
    worker.add_to_role(
        _dynamodb(table.table_arn, DYNAMODB_READ + DYNAMODB_WRITE),
        _usage_updates(table.table_arn),
        # The sparse `attention` index: the only index any function reads (the documents needing a retry).
        _dynamodb(f"{table.table_arn}/index/{ATTENTION_INDEX}", ["dynamodb:Query"]),
        iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[reindex_queue.queue_arn]),  # a sweep's next page
        _s3_objects(storage, S3_READ_OBJECTS + S3_DELETE),
        _s3_list(storage),
        *_es(search, ES_WRITE_PATHS),
    )


def _dynamodb(arn: str, actions: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=actions, resources=[arn])


def _usage_updates(arn: str) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        actions=["dynamodb:UpdateItem"],
        resources=[arn],
        conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": USAGE_KEYS}},
    )


def _s3_objects(storage: Storage, actions: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=actions, resources=[storage.objects_arn()])


def _s3_list(storage: Storage) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        actions=S3_LIST,
        resources=[storage.bucket.bucket_arn],
        conditions={"StringLike": {"s3:prefix": [BLOB_PREFIX + "*"]}},
    )


def _es(search: Search, paths_by_action: dict[str, list[str]]) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(actions=[action], resources=[f"{search.domain_arn}/{path}" for path in paths])
        for action, paths in paths_by_action.items()
    ]


def _secrets(arn: str, actions: list[str]) -> iam.PolicyStatement:
    return iam.PolicyStatement(actions=actions, resources=[arn])
