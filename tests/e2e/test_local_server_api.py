"""`kindex serve` over real HTTP: collections and documents, auth, paging, limits, tenant isolation."""

import os
import stat
import subprocess
import sys
import time
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.e2e


def path(*parts: str) -> str:
    return "/v1/collections" + "".join("/" + quote(p, safe="") for p in parts)


def test_first_start_writes_admin_key_0600_and_serves_docs(server):
    key_file = server.data_dir / "admin-key"
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    assert any(server.admin_key in line for line in server.output)  # printed once at first start
    spec = server.session().get(server.url("/v1/openapi.json"))
    assert spec.status_code == 200
    paths = spec.json()["paths"]
    assert "/v1/collections/{collection}/documents/{document}" in paths
    docs = server.session().get(server.url("/docs"))
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def wait_for_job(session, server, job_id: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while (job := session.get(server.url(f"/v1/jobs/{job_id}")).json())["status"] != "completed":
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    return job


def test_collection_lifecycle_with_partial_update(server):
    admin = server.session(server.admin_key)
    # Given a new collection
    created = admin.put(server.url(path("Team Handbook")), json={"title": "Handbook", "query_groups": "staff,hr"})
    assert created.status_code == 201
    assert created.json()["query_groups"] == ["staff", "hr"]
    # When only allow_guests changes
    updated = admin.put(server.url(path("Team Handbook")), json={"allow_guests": True})
    # Then the other fields are kept
    assert updated.status_code == 200
    body = admin.get(server.url(path("Team Handbook"))).json()
    assert body["title"] == "Handbook" and body["allow_guests"] is True and body["query_groups"] == ["staff", "hr"]
    # And a GET body can be PUT back as is (read-only fields are ignored)
    assert admin.put(server.url(path("Team Handbook")), json=body).status_code == 200
    # When it is deleted, it is gone at once, with a delete job
    deleted = admin.delete(server.url(path("Team Handbook")))
    assert deleted.status_code == 202 and deleted.json()["kind"] == "delete", deleted.text
    assert admin.get(server.url(path("Team Handbook"))).status_code == 404
    # And deleting again answers the same job while it runs, 404 once it completed
    again = admin.delete(server.url(path("Team Handbook")))
    assert again.status_code == 404 or (again.status_code, again.json()["id"]) == (202, deleted.json()["id"])
    wait_for_job(admin, server, deleted.json()["id"])
    assert admin.delete(server.url(path("Team Handbook"))).status_code == 404


def test_documents_with_unicode_ids_paging_and_cascade_delete(server):
    admin = server.session(server.admin_key)
    assert admin.put(server.url(path("docs")), json={}).status_code == 201
    ids = ["My Document", "déjà vu", "日本語", "a#b%c?d", "zeta"]
    for doc_id in ids:
        response = admin.put(server.url(path("docs", "documents", doc_id)), json={"title": doc_id, "content": "text"})
        assert response.status_code == 201, response.text
        assert response.json()["status"] == "pending" and response.json()["version"] == 1
    got = admin.get(server.url(path("docs", "documents", "déjà vu"))).json()
    assert got["id"] == "déjà vu" and got["content"] == "text" and got["collection"] == "docs"
    # all, in stable id order
    listing = admin.get(server.url(path("docs", "documents")), params={"number": -1}).json()
    assert listing["documents"] == sorted(ids)
    # XWiki start/number
    page = admin.get(server.url(path("docs", "documents")), params={"start": 1, "number": 2}).json()
    assert page["documents"] == sorted(ids)[1:3]
    # cursor paging walks everything exactly once
    seen, cursor = [], None
    while True:
        params = {"number": 2, **({"cursor": cursor} if cursor else {})}
        chunk = admin.get(server.url(path("docs", "documents")), params=params).json()
        seen += chunk["documents"]
        cursor = chunk["next_cursor"]
        if not cursor:
            break
    assert seen == sorted(ids)
    assert admin.get(server.url(path("docs")), params={}).json()["document_count"] == len(ids)
    # content change bumps the version and resets status; same content changes nothing
    changed = admin.put(server.url(path("docs", "documents", "zeta")), json={"content": "new text"}).json()
    assert changed["version"] == 2 and changed["status"] == "pending"
    same = admin.put(server.url(path("docs", "documents", "zeta")), json={"content": "new text"}).json()
    assert same["version"] == 2
    retitled = admin.put(server.url(path("docs", "documents", "zeta")), json={"title": "Z"}).json()
    assert retitled["version"] == 2 and retitled["title"] == "Z"
    # delete a document, then the collection with the rest
    assert admin.delete(server.url(path("docs", "documents", "zeta"))).status_code == 204
    assert admin.delete(server.url(path("docs", "documents", "zeta"))).status_code == 404
    deleted = admin.delete(server.url(path("docs")))
    assert deleted.status_code == 202, deleted.text
    wait_for_job(admin, server, deleted.json()["id"])
    assert admin.put(server.url(path("docs")), json={}).status_code == 201
    assert admin.get(server.url(path("docs", "documents"))).json()["documents"] == []
    blobs = server.data_dir / "blobs" / "tenants" / "default" / "collections" / "docs"
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))


