"""Query and citations through `kindex serve` over HTTP, with both roles and an external rights check."""

import pytest

from tests.support.rights_server import RightsServer
from tests.support.waiting import wait_settled

pytestmark = pytest.mark.e2e


def test_query_then_citations_over_http(server):
    admin = server.session(server.admin_key)
    reader = server.session(server.create_key("default", "query"))
    url = server.url("/v1/collections/kb")
    assert admin.put(url, json={"query_groups": ["staff"]}).status_code == 201
    for doc_id, text in {
        "leave": "Staff get 25 days of annual leave.",
        "travel": "Travel is booked through the portal.",
        "pets": "Dogs are welcome in the office on Fridays.",
    }.items():
        admin.put(
            f"{url}/documents/{doc_id}",
            json={"content": text, "title": doc_id.title(), "url": f"https://wiki.example/{doc_id}"},
        )
    wait_settled(admin, url, ["leave", "travel", "pets"])
    # the query role may query
    response = reader.post(
        f"{url}/query", json={"query": "annual leave days", "user": "ann", "groups": ["staff"], "k": 2}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["results"][0]["document_id"] == "leave" and body["results"][0]["citation"] == 1
    assert body["citations"][0] == {
        "n": 1,
        "document_id": "leave",
        "collection": "kb",
        "title": "Leave",
        "url": "https://wiki.example/leave",
        "sections": [],
    }
    # the gate answers 403 for a single collection
    denied = reader.post(f"{url}/query", json={"query": "leave", "user": "bob", "groups": ["sales"]})
    assert denied.status_code == 403 and denied.json()["error"] == "forbidden"
    # multi-collection query
    multi = reader.post(server.url("/v1/query"), json={"query": "leave", "collections": ["kb"], "groups": ["staff"]})
    assert multi.status_code == 200 and multi.json()["results"]
    # citations by query_id, for the query role too
    answer = "You get 25 days <CIT leave />. Also <CIT made-up />."
    cited = reader.post(server.url("/v1/citations"), json={"text": answer, "query_id": body["query_id"]})
    assert cited.status_code == 200, cited.text
    assert cited.json()["markdown"] == ("You get 25 days[^1]. Also.\n\n[^1]: [Leave](https://wiki.example/leave)\n")
    assert "<sup" in cited.json()["html"]
    assert reader.post(server.url("/v1/citations"), json={"text": answer, "query_id": "nope"}).status_code == 404
    # bad query bodies are 422
    for bad in (
        {"query": ""},
        {"query": "x", "k": 0},
        {"query": "x", "k": 101},
        {"query": "x", "mode": "magic"},
        {"query": "x" * 8001},
        {"query": "x", "filters": {"colour": "red"}},
    ):
        assert reader.post(f"{url}/query", json=bad).status_code == 422, bad


def test_external_rights_over_http(server):
    admin = server.session(server.admin_key)
    rights = RightsServer()
    try:
        secret = admin.post(server.url("/v1/rights-check-secret"))
        assert secret.status_code == 200 and len(secret.json()["secret"]) == 64
        rights.secret = secret.json()["secret"].encode()
        url = server.url("/v1/collections/private")
        admin.put(
            url,
            json={
                "allow_guests": True,
                "rights_check_method": "external",
                "rights_check_method_configuration": {"url": rights.url, "timeout": 1},
            },
        )
        for doc_id in ("open", "secret"):
            admin.put(f"{url}/documents/{doc_id}", json={"content": f"quarterly numbers {doc_id}"})
        wait_settled(admin, url, ["open", "secret"])
        rights.allowed = {"open"}
        body = admin.post(f"{url}/query", json={"query": "quarterly numbers", "user": "ann"}).json()
        assert [r["document_id"] for r in body["results"]] == ["open"] and body["denied_count"] == 1
        assert body["warnings"] == []
        assert rights.bad_signatures == 0
        assert "secret" not in str(body["results"]) and "secret" not in body["context"]
        # the query role cannot rotate the secret
        reader = server.session(server.create_key("default", "query"))
        assert reader.post(server.url("/v1/rights-check-secret")).status_code == 403
    finally:
        rights.close()
