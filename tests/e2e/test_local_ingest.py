"""Ingestion through `kindex serve` over HTTP: presigned upload of a real PDF, content PUTs, the CLI."""

import subprocess
import sys
from urllib.parse import quote

import pytest
import requests

from tests.conftest import SHARED_DATA
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def wait_for_status(session, url):
    """The document once indexed or failed, and the statuses it went through on the way."""
    seen = []

    def look():
        body = session.get(url).json()
        if not seen or seen[-1] != body["status"]:
            seen.append(body["status"])
        return body

    body = wait_until(
        look,
        until=lambda b: b["status"] in ("indexed", "failed"),
        interval=0.1,
        message="the document was neither indexed nor failed",
    )
    return body, seen


def test_presigned_upload_of_a_real_pdf_is_indexed_with_pages(server):
    admin = server.session(server.admin_key)
    assert admin.put(server.url("/v1/collections/papers"), json={"chunking_max_size": 1000}).status_code == 201
    doc_url = server.url("/v1/collections/papers/documents/" + quote("Multi page", safe=""))
    pdf = (SHARED_DATA / "docs" / "pdf" / "docling-multi_page.pdf").read_bytes()
    # Given an upload ticket for a document that does not exist yet
    ticket = admin.post(doc_url + "/upload", json={"filename": "docling multi page.pdf", "size": len(pdf)})
    assert ticket.status_code == 200, ticket.text
    body = ticket.json()
    assert body["method"] == "PUT"
    assert body["headers"] == {"Content-Type": "application/pdf", "Content-Length": str(len(pdf)), "If-None-Match": "*"}
    assert body["document"]["title"] == "docling multi page.pdf" and body["expires_at"]
    # When the client PUTs the raw bytes with those headers (no API key needed: the URL is signed)
    uploaded = requests.put(body["url"], data=pdf, headers=body["headers"])
    assert uploaded.status_code == 200
    # Then the document becomes indexed and its chunks carry page numbers
    document, _ = wait_for_status(admin, doc_url)
    assert document["status"] == "indexed", document["failure_reason"]
    chunks = admin.get(doc_url + "/chunks").json()["chunks"]
    assert len(chunks) == document["chunk_count"] > 1
    assert set(chunks[0]) == {
        "chunk_id",
        "index",
        "start",
        "end",
        "page_start",
        "page_end",
        "text",
        "section",
        "table_header",
    }
    assert chunks[0]["page_start"] == 1 and chunks[-1]["page_end"] == 5


def test_upload_url_is_bound_to_its_signature_content_type_length_and_key(server):
    admin = server.session(server.admin_key)
    admin.put(server.url("/v1/collections/signed"), json={})
    body = admin.post(
        server.url("/v1/collections/signed/documents/d/upload"), json={"filename": "a.txt", "size": 5}
    ).json()
    assert (
        requests.put(
            body["url"], data=b"hello", headers={**body["headers"], "Content-Type": "application/pdf"}
        ).status_code
        == 403
    )
    assert (
        requests.put(
            body["url"].replace("signature=", "signature=0"), data=b"hello", headers=body["headers"]
        ).status_code
        == 403
    )
    without_condition = {name: value for name, value in body["headers"].items() if name != "If-None-Match"}
    assert requests.put(body["url"], data=b"hello", headers=without_condition).status_code == 403
    other_key = body["url"].replace("a.txt", "b.txt")
    assert requests.put(other_key, data=b"hello", headers=body["headers"]).status_code == 403
    # A body of another length than the signed one is refused (requests sends the body's real Content-Length)
    assert requests.put(body["url"], data=b"hello world", headers=body["headers"]).status_code == 403
    assert requests.put(body["url"], data=b"hell", headers=body["headers"]).status_code == 403
    assert requests.put(body["url"], data=b"hello", headers=body["headers"]).status_code == 200


def test_upload_of_a_file_over_the_limit_is_refused_when_the_ticket_is_asked_for(server):
    admin = server.session(server.admin_key)
    admin.put(server.url("/v1/collections/big"), json={})
    url = server.url("/v1/collections/big/documents/d/upload")
    # When the declared size is one byte over the file limit (50 MiB by default) / Then 413, and no document
    refused = admin.post(url, json={"filename": "a.pdf", "size": 50 * 1024 * 1024 + 1})
    assert refused.status_code == 413 and refused.json()["error"] == "payload_too_large"
    assert "52428801" in refused.json()["message"]
    assert admin.get(server.url("/v1/collections/big/documents/d")).status_code == 404
    # And at the limit a ticket is signed
    assert admin.post(url, json={"filename": "a.pdf", "size": 50 * 1024 * 1024}).status_code == 200


def test_content_put_goes_pending_then_indexed(server):
    admin = server.session(server.admin_key)
    admin.put(server.url("/v1/collections/notes"), json={})
    url = server.url("/v1/collections/notes/documents/n1")
    created = admin.put(url, json={"title": "Note", "content": "# Heading\n\nSome text worth finding."})
    assert created.json()["status"] == "pending"
    document, seen = wait_for_status(admin, url)
    assert document["status"] == "indexed" and seen[-1] == "indexed"
    chunks = admin.get(url + "/chunks").json()["chunks"]
    assert chunks[0]["text"].startswith("# Heading") and chunks[0]["page_start"] is None


def test_upload_bad_requests(server):
    admin = server.session(server.admin_key)
    admin.put(server.url("/v1/collections/up"), json={})
    base = server.url("/v1/collections/up/documents/d/upload")
    assert admin.post(base, json={"filename": "a/b.pdf", "size": 1}).status_code == 422
    assert admin.post(base, json={}).status_code == 422
    assert admin.post(base, json={"filename": "a.pdf"}).status_code == 422  # the size is required
    assert admin.post(base, json={"filename": "a.pdf", "size": -1}).status_code == 422
    assert admin.post(base, json={"filename": "a.pdf", "size": "12"}).status_code == 422
    assert (
        admin.post(
            server.url("/v1/collections/none/documents/d/upload"), json={"filename": "a.pdf", "size": 1}
        ).status_code
        == 404
    )
    reader = server.session(server.create_key("default", "query"))
    assert reader.post(base, json={"filename": "a.pdf", "size": 1}).status_code == 403


def test_cli_ingest_of_a_folder_while_the_server_runs(server, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("# A\n\nAlpha text.")
    (tmp_path / "sub" / "b.txt").write_text("Beta text.")
    (tmp_path / "bad.pdf").write_bytes(b"not a pdf")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kindex_local.cli",
            "ingest",
            str(tmp_path),
            "--collection",
            "folder",
            "--data-dir",
            str(server.data_dir),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "indexed 2" in result.stdout and "failed 1" in result.stdout, result.stdout + result.stderr
    assert "bad.pdf: CorruptFile" in result.stdout
    assert result.returncode == 1  # a failure is reported in the exit code
    admin = server.session(server.admin_key)
    ids = admin.get(server.url("/v1/collections/folder/documents")).json()["documents"]
    assert ids == ["a.md", "bad.pdf", "sub:b.txt"]
    # running it again changes nothing
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "kindex_local.cli",
            "ingest",
            str(tmp_path),
            "--collection",
            "folder",
            "--data-dir",
            str(server.data_dir),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "unchanged 2" in again.stdout