def test_auth_errors(server):
    assert server.session().get(server.url("/v1/collections")).status_code == 401
    assert server.session("kdx_bogus_" + "x" * 43).get(server.url("/v1/collections")).status_code == 401
    reader = server.session(server.create_key("default", "reader"))
    assert reader.get(server.url("/v1/collections")).status_code == 200
    denied = reader.put(server.url(path("nope")), json={})
    assert denied.status_code == 403 and denied.json()["error"] == "forbidden"
    querier = server.session(server.create_key("default", "query"))  # may query, never list or read
    assert querier.get(server.url("/v1/collections")).status_code == 403
    assert server.session(server.admin_key).get(server.url(path("nope"))).status_code == 404


def test_revoked_key_stops_working_while_server_runs(server):
    key = server.create_key("default", "admin")
    session = server.session(key)
    assert session.get(server.url("/v1/collections")).status_code == 200
    listing = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "keys", "list", "--data-dir", str(server.data_dir)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key_id = key.split("_")[1]
    assert key_id in listing and key not in listing
    subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "keys", "revoke", key_id, "--data-dir", str(server.data_dir)],
        check=True,
        capture_output=True,
    )
    assert session.get(server.url("/v1/collections")).status_code == 401


def test_bad_input_is_4xx_and_changes_nothing(server):
    admin = server.session(server.admin_key)
    assert admin.put(server.url(path("keep")), json={"title": "kept"}).status_code == 201
    url = server.url(path("keep"))
    cases = [
        (admin.put(url, data="{broken", headers={"Content-Type": "application/json"}), 400),
        (admin.put(url, json={"unknown": 1}), 422),
        (admin.put(url, json={"chunking_max_size": 3}), 422),
        (admin.put(url, json={"id": "other"}), 422),
        (admin.put(url, json={"rights_check_method": "external"}), 422),
        (admin.put(url, data=b"\xff\xfe\x00garbage"), 400),
        (admin.put(url, data="x" * (10 * 1024 * 1024 + 10)), 413),
        (admin.get(server.url("/v1/collections"), params={"number": "lots"}), 422),
        (admin.get(server.url("/v1/collections"), params={"cursor": "garbage!"}), 422),
        (admin.put(server.url(path("keep", "documents", "d")), json={"collection": "other"}), 422),
        (admin.put(server.url(path("x" * 256)), json={}), 422),
        (admin.put(server.url("/v1/collections/a%2Fb"), json={}), 422),
        (admin.put(server.url(path("missing", "documents", "d")), json={"content": "x"}), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, (status, response.text)
        assert set(response.json()) == {"error", "message"}
    assert admin.get(url).json()["title"] == "kept"


def test_two_tenants_are_isolated(server):
    acme = server.session(server.create_key("acme", "admin"))
    globex = server.session(server.create_key("globex", "admin"))
    assert acme.put(server.url(path("shared-name")), json={"title": "acme's"}).status_code == 201
    assert (
        acme.put(server.url(path("shared-name", "documents", "d1")), json={"content": "acme secret"}).status_code == 201
    )
    # globex cannot see, change or delete acme's collection: it is simply not there
    assert globex.get(server.url(path("shared-name"))).status_code == 404
    assert globex.get(server.url(path("shared-name", "documents", "d1"))).status_code == 404
    assert globex.delete(server.url(path("shared-name"))).status_code == 404
    assert "shared-name" not in globex.get(server.url("/v1/collections")).json()["collections"]
    # the same ids in globex are independent
    assert globex.put(server.url(path("shared-name")), json={"title": "globex's"}).status_code == 201
    assert acme.get(server.url(path("shared-name"))).json()["title"] == "acme's"
    assert acme.get(server.url(path("shared-name", "documents", "d1"))).json()["content"] == "acme secret"


def test_a_second_server_on_the_same_port_or_data_dir_fails_clearly(server, tmp_path):
    port = server.base_url.rsplit(":", 1)[1]
    busy_port = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "serve", "--port", port, "--data-dir", str(tmp_path / "other")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert busy_port.returncode == 2 and "cannot listen" in busy_port.stderr
    same_dir = subprocess.run(
        [sys.executable, "-m", "kindex_local.cli", "serve", "--port", "0", "--data-dir", str(server.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert same_dir.returncode == 2 and "another kindex process" in same_dir.stderr
