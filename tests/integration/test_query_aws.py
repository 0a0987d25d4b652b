"""Permission-aware retrieval on the AWS backend under moto: collections and documents in DynamoDB, chunk texts
fetched from DynamoDB, vectors and BM25 in the OpenSearch double, the rights-check signing secret in Secrets
Manager with a real rights server on 127.0.0.1, the query log in DynamoDB; and the query function called with API
Gateway REST proxy events. Mirrors test_query.py."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator

import pytest

from functions import query as query_function
from kindex.adapters.aws.dynamodb_query_log import DynamoDbQueryLog, query_pk
from kindex.adapters.aws.secrets_manager import SecretsManagerStore
from kindex.adapters.http_rights import HttpRightsEndpoint
from kindex.app.rights import MAX_TIMEOUT
from kindex.domain.errors import Conflict, Forbidden, InvalidInput, NotFound
from kindex.domain.models import CollectionInput, DocumentInput
from kindex.domain.query import CitationsRequest, QueryRequest
from tests.conftest import load_event
from tests.support.aws import TABLE, LambdaContext
from tests.support.aws_deployment import AwsStack, aws_stack
from tests.support.rights_server import RightsServer

pytestmark = pytest.mark.integration

TOPICS = [
    "volcano eruption lava",
    "penguin colony antarctic",
    "violin concerto orchestra",
    "tax return deadline",
    "marathon training plan",
    "coral reef bleaching",
    "quantum entanglement photon",
    "sourdough bread starter",
]


class Env:
    """The deployment plus the small verbs the tests use."""

    def __init__(self, stack: AwsStack):
        self.stack = stack
        self.services = stack.services

    def collection(self, name: str, tenant: str = "t", **fields) -> None:
        self.services.catalog.put_collection(tenant, name, CollectionInput(**fields))

    def document(self, collection: str, doc_id: str, text: str, tenant: str = "t", **fields) -> None:
        self.services.catalog.put_document(tenant, collection, doc_id, DocumentInput(content=text, **fields))

    def query(self, collections: list[str], multi: bool = False, tenant: str = "t", **request):
        request.setdefault("groups", ["staff"])
        return self.services.query.query(tenant, collections, QueryRequest(**request), multi=multi)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    # The rights servers run on 127.0.0.1, which an AWS deployment only calls when its allowlist admits it.
    with aws_stack(monkeypatch, {"KINDEX_RIGHTS_ALLOWED_NETWORKS": "127.0.0.0/8"}) as stack:
        yield Env(stack)


def trusting(env: Env, server: RightsServer) -> RightsServer:
    """AWS calls rights endpoints over https only: make the deployment trust the test server's CA."""
    env.services.adapters.__dict__["rights_endpoint"] = HttpRightsEndpoint(
        env.services.adapters.rights_policy, ssl_context=server.client_ssl_context()
    )
    env.services.__dict__.pop("rights_checks", None)
    env.services.__dict__.pop("query", None)
    return server


def test_aws_adapters_serve_the_query(env):
    # The point of this module: the query path runs on the AWS adapters, not the local ones
    services = env.services
    assert type(services.adapters.metadata).__name__ == "DynamoDbMetadataStore"
    assert type(services.adapters.chunks).__name__ == "DynamoDbChunkStore"
    assert isinstance(services.adapters.query_log, DynamoDbQueryLog) and isinstance(
        services.adapters.secrets, SecretsManagerStore
    )
    assert services.query.index is services.adapters.search_index and services.query.chunks is services.adapters.chunks


def test_collection_gate(env):
    env.collection("guests", allow_guests=True)
    env.collection("staff-only", query_groups=["staff", "hr"])
    env.document("guests", "g1", "public text about volcanoes")
    env.document("staff-only", "s1", "internal text about volcanoes")
    env.stack.drain()
    # guests: anyone, even with no user at all
    assert [r.document_id for r in env.query(["guests"], query="volcanoes", user=None, groups=[]).results] == ["g1"]
    # otherwise the user's groups must meet the collection's query groups
    assert [r.document_id for r in env.query(["staff-only"], query="volcanoes", user="ann", groups=["hr"]).results] == [
        "s1"
    ]
    with pytest.raises(Forbidden):
        env.query(["staff-only"], query="volcanoes", user="bob", groups=["sales"])
    with pytest.raises(NotFound):
        env.query(["missing"], query="volcanoes")
    # several collections: those failing the gate are left out and named
    response = env.query(["guests", "staff-only"], multi=True, query="volcanoes", user="bob", groups=["sales"])
    assert {r.document_id for r in response.results} == {"g1"}
    assert response.denied_collections == ["staff-only"]


