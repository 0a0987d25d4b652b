"""`kindex serve` over real HTTP: documents' attributes and access lists, `document_access`, `filters.attributes`
(issue 23): round trip through PUT, GET, the list and the upload ticket; hostile values are a 422 naming the field
that change nothing; a revocation takes effect at once for 16 concurrent clients; a fields-only PUT rewrites the
index without re-embedding; the OpenAPI document shows the new fields."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytestmark = pytest.mark.e2e

JSON = {"Content-Type": "application/json"}


def wait_indexed(session, url, ids, timeout=60.0):
    deadline = time.monotonic() + timeout
    statuses = {}
    while time.monotonic() < deadline:
        statuses = {d: session.get(f"{url}/documents/{d}").json()["status"] for d in ids}
        if all(s in ("indexed", "failed") for s in statuses.values()):
            return statuses
        time.sleep(0.1)
    raise AssertionError(statuses)


@pytest.fixture(scope="module")
def admin(server):
    return server.session(server.admin_key)


@pytest.fixture(scope="module")
def kb(server, admin):
    url = server.url("/v1/collections/acl")
    response = admin.put(url, json={"query_groups": ["staff"], "document_access": "required"})
    assert response.status_code == 201, response.text
    assert response.json()["document_access"] == "required"
    return url


def ids(response) -> set[str]:
    assert response.status_code == 200, response.text
    return {r["document_id"] for r in response.json()["results"]}


def test_attributes_and_access_round_trip_over_http(server, admin, kb):
    # Given a document PUT with attributes and an access list
    attributes = {"region": "eu", "year": 2024, "ratio": 0.25, "public": False, "tags": ["hr", "policy"]}
    access = {"users": ["ann"], "groups": ["hr"], "deny_users": [], "deny_groups": ["contractors"]}
    response = admin.put(
        f"{kb}/documents/leave",
        json={"content": "Staff get 25 days of annual leave.", "attributes": attributes, "access": access},
    )
    assert response.status_code == 201, response.text
    assert response.json()["attributes"] == attributes and response.json()["access"] == access
    wait_indexed(admin, kb, ["leave"])
    # Then GET and the list's items show them
    assert admin.get(f"{kb}/documents/leave").json()["attributes"] == attributes
    items = admin.get(f"{kb}/documents").json()["items"]
    assert [(i["id"], i["attributes"], i["access"]) for i in items] == [("leave", attributes, access)]
    # And queries apply both: ann, and hr, see it; a contractor in hr does not; a filter narrows
    query = server.session(server.create_key("default", "query"))
    for mode in ("keyword", "vector", "hybrid"):
        ask = {"query": "annual leave", "mode": mode}
        assert ids(query.post(f"{kb}/query", json={**ask, "user": "ann", "groups": ["staff"]})) == {"leave"}
        assert ids(query.post(f"{kb}/query", json={**ask, "groups": ["staff", "hr"]})) == {"leave"}
        assert ids(query.post(f"{kb}/query", json={**ask, "groups": ["staff", "hr", "contractors"]})) == set()
        assert ids(query.post(f"{kb}/query", json={**ask, "user": "bob", "groups": ["staff"]})) == set()
        assert (
            ids(
                query.post(
                    f"{kb}/query",
                    json={
                        **ask,
                        "user": "ann",
                        "groups": ["staff"],
                        "filters": {"attributes": {"year": {"$gte": 2025}}},
                    },
                )
            )
            == set()
        )
        assert ids(
            query.post(
                f"{kb}/query",
                json={
                    **ask,
                    "user": "ann",
                    "groups": ["staff"],
                    "filters": {"attributes": {"$or": [{"tags": {"$contains": "policy"}}, {"public": True}]}},
                },
            )
        ) == {"leave"}
    # And the upload ticket takes them too
    ticket = admin.post(
        f"{kb}/documents/upload-doc/upload",
        json={"filename": "notes.txt", "size": 5, "attributes": {"region": "us"}, "access": {"groups": ["hr"]}},
    )
    assert ticket.status_code == 200, ticket.text
    assert ticket.json()["document"]["attributes"] == {"region": "us"}
    assert ticket.json()["document"]["access"]["groups"] == ["hr"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"attributes": {"a": {"b": {"c": {"d": 1}}}}}', "attributes.a"),
        ('{"attributes": {' + ", ".join(f'"k{i}": {i}' for i in range(10_000)) + "}}", "attributes"),
        ('{"attributes": {"tags": [' + ", ".join(['"x"'] * 100_000) + "]}}", "attributes.tags"),
        ('{"attributes": {"x": NaN}}', "attributes.x"),
        ('{"attributes": {"x": 9223372036854775808}}', "attributes.x"),
        ('{"attributes": {"x": 9007199254740993}}', "attributes.x"),
        ('{"attributes": {"x": "\\ud800"}}', "attributes.x"),
        ('{"attributes": {"": "x"}}', "attributes"),
        ('{"attributes": {"x": ""}, "access": {"groups": ["a", "b", "c", ""]}}', "access.groups[3]"),
        ('{"access": {"groups": [' + ", ".join(f'"g{i}"' for i in range(1001)) + "]}}", "access.groups"),
        ('{"access": {"users": ["' + "u" * 257 + '"]}}', "access.users[0]"),
        ('{"access": {"everyone": true}}', "access.everyone"),
        ('{"access": ["hr"]}', "access"),
    ],
)
def test_hostile_fields_are_a_422_naming_the_field_and_change_nothing(server, admin, kb, body, field):
    # Given a stored document
    url = f"{kb}/documents/hostile"
    admin.put(url, json={"content": "hostile target", "attributes": {"year": 2020}, "access": {"groups": ["hr"]}})
    wait_indexed(admin, kb, ["hostile"])
    before = admin.get(url).json()
    # When a hostile body is PUT
    response = admin.put(url, data=body.encode(), headers=JSON)
    # Then it is a 4xx JSON answer naming the field, never a 5xx
    assert response.status_code == 422, (field, response.status_code, response.text[:300])
    message = response.json()["message"]
    assert message.startswith(f"{field}:") or f" {field}" in message, message
    # And nothing stored changed
    assert admin.get(url).json() == before


@pytest.mark.parametrize(
    "attributes",
    [
        {"$or": [{"a": 1}] * 10_000},
        {"$and": [{"$and": [{"$and": [{"$and": [{"x": 1}]}]}]}]},
        {"year": {"$gte": "2020"}},
        {"year": {"$in": list(range(1001))}},
        {"x": {"$regex": "."}},
        {"x": {"$eq": 2**63}},
        {"x": ""} | {"": 1},
    ],
)
def test_hostile_filters_are_a_422_naming_the_place(server, kb, attributes):
    query = server.session(server.create_key("default", "query"))
    response = query.post(
        f"{kb}/query", json={"query": "leave", "groups": ["staff"], "filters": {"attributes": attributes}}
    )
    assert response.status_code == 422, response.text[:300]
    assert response.json()["message"].startswith("filters.attributes"), response.json()["message"]


def test_16_concurrent_clients_never_see_a_revoked_document(server, admin):
    # Given 24 documents all visible to ann
    url = server.url("/v1/collections/acl-race")
    assert admin.put(url, json={"query_groups": ["staff"]}).ok
    names = [f"r{i:02d}" for i in range(24)]
    for name in names:
        assert admin.put(
            f"{url}/documents/{name}", json={"content": f"penguin census report {name}", "access": {"users": ["ann"]}}
        ).ok
    wait_indexed(admin, url, names)
    revoked_at: dict[str, float] = {}
    violations, errors, counted = [], [], [0]
    stop = threading.Event()

    key = server.create_key("default", "query")

    def client(mode: str) -> None:
        session = server.session(key)
        try:
            while not stop.is_set():
                began = time.monotonic()
                response = session.post(
                    f"{url}/query",
                    json={"query": "penguin census report", "user": "ann", "groups": ["staff"], "k": 24, "mode": mode},
                )
                if response.status_code != 200:
                    errors.append(response.text[:200])
                    continue
                for result in response.json()["results"]:
                    when = revoked_at.get(result["document_id"])
                    if when is not None and when < began:
                        violations.append((result["document_id"], when, began))
                counted[0] += 1
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(repr(error))

    threads = [threading.Thread(target=client, args=(("keyword", "vector", "hybrid")[i % 3],)) for i in range(16)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 60
        while counted[0] < 16 and time.monotonic() < deadline:  # every client is querying
            time.sleep(0.05)
        # When the access lists are revoked one by one while 16 clients query
        for name in names:
            response = admin.put(f"{url}/documents/{name}", json={"access": {"users": ["bob"]}})
            assert response.status_code == 200, response.text
            revoked_at[name] = time.monotonic()  # committed: no query that begins now may return it to ann
            time.sleep(0.02)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    # Then none ever did
    assert errors == [] and violations == [] and counted[0] >= 32
    wait_indexed(admin, url, names)
    assert (
        ids(
            admin.post(
                f"{url}/query", json={"query": "penguin census report", "user": "ann", "groups": ["staff"], "k": 24}
            )
        )
        == set()
    )
    assert (
        len(
            ids(
                admin.post(
                    f"{url}/query", json={"query": "penguin census report", "user": "bob", "groups": ["staff"], "k": 24}
                )
            )
        )
        == 24
    )


def test_a_fields_only_put_shows_in_progress_then_indexed_without_re_embedding(server, admin):
    url = server.url("/v1/collections/acl-fields")
    assert admin.put(url, json={"query_groups": ["staff"], "chunking_max_size": 60}).ok
    assert admin.put(f"{url}/documents/d1", json={"content": "penguin colony antarctic. " * 30}).ok
    wait_indexed(admin, url, ["d1"])
    before = admin.get(f"{url}/documents/d1").json()
    chunks = [c["chunk_id"] for c in admin.get(f"{url}/documents/d1/chunks").json()["chunks"]]
    # When only the filter fields change
    response = admin.put(f"{url}/documents/d1", json={"attributes": {"region": "eu"}, "language": "en"})
    assert response.status_code == 200 and response.json()["status"] == "in_progress"
    wait_indexed(admin, url, ["d1"])
    after = admin.get(f"{url}/documents/d1").json()
    # Then the content version and the chunks are the same, and the filter finds it
    assert after["status"] == "indexed" and after["version"] == before["version"]
    assert after["fields_version"] == after["indexed_fields_version"] == before["fields_version"] + 1
    assert [c["chunk_id"] for c in admin.get(f"{url}/documents/d1/chunks").json()["chunks"]] == chunks
    assert ids(
        admin.post(
            f"{url}/query", json={"query": "penguin", "groups": ["staff"], "filters": {"attributes": {"region": "eu"}}}
        )
    ) == {"d1"}


def test_the_openapi_document_shows_the_new_fields_with_examples(server):
    schemas = server.session().get(server.url("/v1/openapi.json")).json()["components"]["schemas"]
    text = json.dumps(schemas)
    document_input = schemas["DocumentInput"]["properties"]
    assert {"attributes", "access"} <= set(document_input)
    assert "examples" in json.dumps(document_input["attributes"]) and "deny_groups" in text
    assert "document_access" in schemas["CollectionInput"]["properties"]
    assert "attributes" in schemas["QueryFilters"]["properties"]
    assert "$gte" in json.dumps(schemas["QueryFilters"]["properties"]["attributes"])
    assert {"attributes", "access"} <= set(schemas["DocumentSummary"]["properties"])
