"""Issue 13 item 5: a slow or hung dependency on the request path is a JSON 503 `dependency_unavailable` within the
request's budget - never API Gateway's 504. The query function runs on the AWS adapters (moto), with the search
cluster, the embedding provider or DynamoDB replaced by a real TCP server on 127.0.0.1 that accepts and never
answers."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator

import pytest

from functions import query as query_function
from kindex.adapters.aws import boto, dynamodb_table
from kindex.adapters.aws.dynamodb_table import DynamoDbTable
from kindex.adapters.aws.opensearch_index import OpenSearchIndex
from kindex.domain import budget
from kindex.domain.errors import DependencyFailed
from kindex.domain.models import CollectionInput, DocumentInput
from tests.conftest import load_event
from tests.support.aws import LambdaContext
from tests.support.aws_deployment import AwsStack, aws_stack
from tests.support.blackhole import BlackHole

pytestmark = pytest.mark.integration


class ShortContext(LambdaContext):
    """A Lambda invocation with `seconds` left (an api/query function's timeout is 28 s; tests use less)."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)


def query_event(collection: str, body: dict, tenant: str = "t") -> dict:
    event = copy.deepcopy(load_event("api_put_collection.json"))
    path = f"/v1/collections/{collection}/query"
    event.update(
        resource="/v1/collections/{collection}/query",
        path=path,
        httpMethod="POST",
        pathParameters={"collection": collection},
        body=json.dumps(body),
    )
    event["requestContext"].update(
        resourcePath="/v1/collections/{collection}/query", httpMethod="POST", path=f"/prod{path}"
    )
    event["requestContext"]["authorizer"].update(tenant=tenant, role="query")
    return event


def timed_query(event: dict, seconds: float) -> tuple[float, int, dict, dict]:
    started = time.monotonic()
    response = query_function.handler(event, ShortContext(seconds))
    headers = {name: values[-1] for name, values in (response.get("multiValueHeaders") or {}).items()}
    return time.monotonic() - started, response["statusCode"], json.loads(response["body"]), headers


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsStack]:
    with aws_stack(monkeypatch) as stack:
        stack.services.catalog.put_collection("t", "c", CollectionInput(allow_guests=True))
        stack.services.catalog.put_document("t", "c", "d1", DocumentInput(content="penguin colony antarctic"))
        stack.drain()
        yield stack


def swap_search_index(stack: AwsStack, index: OpenSearchIndex) -> None:
    stack.services.adapters.__dict__["search_index"] = index
    stack.services.__dict__.pop("query", None)


def test_the_healthy_path_answers_inside_a_short_budget(stack):
    elapsed, status, body, _ = timed_query(query_event("c", {"query": "penguin"}), seconds=6)
    assert status == 200 and [r["document_id"] for r in body["results"]] == ["d1"]


def test_a_hung_search_cluster_is_a_503_before_the_budget_ends(stack):
    # Given the search cluster accepts connections and never answers
    with BlackHole() as hole:
        swap_search_index(stack, OpenSearchIndex(endpoint=hole.url, sigv4=False, index_prefix="kindex-hung"))
        # When a query arrives with 6 s left in its Lambda (a 5 s budget)
        elapsed, status, body, headers = timed_query(query_event("c", {"query": "penguin", "mode": "keyword"}), 6)
    # Then a JSON 503 saying the dependency is unavailable, with Retry-After, inside the budget (not 4 x 30 s)
    assert status == 503, body
    assert body["error"] == "dependency_unavailable" and "search cluster" in body["message"]
    assert headers["Retry-After"] == "2"
    assert elapsed < 6.0
    # And the one retry was tried: two connections, not the background profile's four
    assert hole.connections == 2


