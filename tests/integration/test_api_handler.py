"""The API and authorizer Lambda handlers, called with API Gateway REST proxy events from tests/events/."""

import copy
import json

import pytest

from functions import api, authorizer, query
from tests.conftest import load_event
from tests.support.roles import REQUESTS, ROLES, ROUTE_ROLES

pytestmark = pytest.mark.integration


class Context:
    function_name = "kindex-api"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:kindex-api"
    aws_request_id = "req-1"


def call(event):
    response = api.handler(event, Context())
    return response["statusCode"], json.loads(response["body"]) if response.get("body") else None


def test_put_collection_event_creates_then_updates(local_container):
    # Given the sample PUT event from an admin of tenant acme
    event = load_event("api_put_collection.json")
    # When it is handled twice
    status, body = call(copy.deepcopy(event))
    assert status == 201
    assert body["id"] == "My Collection" and body["query_groups"] == ["staff", "admins"]
    status, body = call(copy.deepcopy(event))
    # Then the second is an update of the same collection, stored for tenant acme only
    assert status == 200
    assert local_container.adapters.metadata.get_collection("acme", "My Collection").title == "Handbook"
    assert local_container.adapters.metadata.get_collection("default", "My Collection") is None


def test_collection_says_when_its_chunks_exceed_its_model_window(local_container):
    # Given a collection saved with MiniLM (256-token window) and the default maxChars 2000 chunks
    event = load_event("api_put_collection.json")
    event["body"] = json.dumps({"embedding_model": "local:all-MiniLM-L6-v2"})
    status, body = call(copy.deepcopy(event))
    # Then the answer reports the window, that ~500-token chunks exceed it, and what the model does about it
    assert status == 201
    window = body["embedding_window"]
    assert window["model"] == "local:all-MiniLM-L6-v2" and window["window_tokens"] == 256
    assert window["exceeds_window"] is True and window["long_chunks"] == "pooled"
    assert "256-token window" in window["warning"]
    # When the chunks are made to fit, the warning goes away, and GET says the same as PUT
    event["body"] = json.dumps({"chunking_max_size": 900})
    status, body = call(copy.deepcopy(event))
    assert status == 200 and body["embedding_window"]["exceeds_window"] is False
    assert body["embedding_window"]["warning"] is None
    get = copy.deepcopy(event) | {"httpMethod": "GET", "body": None}
    get["requestContext"] = get["requestContext"] | {"httpMethod": "GET"}
    status, read = call(get)
    assert status == 200 and read["embedding_window"] == body["embedding_window"]
    # And a GET body PUT back is accepted: the report is read-only, ignored on input, never stored
    event["body"] = json.dumps(read)
    status, _ = call(copy.deepcopy(event))
    assert status == 200
    stored = local_container.adapters.metadata.get_collection("acme", "My Collection")
    assert "embedding_window" not in stored.model_dump()


def test_openapi_documents_the_embedding_window_of_a_collection():
    schema = api.resolver.get_openapi_schema().model_dump(by_alias=True)
    properties = schema["components"]["schemas"]["EmbeddingWindow"]["properties"]
    assert {"window_tokens", "exceeds_window", "long_chunks", "warning"} <= set(properties)


def test_a_document_shows_its_revision_and_a_put_cannot_set_it(local_container):
    # Given a collection and a document PUT twice: content, then a title (content unchanged)
    call(load_event("api_put_collection.json"))
    event = load_event("api_put_collection.json")
    event["path"] = "/v1/collections/My%20Collection/documents/d1"
    event["body"] = json.dumps({"content": "text of d1"})
    status, created = call(copy.deepcopy(event))
    event["body"] = json.dumps({"title": "D1"})
    _, retitled = call(copy.deepcopy(event))
    # Then each write has the next revision, while the content version stays
    assert status == 201 and (created["version"], created["revision"]) == (1, 1)
    assert (retitled["version"], retitled["revision"], retitled["title"]) == (1, 2, "D1")
    # When a client sends a revision (a GET body PUT back, or a made-up one) / Then it is ignored like `version`
    event["body"] = json.dumps({**retitled, "revision": 99, "version": 99, "title": "D1 again"})
    status, body = call(copy.deepcopy(event))
    assert status == 200 and (body["version"], body["revision"], body["title"]) == (1, 3, "D1 again")
    assert local_container.adapters.metadata.get_document("acme", "My Collection", "d1").revision == 3
    # And the OpenAPI document describes it as part of the document
    schema = api.resolver.get_openapi_schema().model_dump(by_alias=True)
    assert schema["components"]["schemas"]["DocumentOut"]["properties"]["revision"]["type"] == "integer"


