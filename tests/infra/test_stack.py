"""Synthesized-template tests: wiring and least-privilege permissions, cdk-nag, cfn-lint.

The stack is synthesized once per module, with the layers read from small placeholder directories
(`layer_build_dir` context) so these tests never need the real layer build, pip, Docker or network.
aws-cdk-lib is a hard requirement here: without it (requirements-infra.txt) this module fails, never skips.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from infra import build_app
from infra.config import ConfigError, StackConfig
from kindex.adapters.aws.s3_blobs import build_presign_params

pytestmark = pytest.mark.infra

REPO_ROOT = Path(__file__).resolve().parents[2]
HANDLERS = {
    "api": "api.handler",
    "query": "query.handler",
    "ingest": "ingest.handler",
    "authorizer": "authorizer.handler",
    "reindex": "reindex.handler",
    "reindexworker": "reindex_worker.handler",
    "router": "router.handler",
}
OBSERVABILITY_ACTIONS = {
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
}


def cdk_json_context() -> dict:
    return json.loads((REPO_ROOT / "cdk.json").read_text())["context"]


def placeholder_layers(root: Path) -> Path:
    (root / "core" / "python" / "kindex").mkdir(parents=True)
    (root / "core" / "python" / "kindex" / "__init__.py").write_text("")
    (root / "deps" / "python").mkdir(parents=True)
    (root / "deps" / "python" / "PLACEHOLDER").write_text("test layer\n")
    return root


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    root = tmp_path_factory.mktemp("infra")
    context = {**cdk_json_context(), "layer_build_dir": str(placeholder_layers(root / "layers"))}
    app, stack = build_app(context=context, outdir=str(root / "cdk.out"))
    assembly = app.synth()
    template = Template.from_stack(stack)
    return stack, template, template.to_json(), Path(assembly.directory)


@pytest.fixture(scope="module")
def resources(synthesized):
    return synthesized[2]["Resources"]


def of_type(resources: dict, cfn_type: str) -> dict[str, dict]:
    return {lid: r for lid, r in resources.items() if r["Type"] == cfn_type}


def function_id(resources: dict, name: str) -> str:
    [lid] = [
        lid
        for lid, r in of_type(resources, "AWS::Lambda::Function").items()
        if r["Properties"].get("Handler") == HANDLERS[name]
    ]
    return lid


def role_id(resources: dict, name: str) -> str:
    return resources[function_id(resources, name)]["Properties"]["Role"]["Fn::GetAtt"][0]


def statements(resources: dict, name: str) -> list[dict]:
    """Every statement of every policy attached to the function's role (inline and AWS::IAM::Policy)."""
    role = role_id(resources, name)
    found = [s for p in resources[role]["Properties"].get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for policy in of_type(resources, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            found.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return found


def openai_secret_id(resources: dict) -> str:
    [lid] = of_type(resources, "AWS::SecretsManager::Secret")
    return lid


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def actions(resources: dict, name: str, service: str | None = None) -> set[str]:
    every = {a for s in statements(resources, name) for a in as_list(s["Action"])}
    return {a for a in every if service is None or a.startswith(service + ":")}


def resources_for(resources: dict, name: str, action: str) -> list:
    return [r for s in statements(resources, name) if action in as_list(s["Action"]) for r in as_list(s["Resource"])]


def ingest_queue_id(resources: dict) -> str:
    """The ingest queue: the fair queue the ingest function consumes (the reindex work queue has a redrive too)."""
    [lid] = [
        lid
        for lid, r in of_type(resources, "AWS::SQS::Queue").items()
        if "RedrivePolicy" in r["Properties"] and lid.startswith("IngestQueue")
    ]
    return lid


def arrivals_queue_id(resources: dict) -> str:
    """The arrivals queue: the one S3 notifies, which the router consumes."""
    [lid] = [
        lid
        for lid, r in of_type(resources, "AWS::SQS::Queue").items()
        if "RedrivePolicy" in r["Properties"] and lid.startswith("IngestArrivals")
    ]
    return lid


def event_source(resources: dict, queue_id: str) -> dict:
    [mapping] = [
        m["Properties"]
        for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    ]
    return mapping


def reindex_queue_id(resources: dict) -> str:
    [lid] = [
        lid
        for lid, r in of_type(resources, "AWS::SQS::Queue").items()
        if "RedrivePolicy" in r["Properties"] and lid.startswith("ReindexQueue")
    ]
    return lid


def text(value) -> str:
    return json.dumps(value)


# --- functions -------------------------------------------------------------------------------------------------


def test_every_function_runs_python312_arm64_traced_with_both_layers_and_aws_settings(resources):
    for name in HANDLERS:
        # Given the function for this entry point
        props = resources[function_id(resources, name)]["Properties"]
        env = props["Environment"]["Variables"]
        # Then it is configured for the AWS backend
        assert (props["Runtime"], props["Architectures"], props["TracingConfig"]) == (
            "python3.12",
            ["arm64"],
            {"Mode": "Active"},
        )
        assert len(props["Layers"]) == 2
        assert env["KINDEX_BACKEND"] == "aws"
        assert env["POWERTOOLS_SERVICE_NAME"] == f"kindex-{name}" and env["POWERTOOLS_METRICS_NAMESPACE"] == "kindex"
        assert {
            "KINDEX_TABLE_NAME",
            "KINDEX_BUCKET_NAME",
            "KINDEX_OPENSEARCH_ENDPOINT",
            "KINDEX_SECRETS_PREFIX",
        } <= set(env)
        assert env["KINDEX_SECRETS_PREFIX"] == "kindex-dev"


def test_only_embedding_functions_know_the_openai_secret_and_reindex_knows_the_queue(resources):
    # Given each function's environment
    env = {name: resources[function_id(resources, name)]["Properties"]["Environment"]["Variables"] for name in HANDLERS}
    # Then the OpenAI secret name goes exactly to the functions that embed text (the reindex only re-sends documents;
    # the api re-embeds an import into a collection of another model)
    assert {n for n, e in env.items() if "KINDEX_OPENAI_SECRET_NAME" in e} == {"query", "ingest", "api"}
    assert {n for n, e in env.items() if "KINDEX_INGEST_QUEUE_URL" in e} == {"api", "reindexworker", "router"}
    assert {n for n, e in env.items() if "KINDEX_REINDEX_QUEUE_URL" in e} == {"api", "reindex", "reindexworker"}
    assert env["api"]["KINDEX_MAX_BODY_BYTES"] == env["query"]["KINDEX_MAX_BODY_BYTES"] == str(5 * 1024 * 1024)


def test_each_function_has_its_own_role_without_managed_policies(resources):
    # Given the roles of the five functions
    roles = {name: role_id(resources, name) for name in HANDLERS}
    # Then no two share a role and none carries an AWS managed policy
    assert len(set(roles.values())) == len(HANDLERS)
    for role in roles.values():
        assert "ManagedPolicyArns" not in resources[role]["Properties"]


def test_wildcard_resources_are_only_for_actions_without_resource_types(resources):
    for name in HANDLERS:
        # Given every statement of the function's role
        for statement in statements(resources, name):
            # Then a bare "*" resource only ever appears with the X-Ray actions, which have no resource ARNs, and
            # on the ingest role with Textract's text detection, which has none either
            allowed = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
            if name == "ingest":
                allowed |= {"textract:DetectDocumentText"}
            if "*" in as_list(statement["Resource"]):
                assert set(as_list(statement["Action"])) <= allowed


def test_authorizer_can_only_get_items_from_the_table(resources):
    # When the authorizer's actions are listed without logging and tracing
    data_actions = actions(resources, "authorizer") - OBSERVABILITY_ACTIONS
    # Then reading one key item is all it can do
    assert data_actions == {"dynamodb:GetItem"}
    assert text(resources_for(resources, "authorizer", "dynamodb:GetItem")).count("Metadata") == 1


def test_query_function_cannot_touch_s3_and_only_reads_search_and_secrets(resources):
    # Given the query role's actions
    # Then: no S3 at all, OpenSearch reads, secrets read-only (its DynamoDB grants: the test below)
    assert actions(resources, "query", "s3") == set()
    assert actions(resources, "query", "es") == {"es:ESHttpGet", "es:ESHttpPost"}
    assert actions(resources, "query", "secretsmanager") == {"secretsmanager:GetSecretValue"}
    assert "kindex-dev/tenants/*" in text(resources_for(resources, "query", "secretsmanager:GetSecretValue"))


def dynamodb_grants(resources: dict, name: str) -> set[tuple[str, str, str]]:
    """(action, resource, condition) of every DynamoDB grant of the role, the table named `table`."""
    [table] = of_type(resources, "AWS::DynamoDB::Table")
    grants = set()
    for statement in statements(resources, name):
        for action in (a for a in as_list(statement["Action"]) if a.startswith("dynamodb:")):
            for resource in as_list(statement["Resource"]):
                where = text(resource).replace(text({"Fn::GetAtt": [table, "Arn"]}), "table")
                grants.add((action, where, text(statement.get("Condition", {}))))
    return grants


READ = {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}
WRITE = {"dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}


def test_each_role_has_exactly_the_dynamodb_actions_its_code_calls_with_their_conditions(resources):
    attention = text({"Fn::Join": ["", [{"Fn::GetAtt": ["X", "Arn"]}, "/index/attention"]]}).replace(
        text({"Fn::GetAtt": ["X", "Arn"]}), "table"
    )
    on_table = lambda names, condition="{}": {(a, "table", condition) for a in names}  # noqa: E731
    query_log_only = text({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["T#*#Q#*"]}})
    usage_updates = {
        ("dynamodb:UpdateItem", "table", text({"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["T#*#USAGE"]}}))
    }
    # Then each role gets the actions of the adapters it runs, on the table (never `index/*`), and nothing more:
    # no Scan, DescribeTable or stream reads (CDK's table grants would add them); UpdateItem only on the usage
    # partitions (counters and metering); ConditionCheckItem only for the API, whose collection create checks in its
    # transaction that no deletion of that id is pending
    assert dynamodb_grants(resources, "api") == on_table(READ | WRITE | {"dynamodb:ConditionCheckItem"}) | usage_updates
    assert dynamodb_grants(resources, "ingest") == on_table(READ | WRITE) | usage_updates
    assert dynamodb_grants(resources, "reindexworker") == on_table(READ | WRITE) | usage_updates | {
        ("dynamodb:Query", attention, "{}")
    }  # the only index read: the documents needing attention
    # The query role reads, writes only query-log items (a forged `KEY#...`, an admin key, is refused) and meters
    assert dynamodb_grants(resources, "query") == on_table(READ) | usage_updates | {
        ("dynamodb:PutItem", "table", query_log_only)
    }
    assert dynamodb_grants(resources, "authorizer") == on_table({"dynamodb:GetItem"})
    assert dynamodb_grants(resources, "reindex") == on_table({"dynamodb:Query"})
    assert dynamodb_grants(resources, "router") == set()


def iam_requests(operation: str, params: dict) -> list[tuple[str, str]]:
    """(IAM action, partition key) of one DynamoDB request: a transaction's items each as the action IAM authorizes
    it as (AWS, "Using IAM with DynamoDB transactions"), a batch's items each under the batch's own action."""
    key_of = lambda request: (request.get("Key") or request.get("Item"))["pk"]["S"]  # noqa: E731
    if operation == "TransactWriteItems":
        kinds = {
            "Put": "PutItem",
            "Update": "UpdateItem",
            "Delete": "DeleteItem",
            "ConditionCheck": "ConditionCheckItem",
        }
        return [
            (f"dynamodb:{kinds[kind]}", key_of(body)) for item in params["TransactItems"] for kind, body in item.items()
        ]
    if operation == "BatchWriteItem":
        return [
            ("dynamodb:BatchWriteItem", key_of(next(iter(request.values()))))
            for requests in params["RequestItems"].values()
            for request in requests
        ]
    if operation == "BatchGetItem":
        return [("dynamodb:BatchGetItem", key["pk"]["S"]) for t in params["RequestItems"].values() for key in t["Keys"]]
    if operation == "Query":
        return [("dynamodb:Query", params["ExpressionAttributeValues"][":pk"]["S"])]
    return [(f"dynamodb:{operation}", key_of(params))]


def granted(resources: dict, role: str, action: str, pk: str) -> bool:
    """Whether a statement of the role allows `action` on the table for an item of partition `pk` (LeadingKeys)."""
    from fnmatch import fnmatchcase

    [table] = of_type(resources, "AWS::DynamoDB::Table")
    for statement in statements(resources, role):
        if action not in as_list(statement["Action"]):
            continue
        if text({"Fn::GetAtt": [table, "Arn"]}) not in [text(r) for r in as_list(statement["Resource"])]:
            continue
        patterns = statement.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        if patterns is None or any(fnmatchcase(pk, pattern) for pattern in as_list(patterns)):
            return True
    return False


def usage_writes_of(role: str, store, usage) -> None:
    """What each role's code asks of the metadata store that counts or meters usage (kindex/app: the catalog for the
    API, the ingest commit, the reindex worker's deletes, re-embeds and recounts, the query's meter)."""
    from tests.contract.mixins.metadata_store import make_collection, make_document

    limits = usage.limits_for("acme")
    if role == "api":
        store.put_collection("acme", make_collection("docs"), create=True, limits=limits)
        store.put_document("acme", make_document("docs", "d1", revision=1), create=True, limits=limits)
        document = store.get_document("acme", "docs", "d1")
        store.delete_document("acme", "docs", "d1", revision=document.revision)
        usage.report("acme")
        store.mark_deleting("acme", store.get_collection("acme", "docs"), "job-1")  # DELETE of a collection
    elif role == "ingest":
        store.put_document("acme", make_document("docs", "d1", revision=1), create=True)
        document = store.get_document("acme", "docs", "d1")
        grown = document.model_copy(update={"chunk_count": 12, "content_length": 900, "revision": 2})
        store.put_document("acme", grown, create=False, previous=document, limits=limits)
        usage.record_embedding_tokens("acme", 40)
    elif role == "reindexworker":  # (the API created the collection this worker deletes)
        store.put_document("acme", make_document("docs", "d1", revision=1, chunk_count=3), create=True)
        usage.record_embedding_tokens("acme", 40)
        usage.reconcile("acme")
        store.delete_collection("acme", "docs")
        store.end_deletion("acme", "docs", "job-1")
    elif role == "query":
        usage.record_query("acme", embedding_tokens=12)


@pytest.mark.parametrize("role", ["api", "ingest", "reindexworker", "query"])
def test_every_dynamodb_request_that_counts_or_meters_usage_is_granted_to_the_role_that_sends_it(
    resources, role, monkeypatch
):
    from moto import mock_aws

    from kindex.adapters.aws.dynamodb_metadata import DynamoDbMetadataStore
    from kindex.app.usage import UsageService
    from tests.contract.mixins.metadata_store import make_collection
    from tests.support.aws import TABLE, create_metadata_table, fake_aws_env, moto_client

    # Given the metadata store over moto, recording every request it sends
    fake_aws_env(monkeypatch)
    sent: list[tuple[str, str]] = []
    with mock_aws():
        client = moto_client("dynamodb")
        create_metadata_table(client)
        store = DynamoDbMetadataStore(TABLE, client=client)
        if role == "reindexworker":  # a collection the API marked for deletion
            store.put_collection("acme", make_collection("docs"), create=True)
            store.mark_deleting("acme", store.get_collection("acme", "docs"), "job-1")
        client.meta.events.register(
            "provide-client-params.dynamodb.*",
            lambda params, model, **_: sent.extend(iam_requests(model.name, params)),
        )
        # When the role's code counts and meters usage
        usage = UsageService(store, None)
        usage_writes_of(role, store, usage)
    # Then something was sent and the role's policy allows each request (a transaction's Update as UpdateItem)
    assert sent
    refused = [(action, pk) for action, pk in sent if not granted(resources, role, action, pk)]
    assert not refused, f"{role} would be denied {refused}"


def test_the_query_log_condition_admits_every_query_log_key_and_no_key_item():
    from fnmatch import fnmatchcase

    from kindex.adapters.aws.dynamodb_metadata import KEYS_PARTITION, key_pk, tenant_keys_pk
    from kindex.adapters.aws.dynamodb_query_log import query_pk

    # Given the query log's partition keys (tenant and query ids with the characters the key format escapes)
    for tenant, query_id in (("acme", "q1"), ("a#b", "x%y"), ("T", "Q")):
        assert fnmatchcase(query_pk(tenant, query_id), "T#*#Q#*")
    # Then no key item matches (StringLike's `*` is fnmatch's)
    for pk in (key_pk("k1"), KEYS_PARTITION, tenant_keys_pk("acme")):
        assert not fnmatchcase(pk, "T#*#Q#*"), pk


def test_api_function_manages_documents_uploads_and_tenant_secrets(resources):
    # Then the api can write document blobs under tenants/ only, and create or rotate tenant signing secrets
    assert {
        "s3:PutObject",
        "s3:GetObject",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "s3:ListBucket",
        "s3:ListBucketVersions",
    } == actions(resources, "api", "s3") - {"s3:GetObjectVersion"}
    assert "/tenants/*" in text(resources_for(resources, "api", "s3:PutObject"))
    # (RestoreSecret: the adapter restores a tenant secret that was scheduled for deletion when it is set again)
    assert actions(resources, "api", "secretsmanager") == {
        "secretsmanager:GetSecretValue",
        "secretsmanager:CreateSecret",
        "secretsmanager:PutSecretValue",
        "secretsmanager:RestoreSecret",
    }
    for action in ("secretsmanager:CreateSecret", "secretsmanager:RestoreSecret"):
        secret_resources = text(resources_for(resources, "api", action))
        assert "secret:kindex-dev/tenants/*" in secret_resources and "openai" not in secret_resources
    assert actions(resources, "api", "es") == {"es:ESHttpGet", "es:ESHttpPost", "es:ESHttpPut", "es:ESHttpHead"}
    assert "dynamodb:PutItem" in actions(resources, "api") and "dynamodb:DeleteItem" in actions(resources, "api")


def test_ingest_reads_blobs_deletes_versions_writes_index_and_never_writes_s3(resources):
    s3_actions = actions(resources, "ingest", "s3")
    assert {"s3:GetObject", "s3:DeleteObjectVersion", "s3:ListBucketVersions"} <= s3_actions
    assert "s3:PutObject" not in s3_actions
    assert {"es:ESHttpPut", "es:ESHttpHead", "es:ESHttpPost"} <= actions(resources, "ingest", "es")
    assert "es:ESHttpDelete" not in actions(resources, "ingest", "es")
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= actions(
        resources, "ingest", "sqs"
    )
    assert resources_for(resources, "ingest", "secretsmanager:GetSecretValue") == [{"Ref": openai_secret_id(resources)}]


def test_reindex_worker_api_and_router_enqueue_to_the_ingest_queue_and_nobody_else_does(resources):
    # Given the ingest queue
    queue = ingest_queue_id(resources)
    # Then the two functions that re-send documents and the router may send to it, and no other function may
    senders = {n for n in HANDLERS if {"Fn::GetAtt": [queue, "Arn"]} in resources_for(resources, n, "sqs:SendMessage")}
    assert senders == {"reindexworker", "api", "router"}
    # And nobody sends to the arrivals queue: only S3 does (its queue policy, not a role)
    arrivals = {"Fn::GetAtt": [arrivals_queue_id(resources), "Arn"]}
    assert not any(arrivals in resources_for(resources, n, "sqs:SendMessage") for n in HANDLERS)


def test_reindex_worker_reads_and_deletes_blobs_but_never_writes_them(resources):
    assert actions(resources, "reindexworker", "s3") == {
        "s3:GetObject",
        "s3:GetObjectVersion",
        "s3:ListBucket",
        "s3:ListBucketVersions",
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
    }
    assert {"es:ESHttpPut", "es:ESHttpPost"} <= actions(resources, "reindexworker", "es")
    assert "secretsmanager:GetSecretValue" not in actions(resources, "reindexworker")


def test_reindex_planner_may_only_query_the_table_and_send_tasks(resources):
    # Given the planner's data permissions (besides its logs and traces)
    data = [s for s in statements(resources, "reindex") if not set(as_list(s["Action"])) <= OBSERVABILITY_ACTIONS]
    work_queue = reindex_queue_id(resources)
    [failures] = [lid for lid in of_type(resources, "AWS::SQS::Queue") if lid.startswith("ReindexPlanFailures")]
    # Then it may Query the table (keys and collection ids), send tasks to the work queue and, as Lambda's
    # on-failure destination, record a failed plan: nothing else, on nothing else
    granted = {(a, text(r)) for s in data for a in as_list(s["Action"]) for r in as_list(s["Resource"])}
    [table] = of_type(resources, "AWS::DynamoDB::Table")
    assert {(a, r) for a, r in granted if not a.startswith("dynamodb:")} == {
        ("sqs:SendMessage", text({"Fn::GetAtt": [work_queue, "Arn"]})),
        # what CDK grants the function for its on-failure destination
        *{
            (a, text({"Fn::GetAtt": [failures, "Arn"]}))
            for a in ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
        },
    }
    assert {r for a, r in granted if a.startswith("dynamodb:")} == {text({"Fn::GetAtt": [table, "Arn"]})}
    assert {a for a, _ in granted if a.startswith("dynamodb:")} == {"dynamodb:Query"}
    assert not actions(resources, "reindex", "s3") and not actions(resources, "reindex", "es")


def test_reindex_planner_reserves_one_execution_only_when_the_context_asks(tmp_path):
    context = {
        **cdk_json_context(),
        "layer_build_dir": str(placeholder_layers(tmp_path / "layers")),
        "reindex_planner_reserved_concurrency": 1,
    }
    _, stack = build_app(context=context, outdir=str(tmp_path / "out"), checks=False)
    resources = Template.from_stack(stack).to_json()["Resources"]
    assert resources[function_id(resources, "reindex")]["Properties"]["ReservedConcurrentExecutions"] == 1
    with pytest.raises(ConfigError, match="reindex_planner_reserved_concurrency"):
        StackConfig.from_context({**cdk_json_context(), "reindex_planner_reserved_concurrency": 2}.get)


def test_reindex_planner_runs_without_retries_and_records_failures(resources):
    planner = function_id(resources, "reindex")
    # Then it reserves no concurrency by default (a new account's quota of 10 cannot reserve any: Lambda keeps 100
    # unreserved, and the deploy would fail)
    assert "ReservedConcurrentExecutions" not in resources[planner]["Properties"]
    assert not [
        f
        for f in of_type(resources, "AWS::Lambda::Function").values()
        if "ReservedConcurrentExecutions" in f["Properties"]
    ]
    # And a failed (or too long queued) plan is not retried but sent to the failure queue, which pages someone
    [config] = [
        c["Properties"]
        for c in of_type(resources, "AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": planner}
    ]
    assert config["MaximumRetryAttempts"] == 0 and config["MaximumEventAgeInSeconds"] <= 3600
    [failures] = [lid for lid in of_type(resources, "AWS::SQS::Queue") if lid.startswith("ReindexPlanFailures")]
    assert config["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [failures, "Arn"]}
    assert alarmed_queues(resources) >= {failures}


def test_reindex_worker_consumes_its_queue_with_partial_failures_bounded_and_dead_letters(resources):
    queue_id = reindex_queue_id(resources)
    queue = resources[queue_id]["Properties"]
    worker = function_id(resources, "reindexworker")
    # Then the worker (only it) consumes the work queue, reporting failed tasks one by one, at bounded concurrency
    [mapping] = [
        m["Properties"]
        for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    ]
    assert mapping["FunctionName"] == {"Ref": worker}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 2 <= mapping["ScalingConfig"]["MaximumConcurrency"] <= 10
    assert {n for n in HANDLERS if "sqs:ReceiveMessage" in actions(resources, n)} == {
        "ingest",
        "reindexworker",
        "router",
    }
    # And a task that keeps failing goes to the dead-letter queue, which pages someone
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 3
    assert queue["VisibilityTimeout"] >= 6 * resources[worker]["Properties"]["Timeout"]
    dlq = queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    assert dlq in alarmed_queues(resources)
    # And only the planner, the worker (a sweep's next page) and the api (a job's next pages) send tasks
    senders = {
        n for n in HANDLERS if {"Fn::GetAtt": [queue_id, "Arn"]} in resources_for(resources, n, "sqs:SendMessage")
    }
    assert senders == {"reindex", "reindexworker", "api"}


def test_the_table_has_the_sparse_keys_only_attention_index(resources):
    [table] = of_type(resources, "AWS::DynamoDB::Table").values()
    [index] = table["Properties"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "attention" and index["Projection"] == {"ProjectionType": "KEYS_ONLY"}
    assert [k["AttributeName"] for k in index["KeySchema"]] == ["attention", "sk"]


def alarmed_queues(resources: dict) -> set[str]:
    """Queues with an alarm on visible messages."""
    return {
        d["Value"]["Fn::GetAtt"][0]
        for a in of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
        for d in a["Properties"]["Dimensions"]
        if d["Name"] == "QueueName"
    }


def test_no_role_but_the_ingest_role_consumes_the_queue(resources):
    for name in set(HANDLERS) - {"ingest", "reindexworker", "router"}:
        assert "sqs:ReceiveMessage" not in actions(resources, name)
    queue = {"Fn::GetAtt": [ingest_queue_id(resources), "Arn"]}
    arrivals = {"Fn::GetAtt": [arrivals_queue_id(resources), "Arn"]}
    assert queue not in resources_for(resources, "reindexworker", "sqs:ReceiveMessage")
    assert resources_for(resources, "router", "sqs:ReceiveMessage") == [arrivals]
    assert resources_for(resources, "ingest", "sqs:ReceiveMessage") == [queue]


# --- ingest pipeline -------------------------------------------------------------------------------------------


def test_bucket_notifies_the_arrivals_queue_of_created_and_removed_objects_under_tenants(resources):
    # Given the bucket's notification configuration and the arrivals queue
    [notifications] = of_type(resources, "Custom::S3BucketNotifications").values()
    configs = notifications["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    queue = arrivals_queue_id(resources)
    # Then both event types, and only keys under tenants/, reach the arrivals queue (S3 cannot set a message group,
    # so it never sends to the fair ingest queue itself)
    assert sorted(e for c in configs for e in c["Events"]) == ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    for config in configs:
        assert config["Filter"]["Key"]["FilterRules"] == [{"Name": "prefix", "Value": "tenants/"}]
        assert config["QueueArn"] == {"Fn::GetAtt": [queue, "Arn"]}


@pytest.mark.parametrize(("queue_of", "consumer"), [(ingest_queue_id, "ingest"), (arrivals_queue_id, "router")])
def test_queue_redrives_to_dlq_after_three_receives_and_outlasts_six_function_timeouts(resources, queue_of, consumer):
    queue_id = queue_of(resources)
    queue = resources[queue_id]
    assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 3
    timeout = resources[function_id(resources, consumer)]["Properties"]["Timeout"]
    assert queue["Properties"]["VisibilityTimeout"] >= 6 * timeout
    mapping = event_source(resources, queue_id)
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["FunctionName"] == {"Ref": function_id(resources, consumer)}


def test_both_ingest_queues_dead_letter_to_the_one_alarmed_queue(resources):
    # Given the redrive targets of the arrivals and ingest queues
    targets = {
        text(resources[q(resources)]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"])
        for q in (ingest_queue_id, arrivals_queue_id)
    }
    # Then a notification the router cannot forward lands where an ingest failure does (one alarm, one redrive)
    assert len(targets) == 1


def test_the_ingest_queue_is_a_standard_queue_whose_consumers_can_hold_a_noisy_tenant(resources):
    """SQS fair queues are standard queues whose messages carry a group; a tenant is detected as noisy once it has
    over 10 % of the messages in flight and at least 30 of its own, so the ingest functions must hold 30 at once."""
    from infra.ingest import FAIR_QUEUE_NOISY_IN_FLIGHT

    # Given the ingest queue and its event source
    queue_id = ingest_queue_id(resources)
    mapping = event_source(resources, queue_id)
    # Then it is not FIFO (FIFO would serialize each tenant's group) and its consumers hold enough in flight
    assert "FifoQueue" not in resources[queue_id]["Properties"]
    in_flight = mapping["BatchSize"] * mapping["ScalingConfig"]["MaximumConcurrency"]
    assert in_flight >= FAIR_QUEUE_NOISY_IN_FLIGHT


def test_every_sqs_call_the_router_makes_is_granted_to_it_on_the_ingest_queue(resources, monkeypatch):
    """Given the router's code path against SQS under moto (its adapter, batches over ten messages)
    Then each operation it sends maps to an action its role has on the ingest queue."""
    from moto import mock_aws

    from kindex.adapters.aws.sqs_trigger import SqsIngestTrigger
    from kindex.app.ingest_routing import IngestRouter
    from kindex.domain.keys import blob_key
    from tests.support.aws import fake_aws_env, moto_client

    # SendMessageBatch is authorized as SendMessage (SQS API reference, "Actions").
    iam_action = {"SendMessageBatch": "sqs:SendMessage", "SendMessage": "sqs:SendMessage"}
    fake_aws_env(monkeypatch)
    with mock_aws():
        sqs = moto_client("sqs")
        url = sqs.create_queue(QueueName="ingest")["QueueUrl"]
        operations: list[str] = []
        sqs.meta.events.register("before-call.sqs", lambda model, **_: operations.append(model.name))
        bodies = [
            json.dumps({"Records": [{"s3": {"object": {"key": blob_key("t", "c", f"d{n}", "a")}}}]}) for n in range(25)
        ]
        failed = IngestRouter(SqsIngestTrigger(url, "bucket", client=sqs)).route(
            [(f"m{n}", body) for n, body in enumerate(bodies)]
        )
    assert failed == [] and operations == ["SendMessageBatch"] * 3
    granted = resources_for(resources, "router", "sqs:SendMessage")
    assert {iam_action[o] for o in operations} <= actions(resources, "router", "sqs")
    assert granted == [{"Fn::GetAtt": [ingest_queue_id(resources), "Arn"]}]


def test_the_router_moves_arrivals_in_large_batches_and_may_do_nothing_else(resources):
    # Given the router's event source and role
    mapping = event_source(resources, arrivals_queue_id(resources))
    # Then it takes a hundred notifications per invocation (a batching window is required above ten)
    assert mapping["BatchSize"] == 100 and mapping["MaximumBatchingWindowInSeconds"] >= 1
    assert mapping["ScalingConfig"]["MaximumConcurrency"] >= 2
    # And its data permissions are: consume the arrivals queue, send to the ingest queue; no table, bucket, domain
    data = actions(resources, "router") - OBSERVABILITY_ACTIONS
    assert data == {
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:GetQueueUrl",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:SendMessage",
    }
    assert resources_for(resources, "router", "sqs:SendMessage") == [
        {"Fn::GetAtt": [ingest_queue_id(resources), "Arn"]}
    ]


def test_alarms_fire_on_any_dead_letter_and_on_function_errors(resources):
    alarms = list(of_type(resources, "AWS::CloudWatch::Alarm").values())
    source_queue_id = ingest_queue_id(resources)
    dlq_id = resources[source_queue_id]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    dlq_dimension = {"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}
    on_dlq = [
        a["Properties"]
        for a in alarms
        if a["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
        and dlq_dimension in a["Properties"]["Dimensions"]
    ]
    assert len(on_dlq) == 1
    assert (on_dlq[0]["Threshold"], on_dlq[0]["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert on_dlq[0]["AlarmActions"]
    errored = {
        a["Properties"]["Dimensions"][0]["Value"]["Ref"] for a in alarms if a["Properties"]["MetricName"] == "Errors"
    }
    assert errored == {function_id(resources, name) for name in HANDLERS}


# --- storage, search, secrets ----------------------------------------------------------------------------------


def test_document_bucket_is_encrypted_versioned_private_tls_only_and_logged(synthesized, resources):
    _, template, _, _ = synthesized
    [(bucket_id, bucket)] = [
        (lid, r) for lid, r in of_type(resources, "AWS::S3::Bucket").items() if lid.startswith("StorageDocuments")
    ]
    props = bucket["Properties"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    encryption = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert "LoggingConfiguration" in props
    assert any(
        r.get("NoncurrentVersionExpiration", {}).get("NoncurrentDays") == 7
        for r in props["LifecycleConfiguration"]["Rules"]
    )
    assert bucket["DeletionPolicy"] == "Retain"
    # The console's browser uploads: PUT only
    [rule] = props["CorsConfiguration"]["CorsRules"]
    assert rule["AllowedMethods"] == ["PUT"]
    # every header a presigned upload must send is allowed at the preflight (the browser sets Content-Length itself)
    _, signed = build_presign_params(
        "bucket", "tenants/t/collections/c/documents/d/v1.1.a@f.pdf", "application/pdf", 10
    )
    preflighted = {name.lower() for name in signed} - {"content-length"}
    assert preflighted and preflighted <= {name.lower() for name in rule["AllowedHeaders"]}
    # and from the stack's own API only: no wildcard that would admit other accounts' API Gateway pages
    [origin] = rule["AllowedOrigins"]
    [api_id] = of_type(resources, "AWS::ApiGateway::RestApi")
    assert origin == {
        "Fn::Join": [
            "",
            ["https://", {"Ref": api_id}, ".execute-api.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}],
        ]
    }
    assert "*" not in text(origin)
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                )
            },
        },
    )


def test_table_is_on_demand_with_pitr_ttl_and_retained(resources):
    [table] = of_type(resources, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["DeletionPolicy"] == "Retain"


def test_opensearch_domain_is_encrypted_https_only_and_defers_to_the_roles_own_paths(resources):
    [domain] = of_type(resources, "AWS::OpenSearchService::Domain").values()
    props = domain["Properties"]
    assert props["EncryptionAtRestOptions"]["Enabled"] is True
    assert props["NodeToNodeEncryptionOptions"]["Enabled"] is True
    assert props["DomainEndpointOptions"]["EnforceHTTPS"] is True
    assert props["DomainEndpointOptions"]["TLSSecurityPolicy"] == "Policy-Min-TLS-1-2-2019-07"
    assert props["ClusterConfig"]["ZoneAwarenessEnabled"] is False and props["ClusterConfig"]["InstanceCount"] == 1
    # The resource policy defers to IAM: the account is the principal, so each role's own paths decide (naming the
    # roles with es:ESHttp* would grant each of them everything, the query role's deletes included)
    [statement] = props["AccessPolicies"]["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "es:ESHttp*"
    assert text(statement["Principal"]) == text(
        {"AWS": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::", {"Ref": "AWS::AccountId"}, ":root"]]}}
    )
    assert "Condition" not in statement and not [
        r
        for r in resources.values()
        if r["Type"] == "AWS::IAM::Role" and "es:" in text(r["Properties"].get("Policies", ""))
    ]


def test_openai_secret_is_a_generated_placeholder_not_a_value_in_the_template(resources):
    [secret] = of_type(resources, "AWS::SecretsManager::Secret").values()
    assert secret["Properties"]["Name"] == "kindex-dev/openai-api-key"
    assert "SecretString" not in secret["Properties"] and "GenerateSecretString" in secret["Properties"]


# --- schedule and API ------------------------------------------------------------------------------------------


def test_schedule_invokes_the_reindex_planner_hourly(resources):
    [schedule] = of_type(resources, "AWS::Scheduler::Schedule").values()
    assert schedule["Properties"]["ScheduleExpression"] == "rate(1 hour)"
    assert schedule["Properties"]["Target"]["Arn"] == {"Fn::GetAtt": [function_id(resources, "reindex"), "Arn"]}
    assert "DeadLetterConfig" in schedule["Properties"]["Target"]


def test_authorizer_is_a_cached_request_authorizer_on_the_authorization_header(resources):
    [authorizer] = of_type(resources, "AWS::ApiGateway::Authorizer").values()
    props = authorizer["Properties"]
    assert props["Type"] == "REQUEST"
    assert props["IdentitySource"] == "method.request.header.Authorization"
    # A revoked key works until its cached answer expires: a minute by default, set by context
    assert props["AuthorizerResultTtlInSeconds"] == cdk_json_context()["api_authorizer_cache_seconds"] == 60
    assert function_id(resources, "authorizer") in text(props["AuthorizerUri"])


def test_the_authorizer_cache_is_a_context_setting_and_zero_turns_it_off(tmp_path):
    context = {
        **cdk_json_context(),
        "layer_build_dir": str(placeholder_layers(tmp_path / "layers")),
        "api_authorizer_cache_seconds": 0,
    }
    _, stack = build_app(context=context, outdir=str(tmp_path / "out"), checks=False)
    [authorizer] = of_type(Template.from_stack(stack).to_json()["Resources"], "AWS::ApiGateway::Authorizer").values()
    assert authorizer["Properties"]["AuthorizerResultTtlInSeconds"] == 0
    with pytest.raises(ConfigError, match="api_authorizer_cache_seconds"):
        StackConfig.from_context({**cdk_json_context(), "api_authorizer_cache_seconds": 3601}.get)


def _methods(resources: dict) -> dict[str, dict]:
    """'METHOD /path' -> method properties, the path rebuilt from the resource tree."""
    paths = {}
    api_resources = of_type(resources, "AWS::ApiGateway::Resource")

    def path_of(ref) -> str:
        if isinstance(ref, dict) and "Ref" in ref and ref["Ref"] in api_resources:
            props = api_resources[ref["Ref"]]["Properties"]
            return path_of(props["ParentId"]) + "/" + props["PathPart"]
        return ""

    for method in of_type(resources, "AWS::ApiGateway::Method").values():
        props = method["Properties"]
        paths[f"{props['HttpMethod']} {path_of(props['ResourceId']) or '/'}"] = props
    return paths


def test_routes_go_to_the_right_function_and_only_the_api_description_and_the_console_are_public(resources):
    methods = _methods(resources)
    query_fn, api_fn = function_id(resources, "query"), function_id(resources, "api")
    for route in ("POST /v1/collections/{collection}/query", "POST /v1/query"):
        assert query_fn in text(methods[route]["Integration"]["Uri"])
    for route in (
        "GET /v1/collections",
        "PUT /v1/collections/{collection}",
        "POST /v1/citations",
        "POST /v1/collections/{collection}/documents/{document}/upload",
        "GET /v1/jobs/{job}",
        "GET /v1/usage",
        "POST /v1/collections/{collection}/reindex",
        "POST /v1/rights-check-secret",
        "GET /v1/collections/{collection}/documents/{document}/chunks",
        "GET /console",
        "GET /console/{asset}",
    ):
        assert api_fn in text(methods[route]["Integration"]["Uri"])
    public = {route for route, props in methods.items() if props["AuthorizationType"] == "NONE"}
    assert public == {"GET /v1/openapi.json", "GET /docs", "GET /docs/{asset}", "GET /console", "GET /console/{asset}"}
    assert all(props["AuthorizationType"] == "CUSTOM" for route, props in methods.items() if route not in public)


def test_stage_throttles_all_tenants_logs_access_and_the_default_plan_throttles_each_tenant(resources):
    [stage] = of_type(resources, "AWS::ApiGateway::Stage").values()
    assert "DestinationArn" in stage["Properties"]["AccessLogSetting"]
    assert "$context.authorizer.tenant" in stage["Properties"]["AccessLogSetting"]["Format"]
    [settings] = stage["Properties"]["MethodSettings"]
    context = cdk_json_context()
    assert settings["ThrottlingRateLimit"] == context["api_stage_rate_limit"] and settings["DataTraceEnabled"] is False
    assert settings["ThrottlingBurstLimit"] == context["api_stage_burst_limit"]
    [plan] = of_type(resources, "AWS::ApiGateway::UsagePlan").values()  # cdk.json names no per-tenant plan
    assert plan["Properties"]["Throttle"] == {
        "BurstLimit": context["api_burst_limit"],
        "RateLimit": context["api_rate_limit"],
    }


# --- checks ----------------------------------------------------------------------------------------------------


def test_cdk_nag_aws_solutions_has_no_unsuppressed_finding(synthesized):
    stack = synthesized[0]
    annotations = Annotations.from_stack(stack)
    findings = [
        f"{m.id}: {m.entry.data}"[:300]
        for m in annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
        + annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
    ]
    assert findings == []


def test_every_nag_suppression_carries_a_reason(resources):
    suppressions = [
        rule
        for r in resources.values()
        for rule in r.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]
    assert suppressions, "expected the documented suppressions in the template metadata"
    assert all(len(rule.get("reason", "")) >= 40 for rule in suppressions)


def test_cfn_lint_is_clean_apart_from_cdk_redundant_dependencies(synthesized):
    from cfnlint.api import ManualArgs, lint

    template_file = synthesized[3] / f"{synthesized[0].stack_name}.template.json"
    matches = lint(template_file.read_text(), config=ManualArgs(regions=["us-east-1"], ignore_checks=["W3005"]))
    assert [str(m) for m in matches] == []


# --- configuration ---------------------------------------------------------------------------------------------


def test_existing_opensearch_endpoint_replaces_the_domain(tmp_path):
    # Given an existing domain in the context
    context = {
        **cdk_json_context(),
        "layer_build_dir": str(placeholder_layers(tmp_path / "layers")),
        "opensearch_existing_endpoint": "search-shared-abc.eu-west-1.es.amazonaws.com",
        "opensearch_existing_domain_arn": "arn:aws:es:eu-west-1:123456789012:domain/shared",
    }
    # When the stack is built (without cdk-nag: the main fixture covers it)
    _, stack = build_app(context=context, outdir=str(tmp_path / "out"), checks=False)
    resources = Template.from_stack(stack).to_json()["Resources"]
    # Then no domain is created, and the functions use and may only reach the given one
    assert of_type(resources, "AWS::OpenSearchService::Domain") == {}
    env = resources[function_id(resources, "query")]["Properties"]["Environment"]["Variables"]
    assert env["KINDEX_OPENSEARCH_ENDPOINT"] == "https://search-shared-abc.eu-west-1.es.amazonaws.com"
    assert resources_for(resources, "query", "es:ESHttpGet") == [
        f"arn:aws:es:eu-west-1:123456789012:domain/shared/{path}"
        for path in ("kindex-*/_search", "kindex-*/_msearch", "_alias/kindex-*")
    ]
    # and no OpenSearch alarm or dashboard graph points at a domain the stack does not own
    assert not [
        a for a in of_type(resources, "AWS::CloudWatch::Alarm").values() if a["Properties"].get("Namespace") == "AWS/ES"
    ]


def test_existing_endpoint_without_domain_arn_is_refused():
    context = {**cdk_json_context(), "opensearch_existing_endpoint": "search-x.eu-west-1.es.amazonaws.com"}
    with pytest.raises(ConfigError, match="opensearch_existing_domain_arn"):
        StackConfig.from_context(context.get)


def test_missing_layer_build_is_reported_with_the_command_to_run(tmp_path):
    from infra.functions import LayersMissing

    context = {**cdk_json_context(), "layer_build_dir": str(tmp_path / "nothing-built")}
    with pytest.raises(LayersMissing, match="build_layers.py"):
        build_app(context=context, outdir=str(tmp_path / "out"), checks=False)


def test_deployed_routes_are_exactly_the_routes_of_the_openapi_document(resources):
    """Given the OpenAPI document the API function serves (its routes and the query function's)
    Then API Gateway deploys exactly those methods and paths, plus the public ones (the API description, its page
    and the console), and nothing else."""
    from functions import api

    document = api.resolver.get_openapi_schema()
    expected = {
        f"{method.upper()} {path}"
        for path, item in document.paths.items()
        for method in ("get", "put", "post", "delete", "patch")
        if getattr(item, method, None) is not None
    }
    assert expected, "the OpenAPI document lists routes"
    assert set(_methods(resources)) == expected | {
        "GET /v1/openapi.json",
        "GET /docs",
        "GET /docs/{asset}",
        "GET /console",
        "GET /console/{asset}",
    }


def test_each_function_gets_what_its_settings_model_requires(resources):
    """Given each function's settings model (validated at cold start: a missing variable fails the first invocation)
    Then the synthesized function has every variable its model requires on AWS, and runs the aws backend."""
    from kindex.settings import (
        ENV_NAMES,
        ApiSettings,
        AuthorizerSettings,
        IngestSettings,
        QuerySettings,
        ReindexPlannerSettings,
        ReindexSettings,
        RouterSettings,
    )

    models = {
        "api": ApiSettings,
        "authorizer": AuthorizerSettings,
        "ingest": IngestSettings,
        "query": QuerySettings,
        "reindex": ReindexPlannerSettings,
        "reindexworker": ReindexSettings,
        "router": RouterSettings,
    }
    for name, model in models.items():
        environment = resources[function_id(resources, name)]["Properties"]["Environment"]["Variables"]
        assert environment["KINDEX_BACKEND"] == "aws", name
        missing = [ENV_NAMES[field] for field in model.aws_requires if ENV_NAMES[field] not in environment]
        assert missing == [], (name, missing)


# --- OpenSearch paths (least privilege per method and path) ---------------------------------------------------

DOMAIN_ROLES = ("api", "query", "ingest", "reindexworker")


def es_paths(resources: dict, name: str) -> dict[str, set[str]]:
    """action -> the request paths (after `domain/<name>/`) the role may send it to; fails on any other form."""
    found: dict[str, set[str]] = {}
    for statement in statements(resources, name):
        for action in (a for a in as_list(statement["Action"]) if a.startswith("es:")):
            for resource in as_list(statement["Resource"]):
                parts = resource["Fn::Join"][1] if isinstance(resource, dict) else [resource]
                tail = parts[-1]
                assert isinstance(tail, str) and ":domain/kindex-dev/" in tail, resource
                found.setdefault(action, set()).add(tail.split(":domain/kindex-dev/", 1)[1])
    return found


def test_query_role_may_only_search_and_look_up_aliases_on_kindex_indexes(resources):
    # When the query role's OpenSearch grants are read as method -> paths
    paths = es_paths(resources, "query")
    # Then it can search (single and multi) and read the model's aliases, and nothing else: no bulk, no
    # delete_by_query, no PUT or DELETE, no cluster API, no other index
    assert paths == {
        "es:ESHttpPost": {"kindex-*/_search", "kindex-*/_msearch"},
        "es:ESHttpGet": {"kindex-*/_search", "kindex-*/_msearch", "_alias/kindex-*"},
    }


def test_writers_reach_only_kindex_index_paths_and_nobody_reaches_the_cluster_apis(resources):
    for name in ("api", "ingest", "reindexworker"):
        # Given a writer's grants
        paths = es_paths(resources, name)
        # Then: index existence and creation on kindex-* only, bulk, delete_by_query, refresh, searches; never DELETE
        assert paths["es:ESHttpHead"] == paths["es:ESHttpPut"] == {"kindex-*"}
        assert paths["es:ESHttpPost"] == {
            "kindex-*/_search",
            "kindex-*/_msearch",
            "kindex-*/_bulk",
            "kindex-*/_delete_by_query",
            "kindex-*/_refresh",
        }
        assert "es:ESHttpDelete" not in paths and "es:ESHttp*" not in paths
    for name in DOMAIN_ROLES:
        every_path = {p for ps in es_paths(resources, name).values() for p in ps}
        # And no role has a bare domain wildcard or any cluster-level API
        assert not {
            p
            for p in every_path
            if p in ("*", "") or p.startswith(("_cluster", "_nodes", "_snapshot", "_plugins", "_all", "*"))
        }
    # And the authorizer reaches no OpenSearch path at all
    assert es_paths(resources, "authorizer") == {}


def test_granted_index_pattern_covers_every_index_name_the_adapter_uses():
    from fnmatch import fnmatchcase

    from kindex.adapters.aws.opensearch_requests import concrete_index, index_alias

    # Given the names the AWS composition's adapter (default prefix) creates and reads
    for model, dims in (("text-embedding-3-small", 1536), ("hash-embedding", 256), ("Weird/Model Name", 8)):
        alias = index_alias("kindex", model, dims)
        # Then the alias and the index behind it fall under the granted pattern
        assert fnmatchcase(alias, "kindex-*") and fnmatchcase(concrete_index(alias), "kindex-*")


# --- alarms and dashboard ------------------------------------------------------------------------------------


def alarms_by_metric(resources: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for alarm in of_type(resources, "AWS::CloudWatch::Alarm").values():
        found.setdefault(alarm["Properties"]["MetricName"], []).append(alarm["Properties"])
    return found


def test_cloudwatch_of_this_account_may_publish_to_the_alarm_topic(resources):
    [topic_id] = of_type(resources, "AWS::SNS::Topic")
    [policy] = [
        p["Properties"]
        for p in of_type(resources, "AWS::SNS::TopicPolicy").values()
        if {"Ref": topic_id} in p["Properties"]["Topics"]
    ]
    allows = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"]
    # Then exactly one Allow: CloudWatch may publish, only for alarms of this account
    [allow] = allows
    assert allow["Principal"] == {"Service": "cloudwatch.amazonaws.com"} and allow["Action"] == "sns:Publish"
    assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ":alarm:*" in text(allow["Condition"]["ArnLike"]["aws:SourceArn"])
    # And the enforce-SSL Deny is still there
    assert [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]


def test_every_alarm_notifies_the_topic(resources):
    [topic_id] = of_type(resources, "AWS::SNS::Topic")
    for alarm in of_type(resources, "AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]


def test_opensearch_health_ingest_lag_and_api_5xx_alarms(resources):
    by_metric = alarms_by_metric(resources)
    [domain_id] = of_type(resources, "AWS::OpenSearchService::Domain")

    def one(metric: str) -> dict:
        [alarm] = by_metric[metric]
        return alarm

    for metric in (
        "ClusterStatus.red",
        "FreeStorageSpace",
        "JVMMemoryPressure",
        "KNNCircuitBreakerTriggered",
        "CPUCreditBalance",
    ):
        alarm = one(metric)
        assert alarm["Namespace"] == "AWS/ES"
        assert {"Name": "DomainName", "Value": {"Ref": domain_id}} in alarm["Dimensions"]
        assert {d["Name"] for d in alarm["Dimensions"]} == {"DomainName", "ClientId"}
    red, knn = one("ClusterStatus.red"), one("KNNCircuitBreakerTriggered")
    assert (red["Statistic"], red["Threshold"], red["ComparisonOperator"]) == (
        "Maximum",
        1,
        "GreaterThanOrEqualToThreshold",
    )
    assert (knn["Statistic"], knn["Threshold"]) == ("Maximum", 1)
    storage = one("FreeStorageSpace")  # MiB per node: a quarter of the 10 GiB volume
    assert (storage["Statistic"], storage["Threshold"], storage["ComparisonOperator"]) == (
        "Minimum",
        2560,
        "LessThanOrEqualToThreshold",
    )
    assert (one("JVMMemoryPressure")["Threshold"], one("JVMMemoryPressure")["EvaluationPeriods"]) == (95, 3)
    # A one-node domain is yellow by construction (no node for the replica): no yellow alarm there
    assert "ClusterStatus.yellow" not in by_metric
    # The fair ingest queue and the arrivals queue before it (a router that stopped) both alarm on their oldest
    for age in by_metric["ApproximateAgeOfOldestMessage"]:
        assert (age["Threshold"], age["ComparisonOperator"]) == (900, "GreaterThanOrEqualToThreshold")
    aged = {text(a["Dimensions"]) for a in by_metric["ApproximateAgeOfOldestMessage"]}
    assert aged == {
        text([{"Name": "QueueName", "Value": {"Fn::GetAtt": [q(resources), "QueueName"]}}])
        for q in (ingest_queue_id, arrivals_queue_id)
    }
    five_xx = one("5XXError")
    assert five_xx["Namespace"] == "AWS/ApiGateway" and five_xx["Statistic"] == "Sum" and five_xx["Threshold"] == 5


def test_two_m_nodes_get_a_yellow_alarm_and_no_cpu_credit_alarm(tmp_path):
    # Given two general-purpose (non-burstable) data nodes
    context = {
        **cdk_json_context(),
        "layer_build_dir": str(placeholder_layers(tmp_path / "layers")),
        "opensearch_instance_type": "m7g.large.search",
        "opensearch_instance_count": 2,
        "opensearch_volume_gib": 100,
    }
    _, stack = build_app(context=context, outdir=str(tmp_path / "out"), checks=False)
    by_metric = alarms_by_metric(Template.from_stack(stack).to_json()["Resources"])
    # Then a replica can be placed, so yellow alarms (5 minutes in a row); credits do not exist on m7g
    [yellow] = by_metric["ClusterStatus.yellow"]
    assert yellow["EvaluationPeriods"] == 5
    assert "CPUCreditBalance" not in by_metric
    assert by_metric["FreeStorageSpace"][0]["Threshold"] == 25600


def test_dashboard_shows_ingest_lag_query_percentiles_errors_and_opensearch_health(resources):
    [dashboard] = of_type(resources, "AWS::CloudWatch::Dashboard").values()
    body = text(dashboard["Properties"]["DashboardBody"])
    for needle in (
        "ApproximateAgeOfOldestMessage",
        "p50",
        "p99",
        "5XXError",
        "4XXError",
        "Errors",
        "ClusterStatus.red",
        "JVMMemoryPressure",
        "FreeStorageSpace",
        "KNNCircuitBreakerTriggered",
    ):
        assert needle in body, needle


def test_api_execution_logs_expire_and_exist_before_the_stage(resources):
    [stage_id] = of_type(resources, "AWS::ApiGateway::Stage")
    groups = {
        lid: r
        for lid, r in of_type(resources, "AWS::Logs::LogGroup").items()
        if "API-Gateway-Execution-Logs_" in text(r["Properties"].get("LogGroupName", ""))
    }
    [(group_id, group)] = groups.items()
    assert group["Properties"]["RetentionInDays"] == 30 and group["DeletionPolicy"] == "Delete"
    assert group_id in resources[stage_id]["DependsOn"]
    # Every log group of the stack expires
    assert all("RetentionInDays" in r["Properties"] for r in of_type(resources, "AWS::Logs::LogGroup").values())


def adapter_requests(operations, *, refresh: str = "wait_for", setup=None) -> list[tuple[str, str]]:
    """(method, path) of every request `operations` makes the real adapter send, through a real opensearch-py
    client answered by the OpenSearch double (which checks each request against the API spec). `setup` runs first
    in another adapter (another function's process), and its requests are not counted."""
    from kindex.adapters.aws.opensearch_index import OpenSearchIndex
    from tests.support.opensearch_double import OpenSearchDouble

    double = OpenSearchDouble()
    if setup is not None:
        setup(OpenSearchIndex(double.client()))
        double.requests.clear()
    operations(OpenSearchIndex(double.client(), refresh=refresh))
    assert double.spec_violations == []
    return [(request.method, request.path.split("?", 1)[0]) for request in double.requests]


def allowed(paths: dict[str, set[str]], method: str, path: str) -> bool:
    from fnmatch import fnmatchcase

    # IAM's `*` matches any characters, `/` included, as fnmatch's does
    return any(fnmatchcase(path.lstrip("/"), granted) for granted in paths.get("es:ESHttp" + method.title(), ()))


def records(model_dims: int, count: int, *, tenant: str = "acme", collection: str = "c1", document: str = "d1"):
    from kindex.domain.types import IndexRecord

    return [
        IndexRecord(
            tenant=tenant,
            collection=collection,
            document_id=document,
            chunk_id=f"{document}-{n}",
            vector=[0.5 + n % 7] * model_dims,
            text=f"hello {n}",
        )
        for n in range(count)
    ]


MODEL, OLD_MODEL = "text-embedding-3-small", "text-embedding-ada-002"


def writer_operations(index) -> None:
    """What the writers send (functions/ingest.py, api.py and reindex_worker.py through kindex/compose/aws.py):
    ingest commits a batch's deferred upserts with one refresh per index (an upsert over 500 chunks goes out in
    several bulk requests), replaces and removes documents (deletes by document and chunk ids); the api imports
    (upserts), deletes documents and whole collections, and runs a reindex job's first sweep page (chunk listing,
    orphan deletes); the worker sweeps and switches a collection to a new model (the old model's vectors deleted by
    query, the new model's chunk ids listed), and bulk loaders end with a refresh."""
    writes = [index.upsert_deferred(MODEL, records(4, 600)), index.upsert_deferred(MODEL, records(4, 3, document="d2"))]
    index.commit_deferred(writes)
    index.upsert(MODEL, records(4, 3, document="d3"))  # one bulk request, refresh=wait_for
    index.upsert(MODEL, records(4, 700, document="d4"))  # several bulk requests, then one refresh
    index.upsert(OLD_MODEL, records(8, 2))  # a second model's index (the collection's previous model)
    index.chunk_ids(MODEL, "acme", "c1")
    index.delete(MODEL, "acme", "c1", document_ids=["d1"])
    index.delete(MODEL, "acme", "c1", document_ids=["d4"], chunk_ids=["d4-1", "d4-2"])
    index.delete(OLD_MODEL, "acme", "c1")  # a switch: the old model's vectors of the collection; a collection delete
    index.refresh(MODEL)


def reader_operations(index) -> None:
    """What the query function sends: k-NN and keyword searches (the keyword search first looks up the model's
    aliases), and a k-NN search at a dimension the model does not use (an alias lookup to tell the error)."""
    from kindex.domain.errors import InvalidInput

    index.knn_search(MODEL, "acme", ["c1"], [0.5] * 4, 5)
    index.keyword_search(MODEL, "acme", ["c1"], "hello", 5)
    with pytest.raises(InvalidInput):
        index.knn_search(MODEL, "acme", ["c1"], [0.5] * 6, 5)


def test_every_request_the_adapter_sends_is_granted_to_the_role_that_sends_it(resources):
    writes = adapter_requests(writer_operations)
    no_wait = adapter_requests(writer_operations, refresh="false")
    reads = adapter_requests(reader_operations, setup=lambda index: index.upsert(MODEL, records(4, 2)))
    # Given the requests really sent: index creation, bulk (several for 600 and 700 chunks), deferred and final
    # refreshes, deletes by query, chunk listings, alias lookups and searches
    sent = set(writes + no_wait + reads)
    assert {
        ("HEAD", f"/kindex-{MODEL}-4"),
        ("PUT", f"/kindex-{MODEL}-4-v1"),
        ("POST", f"/kindex-{MODEL}-4/_bulk"),
        ("POST", f"/kindex-{MODEL}-4/_refresh"),
        ("POST", f"/kindex-{OLD_MODEL}-8/_delete_by_query"),
        ("POST", f"/kindex-{MODEL}-4/_search"),
        ("GET", f"/_alias/kindex-{MODEL}-*"),
    } <= sent
    assert writes.count(("POST", f"/kindex-{MODEL}-4/_bulk")) >= 4  # 600 and 700 chunks: over 500 per request
    # And no bulk goes to the domain's root (a root bulk body could name any index)
    assert not [call for call in sent if call[1] in ("/_bulk", "/_msearch", "/_refresh")]
    # Then each is granted to every writer, and the query role's are granted to it
    for name in ("api", "ingest", "reindexworker"):
        paths = es_paths(resources, name)
        assert sorted({call for call in sent if not allowed(paths, *call)}) == [], name
    query_paths = es_paths(resources, "query")
    assert sorted({call for call in reads if not allowed(query_paths, *call)}) == []
    # And none of the writes but the searches and alias lookups they include is open to the query role
    assert {call for call in writes + no_wait if allowed(query_paths, *call)} == {
        call for call in writes + no_wait if call[1].endswith("/_search") or call[1].startswith("/_alias/")
    }


# --- idle cost (scripts/idle_cost.py) --------------------------------------------------------------------------


def idle_cost_module():
    import importlib.util
    import sys

    if "idle_cost" not in sys.modules:  # a script, not a package: load it by path (dataclasses need it registered)
        spec = importlib.util.spec_from_file_location("idle_cost", REPO_ROOT / "scripts" / "idle_cost.py")
        sys.modules["idle_cost"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["idle_cost"]


def test_docs_idle_cost_is_the_one_computed_from_the_template(synthesized):
    idle_cost = idle_cost_module()
    prices = json.loads(idle_cost.PRICES.read_text())
    docs = (REPO_ROOT / "docs" / "aws.md").read_text()
    # Given the template of the default configuration, when its idle cost is rendered
    block = idle_cost.render(synthesized[2], prices)
    # Then docs/aws.md holds exactly that block (refresh: scripts/idle_cost.py --write docs/aws.md)
    assert idle_cost.replace_block(docs, block) == docs
    alarms = len(of_type(synthesized[2]["Resources"], "AWS::CloudWatch::Alarm"))
    assert f"| CloudWatch alarms (standard resolution) | {alarms} x $0.10 |" in block


def test_idle_cost_prices_every_node_and_volume_and_refuses_unknown_types():
    idle_cost = idle_cost_module()
    prices = json.loads(idle_cost.PRICES.read_text())
    domain = {
        "Type": "AWS::OpenSearchService::Domain",
        "Properties": {
            "ClusterConfig": {
                "InstanceType": "t3.medium.search",
                "InstanceCount": 2,
                "DedicatedMasterEnabled": True,
                "DedicatedMasterType": "m6g.large.search",
                "DedicatedMasterCount": 3,
            },
            "EBSOptions": {"EBSEnabled": True, "VolumeType": "gp3", "VolumeSize": 50},
        },
    }
    lines = idle_cost.idle_lines({"Resources": {"D": domain}}, prices)
    by_item = {line.item: line.monthly_usd for line in lines}
    assert by_item["OpenSearch data nodes, t3.medium.search"] == pytest.approx(2 * 730 * 0.073)
    assert by_item["OpenSearch dedicated master nodes, m6g.large.search"] == pytest.approx(3 * 730 * 0.128)
    assert by_item["OpenSearch gp3 storage"] == pytest.approx(100 * 0.122)
    domain["Properties"]["ClusterConfig"]["InstanceType"] = "x99.huge.search"
    with pytest.raises(idle_cost.UnknownPrice, match="x99.huge.search"):
        idle_cost.idle_lines({"Resources": {"D": domain}}, prices)


def test_every_price_names_its_source():
    prices = json.loads(idle_cost_module().PRICES.read_text())
    assert prices["recorded"] and prices["region"] == "us-east-1"
    for name, entry in prices["prices"].items():
        assert entry["source"].startswith("https://"), name


def test_the_index_design_reaches_every_search_function_with_no_replica_on_a_one_node_domain(resources):
    """Given cdk.json's defaults (one data node) Then the functions create indices with no replica (a replica
    cannot share its primary's node: the index would stay yellow), and the documented design defaults."""
    for name in ("api", "query", "ingest", "reindexworker"):
        environment = resources[function_id(resources, name)]["Properties"]["Environment"]["Variables"]
        assert {
            key: value
            for key, value in environment.items()
            if key.startswith("KINDEX_OPENSEARCH_") and key != "KINDEX_OPENSEARCH_ENDPOINT"
        } == {
            "KINDEX_OPENSEARCH_ENGINE": "faiss",
            "KINDEX_OPENSEARCH_SHARDS": "1",
            "KINDEX_OPENSEARCH_REPLICAS": "0",
            "KINDEX_OPENSEARCH_ROUTING_SHARDS": "0",
            "KINDEX_OPENSEARCH_ROUTING_PARTITION_SIZE": "1",
            "KINDEX_OPENSEARCH_HNSW_M": "16",
            "KINDEX_OPENSEARCH_EF_CONSTRUCTION": "128",
            "KINDEX_OPENSEARCH_EF_SEARCH": "100",
            "KINDEX_OPENSEARCH_COMPRESSION": "none",
            "KINDEX_OPENSEARCH_REFRESH_INTERVAL": "1s",
            "KINDEX_OPENSEARCH_REFRESH": "wait_for",
        }, name


def test_a_large_design_in_the_context_becomes_the_adapters_design(monkeypatch):
    # Given a context for a six-node domain with a partitioned, compressed index
    context = {
        **cdk_json_context(),
        "opensearch_instance_count": 6,
        "opensearch_shards": 12,
        "opensearch_routing_partition_size": 4,
        "opensearch_compression": "32x",
        "opensearch_ef_search": 256,
        "opensearch_refresh_interval": "30s",
        "opensearch_refresh": "false",
    }
    config = StackConfig.from_context(context.get)
    # When the functions' settings are loaded from the environment the stack gives them
    from kindex.compose.aws import AwsAdapters
    from kindex.settings import ApiSettings, load_settings

    environment = {
        "KINDEX_BACKEND": "aws",
        "KINDEX_TABLE_NAME": "t",
        "KINDEX_BUCKET_NAME": "b",
        "KINDEX_OPENSEARCH_ENDPOINT": "https://search-x.eu-west-1.es.amazonaws.com",
        **config.search_environment(),
    }
    adapter = AwsAdapters(load_settings(environment, model=ApiSettings)).search_index
    # Then the adapter creates indices exactly as the context said (one replica by default on several nodes)
    assert adapter.design == config.opensearch_index
    assert (
        adapter.design.number_of_shards,
        adapter.design.number_of_replicas,
        adapter.design.routing_partition_size,
        adapter.design.compression,
        adapter.design.ef_search,
    ) == (12, 1, 4, "32x", 256)
    assert environment["KINDEX_OPENSEARCH_REFRESH"] == "false"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"opensearch_replicas": 1}, "below opensearch_instance_count"),
        ({"opensearch_shards": 3, "opensearch_routing_partition_size": 3}, "less than number_of_shards"),
        (
            {"opensearch_shards": 4, "opensearch_routing_partition_size": 2, "opensearch_routing_shards": 64},
            "equals number_of_shards",
        ),
        ({"opensearch_engine": "lucene", "opensearch_compression": "fp16"}, "needs the faiss engine"),
        ({"opensearch_compression": "64x"}, "unknown compression"),
        ({"opensearch_refresh": "true"}, "opensearch_refresh must be one of"),
        ({"opensearch_shards": "many"}, "opensearch_shards must be an integer"),
    ],
)
def test_an_index_design_opensearch_would_refuse_stops_the_synth(overrides, message):
    context = {**cdk_json_context(), **overrides}
    with pytest.raises(ConfigError, match=message):
        StackConfig.from_context(context.get)


def test_the_domain_refuses_indices_named_inside_bulk_bodies(resources):
    """Path-level grants only hold if a body cannot name another index: the domain refuses explicit indices in
    bulk and multi-search bodies."""
    [domain] = of_type(resources, "AWS::OpenSearchService::Domain").values()
    assert domain["Properties"]["AdvancedOptions"]["rest.action.multi.allow_explicit_index"] == "false"


def test_request_functions_stop_before_api_gateways_limit_and_its_own_errors_are_json_503s(resources):
    # The api and query functions' timeout is under API Gateway's 29 s and above their request budget + reserve
    from kindex.domain import budget
    from kindex.settings import Settings

    for name in ("api", "query"):
        timeout = resources[function_id(resources, name)]["Properties"]["Timeout"]
        assert Settings().request_budget_s + budget.RESERVE_S < timeout < 29
    # And an authorizer failure or an integration timeout reaches the caller as JSON 503 dependency_unavailable
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in of_type(resources, "AWS::ApiGateway::GatewayResponse").values()
    }
    for response_type in ("AUTHORIZER_FAILURE", "INTEGRATION_TIMEOUT"):
        assert responses[response_type]["StatusCode"] == "503"
        body = json.loads(responses[response_type]["ResponseTemplates"]["application/json"])
        assert body["error"] == "dependency_unavailable" and body["message"]


# --- names, capacity, new alarms -------------------------------------------------------------------------------


def test_names_that_must_be_unique_carry_what_makes_them_unique(resources):
    # Dashboard names are global to the account: the region keeps the same stage in two regions apart
    [dashboard] = of_type(resources, "AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == {"Fn::Join": ["", ["kindex-dev-", {"Ref": "AWS::Region"}]]}
    # The log delivery policy is named after the stack and the region; the domain is named per stage (domain
    # names are unique per account and region)
    [policy] = of_type(resources, "AWS::Logs::ResourcePolicy").values()
    assert policy["Properties"]["PolicyName"] == {
        "Fn::Join": ["", ["kindex-dev-", {"Ref": "AWS::Region"}, "-opensearch-logs"]]
    }
    [domain] = of_type(resources, "AWS::OpenSearchService::Domain").values()
    assert domain["Properties"]["DomainName"] == "kindex-dev"
    # And every other named resource either holds the stage (its own per-region namespace) or is retained data
    # whose name CloudFormation generates (so a redeploy after destroy never meets a leftover)
    for kind in ("AWS::DynamoDB::Table", "AWS::S3::Bucket"):
        assert all(not {"TableName", "BucketName"} & set(r["Properties"]) for r in of_type(resources, kind).values())


def test_the_stack_states_the_domains_capacity_in_chunks(synthesized):
    from infra.capacity import search_capacity

    stack, _, template, _ = synthesized
    output = template["Outputs"]["SearchCapacityChunks"]
    # Given one t3.small.search (2 GiB: 1 GiB heap, half the rest for graphs), float32 vectors of 1,536 dims, m 16
    # Then about 0.5 GiB / (1.1 x (4 x 1,536 + 8 x 16)) bytes = 77,8xx chunks
    assert output["Value"] == str(stack.capacity.chunks) and 77_000 < stack.capacity.chunks < 78_500
    assert "t3.small.search" in output["Description"]
    # And the formula follows replicas, compression and nodes
    design = stack.config.opensearch_index
    from dataclasses import replace

    assert (
        search_capacity("r6g.large.search", 2, replace(design, number_of_replicas=1)).chunks
        == search_capacity("r6g.large.search", 1, design).chunks
    )
    assert (
        search_capacity("t3.small.search", 1, replace(design, compression="32x", engine="faiss")).chunks
        > 15 * stack.capacity.chunks
    )
    assert search_capacity("x9.huge.search", 1, design).chunks is None


def test_alarms_cover_blocked_writes_snapshots_knn_memory_and_throttles(resources):
    by_metric = alarms_by_metric(resources)
    [blocked] = by_metric["ClusterIndexWritesBlocked"]
    assert (blocked["Statistic"], blocked["Threshold"], blocked["Period"]) == ("Maximum", 1, 300)
    [snapshot] = by_metric["AutomatedSnapshotFailure"]
    assert (snapshot["Statistic"], snapshot["Threshold"]) == ("Maximum", 1)
    # k-NN graph memory: well before the breaker (100 % of its limit)
    [knn] = by_metric["KNNGraphMemoryUsagePercentage"]
    assert knn["Threshold"] <= 75 and knn["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    throttled = {a["Dimensions"][0]["Value"]["Ref"] for a in by_metric["Throttles"]}
    assert throttled == {function_id(resources, name) for name in HANDLERS}


def textract_calls() -> set[str]:
    """The Textract operations kindex/adapters/aws/textract_ocr.py calls (`client.<operation>(...)`), as IAM actions."""
    import ast

    source = (REPO_ROOT / "layers" / "core" / "kindex" / "adapters" / "aws" / "textract_ocr.py").read_text()
    called = {
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "client"
    }
    return {"textract:" + "".join(part.title() for part in name.split("_")) for name in called}


def test_only_the_ingest_role_may_call_textract_and_only_what_the_adapter_calls(resources):
    # Given what the Textract adapter calls (the synchronous text detection of one page)
    assert textract_calls() == {"textract:DetectDocumentText"}
    # Then the ingest role has exactly those Textract actions, on "*" (Textract has no resource types in IAM)
    assert actions(resources, "ingest", "textract") == textract_calls()
    assert resources_for(resources, "ingest", "textract:DetectDocumentText") == ["*"]
    # And no other role has any
    for name in HANDLERS:
        if name != "ingest":
            assert actions(resources, name, "textract") == set(), name
