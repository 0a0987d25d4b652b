"""The API and authorizer Lambda handlers, called with API Gateway REST proxy events from tests/events/."""

import copy
import json

import pytest

from functions import api, authorizer
from tests.conftest import load_event

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
    assert local_container.metadata.get_collection("acme", "My Collection").title == "Handbook"
    assert local_container.metadata.get_collection("default", "My Collection") is None


def test_list_documents_event_pages_for_query_role(local_container):
    call(load_event("api_put_collection.json"))
    for doc in ("d1", "d2", "d3", "d4"):
        put = load_event("api_put_collection.json")
        put["path"] = f"/v1/collections/My%20Collection/documents/{doc}"
        put["body"] = json.dumps({"content": f"text of {doc}"})
        assert call(put)[0] == 201
    status, body = call(load_event("api_list_documents.json"))
    assert status == 200 and body["documents"] == ["d2", "d3"] and body["next_cursor"]


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


@pytest.mark.parametrize("body, status, code", [
    ("{not json", 400, "bad_request"),
    ('{"title": 5}', 422, "invalid_input"),
    ('{"unknown_field": 1}', 422, "invalid_input"),
    ("[]", 422, "invalid_input"),
    ('{"chunking_max_size": "big"}', 422, "invalid_input"),
    ("\"just a string\"", 422, "invalid_input"),
    ('{"title": "x", "id": "Other"}', 422, "invalid_input"),
])
def test_bad_bodies_get_4xx_with_error_and_message(local_container, body, status, code):
    event = load_event("api_put_collection.json")
    event["body"] = body
    got_status, got = call(event)
    assert (got_status, got["error"]) == (status, code)
    assert got["message"]
    assert local_container.metadata.get_collection("acme", "My Collection") is None


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
