"""`kindex serve` against hostile ids and each key role: `.`/`..` ids are refused, names once used for temp files
are ordinary documents that index and delete without leftovers, and a query key can query and cite, nothing else."""

import http.client
import json
import subprocess
import sys
from urllib.parse import quote, urlparse

import pytest
import requests

from tests.e2e.test_local_ingest import wait_for_status
from tests.support.roles import REQUESTS, ROLES, ROUTE_ROLES

pytestmark = pytest.mark.e2e


def url(server, *parts: str) -> str:
    return server.url("/v1/collections" + "".join("/" + quote(p, safe="") for p in parts))


def raw_request(server, method: str, raw_path: str, body: dict | None = None) -> tuple[int, dict]:
    """A request whose path is sent byte for byte (HTTP clients remove `.` and `..` segments before sending)."""
    address = urlparse(server.base_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        connection.request(
            method,
            raw_path,
            body=json.dumps(body or {}),
            headers={"Authorization": f"Bearer {server.admin_key}", "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def blob_files(server) -> list[str]:
    root = server.data_dir / "blobs"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("dots", [".", ".."])
def test_dot_ids_are_422_naming_the_field_and_store_nothing(server, dots):
    admin = server.session(server.admin_key)
    assert admin.put(url(server, "ids"), json={}).status_code in (200, 201)
    before = blob_files(server)
    encoded = "%2E" * len(dots)
    encoded_cases = {
        "collection id": [admin.put(server.url(f"/v1/collections/{encoded}"), json={})],
        "document id": [
            admin.put(server.url(f"/v1/collections/ids/documents/{encoded}"), json={"content": "x"}),
            admin.post(
                server.url(f"/v1/collections/ids/documents/{encoded}/upload"), json={"filename": "a.txt", "size": 1}
            ),
        ],
        "filename": [admin.post(url(server, "ids", "documents", "d", "upload"), json={"filename": dots, "size": 1})],
    }
    for field, responses in encoded_cases.items():
        for response in responses:
            assert (response.status_code, response.json()["error"]) == (422, "invalid_input"), (field, response.text)
            assert field in response.json()["message"], (field, response.text)
    # Sent literally, the segment reaches the API as the same id (or, were the path normalised first, no route)
    for field, raw_path in [
        ("collection id", f"/v1/collections/{dots}"),
        ("document id", f"/v1/collections/ids/documents/{dots}"),
    ]:
        status, body = raw_request(server, "PUT", raw_path, {} if field == "collection id" else {"content": "x"})
        assert (status, body["error"]) in ((422, "invalid_input"), (404, "not_found")), (raw_path, status, body)
        assert status == 404 or field in body["message"]
    listed = admin.get(server.url("/v1/collections"), params={"number": -1}).json()["collections"]
    assert "." not in listed and ".." not in listed
    assert admin.get(url(server, "ids", "documents")).json()["documents"] == []
    assert blob_files(server) == before


def test_dot_tenants_are_refused_by_the_cli(server):
    for tenant in (".", ".."):
        created = subprocess.run(
            [
                sys.executable,
                "-m",
                "kindex_local.cli",
                "keys",
                "create",
                "--tenant",
                tenant,
                "--role",
                "admin",
                "--data-dir",
                str(server.data_dir),
            ],
            capture_output=True,
            text=True,
        )
        assert created.returncode == 2 and "'.' or '..'" in created.stderr


@pytest.mark.parametrize("document, filename", [(".tmp-x", None), ("d", ".tmp-x"), (".tmp-abcd1234", ".tmp-k2j4_x9a")])
def test_names_like_temp_files_are_indexed_and_deleted_without_leftovers(server, document, filename):
    admin = server.session(server.admin_key)
    collection = "temps"
    admin.put(url(server, collection), json={"allow_guests": True})
    doc_url = url(server, collection, "documents", document)
    # Given a document with a temp-file-like id and/or a file with a temp-file-like name
    if filename is None:
        assert admin.put(doc_url, json={"content": "The glacier report mentions moraines."}).status_code == 201
    else:
        text = b"The glacier report mentions moraines."
        ticket = admin.post(
            doc_url + "/upload", json={"filename": filename, "mimetype": "text/plain", "size": len(text)}
        ).json()
        assert requests.put(ticket["url"], data=text, headers=ticket["headers"]).status_code == 200
    # When it is indexed / Then it is found by a query
    body, _ = wait_for_status(admin, doc_url)
    assert body["status"] == "indexed", body
    hits = admin.post(url(server, collection, "query"), json={"query": "glacier moraines", "mode": "keyword"}).json()
    assert [hit["document_id"] for hit in hits["results"]] == [document]
    tenant_prefix = "tenants/default/collections/temps/"
    assert any(path.startswith(tenant_prefix) for path in blob_files(server))
    # And when it is deleted, no file of it is left and a query finds nothing
    assert admin.delete(doc_url).status_code == 204
    assert [path for path in blob_files(server) if path.startswith(tenant_prefix)] == []
    assert admin.post(url(server, collection, "query"), json={"query": "glacier moraines"}).json()["results"] == []


def test_each_role_reaches_exactly_its_routes_over_http(server):
    # Given a tenant with an indexed document, delete targets for each role and a reindex job
    tenant = "roles"
    admin = server.session(server.create_key(tenant, "admin"))
    assert admin.put(url(server, "c"), json={"allow_guests": True}).status_code == 201
    assert (
        admin.put(url(server, "c", "documents", "d"), json={"content": "The leave policy grants 25 days."}).status_code
        == 201
    )
    for role in ROLES:
        assert admin.put(url(server, f"gone-{role}"), json={}).status_code == 201
        assert admin.put(url(server, "c", "documents", f"gone-{role}"), json={"content": "x"}).status_code == 201
    wait_for_status(admin, url(server, "c", "documents", "d"))
    job = admin.post(url(server, "c", "reindex"), json={}).json()["id"]
    sessions = {role: server.session(server.create_key(tenant, role)) for role in ROLES}
    for role, session in sessions.items():
        for route, allowed in ROUTE_ROLES.items():
            path, body = REQUESTS[route]
            # When the role's key calls the route over HTTP
            response = session.request(route[0], server.url(path.format(role=role, job=job)), json=body)
            # Then allowed calls succeed and the others are 403 JSON, whatever the route class
            if role in allowed:
                assert 200 <= response.status_code < 300, (role, route, response.status_code, response.text)
            else:
                assert response.status_code == 403, (role, route, response.status_code, response.text)
                assert response.json()["error"] == "forbidden"
    # And the query key really could query (the route is not merely reachable: it answers from the index)
    hits = sessions["query"].post(url(server, "c", "query"), json={"query": "leave policy", "mode": "keyword"}).json()
    assert [hit["document_id"] for hit in hits["results"]] == ["d"]
    # while it cannot read the document's content or chunks that the query answered from
    assert sessions["query"].get(url(server, "c", "documents", "d")).status_code == 403
    assert sessions["query"].get(url(server, "c", "documents", "d", "chunks")).status_code == 403
    assert sessions["reader"].get(url(server, "c", "documents", "d")).json()["content"].startswith("The leave")
