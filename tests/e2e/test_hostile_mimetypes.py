"""A document's `mimetype` over real HTTP (issue 26.9): it becomes the Content-Type an upload must send, so a value
with CR/LF or a path in it is refused with 422 naming the field, by the upload ticket, the document PUT and the
import alike, and nothing is stored."""

import pytest
import requests

from tests.support.waiting import wait_settled

pytestmark = pytest.mark.e2e

HOSTILE = ["text/plain\r\nX-Evil: 1", "../../etc", "text/plain; charset=utf-8", "text", "text/plain ", "*/*"]


def refused_naming_mimetype(response: requests.Response, field: str = "mimetype") -> None:
    assert response.status_code == 422, response.text[:300]
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == "invalid_input"
    assert f"{field}: must be a media type" in body["message"], body["message"]


@pytest.fixture(scope="module")
def admin(server) -> requests.Session:
    session = server.session(server.admin_key)
    assert session.put(server.url("/v1/collections/types"), json={}).status_code == 201
    assert (
        session.put(
            server.url("/v1/collections/types/documents/kept"),
            json={"content": "some text", "mimetype": "text/markdown"},
        ).status_code
        == 201
    )
    # (indexed before the tests compare it: "changes nothing" must not race the worker's own writes)
    wait_settled(session, server.url("/v1/collections/types"), ["kept"])
    return session


@pytest.mark.parametrize("mimetype", HOSTILE)
def test_an_upload_ticket_for_a_hostile_mimetype_is_refused_and_creates_nothing(server, admin, mimetype):
    url = server.url("/v1/collections/types/documents/new")
    refused_naming_mimetype(admin.post(url + "/upload", json={"filename": "a.txt", "size": 3, "mimetype": mimetype}))
    assert admin.get(url).status_code == 404


@pytest.mark.parametrize("mimetype", HOSTILE)
def test_a_document_put_of_a_hostile_mimetype_is_refused_and_changes_nothing(server, admin, mimetype):
    url = server.url("/v1/collections/types/documents/kept")
    before = admin.get(url).json()
    refused_naming_mimetype(admin.put(url, json={"title": "changed", "mimetype": mimetype}))
    assert admin.get(url).json() == before
    refused_naming_mimetype(
        admin.put(server.url("/v1/collections/types/documents/other"), json={"content": "x", "mimetype": mimetype})
    )
    assert admin.get(server.url("/v1/collections/types/documents/other")).status_code == 404


@pytest.mark.parametrize("mimetype", HOSTILE)
def test_an_import_of_a_hostile_mimetype_is_refused_and_imports_nothing(server, admin, mimetype):
    batch = {
        "format_version": 1,
        "embedding_model": "hash:384",
        "dimensions": 384,
        "documents": [{"id": "imported", "chunk_count": 1, "mimetype": mimetype}],
        "chunks": [{"document_id": "imported", "index": 0, "start": 0, "end": 2, "text": "hi", "vector": [0.5] * 384}],
    }
    refused_naming_mimetype(admin.post(server.url("/v1/collections/types/import"), json=batch), "documents.0.mimetype")
    assert admin.get(server.url("/v1/collections/types/documents/imported")).status_code == 404


def test_a_well_formed_mimetype_is_the_header_the_upload_sends(server, admin):
    # Given a ticket for a declared media type / Then it is the Content-Type to send, and the upload works
    url = server.url("/v1/collections/types/documents/declared")
    ticket = admin.post(url + "/upload", json={"filename": "notes", "size": 5, "mimetype": "text/markdown"}).json()
    assert ticket["headers"]["Content-Type"] == "text/markdown" and ticket["document"]["mimetype"] == "text/markdown"
    assert requests.put(ticket["url"], data=b"# Hi\n", headers=ticket["headers"], timeout=30).status_code == 200