def test_results_citations_context_and_query_log(env):
    env.collection("c", query_groups=["staff"], chunking_max_size=60)
    for i, topic in enumerate(TOPICS):
        env.document("c", f"doc-{i}", f"{topic}. " * 6, title=f"Title {i}", url=f"https://example.com/{i}")
    env.stack.drain()
    # When querying in hybrid mode
    response = env.query(["c"], query="penguin colony antarctic", k=4, mode="hybrid")
    # Then the best result carries its document's metadata and its chunk text from DynamoDB
    first = response.results[0]
    assert (first.document_id, first.title, first.url, first.collection, first.citation) == (
        "doc-1",
        "Title 1",
        "https://example.com/1",
        "c",
        1,
    )
    assert "penguin colony antarctic" in first.content
    # And citations are numbered by first appearance of each document
    order = list(dict.fromkeys(r.document_id for r in response.results))
    assert [c.document_id for c in response.citations] == order
    assert all(r.citation == order.index(r.document_id) + 1 for r in response.results)
    assert 'document-id="doc-1"' in response.context and "<CIT document-id />" in response.context
    # And the query's documents were logged in DynamoDB, with a TTL
    item = env.stack.dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": query_pk("t", response.query_id)}, "sk": {"S": "Q"}}
    )["Item"]
    assert int(item["expires_at"]["N"]) > 0
    # When an answer citing them by query_id is rendered
    text = f"Penguins live in colonies <CIT doc-1 />. Not this <CIT doc-99 />. Again <CIT doc-1, {order[-1]} />."
    cited = env.services.citations.render("t", CitationsRequest(text=text, query_id=response.query_id))
    # Then known ids become footnotes in first-seen order with the logged titles and URLs; unknown ids are dropped
    assert [(r.n, r.document_id, r.title, r.url) for r in cited.references][0] == (
        1,
        "doc-1",
        "Title 1",
        "https://example.com/1",
    )
    assert [r.document_id for r in cited.references] == ["doc-1", order[-1]]
    assert "doc-99" not in cited.markdown and "[^1]" in cited.markdown
    assert "[Title 1](https://example.com/1)" in cited.markdown
    # And another tenant cannot use the query id
    with pytest.raises(NotFound):
        env.services.citations.render("u", CitationsRequest(text=text, query_id=response.query_id))


def test_hybrid_finds_what_each_single_mode_misses(env):
    env.collection("c", query_groups=["staff"])
    # keyword-only hit: the exact words buried in a long unrelated text (its vector is diluted)
    filler = " ".join(t for t in TOPICS[2:] for _ in range(3))
    env.document("c", "lexical", f"{filler} running quickly {filler}")
    # vector-only hit: other word forms, same character trigrams (no exact token for BM25)
    env.document("c", "fuzzy", "runners run quick quicker")
    # a decoy closer to the query than "lexical" in trigrams, without its words: the vector top 2 misses "lexical"
    env.document("c", "decoy", "runnable quickie runnels")
    for i, topic in enumerate(TOPICS):
        env.document("c", f"noise-{i}", f"{topic} " * 5)
    env.stack.drain()
    relevant = {"lexical", "fuzzy"}

    def found(mode):
        return {r.document_id for r in env.query(["c"], query="running quickly", k=2, mode=mode).results} & relevant

    assert found("keyword") == {"lexical"} and found("vector") == {"fuzzy"}
    assert found("hybrid") == relevant


def test_two_tenants_with_identical_ids_never_see_each_others_chunks(env):
    # Given two tenants with the same collection id and the same document id
    for tenant in ("t", "u"):
        env.collection("same", tenant=tenant, query_groups=["staff"])
        env.document("same", "same-doc", f"penguin colony belonging to tenant {tenant}", tenant=tenant)
    env.stack.drain()
    # When each queries in every mode / Then each gets exactly its own chunk
    for tenant in ("t", "u"):
        for mode in ("vector", "keyword", "hybrid"):
            response = env.query(["same"], tenant=tenant, query="penguin colony tenant", mode=mode, k=10)
            assert [r.content for r in response.results] == [f"penguin colony belonging to tenant {tenant}"]
    # And deleting one tenant's document leaves the other's answering
    env.services.catalog.delete_document("u", "same", "same-doc")
    env.stack.drain()
    assert env.query(["same"], tenant="u", query="penguin colony").results == []
    assert len(env.query(["same"], tenant="t", query="penguin colony").results) == 1


