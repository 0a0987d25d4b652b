"""`kindex serve` over real HTTP: hostile JSON bodies, numbers and paging parameters get a 4xx JSON answer that
names the field, never a 5xx, and change nothing; list and chunk routes answer in bounded pages."""

import pytest

from tests.support.waiting import wait_settled

pytestmark = pytest.mark.e2e

JSON = {"Content-Type": "application/json"}


def refused(response, status: int, field: str) -> None:
    assert response.status_code == status, (field, response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error", "message"}
    assert body["message"].startswith(f"{field}:") or f" {field}" in body["message"], body["message"]


@pytest.fixture(scope="module")
def admin(server):
    session = server.session(server.admin_key)
    assert session.put(server.url("/v1/collections/strict"), json={"title": "kept", "allow_guests": True}).ok
    assert session.put(server.url("/v1/collections/strict/documents/d1"), json={"content": "some text"}).ok
    return session


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ('{"title": ' + "[" * 10_000 + "]" * 10_000 + "}", 400, "title"),
        ('{"title": "a", "title": "b"}', 422, "title"),
        ('{"chunking_max_size": NaN}', 422, "chunking_max_size"),
        ('{"chunking_max_size": Infinity}', 422, "chunking_max_size"),
        ('{"chunking_overlap_offset": -Infinity}', 422, "chunking_overlap_offset"),
        ('{"chunking_max_size": ' + "9" * 4000 + "}", 422, "chunking_max_size"),
        ('{"chunking_max_size": 100001}', 422, "chunking_max_size"),
        ('{"chunking_max_size": "500"}', 422, "chunking_max_size"),
        ('{"embedding_model": "local:foo"}', 422, "embedding_model"),
    ],
)
def test_hostile_collection_bodies_are_refused_naming_the_field(server, admin, body, status, field):
    # When a hostile body is PUT over HTTP / Then a 4xx names the field, and the collection is unchanged
    refused(admin.put(server.url("/v1/collections/strict"), data=body, headers=JSON), status, field)
    assert admin.get(server.url("/v1/collections/strict")).json()["title"] == "kept"


@pytest.mark.parametrize("k", ['"5"', "true", "5.0", "NaN"])
def test_query_k_must_be_a_json_integer(server, admin, k):
    response = admin.post(
        server.url("/v1/collections/strict/query"), data='{"query": "text", "k": ' + k + "}", headers=JSON
    )
    refused(response, 422, "k")


def test_query_with_integer_k_is_answered(server, admin):
    response = admin.post(server.url("/v1/collections/strict/query"), json={"query": "text", "k": 5})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "route", ["/v1/collections", "/v1/collections/strict/documents", "/v1/collections/strict/documents/d1/chunks"]
)
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"start": str(2**63)}, "start"),
        ({"number": str(2**63)}, "number"),
        ({"number": "1001"}, "number"),
        ({"number": "0"}, "number"),
        ({"start": "-1"}, "start"),
    ],
)
def test_paging_parameters_out_of_bounds_are_refused_naming_the_parameter(server, admin, route, params, field):
    refused(admin.get(server.url(route), params=params), 422, field)


def test_chunks_answer_in_pages(server, admin):
    # Given a document indexed into many chunks
    assert admin.put(server.url("/v1/collections/paged"), json={"chunking_max_size": 20}).status_code == 201
    text = " ".join(f"sentence {i:03d}." for i in range(300))
    assert admin.put(server.url("/v1/collections/paged/documents/long"), json={"content": text}).status_code == 201
    assert wait_settled(admin, server.url("/v1/collections/paged"), ["long"]) == {"long": "indexed"}
    total = admin.get(server.url("/v1/collections/paged/documents/long")).json()["chunk_count"]
    assert total > 150
    # When walking its chunks with the default page, following next_cursor
    url = server.url("/v1/collections/paged/documents/long/chunks")
    first = admin.get(url).json()
    indexes, cursor = [c["index"] for c in first["chunks"]], first["next_cursor"]
    while cursor:
        page = admin.get(url, params={"cursor": cursor}).json()
        indexes += [c["index"] for c in page["chunks"]]
        cursor = page["next_cursor"]
    # Then the first page held 100, and the walk saw every chunk once, in order
    assert len(first["chunks"]) == 100
    assert indexes == list(range(total))