def test_a_hung_embedding_provider_is_a_503_before_the_budget_ends(stack, monkeypatch):
    # Given a collection on an OpenAI model whose endpoint never answers
    with BlackHole() as hole:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-budget")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{hole.url}/v1")
        stack.services.catalog.put_collection(
            "t", "o", CollectionInput(allow_guests=True, embedding_model="openai:text-embedding-3-small")
        )
        # When a (vector) query arrives with 5 s left (a 4 s budget)
        elapsed, status, body, _ = timed_query(query_event("o", {"query": "penguin", "mode": "vector"}), 5)
    # Then 503 dependency_unavailable (not 422, not the ingest path's 6 x 30 s), inside the budget
    assert status == 503, body
    assert body["error"] == "dependency_unavailable" and "embedding provider" in body["message"], body
    assert "sk-test" not in json.dumps(body)
    assert elapsed < 5.0 and hole.connections >= 1


@pytest.fixture
def hung_dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[BlackHole]:
    """DynamoDB's endpoint accepts connections and never answers (the shared clients point at it)."""
    with BlackHole() as hole:
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", hole.url)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        dynamodb_table.dynamodb_client.cache_clear()
        try:
            yield hole
        finally:
            dynamodb_table.dynamodb_client.cache_clear()


GET = {"TableName": "kindex", "Key": {"pk": {"S": "a"}, "sk": {"S": "b"}}}


def test_a_hung_metadata_store_fails_fast_with_one_retry(hung_dynamodb):
    # When a request with a full budget reads an item
    started = time.monotonic()
    with budget.for_request(ShortContext(27), limit_s=25.0), pytest.raises(DependencyFailed, match="unreachable"):
        DynamoDbTable("kindex")._call("get_item", GET)
    elapsed = time.monotonic() - started
    # Then it failed after two attempts of at most connect + read timeout each, not botocore's 6 x 60 s
    assert hung_dynamodb.connections == 2
    assert elapsed < boto.REQUEST_WORST_S


def test_near_the_end_of_the_budget_there_is_no_retry_and_then_no_call(hung_dynamodb):
    # Given a request whose budget holds one attempt but not two
    with budget.for_request(ShortContext(boto.REQUEST_WORST_S), limit_s=25.0):
        assert boto.profile("the metadata store") == boto.LAST_TRY
        # When it reads an item / Then one attempt is made
        with pytest.raises(DependencyFailed, match="unreachable"):
            DynamoDbTable("kindex")._call("get_item", GET)
        assert hung_dynamodb.connections == 1
    # And a request whose budget does not hold one attempt sends nothing at all
    with budget.for_request(ShortContext(boto.ATTEMPT_WORST_S), limit_s=25.0):
        with pytest.raises(budget.BudgetSpent, match="metadata store did not answer"):
            DynamoDbTable("kindex")._call("get_item", GET)
    assert hung_dynamodb.connections == 1
    # And outside a request the background profile applies
    assert boto.profile("the metadata store") == boto.BACKGROUND


def test_the_authorizer_checks_keys_within_its_budget_and_a_hung_store_is_not_a_401(hung_dynamodb, monkeypatch):
    # Given the authorizer on the AWS backend whose key store (DynamoDB) hangs
    from functions import authorizer
    from kindex.adapters.aws.dynamodb_metadata import DynamoDbMetadataStore
    from kindex.app.keys import KeyService

    keys = KeyService(DynamoDbMetadataStore("kindex"))
    event = load_event("authorizer_request.json")
    event["headers"]["Authorization"] = "Bearer kdx_0123456789abcdef_" + "x" * 43
    started = time.monotonic()
    # When a request arrives / Then the authorizer fails as a dependency failure (API Gateway: JSON 503), not with
    # "Unauthorized" (a 401 would tell a valid caller its key is wrong), and within its budget
    with pytest.raises(DependencyFailed):
        authorizer.handler(event, ShortContext(10), keys=keys)
    assert time.monotonic() - started < authorizer.AUTHORIZER_BUDGET_S
    assert hung_dynamodb.connections >= 1