def test_expand_reads_neighbours_from_dynamodb_for_each_tenant_with_identical_ids(env):
    # Given two tenants with the same ids and a document of one sentence per chunk
    sentences = [f"Sentence {word} of the manual." for word in ("one", "two", "three", "four", "five")]
    for tenant in ("t", "u"):
        env.collection("same", tenant=tenant, query_groups=["staff"], chunking_max_size=40)
        text = " ".join(f"{s[:-1]} for {tenant}." for s in sentences)
        env.document("same", "manual", text, tenant=tenant)
    env.stack.drain()
    for tenant in ("t", "u"):
        chunks = env.services.adapters.chunks.list_chunks(tenant, "same", "manual")
        assert len(chunks) == 5
        # When the middle sentence is found with one neighbour on each side
        (result,) = env.query(
            ["same"], tenant=tenant, query="three", mode="keyword", expand={"before": 1, "after": 1}
        ).results
        # Then the passage is the tenant's own chunks 1-3, offsets and text as stored
        assert result.chunk_ids == [c.chunk_id for c in chunks[1:4]]
        assert (result.start, result.end) == (chunks[1].start, chunks[3].end)
        assert result.content == "".join(c.text for c in chunks[1:4]) and result.content.count(f"for {tenant}.") == 3


@pytest.fixture
def rights(env) -> Iterator[RightsServer]:
    """A collection checked by a real rights server, which knows the secret rotated into Secrets Manager. Its timeout
    is the longest a collection may set: no test here waits for it, and a loaded machine must not turn an answer
    into a timeout."""
    server = trusting(env, RightsServer(tls=True))
    server.secret = env.services.rights_secrets.rotate("t").encode()
    env.collection(
        "ext",
        query_groups=["staff"],
        rights_check_method="external",
        rights_check_method_configuration={"url": server.url, "timeout": MAX_TIMEOUT},
    )
    for i in range(12):
        env.document("ext", f"d{i:02d}", f"penguin report number {i} " + "antarctic ice " * (i % 4))
    env.stack.drain()
    yield server
    server.close()


def test_external_rights_allow_a_subset_with_a_valid_signature(env, rights):
    # The secret is in Secrets Manager under the deployment's prefix (a fresh process would read it there)
    secrets = env.stack.services.adapters.secrets
    stored = secrets.client.get_secret_value(SecretId="kindex/tenants/t/rights-check-signing")
    assert stored["SecretBinary"] == rights.secret
    # Given the endpoint allows two documents
    rights.allowed = {"d03", "d07"}
    # When ann queries
    response = env.query(["ext"], query="penguin report", user="ann", k=5)
    # Then only those are returned, the others counted as denied
    assert {r.document_id for r in response.results} == {"d03", "d07"}
    assert response.denied_count > 0
    # And the request named the user and collection, and carried a signature the server verified
    sent = rights.requests[0]
    assert sent["body"]["username"] == "ann" and sent["body"]["collection"] == "ext"
    assert rights.bad_signatures == 0 and "X-Kindex-Signature" in sent["headers"]
    assert response.warnings == []


def test_rights_failures_fail_closed(env, rights, monkeypatch):
    everything = {f"d{i:02d}" for i in range(12)}
    # A failed call costs its whole budget (a closed port must look like a filtered one): asked of this sleep, which
    # records it instead of waiting the collection's timeout (MAX_TIMEOUT) for each failure
    slept: list[float] = []
    monkeypatch.setattr(env.services.rights_checks, "sleep", slept.append)
    # The endpoint denies everything; answers 500, or garbage, while "allowing" everything; or (last) cannot
    # verify the signature because the secret in Secrets Manager was replaced
    cases = {
        "deny": ("allow", set()),
        "error": ("error", everything),
        "garbage": ("garbage", everything),
        "bad-signature": ("allow", everything),
    }
    for case, (mode, allowed) in cases.items():
        rights.mode, rights.allowed = mode, allowed
        if case == "bad-signature":
            env.services.adapters.secrets.put_secret(
                "tenants/t/rights-check-signing", b"not the secret the server knows"
            )
        # When ann queries / Then nothing is returned and the candidates are counted as denied
        began = time.monotonic()
        response = env.query(["ext"], query="penguin report", user="ann", k=5)
        took = time.monotonic() - began
        assert response.results == [] and response.denied_count > 0, case
        # And only a valid answer that denies is silent
        expected = [] if case == "deny" else [("ext", "rights_check_failed")]
        assert [(w.collection, w.code) for w in response.warnings] == expected, case
        # And a failed call waited until its deadline, a valid answer not at all: each call began after the query
        # did and ends MAX_TIMEOUT after it began, so at least MAX_TIMEOUT minus the query's own time was left
        assert (case == "deny") == (slept == []), (case, slept)
        assert all(seconds >= MAX_TIMEOUT - took for seconds in slept), (case, slept, took)
        slept.clear()
    assert rights.bad_signatures > 0