def test_a_collection_shows_its_revision_and_a_put_cannot_set_it(local_container):
    # Given a collection created, then PUT again with a title
    status, created = call(load_event("api_put_collection.json"))
    event = load_event("api_put_collection.json")
    event["body"] = json.dumps({"title": "Retitled"})
    _, retitled = call(copy.deepcopy(event))
    # Then each write has the next revision, and a title change leaves config_version alone
    assert status == 201 and created["revision"] == 1
    assert (retitled["revision"], retitled["title"], retitled["config_version"]) == (
        2,
        "Retitled",
        created["config_version"],
    )
    # When a client sends a revision (a GET body PUT back, or a made-up one) / Then it is ignored like config_version
    event["body"] = json.dumps({**retitled, "revision": 99, "config_version": 99, "title": "Again"})
    status, body = call(copy.deepcopy(event))
    assert status == 200 and (body["revision"], body["config_version"], body["title"]) == (
        3,
        created["config_version"],
        "Again",
    )
    assert local_container.adapters.metadata.get_collection("acme", "My Collection").revision == 3
    # When one sends a revision that is not even a number / Then it is ignored too
    event["body"] = json.dumps({"revision": "x", "title": "Fourth"})
    status, body = call(copy.deepcopy(event))
    assert status == 200 and body["revision"] == 4
    # And the OpenAPI document describes it as part of the collection
    schema = api.resolver.get_openapi_schema().model_dump(by_alias=True)
    assert schema["components"]["schemas"]["CollectionOut"]["properties"]["revision"]["type"] == "integer"


def test_list_documents_event_pages_for_reader_role(local_container):
    call(load_event("api_put_collection.json"))
    for doc in ("d1", "d2", "d3", "d4"):
        put = load_event("api_put_collection.json")
        put["path"] = f"/v1/collections/My%20Collection/documents/{doc}"
        put["body"] = json.dumps({"content": f"text of {doc}"})
        assert call(put)[0] == 201
    status, body = call(load_event("api_list_documents.json"))
    assert status == 200 and body["documents"] == ["d2", "d3"] and body["next_cursor"]
    # while a query key, handed to an application that serves many users, may not list them
    event = load_event("api_list_documents.json")
    event["requestContext"]["authorizer"]["role"] = "query"
    status, body = call(event)
    assert status == 403 and body == {
        "error": "forbidden",
        "message": "this query key may only query and render citations",
    }


def test_query_role_cannot_write(local_container):
    event = load_event("api_put_collection.json")
    event["requestContext"]["authorizer"]["role"] = "query"
    status, body = call(event)
    assert status == 403 and body["error"] == "forbidden"


def test_event_without_authorizer_context_is_unauthorized(local_container):
    event = load_event("api_list_documents.json")
    del event["requestContext"]["authorizer"]
    status, body = call(event)
    assert status == 401 and set(body) == {"error", "message"}


@pytest.mark.parametrize(
    "body, status, code",
    [
        ("{not json", 400, "bad_request"),
        ('{"title": 5}', 422, "invalid_input"),
        ('{"unknown_field": 1}', 422, "invalid_input"),
        ("[]", 422, "invalid_input"),
        ('{"chunking_max_size": "big"}', 422, "invalid_input"),
        ('"just a string"', 422, "invalid_input"),
        ('{"title": "x", "id": "Other"}', 422, "invalid_input"),
    ],
)
def test_bad_bodies_get_4xx_with_error_and_message(local_container, body, status, code):
    event = load_event("api_put_collection.json")
    event["body"] = body
    got_status, got = call(event)
    assert (got_status, got["error"]) == (status, code)
    assert got["message"]
    assert local_container.adapters.metadata.get_collection("acme", "My Collection") is None


def test_unknown_field_is_named_in_the_message(local_container):
    event = load_event("api_put_collection.json")
    event["body"] = '{"titel": "typo"}'
    assert "titel" in call(event)[1]["message"]


def test_oversized_body_is_413(local_container):
    event = load_event("api_put_collection.json")
    event["body"] = json.dumps({"title": "x" * (10 * 1024 * 1024 + 1)})
    assert call(event)[0] == 413


