"""The SDK's request builders for issue 23's fields: attributes and access in upload tickets and document PUTs,
document_access on collections, and the attribute filter of a query sent as the JSON of the filter language, however
it was given (JSON, a `Filter`, a QueryRequest model). Validated by the API's own models before any request."""

import pytest
from pydantic import ValidationError

from kindex.client import F, calls
from kindex.client.models import QueryRequest

pytestmark = pytest.mark.unit

RECENT_EU = {"$and": [{"region": {"$eq": "eu"}}, {"year": {"$gte": 2020}}]}


@pytest.mark.parametrize(
    "filters",
    [
        F.eq("region", "eu") & F.gte("year", 2020),
        {"attributes": F.eq("region", "eu") & F.gte("year", 2020)},
        {"attributes": RECENT_EU},
    ],
)
def test_a_query_sends_the_attribute_filter_as_the_json_of_the_filter_language(filters):
    # When a query is built with the filter given as a Filter, under `attributes`, or as JSON
    call = calls.query("handbook", "leave", filters=filters, groups=["staff"])
    several = calls.query_collections(["a", "b"], "leave", filters=filters)
    # Then the body holds the filter language's JSON (not the parsed tree the API's model keeps)
    assert call.body["filters"] == {"attributes": RECENT_EU} and call.body["groups"] == ["staff"]
    assert several.body["filters"] == {"attributes": RECENT_EU} and several.body["collections"] == ["a", "b"]


def test_a_query_model_with_a_filter_is_sent_as_its_json_too():
    request = QueryRequest.model_validate(
        {"query": "leave", "filters": {"attributes": {"region": "eu"}, "language": "en"}}
    )
    body = calls.query("handbook", request).body
    assert body["filters"] == {"attributes": {"region": {"$eq": "eu"}}, "language": "en"}
    assert calls.query("handbook", "leave").body == {"query": "leave"}


def test_a_filter_the_api_refuses_fails_before_any_request_naming_the_place():
    with pytest.raises(ValidationError, match=r"year.\$gte"):
        calls.query("handbook", "leave", filters={"attributes": {"year": {"$gte": "2020"}}})


@pytest.mark.parametrize("attributes", ["region", ["region"], 7])
def test_an_attribute_filter_that_is_no_object_is_the_models_error_not_a_crash(attributes):
    # When the attribute filter is given as a string, a list or a number (JSON that is no filter object)
    # Then the API's model refuses it before any request, naming the field (before: an AttributeError)
    with pytest.raises(ValidationError, match=r"filters\.attributes"):
        calls.query("handbook", "leave", filters={"attributes": attributes})


def test_attributes_and_access_go_into_the_upload_ticket_and_the_document_put():
    ticket = calls.prepare_upload("c", "d", "f.pdf", 10, attributes={"year": 2024}, access={"groups": ["hr"]})
    assert ticket.body == {"filename": "f.pdf", "size": 10, "attributes": {"year": 2024}, "access": {"groups": ["hr"]}}
    assert calls.prepare_upload("c", "d", "f.pdf", 10).body == {"filename": "f.pdf", "size": 10}
    put = calls.put_document("c", "d", attributes={"tags": ["a"]}, access=None)
    assert put.body == {"attributes": {"tags": ["a"]}, "access": None}  # null removes the access list
    with pytest.raises(ValidationError, match="attributes"):
        calls.put_document("c", "d", attributes={"1st": "x"})
    assert calls.put_collection("c", document_access="required").body == {"document_access": "required"}
    with pytest.raises(ValidationError, match="document_access"):
        calls.put_collection("c", document_access="sometimes")