def test_aws_calls_https_only_and_no_private_address_by_default(monkeypatch):
    # Given an AWS deployment with the default allowlist (nothing private) and tenant t's signing secret
    with aws_stack(monkeypatch) as stack:
        env = Env(stack)
        env.services.rights_secrets.rotate("t")
        for url, rule in [
            ("http://rights.example.com/check", "https"),
            ("https://127.0.0.1:8443/check", "private"),
            ("https://localhost/check", "private"),
            ("https://10.0.0.1/check", "private"),
            ("https://[::ffff:10.0.0.1]/check", "private"),
            ("https://169.254.169.254/latest/meta-data/", "link-local"),
            ("https://[fd00:ec2::254]/", "link-local"),
            ("https://metadata.google.internal/", "metadata"),
        ]:
            # When a collection is saved with one of these URLs / Then it is refused, naming the rule
            with pytest.raises(InvalidInput, match=rule):
                env.collection(
                    "ext",
                    query_groups=["staff"],
                    rights_check_method="external",
                    rights_check_method_configuration={"url": url},
                )
        assert env.services.adapters.metadata.get_collection("t", "ext") is None
        env.collection(
            "ext",
            query_groups=["staff"],
            rights_check_method="external",
            rights_check_method_configuration={"url": "https://rights.example.com/check"},
        )


def test_no_secret_in_secrets_manager_denies_without_calling(env):
    server = trusting(env, RightsServer(tls=True))
    try:
        # Saving is refused without the secret, naming the route that creates it
        with pytest.raises(Conflict, match="POST /v1/rights-check-secret"):
            env.collection(
                "ext2",
                query_groups=["staff"],
                rights_check_method="external",
                rights_check_method_configuration={"url": server.url},
            )
        # A collection stored before that check existed: denied at query time, and the response says why
        env.collection("ext2", query_groups=["staff"])
        stored = env.services.adapters.metadata.get_collection("t", "ext2")
        stored = stored.model_copy(
            update={
                "rights_check_method": "external",
                "revision": stored.revision + 1,
                "rights_check_method_configuration": {"url": server.url},
            }
        )
        env.services.adapters.metadata.put_collection("t", stored, create=False)
        env.document("ext2", "d", "penguin")
        env.stack.drain()
        response = env.query(["ext2"], query="penguin")
        assert response.results == [] and response.denied_count == 1
        assert [(w.collection, w.code) for w in response.warnings] == [("ext2", "rights_check_secret_missing")]
        assert server.requests == []
    finally:
        server.close()


def query_event(collection_path: str, body: dict, tenant: str = "acme", role: str = "query") -> dict:
    """An API Gateway REST proxy event for POST /v1/collections/{collection}/query, shaped like tests/events/."""
    event = copy.deepcopy(load_event("api_put_collection.json"))
    path = f"/v1/collections/{collection_path}/query"
    event.update(
        resource="/v1/collections/{collection}/query",
        path=path,
        httpMethod="POST",
        pathParameters={"collection": collection_path},
        body=json.dumps(body),
    )
    event["requestContext"].update(
        resourcePath="/v1/collections/{collection}/query", httpMethod="POST", path=f"/prod{path}"
    )
    event["requestContext"]["authorizer"].update(tenant=tenant, role=role)
    return event


def call(event: dict) -> tuple[int, dict]:
    response = query_function.handler(event, LambdaContext())
    return response["statusCode"], json.loads(response["body"])


def test_query_function_answers_an_api_gateway_event(env):
    # Given tenant acme's collection with a space in its id, and an indexed document
    env.collection("My Collection", tenant="acme", query_groups=["staff"])
    env.document("My Collection", "d1", "penguin colony antarctic", tenant="acme", title="Penguins")
    env.collection("private", tenant="acme", query_groups=["hr"])
    env.stack.drain()
    # When a query-role key's request arrives through API Gateway
    status, body = call(query_event("My%20Collection", {"query": "penguin colony", "k": 3, "groups": ["staff"]}))
    # Then 200 with the result, its content and citation
    assert status == 200
    assert [(r["document_id"], r["content"], r["title"]) for r in body["results"]] == [
        ("d1", "penguin colony antarctic", "Penguins")
    ]
    assert body["citations"][0]["document_id"] == "d1" and body["query_id"]
    # And the gate, a missing collection, another tenant's principal and a bad body map to their statuses
    assert call(query_event("private", {"query": "penguin", "groups": ["staff"]}))[0] == 403
    assert call(query_event("nope", {"query": "penguin"}))[0] == 404
    assert call(query_event("My%20Collection", {"query": "penguin", "groups": ["staff"]}, tenant="t"))[0] == 404
    status, body = call(query_event("My%20Collection", {"query": "penguin", "k": 0}))
    assert status == 422 and body["error"] == "invalid_input"
