"""Records stored before ids were normalized (decomposed 'café', a zero-width space): the API function still reads
and deletes them by the path they were stored under, while new paths name the NFC form."""

import copy
import json
from urllib.parse import quote

import pytest

from functions import api
from kindex.domain.models import Collection, Document
from kindex_local.deployment import build_worker
from tests.conftest import load_event
from tests.integration.test_api_handler import Context

pytestmark = pytest.mark.integration

NFC_CAFE, NFD_CAFE = "caf\u00e9", "cafe\u0301"


def call(method: str, *ids: str, body: dict | None = None) -> tuple[int, dict | None]:
    event = copy.deepcopy(load_event("api_put_collection.json"))
    segments = [quote(i, safe="") for i in ids]
    path = "/v1/collections/" + segments[0] + ("/documents/" + segments[1] if len(ids) > 1 else "")
    event.update(
        httpMethod=method,
        path=path,
        body=json.dumps(body) if body is not None else None,
        resource="/v1/collections/{collection}" + ("/documents/{document}" if len(ids) > 1 else ""),
        pathParameters=dict(zip(("collection", "document"), segments)),
    )
    event["requestContext"].update(httpMethod=method, path="/prod" + path, resourcePath=event["resource"])
    response = api.handler(event, Context())
    return response["statusCode"], json.loads(response["body"]) if response.get("body") else None


def test_a_record_stored_under_a_decomposed_id_stays_readable_and_deletable(local_container):
    # Given a collection and a document stored (by an earlier version) under ids in decomposed form
    store = local_container.adapters.metadata
    store.put_collection("acme", Collection(id=NFD_CAFE, embedding_model="hash:384"), create=True)
    store.put_document("acme", Document(id=NFD_CAFE, collection=NFD_CAFE, title="old"), create=True)
    store.put_document("acme", Document(id="zero\u200bwidth", collection=NFD_CAFE, title="zw"), create=True)
    # When they are read by the path they were stored under / Then they are found
    status, body = call("GET", NFD_CAFE)
    assert status == 200 and body["id"] == NFD_CAFE
    status, body = call("GET", NFD_CAFE, NFD_CAFE)
    assert status == 200 and body["title"] == "old"
    assert call("GET", NFD_CAFE, "zero\u200bwidth")[1]["title"] == "zw"  # refused only when created
    # And a new record under the NFC form is another one, found first by either form
    assert call("PUT", NFC_CAFE, body={})[0] == 201
    assert call("GET", NFD_CAFE)[1]["id"] == NFC_CAFE
    # And the old ones delete by their own form
    assert call("DELETE", NFD_CAFE, NFD_CAFE)[0] == 204 and store.get_document("acme", NFD_CAFE, NFD_CAFE) is None
    assert call("DELETE", NFD_CAFE, "zero\u200bwidth")[0] == 204
    # (a collection delete is a job, gone from reads at once; while it runs, a DELETE by either form answers that job,
    # so the old form's own delete follows once the NFC twin's job is done)
    assert call("DELETE", NFC_CAFE)[0] == 202 and store.get_collection("acme", NFC_CAFE) is None
    build_worker().drain()
    assert call("DELETE", NFD_CAFE)[0] == 202 and store.get_collection("acme", NFD_CAFE) is None
    build_worker().drain()
    assert call("DELETE", NFD_CAFE)[0] == 404