def test_authorizer_allows_a_live_key_and_rejects_others(local_container):
    _, token = local_container.keys.create("acme", "query")
    event = load_event("authorizer_request.json")
    event["headers"]["Authorization"] = f"Bearer {token}"
    policy = authorizer.handler(event, Context())
    assert policy["context"]["tenant"] == "acme" and policy["context"]["role"] == "query"
    statement = policy["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow"
    # the cached policy must cover every route of this API and stage, not only the first one called
    assert statement["Resource"] == "arn:aws:execute-api:eu-west-1:123456789012:abcdef1234/prod/*/*"
    for header in ("Bearer nope", "", f"Basic {token}"):
        event["headers"]["Authorization"] = header
        with pytest.raises(Exception, match="^Unauthorized$"):
            authorizer.handler(event, Context())


C, D = "/v1/collections/c", "/v1/collections/c/documents"


def role_event(role: str, method: str, path: str, body: dict | None = None) -> dict:
    built = load_event("api_list_documents.json")
    built.update(
        httpMethod=method,
        path=path,
        body=json.dumps(body) if body is not None else None,
        queryStringParameters=None,
        multiValueQueryStringParameters=None,
        pathParameters=None,
    )
    built["requestContext"]["authorizer"] = {
        "tenant": "acme",
        "role": role,
        "key_id": f"{role}-key",
        "principalId": f"acme/{role}-key",
    }
    return built


@pytest.fixture
def tenant_data(local_container):
    """Collection `c` with an indexed document `d`, targets for every role's deletes, and a reindex job."""
    from functions import ingest
    from kindex_local.worker import Worker

    assert call(role_event("admin", "PUT", C, {"allow_guests": True}))[0] == 201
    assert call(role_event("admin", "PUT", D + "/d", {"content": "The leave policy grants 25 days."}))[0] == 201
    for role in ROLES:
        assert call(role_event("admin", "PUT", f"/v1/collections/gone-{role}", {}))[0] == 201
        assert call(role_event("admin", "PUT", f"{D}/gone-{role}", {"content": "to delete"}))[0] == 201
    Worker(local_container.adapters.queue, ingest.handler).drain(timeout=60)
    status, job = call(role_event("admin", "POST", C + "/reindex", {"clean": False}))
    assert status == 202
    return {"job": job["id"]}


def test_every_route_has_a_role_decision():
    # Given the API's routes, as its OpenAPI document lists them / Then each one is in the role table
    paths = api.resolver.get_openapi_schema().paths
    routes = {
        (method.upper(), path)
        for path, item in paths.items()
        for method in ("get", "put", "post", "delete", "patch")
        if getattr(item, method, None)
    }
    assert routes == set(ROUTE_ROLES) == set(REQUESTS)


@pytest.mark.parametrize("role", ROLES)
def test_each_role_reaches_exactly_its_routes(local_container, tenant_data, role):
    for route, allowed in ROUTE_ROLES.items():
        path, body = REQUESTS[route]
        path = path.format(role=role, job=tenant_data["job"])
        # When the role calls the route through the API function (and the query function, which serves queries)
        handlers = [api.handler] + ([query.handler] if route[1].endswith("query") else [])
        for handler in handlers:
            response = handler(role_event(role, route[0], path, body), Context())
            got = json.loads(response["body"]) if response.get("body") else None
            # Then an allowed call succeeds and any other is a 403 naming what the key may do
            if role in allowed:
                assert 200 <= response["statusCode"] < 300, (role, route, response["statusCode"], got)
            else:
                assert response["statusCode"] == 403, (role, route, response["statusCode"], got)
                assert got["error"] == "forbidden" and f"this {role} key may only" in got["message"]
    # And a refused write changed nothing
    if role != "admin":
        assert local_container.adapters.metadata.get_collection("acme", f"gone-{role}") is not None
        assert local_container.adapters.metadata.get_document("acme", "c", f"gone-{role}") is not None
        assert local_container.adapters.metadata.get_collection("acme", f"new-{role}") is None
        assert local_container.adapters.metadata.get_document("acme", "c", f"up-{role}") is None
        assert local_container.adapters.metadata.get_document("acme", "c", "imported") is None


@pytest.mark.parametrize("role", ["superuser", "", "ADMIN", "query "])
def test_unknown_roles_reach_nothing(local_container, tenant_data, role):
    # Given an authorizer context whose role this version does not know (a newer key, a corrupt item)
    for route in ROUTE_ROLES:
        path, body = REQUESTS[route]
        status, got = call(role_event(role, route[0], path.format(role="x", job=tenant_data["job"]), body))
        # When it calls any route / Then it is refused, as if it had no key
        assert status == 401 and got["error"] == "unauthorized", (role, route, status)


@pytest.mark.parametrize("segment", ["%FF", "%FE", "%C3%28", "%ED%A0%80"])
def test_path_ids_that_are_not_utf8_are_422_not_merged_into_one(local_container, segment):
    # Given an id whose percent-encoding is not UTF-8 (decoded with replacement, '%FF' and '%FE' were one id)
    call(role_event("admin", "PUT", C, {}))
    # When it is used in a path / Then 422 naming the segment, and nothing was stored
    status, body = call(role_event("admin", "PUT", f"{D}/{segment}", {"content": "x"}))
    assert status == 422 and segment in body["message"]
    assert local_container.adapters.metadata.list_documents("acme", "c", after=None, offset=0, limit=None) == []
